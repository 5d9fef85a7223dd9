"""libiec61850 (pyiec61850-ng) as the GOOSE peer of the integration test and the benchmark: a publisher
of data sets with booleans, bit-strings, integers, floats and UtcTime, and a subscriber that records
what it receives. No one here wrote it: it checks the gateway's codec against libiec61850's."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyiec61850.pyiec61850 as iec
from pyiec61850.goose import GoosePublisher, GooseSubscriber
from pyiec61850.goose import subscriber as goose_subscriber


@dataclass(frozen=True)
class Member:
    kind: str  # boolean, bitstring, integer, float, utc_time
    value: Any
    bits: int = 13


def _mms(m: Member) -> Any:
    if m.kind == "boolean":
        return iec.MmsValue_newBoolean(bool(m.value))
    if m.kind == "integer":
        return iec.MmsValue_newIntegerFromInt32(int(m.value))
    if m.kind == "float":
        return iec.MmsValue_newFloat(float(m.value))
    if m.kind == "bitstring":
        v = iec.MmsValue_newBitString(m.bits)
        iec.MmsValue_setBitStringFromIntegerBigEndian(v, int(m.value))  # the int's MSB is bit 0
        return v
    if m.kind == "utc_time":
        return iec.MmsValue_newUtcTimeByMsTime(int(m.value))
    raise ValueError(m.kind)


class Publisher:
    """libiec61850's GoosePublisher on ``interface``; ``publish(members, change=True)`` increments
    stNum first (libiec61850 stamps ``t`` then), ``change=False`` is a retransmission (sqNum + 1)."""

    def __init__(self, interface: str, gocb_ref: str, dat_set: str, app_id: int, *, ttl_ms: int = 2000) -> None:
        self.wrapper = GoosePublisher(interface)
        self.wrapper.set_go_cb_ref(gocb_ref)
        self.wrapper.set_data_set(dat_set)
        self.wrapper.set_go_id(gocb_ref.rsplit("$", 1)[-1])
        self.wrapper.set_app_id(app_id)
        self.wrapper.set_time_allowed_to_live(ttl_ms)
        self.wrapper.start()

    def publish(self, members: list[Member], *, change: bool = True) -> None:
        values = iec.LinkedList_create()
        try:
            for m in members:
                iec.LinkedList_add(values, _mms(m))
            if change:
                iec.GoosePublisher_increaseStNum(self.wrapper._publisher)
            rc = iec.GoosePublisher_publish(self.wrapper._publisher, values)
            if rc != 0:
                raise OSError(f"GoosePublisher_publish returned {rc}")
        finally:
            iec.LinkedList_destroyDeep_MmsValueDelete(values)

    def stop(self) -> None:
        self.wrapper.stop()


@dataclass
class Received:
    st_num: int
    sq_num: int
    t_ms: int
    values: list[Any]
    valid: bool
    ttl_ms: int


#: ``t`` of the message being handled: the wrapper's GooseMessage.timestamp is its receive time, so
#: the handler below reads libiec61850's GooseSubscriber_getTimestamp (ms) before the wrapper runs.
_T_MS = [-1]


class _Handler(goose_subscriber._PyGooseHandler):
    def trigger(self) -> None:
        _T_MS[0] = int(iec.GooseSubscriber_getTimestamp(self._libiec61850_goose_subscriber))
        super().trigger()


def _line(msg: Any) -> str:
    return json.dumps({"st_num": msg.st_num, "sq_num": msg.sq_num, "t_ms": _T_MS[0], "values": list(msg.values),
                       "valid": bool(msg.is_valid), "ttl_ms": msg.time_allowed_to_live})


class Subscriber:
    """libiec61850's GooseReceiver for one gocbRef in its own process (``python goose_peer.py subscribe``):
    stopping a GooseReceiver from Python deadlocks (its thread waits for the GIL while being joined), so
    the process is killed instead. What it receives is one JSON line per message in ``out``."""

    def __init__(self, interface: str, gocb_ref: str, app_id: int, out: Path) -> None:
        self.out = out
        self.proc = subprocess.Popen([sys.executable, __file__, "subscribe", interface, gocb_ref, str(app_id)],
                                     stdout=out.open("wb"), stderr=subprocess.DEVNULL, start_new_session=True)

    def ready(self) -> bool:
        return self.out.exists() and self.out.read_text().startswith("READY")

    def snapshot(self) -> list[Received]:
        rows = [json.loads(x) for x in self.out.read_text().splitlines() if x.startswith("{")]
        return [Received(**r) for r in rows]

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


def _subscribe(interface: str, gocb_ref: str, app_id: int) -> None:
    goose_subscriber._PyGooseHandler = _Handler  # type: ignore[misc]
    sub = GooseSubscriber(interface, gocb_ref)
    sub.set_app_id(app_id)
    sub.set_listener(lambda msg: print(_line(msg), flush=True))
    sub.start()
    print("READY", flush=True)
    parent = os.getppid()
    while os.getppid() == parent:  # the test process gone (killed): go too
        time.sleep(0.5)
    os._exit(0)


if __name__ == "__main__":
    _subscribe(sys.argv[2], sys.argv[3], int(sys.argv[4]))
