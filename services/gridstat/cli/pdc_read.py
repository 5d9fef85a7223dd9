"""``gridstat pdc-read``: a PDC in a shell -- read any IEEE C37.118.2 device or server and print it.

It connects to HOST:PORT as the standard's client (the codec, ``gridstat.gateways.c37118``), asks
for the configuration (CFG-2, or CFG-3 with ``--cfg3``), turns data on, prints the configuration and
then one line per data frame (JSON with ``-o json``), and turns data off again after ``--frames``
frames or ``--duration-s``. For checking a PMU, a PDC, ``gridstat pmu-sim`` or ``gridstat
pdc-server`` by hand (docs/interop.md). Bad bytes are counted and shown, never fatal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from typing import Any

from gridstat.cli.common import parse_address
from gridstat.errors import ValidationError
from gridstat.gateways.c37118 import (
    Command,
    CommandFrame,
    ConfigFrame,
    DataFrame,
    HeaderFrame,
    StreamDecoder,
    build_frame,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("device", metavar="HOST:PORT", help="the device's or server's TCP address (127.0.0.1 unless "
                                                       "--allow-remote)")
    p.add_argument("--idcode", type=int, required=True, help="the stream's IDCODE (the device answers to it)")
    p.add_argument("--frames", type=int, default=10, metavar="N", help="data frames to print (default 10)")
    p.add_argument("--duration-s", type=float, default=30.0, metavar="S", help="give up after S seconds (default 30)")
    p.add_argument("--cfg3", action="store_true", help="ask for CFG-3 instead of CFG-2")
    p.add_argument("--allow-remote", action="store_true", help="allow an address beyond 127.0.0.1")
    p.add_argument("--output", "-o", choices=("text", "json"), default="text")


def _frame_row(frame: DataFrame) -> dict[str, Any]:
    base = frame.config.time_base

    def num(x: float) -> float | None:
        return None if isinstance(x, float) and math.isnan(x) else round(x, 6)

    return {"soc": frame.soc, "fracsec": frame.fracsec, "time_s": round(frame.soc + frame.fracsec / base, 6),
            "stations": [{"station": p.config.station_name, "stat": p.stat.to_word(),
                          "phasors": [[num(a), num(b)] for a, b in p.phasors],
                          "freq_hz": num(p.frequency_hz()), "dfreq": num(p.dfreq),
                          "analogs": [num(a) for a in p.analogs], "digitals": list(p.digitals)}
                         for p in frame.pmus]}


async def _read(args: argparse.Namespace, host: str, port: int) -> int:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
    except (OSError, TimeoutError) as exc:
        print(f"gridstat pdc-read: cannot connect to {args.device}: {exc}", file=sys.stderr)
        return 1
    decoder = StreamDecoder()
    ask = Command.SEND_CFG3 if args.cfg3 else Command.SEND_CFG2
    now = int(time.time())
    for cmd in (Command.DATA_OFF, ask, Command.DATA_ON):
        writer.write(build_frame(CommandFrame(args.idcode, now, 0, cmd)))
    got = 0
    deadline = time.monotonic() + args.duration_s
    try:
        while got < args.frames and time.monotonic() < deadline:
            try:
                data = await asyncio.wait_for(reader.read(1 << 16), max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                break
            if not data:
                print("gridstat pdc-read: the device closed the connection", file=sys.stderr)
                break
            for frame in decoder.feed(data):
                if isinstance(frame, ConfigFrame):
                    info = {"config": frame.frame_type.name, "idcode": frame.idcode, "data_rate": frame.data_rate,
                            "time_base": frame.time_base,
                            "stations": [{"station": p.station_name, "idcode": p.idcode,
                                          "phasors": list(p.phasor_names), "analogs": list(p.analog_names)}
                                         for p in frame.pmus]}
                    print(json.dumps(info) if args.output == "json" else
                          f"{frame.frame_type.name} idcode={frame.idcode} data_rate={frame.data_rate} "
                          f"time_base={frame.time_base} stations=" +
                          ",".join(f"{p.station_name}({p.idcode}):{len(p.phasor_names)}ph"
                                   for p in frame.pmus), flush=True)
                elif isinstance(frame, HeaderFrame):
                    print(json.dumps({"header": frame.text}) if args.output == "json" else f"HEADER {frame.text}")
                elif isinstance(frame, DataFrame):
                    got += 1
                    row = _frame_row(frame)
                    if args.output == "json":
                        print(json.dumps(row), flush=True)
                    else:
                        parts = [f"{s['station']} stat={s['stat']:#06x} freq={s['freq_hz']} "
                                 f"ph1={s['phasors'][0] if s['phasors'] else '-'}" for s in row["stations"]]
                        print(f"DATA {row['time_s']:.6f} " + " | ".join(parts), flush=True)
    finally:
        writer.write(build_frame(CommandFrame(args.idcode, int(time.time()), 0, Command.DATA_OFF)))
        writer.close()
    drops = decoder.drops.as_dict()
    if drops:
        print(f"gridstat pdc-read: dropped {drops}", file=sys.stderr)
    if got < args.frames:
        print(f"gridstat pdc-read: {got} of {args.frames} data frames in {args.duration_s:g} s", file=sys.stderr)
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    host, _, port = parse_address(args.device, "device").rpartition(":")
    host = host.strip("[]")
    if not args.allow_remote and host not in ("127.0.0.1", "localhost", "::1"):
        raise ValidationError(f"device {args.device!r} is beyond 127.0.0.1; add --allow-remote", field="device")
    if not 0 <= args.idcode <= 0xFFFF:
        raise ValidationError(f"--idcode must be 0..65535, not {args.idcode}", field="idcode")
    if args.frames < 1:
        raise ValidationError("--frames must be at least 1", field="frames")
    return asyncio.run(_read(args, host, int(port)))
