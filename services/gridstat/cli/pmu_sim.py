"""``gridstat pmu-sim``: a simulated C37.118 PMU (or a PDC's stream of several) on 127.0.0.1.

It serves command frames on TCP and data frames at its reporting rate, stamped on the time grid,
with values that are a documented function of station, channel and frame
(gridstat.gateways.simulated; docs/interop.md). Point ``gridstat pmu-gateway --device`` at it to
try the gateway without a device, or any C37.118 client.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys

from gridstat.cli.common import parse_address
from gridstat.errors import ValidationError
from gridstat.gateways.simulated import DeviceServer, SimulatedDevice, stations


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stations", type=int, default=1, metavar="N",
                   help="PMUs in the stream: 1 is a PMU, more a PDC's stream (NUM_PMU = N; default 1)")
    p.add_argument("--phasors", type=int, default=3, metavar="N", help="phasors per station (default 3)")
    p.add_argument("--analogs", type=int, default=0, metavar="N", help="analog values per station (default 0)")
    p.add_argument("--digitals", type=int, default=0, metavar="N", help="digital words per station (default 0)")
    p.add_argument("--frames-per-s", type=int, default=60, metavar="R", help="reporting rate (default 60)")
    p.add_argument("--idcode", type=int, default=1, help="the stream's IDCODE; stations get IDCODE+1.. when "
                                                        "N > 1, else this one (default 1)")
    p.add_argument("--prefix", default="PMU", help="station names: PREFIX1, PREFIX2 ... (default PMU)")
    p.add_argument("--listen", default="127.0.0.1:4712", metavar="HOST:PORT",
                   help="TCP command (and data) address (default 127.0.0.1:4712; port 0 picks one)")
    p.add_argument("--udp-to", metavar="HOST:PORT", help="send data spontaneously over UDP to this address")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: until SIGINT/SIGTERM)")
    p.add_argument("--precise", action="store_true",
                   help="send each frame at its instant to within microseconds (polls the clock for the last 2 ms "
                        "before each frame: for benchmarks)")


def _host_port(value: str, what: str) -> tuple[str, int]:
    """``HOST:PORT``; port 0 (any free port) is allowed for a listener."""
    host, _, port = (value[:-2] + ":1" if value.endswith(":0") else value).rpartition(":")
    parse_address(f"{host}:{port}", what)
    return host.strip("[]"), 0 if value.endswith(":0") else int(port)


def run(args: argparse.Namespace) -> int:
    for name in ("stations", "phasors", "frames_per_s"):
        if getattr(args, name) < 1:
            raise ValidationError(f"--{name.replace('_', '-')} must be at least 1", field=name)
    if not 0 <= args.idcode <= 0xFFFF - args.stations:
        raise ValidationError("--idcode leaves no room for the stations' IDCODEs in 0..65535", field="idcode")
    first = args.idcode + 1 if args.stations > 1 else args.idcode
    device = SimulatedDevice(stations(args.stations, phasors=args.phasors, analogs=args.analogs,
                                      digitals=args.digitals, first_idcode=first, prefix=args.prefix),
                             idcode=args.idcode, frames_per_s=args.frames_per_s)
    host, port = _host_port(args.listen, "listen")
    udp_to = _host_port(args.udp_to, "udp_to") if args.udp_to else None
    server = DeviceServer(device, host=host, port=port, udp_to=udp_to, precise=args.precise)

    async def main() -> None:
        await server.start()
        print(f"READY name=pmu-sim port={server.port}", flush=True)
        print(json.dumps({"kind": "pmu-sim", "listen": server.address, "idcode": args.idcode,
                          "stations": args.stations, "frames_per_s": args.frames_per_s,
                          "udp_to": args.udp_to}), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), args.duration)
        await server.stop()
        s = server.stats
        print(json.dumps({"kind": "pmu-sim", "final": True, "connections": s.connections, "commands": s.commands,
                          "frames_sent": s.frames_sent, "late_ticks": s.late_ticks, "drops": server.drops}),
              flush=True)

    try:
        asyncio.run(main())
    except OSError as exc:
        print(f"gridstat pmu-sim: cannot listen on {args.listen}: {exc.strerror}", file=sys.stderr)
        return 1
    return 0
