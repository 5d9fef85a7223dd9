"""``gridstat sttp-gateway``: republish an STTP (IEEE 2664) publisher's measurements as GridStat variables.

    gridstat sttp-gateway --source 127.0.0.1:7175 --edge 127.0.0.1:7801 \\
        [--filter "FILTER ActiveMeasurements WHERE SignalType = 'FREQ'"] [--frames-per-s 30] \\
        [--publisher NAME] [--stats-every-s 1] [-o json]

It subscribes to the STTP publisher at ``--source`` (loopback unless ``--allow-remote``) with the
filter expression ``--filter`` (every measurement by default), reads its metadata, and publishes every
measurement as the float variable ``<device>/<point tag>`` through the edge router, one SDK publisher
per device, with the measurement's own timestamp and the metadata as attributes (docs/sttp.md,
"Republishing"). The library reconnects by itself when the publisher goes away. It prints ``READY
name=<name> source=<host:port> edge=<host:port>``, a stats line every ``--stats-every-s``, and a final
one on SIGTERM or SIGINT (or ``--duration-s``); exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from gridstat.cli import gateways
from gridstat.cli.common import EXIT_CODES_HELP, EXIT_OK
from gridstat.cli.traffic import Runner, add_edge_client_arguments, check_edge, is_loopback_host, tls_files
from gridstat.core import serving
from gridstat.core.model import MAX_FRAMES_PER_S, check_name
from gridstat.errors import ValidationError
from gridstat.gateways.sttp import SttpGateway, SttpGatewayOptions
from gridstat.gateways.sttp.library import load

DEFAULT_FILTER = "FILTER ActiveMeasurements WHERE SignalID IS NOT NULL"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXIT_CODES_HELP
    p.add_argument("--source", required=True, metavar="HOST:PORT", help="the STTP publisher's address")
    p.add_argument("--allow-remote", action="store_true", help="allow a --source beyond loopback")
    p.add_argument("--filter", default=DEFAULT_FILTER, metavar="EXPR",
                   help=f"the STTP filter expression of the subscription (default: {DEFAULT_FILTER!r})")
    p.add_argument("--frames-per-s", type=int, default=0, metavar="R",
                   help="the variables' frame rate (default: each device's FramesPerSecond from the metadata)")
    p.add_argument("--publisher", default=None, metavar="NAME",
                   help="publish every variable under this publisher (default: one publisher per device)")
    p.add_argument("--edge", required=True, metavar="HOST:PORT", help="control port of the edge router")
    p.add_argument("--priority", type=int, default=1, metavar="P", help="0 alert .. 6 low (default 1)")
    gateways.add_name_arguments(p, "sttp-gateway")
    gateways.add_edge_timeout_argument(p)
    add_edge_client_arguments(p, log_level_help="log level on stderr (default WARNING)")


def parse_source(value: str, *, allow_remote: bool) -> str:
    """``HOST:PORT``; a host beyond loopback only with ``--allow-remote``."""
    host, sep, port = value.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValidationError(f"--source {value!r} is not HOST:PORT", field="source")
    if not allow_remote and not is_loopback_host(host):
        raise ValidationError(f"--source {value!r} is beyond loopback: add --allow-remote to mean it",
                              field="source")
    return f"{host}:{int(port)}"


def options_of(args: argparse.Namespace) -> SttpGatewayOptions:
    source = parse_source(args.source, allow_remote=args.allow_remote)
    if not 0 <= args.frames_per_s <= MAX_FRAMES_PER_S:
        raise ValidationError(f"--frames-per-s must be 1..{MAX_FRAMES_PER_S} (0: from the metadata), "
                              f"not {args.frames_per_s}", field="frames_per_s")
    gateways.check_priority(args.priority)
    if args.publisher is not None:
        check_name(args.publisher, what="publisher")
    if not args.filter.strip():
        raise ValidationError("--filter is empty", field="filter")
    gateways.check_common(args, positive=("timeout",), non_negative=("stats_every_s",))
    load()  # sttpapi missing: exit 2 with what to install
    return SttpGatewayOptions(source=source, edge=check_edge(args.edge), filter_expression=args.filter.strip(),
                              frames_per_s=args.frames_per_s, publisher=args.publisher, priority=args.priority,
                              tls=tls_files(args), edge_timeout_s=args.timeout)


def stats(args: argparse.Namespace, runner: Runner, gateway: SttpGateway, *,
          final: bool) -> tuple[dict[str, Any], str]:
    s = gateway.report()
    data = {**gateways.stats_head("sttp-gateway", args, runner, final=final), **s}
    drops = gateways.counts_text(s["drops"])
    text = (f"{'FINAL ' if final else ''}sttp-gateway {args.name}: connected={s['connected']} "
            f"variables={s['variables']} registered={s['registered']} "
            f"measurements={s.get('measurements', 0)} published={s.get('events_published', 0)} drops={drops}")
    return data, text


async def _run(args: argparse.Namespace, options: SttpGatewayOptions) -> int:
    runner = Runner("sttp-gateway", args)
    runner.install()
    gateway = SttpGateway(options)
    await gateway.start()
    runner.line(f"READY name={args.name} source={options.source} edge={options.edge}")
    try:
        await runner.report_until_stopped(lambda: stats(args, runner, gateway, final=False))
    finally:
        runner.emit(*stats(args, runner, gateway, final=True))
        await asyncio.shield(gateway.stop())
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    options = options_of(args)
    return serving.run(args, lambda: _run(args, options))
