"""``gridstat iec104-gateway``: publish an IEC 60870-5-104 outstation's monitored values as GridStat status variables.

    gridstat iec104-gateway --outstation 127.0.0.1:2404 --edge 127.0.0.1:7801 [--map points.yaml] \\
        [--common-address CA ...] [--interval-ms 1000] [--stats-every-s 1] [-o json] \\
        [--tls-ca PEM --tls-cert PEM --tls-key PEM]

It connects to the outstation as a controlling station (STARTDT, then a general interrogation, again
after every reconnect), reads single and double points and measured values (normalized, scaled, short
float; with or without CP56Time2a) and publishes each information object as ``ca<CA>/ioa<IOA>`` (or
the map file's name) through the edge router (``--edge``: its control port). Measured values are
periodic variables at ``interval_ms``; points are alert variables. When the outstation goes away it
reconnects with a capped, jittered back-off. docs/iec104.md describes the variables, the option with
quality and time, and the counters.

It prints ``READY name=<name> outstation=<host:port> edge=<host:port>`` (`` metrics_port=N`` with
``--metrics-port``: ``gridstat_iec104_*`` on /metrics, telemetry/iec104.py), then a stats line every
``--stats-every-s`` (``-o json``: one object per line)::

    {"kind":"iec104-gateway","name":"iec104-gateway","final":false,"ts_ms":..,"uptime_s":..,"state":"started",
     "asdus":{"M_ME_NC_1":N,...},"drops":{},"reconnects":0,"interrogations":1,"events_published":M,...,
     "connection":{"peer":"127.0.0.1:2404","i_received":..,...}}

SIGTERM or SIGINT (or ``--duration-s``) stop it with a final line; exit 0.
"""

from __future__ import annotations

import argparse
from typing import Any

from gridstat.cli import gateways
from gridstat.cli.common import EXIT_CODES_HELP
from gridstat.cli.traffic import Runner, add_edge_client_arguments, check_edge, tls_files
from gridstat.core import serving
from gridstat.core.tls import TlsFiles
from gridstat.errors import ValidationError
from gridstat.gateways.iec104 import DEFAULT_PORT, GatewayOptions, Iec104Gateway, PointMap, load_point_map
from gridstat.gateways.iec104.asdu import GLOBAL_ADDRESS
from gridstat.gateways.iec104.mapping import MAX_INTERVAL_MS
from gridstat.telemetry import roles as telemetry
from gridstat.telemetry.iec104 import Iec104Collector


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXIT_CODES_HELP
    p.add_argument("--outstation", required=True, metavar="HOST:PORT",
                   help=f"the outstation's address (port {DEFAULT_PORT} if omitted)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow an --outstation outside 127.0.0.1 (a real outstation on the network)")
    p.add_argument("--common-address", type=int, action="append", default=[], metavar="CA",
                   help=f"interrogate this station (repeatable; default {GLOBAL_ADDRESS}: every station)")
    p.add_argument("--edge", required=True, metavar="HOST:PORT", help="control port of the edge router")
    p.add_argument("--map", default=None, metavar="FILE",
                   help="YAML or JSON: stations, points (ca, ioa -> name, kind, interval_ms, attributes); "
                        "docs/iec104.md")
    p.add_argument("--only-mapped", action="store_true",
                   help="publish only the map file's points (the others are counted as unmapped)")
    p.add_argument("--interval-ms", type=int, default=None, metavar="MS",
                   help="interval of measured values not set by the map (the outstation's cyclic rate; default "
                        "the map's defaults.interval_ms, else 1000)")
    p.add_argument("--min-interval-ms", type=int, default=None, metavar="MS",
                   help="smallest gap between two alerts of a point (default the map's, else 1)")
    p.add_argument("--interrogation-period-s", type=float, default=0.0, metavar="S",
                   help="a general interrogation every S seconds too (0: at start and after reconnects only)")
    p.add_argument("--priority", type=int, default=1, metavar="P",
                   help="priority of measured values, 0 .. 6 (default 1; points are alerts, priority 0)")
    gateways.add_name_arguments(p, "iec104-gateway")
    t = p.add_argument_group("the link (IEC 60870-5-104 5.5-5.6) and reconnecting")
    t.add_argument("--k", type=int, default=12, help="I frames sent before an acknowledgement is needed (default 12)")
    t.add_argument("--w", type=int, default=8, help="I frames received before acknowledging them (default 8)")
    t.add_argument("--t0-s", type=float, default=30.0, metavar="S", help="connect timeout (default 30)")
    t.add_argument("--t1-s", type=float, default=15.0, metavar="S",
                   help="an I frame or test not acknowledged in S seconds closes the connection (default 15)")
    t.add_argument("--t2-s", type=float, default=10.0, metavar="S",
                   help="acknowledge received I frames at the latest after S seconds (default 10)")
    t.add_argument("--t3-s", type=float, default=20.0, metavar="S",
                   help="send a test frame after S seconds without a frame (default 20)")
    gateways.add_reconnect_arguments(t)
    add_edge_client_arguments(p, log_level_help="log level on stderr (default WARNING)")
    # --metrics-port: gridstat_iec104_* on /metrics (telemetry/iec104.py), as goose-gateway
    telemetry.add_arguments(p)


def parse_outstation(value: str, *, allow_remote: bool) -> tuple[str, int]:
    """``HOST[:PORT]``; a host other than the loopback only with ``--allow-remote``."""
    return gateways.parse_device_address(value, allow_remote=allow_remote, default_port=DEFAULT_PORT,
                                         flag="--outstation", remote_flag="--allow-remote", peer="an outstation",
                                         bare_ipv6=True)


def options_of(args: argparse.Namespace) -> GatewayOptions:
    host, port = parse_outstation(args.outstation, allow_remote=args.allow_remote)
    for ca in args.common_address:
        if not 1 <= ca <= GLOBAL_ADDRESS:
            raise ValidationError(f"--common-address must be 1..{GLOBAL_ADDRESS}, not {ca}", field="common_address")
    gateways.check_priority(args.priority)
    gateways.check_intervals(args, MAX_INTERVAL_MS)
    gateways.check_common(args, positive=("t0_s", "t1_s", "t2_s", "t3_s", "retry_initial_s", "retry_max_s", "timeout"),
                          non_negative=("interrogation_period_s", "healthy_after_s", "stats_every_s"))
    return GatewayOptions(
        host=host, port=port, edge=check_edge(args.edge),
        common_addresses=tuple(dict.fromkeys(args.common_address)) or (GLOBAL_ADDRESS,), k=args.k, w=args.w,
        t0_s=args.t0_s, t1_s=args.t1_s, t2_s=args.t2_s, t3_s=args.t3_s,
        interrogation_period_s=args.interrogation_period_s, retry_initial_s=args.retry_initial_s,
        retry_max_s=args.retry_max_s, healthy_after_s=args.healthy_after_s, priority=args.priority,
        edge_timeout_s=args.timeout)


def points_of(args: argparse.Namespace) -> PointMap:
    """The map file with the command line's defaults over it."""
    points = load_point_map(args.map) if args.map else PointMap()
    changes: dict[str, Any] = {}
    if args.interval_ms is not None:
        changes["interval_ms"] = args.interval_ms
    if args.min_interval_ms is not None:
        changes["min_interval_ms"] = args.min_interval_ms
    if args.only_mapped:
        if not args.map:
            raise ValidationError("--only-mapped needs --map", field="only_mapped")
        changes["only_mapped"] = True
    if changes:
        import dataclasses

        points = dataclasses.replace(points, **changes)
    return points


def stats(args: argparse.Namespace, runner: Runner, gateway: Iec104Gateway, *,
          final: bool) -> tuple[dict[str, Any], str]:
    s = gateway.stats
    data = {**gateways.stats_head("iec104-gateway", args, runner, final=final), **s.as_dict()}
    asdus = gateways.counts_text(s.asdus)
    drops = gateways.counts_text(s.drops.as_dict())
    text = (f"{'FINAL ' if final else ''}iec104-gateway {args.name}: state={s.state} asdus={asdus} drops={drops} "
            f"reconnects={s.reconnects} interrogations={s.interrogations_completed}/{s.interrogations} "
            f"values={s.values} published={s.events_published} alerts={s.alerts_published} "
            f"unpublished={s.events_unpublished} failed={s.events_failed} variables={s.registrations}")
    return data, text


async def _run(args: argparse.Namespace, options: GatewayOptions, points: PointMap, tls: TlsFiles | None) -> int:
    runner = Runner("iec104-gateway", args)
    runner.install()
    gateway = Iec104Gateway(options, points=points, tls=tls)
    tel = telemetry.RoleTelemetry.from_args("gateway", args.name, args)
    tel.add_collector(Iec104Collector(args.name, gateway.outstation, gateway.stats.as_dict))
    await tel.start()
    runner.line(f"READY name={args.name} outstation={gateway.outstation} edge={options.edge}{tel.ready_suffix()}")
    return await gateways.serve(runner, gateway.run, lambda final: stats(args, runner, gateway, final=final), tel=tel)


def run(args: argparse.Namespace) -> int:
    options = options_of(args)
    points = points_of(args)
    tls = tls_files(args)
    return serving.run(args, lambda: _run(args, options, points, tls))
