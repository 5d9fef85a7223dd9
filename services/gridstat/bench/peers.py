"""Benchmark peers, each run as its own process: a paced load generator and a counting subscriber.

``python -m gridstat.bench.peers pub`` / ``sub`` / ``router``. The orchestrator
(``gridstat.bench.router``) drives them with one JSON line per command on stdin
and reads one JSON line per reply on stdout.

The publisher is a *load generator*, not a GridStat publisher SDK: it writes
datagrams in the GridStat wire format (``gridstat.core.wire``; checked at start
against ``wire.encode_event``/``encode_datagram``) with events packed ``pack``
per datagram, as GridStat routers pack. Every event carries the real wall-clock
ms in ``timestamp_ms`` (the routers' rate filter and future-timestamp check use
it) and, as its 8-byte int value, ``time.monotonic_ns()`` taken just before the
datagram is sent. The subscriber, on the same host and so on the same
CLOCK_MONOTONIC, takes ``time.monotonic_ns()`` right after ``recv`` and records
the one-way latency of every event of every ``sample_every``-th datagram (all of
them below ~100,000 events/s; sampling keeps the subscriber, which shares a core
with the publisher, from becoming the bottleneck it would measure).

Load variables are published every 1 ms (like the dissertation's load
variables): an offered load of R events/s is R/1000 load variables, all sent
each 1-ms tick. One reference variable is published every ``ref_interval_ms``
(50 ms) in a datagram of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import struct
import sys
import time
from array import array
from typing import Any

from gridstat.core import wire

REF_VAR = 9_999
#: Each topology (chain length) routes its own block of variable ids: base + 1 + i load, base + 9999 reference.
VAR_BLOCK = 10_000


def load_var(base: int, i: int) -> int:
    return base + 1 + i


def ref_var(base: int) -> int:
    return base + REF_VAR

#: event head after the timestamp: variable_id, flags, option_count, value_len
_VHEAD = struct.Struct(">IBBH")
_STAMP_TS = struct.Struct(">qQ")  # value (send stamp) of one event, timestamp of the next
_TS = struct.Struct(">Q")
_STAMP = struct.Struct(">q")
_HEADER_PACK = wire.HEADER.pack
_EVENT = struct.Struct(">QIBBHq")  # 24 bytes: head + one 8-byte int value, no options
EVENT_SIZE = _EVENT.size


def _pin(cpu: int | None) -> None:
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return
    try:
        if cpu < (os.cpu_count() or 1):
            os.sched_setaffinity(0, {cpu})
    except OSError:
        pass


def _reply(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def build_datagram(sender: int, seq: int, ts_ms: int, stamp: int, vheads: list[bytes]) -> bytes:
    """The fast path: header, then for each event ts | vhead | stamp, with one join."""
    mid = _STAMP_TS.pack(stamp, ts_ms)
    return b"".join((_HEADER_PACK(wire.MAGIC, wire.WIRE_VERSION, wire.KIND_EVENTS, sender, seq & 0xFFFF_FFFF,
                                  len(vheads), 0, 0), mid[8:], mid.join(vheads), mid[:8]))


def self_check() -> None:
    """The fast encoder must produce exactly what ``wire.encode_datagram`` produces."""
    vids = [3, 7, REF_VAR]
    ts, stamp = 1_700_000_000_123, 987_654_321
    fast = build_datagram(42, 5, ts, stamp, [_VHEAD.pack(v, 0, 0, 8) for v in vids])
    ref = wire.encode_datagram(42, 5, [wire.encode_event(wire.Event(ts, v, _STAMP.pack(stamp))) for v in vids])
    if fast != ref:
        raise SystemExit("bench publisher: fast encoder disagrees with gridstat.core.wire")
    dg = wire.decode_datagram(fast)
    assert [e.variable_id for e in dg.events] == vids


# -- publisher ----------------------------------------------------------------

def _publish(sock: socket.socket, sender: int, cmd: dict[str, Any], seq: int) -> tuple[dict[str, Any], int]:
    dest = (str(cmd["host"]), int(cmd["port"]))
    rate = int(cmd["rate"])
    duration = float(cmd["duration"])
    pack = max(1, int(cmd.get("pack", 16)))
    ref_every = max(1, int(cmd.get("ref_interval_ms", 50)))
    base = int(cmd.get("var_base", 0))
    nvars = round(rate / 1000)
    heads = [_VHEAD.pack(load_var(base, i), 0, 0, 8) for i in range(nvars)]
    groups = [heads[i:i + pack] for i in range(0, nvars, pack)]
    ref_group = [_VHEAD.pack(ref_var(base), 0, 0, 8)]
    ticks = max(1, int(duration * 1000))
    spread = cmd.get("pacing", "burst") == "spread"
    gap = 1_000_000 // max(1, len(groups))
    sendto = sock.sendto
    mono = time.monotonic_ns
    wall = time.time_ns
    pack_ts = _STAMP_TS.pack
    hpack = _HEADER_PACK
    magic, version, kind = wire.MAGIC, wire.WIRE_VERSION, wire.KIND_EVENTS
    key = bytes.fromhex(str(cmd.get("key", "")))
    tag, tag_len = wire.auth_tag, wire.AUTH_TAG_LEN
    sent_load = sent_ref = datagrams = errors = late = 0
    cpu0 = os.times()
    start = mono()
    hard_stop = start + int(duration * 1.5e9) + 500_000_000  # bounded even if the machine stalls
    tick = 0
    for tick in range(ticks):
        due = start + tick * 1_000_000
        now = mono()
        if now < due:
            time.sleep((due - now) / 1e9)
        elif now - due > 2_000_000:
            late += 1
            if now > hard_stop:
                break
        ts_ms = wall() // 1_000_000
        for j, grp in enumerate(groups):
            if spread and j:
                # Spread the tick's datagrams evenly over the millisecond instead of one burst.
                # Sleep only (no spinning: the subscriber shares this core); 1 us timer slack.
                slot = due + j * gap
                now = mono()
                if slot > now:
                    time.sleep((slot - now) / 1e9)
            mid = pack_ts(mono(), ts_ms)
            seq = (seq + 1) & 0xFFFF_FFFF
            if key:  # a keyed channel (docs/security.md): header with tag_len, HMAC over header and body
                data = b"".join((hpack(magic, version, kind, sender, seq, len(grp), tag_len, 0), mid[8:],
                                 mid.join(grp), mid[:8]))
                data += tag(key, data)
            else:
                data = b"".join((hpack(magic, version, kind, sender, seq, len(grp), 0, 0), mid[8:],
                                 mid.join(grp), mid[:8]))
            try:
                sendto(data, dest)
            except OSError:
                errors += len(grp)
                continue
            sent_load += len(grp)
            datagrams += 1
        if tick % ref_every == 0:
            mid = pack_ts(mono(), ts_ms)
            seq = (seq + 1) & 0xFFFF_FFFF
            data = b"".join((hpack(magic, version, kind, sender, seq, 1, tag_len if key else 0, 0), mid[8:],
                             ref_group[0], mid[:8]))
            if key:
                data += tag(key, data)
            try:
                sendto(data, dest)
                sent_ref += 1
                datagrams += 1
            except OSError:
                errors += 1
    elapsed = (mono() - start) / 1e9
    cpu1 = os.times()
    cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    return ({"sent_load": sent_load, "sent_ref": sent_ref, "sent": sent_load + sent_ref, "datagrams": datagrams,
             "send_errors": errors, "late_ticks": late, "ticks": tick + 1, "elapsed": elapsed,
             "offered_rate": nvars * 1000, "achieved_rate": (sent_load + sent_ref) / elapsed if elapsed else 0.0,
             "cpu_s": cpu}, seq)


def _fine_timer_slack() -> None:
    """1 us timer slack (default 50 us), so sub-millisecond sleeps of the paced sender are accurate."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(29, 1000, 0, 0, 0)  # PR_SET_TIMERSLACK, ns
    except (OSError, AttributeError):
        pass


def run_pub(args: argparse.Namespace) -> int:
    _pin(args.cpu)
    _fine_timer_slack()
    self_check()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
    sock.bind(("127.0.0.1", 0))
    _reply({"ready": True, "port": sock.getsockname()[1]})
    seq = 0
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("cmd") == "quit":
            break
        result, seq = _publish(sock, args.sender_id, cmd, seq)
        _reply(result)
    sock.close()
    return 0


# -- subscriber ---------------------------------------------------------------

def _summary(lat: array[int]) -> dict[str, Any]:
    n = len(lat)
    if n == 0:
        return {"n": 0}
    s = sorted(lat)

    def pct(p: float) -> float:
        return s[min(n - 1, max(0, round(p / 100 * n + 0.5) - 1))] / 1000

    return {"n": n, "mean": sum(s) / n / 1000, "p50": pct(50), "p99": pct(99), "p999": pct(99.9),
            "max": s[-1] / 1000, "min": s[0] / 1000}


def run_sub(args: argparse.Namespace) -> int:
    _pin(args.cpu)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    _reply({"ready": True, "port": sock.getsockname()[1]})
    buf = bytearray(65536)
    view = memoryview(buf)
    key = bytes.fromhex(args.key)
    verify = wire.verify_datagram
    recv_into = sock.recv_into
    mono = time.monotonic_ns
    hunpack = wire.HEADER.unpack_from
    hsize = wire.HEADER_SIZE
    stdin_fd = sys.stdin.fileno()
    inbuf = b""
    # trial state
    recording = False
    ref_id = REF_VAR
    sample_every = 1
    lat_ref: array[int] = array("q")
    lat_all: array[int] = array("q")
    n_events = n_ref = n_dg = bad = 0
    pairs: dict[int, struct.Struct] = {}
    last_rx = 0
    stop_cmd: dict[str, Any] | None = None
    stop_deadline = 0
    while True:
        timeout = 0.02 if stop_cmd is not None else 0.5
        ready, _, _ = select.select([sock, stdin_fd], [], [], timeout)
        if sock in ready:
            while True:
                try:
                    n = recv_into(buf)
                except BlockingIOError:
                    break
                except OSError:
                    bad += 1
                    continue
                now = mono()
                last_rx = now
                n_dg += 1
                if n < hsize:
                    bad += 1
                    continue
                _m, _v, kind, _s, _q, count, tag_len, _r = hunpack(buf, 0)
                body = n - tag_len - hsize
                if kind != wire.KIND_EVENTS or body != count * EVENT_SIZE:
                    bad += 1
                    continue
                if key and not verify(key, view[:n]):  # what a keyed subscriber does (client.subscriber)
                    bad += 1
                    continue
                if recording and n_dg % sample_every == 0:
                    st = pairs.get(count)
                    if st is None:
                        st = pairs[count] = struct.Struct(">" + "8xI4xq" * count)
                    flat = st.unpack_from(buf, hsize)
                    stamps = flat[1::2]
                    lat_all.extend([now - x for x in stamps])
                    vids = flat[0::2]
                    if ref_id in vids:
                        for vid, x in zip(vids, stamps, strict=True):
                            if vid == ref_id:
                                lat_ref.append(now - x)
                                n_ref += 1
                    n_events += count
                else:
                    # Counting only (saturation trials): the header's count is enough, keep the subscriber cheap.
                    n_events += count
        if stdin_fd in ready:
            chunk = os.read(stdin_fd, 65536)
            if not chunk:
                break
            inbuf += chunk
            while b"\n" in inbuf:
                line, inbuf = inbuf.split(b"\n", 1)
                cmd = json.loads(line)
                c = cmd.get("cmd")
                if c == "quit":
                    sock.close()
                    return 0
                if c == "start":
                    recording = bool(cmd.get("record", False))
                    ref_id = int(cmd.get("ref_var", REF_VAR))
                    sample_every = max(1, int(cmd.get("sample_every", 1)))
                    lat_ref, lat_all = array("q"), array("q")
                    n_events = n_ref = n_dg = bad = 0
                    _reply({"ok": True})
                elif c == "stop":
                    stop_cmd = cmd
                    stop_deadline = mono() + int(float(cmd.get("max_wait_s", 2.0)) * 1e9)
                    last_rx = max(last_rx, mono())
        if stop_cmd is not None:
            now = mono()
            quiet = int(float(stop_cmd.get("quiet_s", 0.15)) * 1e9)
            if now - last_rx >= quiet or now >= stop_deadline:
                _reply({"received": n_events, "received_ref": n_ref,
                        "datagrams": n_dg, "bad": bad, "lat_ref": _summary(lat_ref),
                        "lat_all": _summary(lat_all)})
                stop_cmd = None
                recording = False
                lat_ref, lat_all = array("q"), array("q")
    sock.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="gridstat.bench.peers")
    p.add_argument("role", choices=["pub", "sub"])
    p.add_argument("--sender-id", type=int, default=900_001)
    p.add_argument("--cpu", type=int, default=None)
    p.add_argument("--key", default="", help="sub: hex channel key; verify every datagram's tag (pub: per command)")
    args = p.parse_args(argv)
    return run_pub(args) if args.role == "pub" else run_sub(args)


if __name__ == "__main__":
    sys.exit(main())
