"""``gridstat dnp3-gateway``: publish a DNP3 outstation's analog and binary inputs as GridStat status variables.

    gridstat dnp3-gateway --outstation 127.0.0.1:20000 --address 10 --edge 127.0.0.1:7801 \\
        [--master-address 1] [--event-poll-s 1] [--integrity-poll-s 300] [--unsolicited] [--map points.yaml] \\
        [--interval-ms 1000] [--stats-every-s 1] [-o json] [--metrics-port N] \\
        [--tls-ca PEM --tls-cert PEM --tls-key PEM]

It connects to the outstation as a DNP3 master over TCP (integrity poll, then class 1/2/3 event polls or
unsolicited responses), publishes every analog input as the periodic variable ``dnp<address>/ai<index>``
and every binary input change as the alert ``dnp<address>/bi<index>`` through the edge router (``--edge``:
its control port), each event with the point's flags and device time. When the outstation goes away it
reconnects with a capped, jittered back-off. docs/dnp3.md describes the variables, the map file and the
counters.

It prints ``READY name=<name> outstation=<host:port> address=<n> edge=<host:port>`` (`` metrics_port=N`` with
``--metrics-port``: ``gridstat_dnp3_*`` on /metrics, telemetry/dnp3.py; docs/dnp3.md, "Metrics"), then a stats
line every ``--stats-every-s`` (``-o json``: one object per line, ``{"kind": "dnp3-gateway", ...}``). SIGTERM or
SIGINT (or ``--duration-s``) stop it with a final line; exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from gridstat.cli.common import EXIT_CODES_HELP, EXIT_OK
from gridstat.cli.traffic import (
    Runner,
    add_edge_client_arguments,
    check_edge,
    check_positive,
    is_loopback_host,
    tls_files,
)
from gridstat.core import clock, serving
from gridstat.core.model import PRIORITY_LOW, check_name
from gridstat.core.tls import TlsFiles
from gridstat.errors import ValidationError
from gridstat.gateways.dnp3 import Dnp3Gateway, GatewayOptions, PointMap, SessionSettings, load_point_map
from gridstat.gateways.dnp3.mapping import MAX_INTERVAL_MS
from gridstat.telemetry import roles as telemetry
from gridstat.telemetry.dnp3 import Dnp3Collector

#: DNP3's registered TCP port (IANA).
DEFAULT_PORT = 20000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXIT_CODES_HELP
    p.add_argument("--outstation", required=True, metavar="HOST:PORT",
                   help=f"the outstation's TCP port (port {DEFAULT_PORT} if omitted)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow an --outstation outside 127.0.0.1 (a real outstation on the network)")
    p.add_argument("--address", type=int, required=True, metavar="N", help="the outstation's link address (0..65519)")
    p.add_argument("--master-address", type=int, default=1, metavar="N", help="this master's link address (default 1)")
    p.add_argument("--edge", required=True, metavar="HOST:PORT", help="control port of the edge router")
    p.add_argument("--map", default=None, metavar="FILE",
                   help="YAML or JSON: points' names, kinds, intervals and attributes (docs/dnp3.md)")
    p.add_argument("--interval-ms", type=int, default=None, metavar="MS",
                   help="the periodic variables' interval when the map does not say (default 1000)")
    p.add_argument("--min-interval-ms", type=int, default=None, metavar="MS",
                   help="the alerts' minimum interval when the map does not say (default 100)")
    p.add_argument("--priority", type=int, default=1, metavar="P",
                   help="periodic variables' priority, 1 .. 6 (alerts are 0; default 1)")
    p.add_argument("--name", default="dnp3-gateway", metavar="NAME", help="this gateway's name in its stats lines")
    p.add_argument("--stats-every-s", type=float, default=1.0, metavar="S",
                   help="print a stats line every S seconds (0: only the final line; default 1)")
    p.add_argument("--duration-s", type=float, default=None, metavar="S",
                   help="stop after S seconds (default: run until SIGTERM or SIGINT)")
    m = p.add_argument_group("the master")
    m.add_argument("--integrity-poll-s", type=float, default=300.0, metavar="S",
                   help="integrity poll (class 0, 1, 2, 3) every S seconds (0: at startup and when asked; default 300)")
    m.add_argument("--event-poll-s", type=float, default=1.0, metavar="S",
                   help="class 1, 2, 3 event poll every S seconds (0: none, with --unsolicited; default 1)")
    m.add_argument("--unsolicited", action="store_true", help="enable the outstation's unsolicited responses")
    m.add_argument("--response-timeout-s", type=float, default=5.0, metavar="S",
                   help="a request unanswered this long is tried again; twice in a row reconnects (default 5)")
    m.add_argument("--keepalive-s", type=float, default=60.0, metavar="S",
                   help="REQUEST LINK STATUS after S seconds without a frame (0: never; default 60)")
    t = p.add_argument_group("timeouts and reconnecting")
    t.add_argument("--connect-timeout-s", type=float, default=5.0, metavar="S", help="TCP connect timeout (default 5)")
    t.add_argument("--retry-initial-s", type=float, default=0.5, metavar="S", help="first back-off (default 0.5)")
    t.add_argument("--retry-max-s", type=float, default=30.0, metavar="S", help="longest back-off (default 30)")
    t.add_argument("--healthy-after-s", type=float, default=30.0, metavar="S",
                   help="a connection up this long resets the back-off (default 30)")
    t.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="deadline of each call to the edge router (default 10)")
    add_edge_client_arguments(p, log_level_help="log level on stderr (default WARNING)")
    # --metrics-host/--metrics-port: gridstat_dnp3_* on /metrics (telemetry/dnp3.py), as iec104-gateway
    telemetry.add_arguments(p)


def parse_outstation(value: str, *, allow_remote: bool) -> tuple[str, int]:
    """``HOST[:PORT]``; a host other than the loopback only with ``--allow-remote``."""
    text = value.strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, str(DEFAULT_PORT)
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValidationError(f"--outstation {value!r} is not HOST:PORT", field="outstation")
    if not allow_remote and not is_loopback_host(host):
        raise ValidationError(f"--outstation {value!r} is not on this host: add --allow-remote to talk to an "
                              f"outstation on the network", field="outstation")
    return host, int(port)


def options_of(args: argparse.Namespace) -> GatewayOptions:
    host, port = parse_outstation(args.outstation, allow_remote=args.allow_remote)
    if not 1 <= args.priority <= PRIORITY_LOW:
        raise ValidationError(f"--priority must be 1..{PRIORITY_LOW}, not {args.priority}", field="priority")
    check_name(args.name, what="name")
    for flag in ("connect_timeout_s", "retry_initial_s", "retry_max_s", "timeout", "response_timeout_s"):
        check_positive(getattr(args, flag), f"--{flag.replace('_', '-')}")
    for flag in ("healthy_after_s", "stats_every_s", "integrity_poll_s", "event_poll_s", "keepalive_s"):
        check_positive(getattr(args, flag), f"--{flag.replace('_', '-')}", allow_zero=True)
    check_positive(args.duration_s, "--duration-s")
    if args.retry_initial_s > args.retry_max_s:
        raise ValidationError("--retry-initial-s is above --retry-max-s", field="retry_initial_s")
    for flag in ("interval_ms", "min_interval_ms"):
        value = getattr(args, flag)
        if value is not None and not 1 <= value <= MAX_INTERVAL_MS:
            raise ValidationError(f"--{flag.replace('_', '-')} must be 1..{MAX_INTERVAL_MS}, not {value}", field=flag)
    settings = SessionSettings(master_address=args.master_address, outstation_address=args.address,
                               integrity_poll_s=args.integrity_poll_s, event_poll_s=args.event_poll_s,
                               unsolicited=args.unsolicited, response_timeout_s=args.response_timeout_s,
                               keepalive_s=args.keepalive_s)
    return GatewayOptions(host=host, port=port, edge=check_edge(args.edge), settings=settings,
                          connect_timeout_s=args.connect_timeout_s, retry_initial_s=args.retry_initial_s,
                          retry_max_s=args.retry_max_s, healthy_after_s=args.healthy_after_s,
                          priority=args.priority, edge_timeout_s=args.timeout)


def points_of(args: argparse.Namespace) -> PointMap:
    """The map file, with the command line's defaults where the file sets none."""
    names = load_point_map(args.map) if args.map else PointMap()
    if names.interval_ms is None:
        names.interval_ms = args.interval_ms
    if names.min_interval_ms is None:
        names.min_interval_ms = args.min_interval_ms
    return names


def stats(args: argparse.Namespace, runner: Runner, gateway: Dnp3Gateway, *, final: bool
          ) -> tuple[dict[str, Any], str]:
    s = gateway.stats
    data: dict[str, Any] = {"kind": "dnp3-gateway", "name": args.name, "final": final, "ts_ms": clock.now_ms(),
                            "uptime_s": round(time.monotonic() - runner.started, 3),
                            "outstation": f"{gateway.options.host}:{gateway.options.port}",
                            "address": gateway.options.settings.outstation_address, **s.as_dict()}
    points = ",".join(f"{k}:{v}" for k, v in sorted(s.points.items())) or "-"
    drops = ",".join(f"{k}:{v}" for k, v in sorted(s.drops.as_dict().items())) or "-"
    text = (f"{'FINAL ' if final else ''}dnp3-gateway {args.name}: state={s.state} points={points} drops={drops} "
            f"reconnects={s.reconnects} timeouts={s.response_timeouts} published={s.events_published} "
            f"alerts={s.alerts_published} unpublished={s.events_unpublished} failed={s.events_failed} "
            f"variables={s.registrations}")
    return data, text


async def _run(args: argparse.Namespace, options: GatewayOptions, names: PointMap, tls: TlsFiles | None) -> int:
    runner = Runner("dnp3-gateway", args)
    runner.install()
    gateway = Dnp3Gateway(options, names=names, tls=tls)
    tel = telemetry.RoleTelemetry.from_args("gateway", args.name, args)
    tel.add_collector(Dnp3Collector(args.name, f"{options.host}:{options.port}", gateway.stats.as_dict))
    await tel.start()
    runner.line(f"READY name={args.name} outstation={options.host}:{options.port} "
                f"address={options.settings.outstation_address} edge={options.edge}{tel.ready_suffix()}")
    task = asyncio.ensure_future(gateway.run(runner.stop))
    try:
        await runner.report_until_stopped(lambda: stats(args, runner, gateway, final=False))
        await task
    finally:
        runner.stop.set()
        if not task.done():
            await task
        await tel.stop()
        runner.emit(*stats(args, runner, gateway, final=True))
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    options = options_of(args)
    names = points_of(args)
    tls = tls_files(args)
    return serving.run(args, lambda: _run(args, options, names, tls))
