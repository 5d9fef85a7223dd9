"""A DNP3 outstation made of dnp3py (IEEE 1815-2012, pure Python; no one here wrote it), for the dnp3
gateway's integration test and docs/dnp3.md's walk-through. Its own process:

    python dnp3py_outstation.py --port 0 --address 10 --status FILE [--analogs 4] [--binaries 4]

It serves ``--analogs`` analog inputs and ``--binaries`` binary inputs, all class 1 events, on 127.0.0.1
(``--port 0``: any free port), writes ``READY port=<port>`` to ``--status``, and reads commands on stdin,
one a line, applied to dnp3py's own database:

    ai <index> <value> <flags> <time_ms>      an analog input's value, flags and device time
    bi <index> <0|1> <flags> <time_ms>        a binary input's state, flags and device time

dnp3py 0.6.0 reports class events without time (g2v1, g32v1). An event that has a time is sent here with
it -- binary input events as g2v2, analog input events as g32v7 (float with time) -- encoded by dnp3py's
own object classes (``BinaryInputEventTime``, ``AnalogInputEventFloatTime``), so the device times the
gateway reads were written by dnp3py.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from dnp3.application import ObjectHeader
from dnp3.application.fragment import ObjectBlock
from dnp3.core.flags import AnalogQuality, BinaryQuality
from dnp3.core.timestamp import DNP3Timestamp
from dnp3.database import AnalogInputConfig, BinaryInputConfig, Database
from dnp3.objects.analog_input import AnalogInputEventFloatTime
from dnp3.objects.binary_input import BinaryInputEvent, BinaryInputEventTime
from dnp3.outstation import Outstation, OutstationConfig, OutstationTcpRunner
from dnp3.outstation.outstation import _serialize_analog_input_event


class TimedOutstation(Outstation):
    """dnp3py's outstation, its events carrying their time when they have one."""

    def _event_blocks(self, events: list[Any], group: int, timed: int, untimed: int, encode: Any) -> list[ObjectBlock]:
        if not events:
            return []
        index_size, count_data, qualifier = self._event_framing(events)
        with_time = all(e.timestamp is not None for e in events)
        data = bytearray()
        for e in events:
            data.extend(e.index.to_bytes(index_size, "little"))
            data.extend(encode(e, with_time))
        header = ObjectHeader(group=group, variation=timed if with_time else untimed, qualifier=qualifier)
        return [ObjectBlock(header=header, data=count_data + bytes(data))]

    def _build_binary_event_blocks(self, events: list[Any]) -> list[ObjectBlock]:
        def encode(e: Any, with_time: bool) -> bytes:
            if with_time:
                return BinaryInputEventTime(quality=e.quality, state=e.value, timestamp=e.timestamp).to_bytes()
            return BinaryInputEvent(quality=e.quality, state=e.value).to_bytes()
        return self._event_blocks(events, 2, 2, 1, encode)

    def _build_analog_event_blocks(self, events: list[Any]) -> list[ObjectBlock]:
        def encode(e: Any, with_time: bool) -> bytes:
            if with_time:
                return AnalogInputEventFloatTime(quality=e.quality, value=float(e.value),
                                                 timestamp=e.timestamp).to_bytes()
            return _serialize_analog_input_event(e)
        return self._event_blocks(events, 32, 7, 1, encode)


def apply(db: Database, line: str) -> None:
    parts = line.split()
    if len(parts) != 5 or parts[0] not in ("ai", "bi"):
        print(f"bad command {line!r}", file=sys.stderr, flush=True)
        return
    kind, index, value, flags, time_ms = parts[0], int(parts[1]), parts[2], int(parts[3]), int(parts[4])
    stamp = DNP3Timestamp(time_ms) if time_ms else None
    if kind == "ai":
        db.update_analog_input(index, value=float(value), quality=AnalogQuality(flags), timestamp=stamp)
    else:
        db.update_binary_input(index, value=value == "1", quality=BinaryQuality(flags & 0x7F), timestamp=stamp)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--address", type=int, default=10)
    p.add_argument("--master-address", type=int, default=1)
    p.add_argument("--analogs", type=int, default=4)
    p.add_argument("--binaries", type=int, default=4)
    p.add_argument("--status", required=True)
    args = p.parse_args()
    db = Database()
    for i in range(args.analogs):
        db.add_analog_input(i, AnalogInputConfig())
    for i in range(args.binaries):
        db.add_binary_input(i, BinaryInputConfig())
    outstation = TimedOutstation(database=db, config=OutstationConfig(address=args.address,
                                                                      master_address=args.master_address))
    runner = OutstationTcpRunner(outstation=outstation, host="127.0.0.1", port=args.port)
    serving = asyncio.ensure_future(runner.run())
    while runner.local_address is None:
        await asyncio.sleep(0.01)
    Path(args.status).write_text(f"READY port={runner.local_address[1]}\n")
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        if line.strip():
            apply(db, line.decode())
    await runner.stop()
    serving.cancel()


if __name__ == "__main__":
    asyncio.run(main())
