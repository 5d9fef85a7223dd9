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
from typing import Any

from gridstat.cli import gateways
from gridstat.cli.common import EXIT_CODES_HELP
from gridstat.cli.traffic import Runner, add_edge_client_arguments, check_edge, tls_files
from gridstat.core import serving
from gridstat.core.tls import TlsFiles
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
    gateways.add_name_arguments(p, "dnp3-gateway")
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
    gateways.add_reconnect_arguments(t)
    add_edge_client_arguments(p, log_level_help="log level on stderr (default WARNING)")
    # --metrics-host/--metrics-port: gridstat_dnp3_* on /metrics (telemetry/dnp3.py), as iec104-gateway
    telemetry.add_arguments(p)


def parse_outstation(value: str, *, allow_remote: bool) -> tuple[str, int]:
    """``HOST[:PORT]``; a host other than the loopback only with ``--allow-remote``."""
    return gateways.parse_device_address(value, allow_remote=allow_remote, default_port=DEFAULT_PORT,
                                         flag="--outstation", remote_flag="--allow-remote", peer="an outstation")


def options_of(args: argparse.Namespace) -> GatewayOptions:
    host, port = parse_outstation(args.outstation, allow_remote=args.allow_remote)
    gateways.check_priority(args.priority, lowest=1)
    gateways.check_common(args, positive=("connect_timeout_s", "retry_initial_s", "retry_max_s", "timeout",
                                          "response_timeout_s"),
                          non_negative=("healthy_after_s", "stats_every_s", "integrity_poll_s", "event_poll_s",
                                        "keepalive_s"))
    gateways.check_intervals(args, MAX_INTERVAL_MS)
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
    data = {**gateways.stats_head("dnp3-gateway", args, runner, final=final),
            "outstation": f"{gateway.options.host}:{gateway.options.port}",
            "address": gateway.options.settings.outstation_address, **s.as_dict()}
    points = gateways.counts_text(s.points)
    drops = gateways.counts_text(s.drops.as_dict())
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
    return await gateways.serve(runner, gateway.run, lambda final: stats(args, runner, gateway, final=final), tel=tel)


def run(args: argparse.Namespace) -> int:
    options = options_of(args)
    names = points_of(args)
    tls = tls_files(args)
    return serving.run(args, lambda: _run(args, options, names, tls))
