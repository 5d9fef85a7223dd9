"""``gridstat goose-gateway``: IEC 61850 GOOSE into GridStat status variables, and back out.

    gridstat goose-gateway --interface eth1 --map goose.yaml --edge 127.0.0.1:7801 \\
        [--name NAME] [--priority 0] [--latency-ms 50] [--stats-every-s 1] [-o json] \\
        [--metrics-port N] [--tls-ca PEM --tls-cert PEM --tls-key PEM]

The map file's ``subscribe`` blocks are read from the interface (raw Ethernet, EtherType 0x88B8; root
or CAP_NET_RAW) and every mapped data-set member is published as an alert variable on each new state
(stNum), with the GOOSE ``t`` as its timestamp and its quality in the DEVICE_TIME option. The map's
``publish`` blocks are sent as GOOSE: the gateway subscribes to their alert variables and sends each
change with stNum + 1, then retransmits on the standard's curve. docs/goose.md has the details.

It prints ``READY name=<name> interface=<if> edge=<host:port> subscribe=<n> publish=<n>
[metrics_port=<port>]``, then a stats line every ``--stats-every-s`` and a final one on SIGTERM or
SIGINT (exit 0).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from gridstat.cli import gateways
from gridstat.cli.common import EXIT_CODES_HELP, EXIT_OK
from gridstat.cli.subscribe import POD_IP_ENV
from gridstat.cli.traffic import Runner, add_edge_client_arguments, check_edge, tls_files
from gridstat.core import serving
from gridstat.core.tls import TlsFiles
from gridstat.errors import ValidationError
from gridstat.gateways.goose import (
    GooseGateway,
    GooseGatewayOptions,
    GooseMap,
    GoosePublisherGateway,
    GoosePublisherOptions,
    GooseStats,
    load_map,
)
from gridstat.telemetry import roles as telemetry
from gridstat.telemetry.goose import GooseCollector


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXIT_CODES_HELP
    p.add_argument("--interface", required=True, metavar="IF", help="network interface of the GOOSE LAN (lo in tests)")
    p.add_argument("--map", required=True, metavar="FILE",
                   help="YAML or JSON: subscribe blocks (gocbRef/appID, members -> variables) and publish blocks "
                        "(docs/goose.md)")
    p.add_argument("--edge", required=True, metavar="HOST:PORT", help="control port of the edge router")
    p.add_argument("--name", default="goose-gateway", metavar="NAME",
                   help="this gateway's name (stats lines, metrics, and its subscriber's name)")
    p.add_argument("--priority", type=int, default=0, metavar="P", help="the variables' priority, 0 alert .. 6 "
                                                                         "(default 0)")
    p.add_argument("--latency-ms", type=int, default=50, metavar="MS",
                   help="latency bound of the subscriptions of published blocks (default 50)")
    gateways.add_reporting_arguments(p)
    gateways.add_edge_timeout_argument(p)
    add_edge_client_arguments(p, log_level_help="log level on stderr (default WARNING)")
    telemetry.add_arguments(p)


def check(args: argparse.Namespace) -> GooseMap:
    check_edge(args.edge)
    gateways.check_priority(args.priority)
    gateways.check_common(args, positive=("latency_ms", "timeout"), non_negative=("stats_every_s",))
    goose_map = load_map(args.map)
    if not goose_map.subscribe and not goose_map.publish:
        raise ValidationError(f"{args.map}: neither subscribe nor publish blocks", field="map")
    return goose_map


def stats(args: argparse.Namespace, runner: Runner, shared: GooseStats, *, final: bool) -> tuple[dict[str, Any], str]:
    s = shared.as_dict()
    data = {**gateways.stats_head("goose-gateway", args, runner, final=final), **s}
    drops = gateways.counts_text(s.get("drops", {}))
    text = (f"{'FINAL ' if final else ''}goose-gateway {args.name}: frames={s.get('frames', 0)} drops={drops} "
            f"states={s.get('states', 0)} retransmissions={s.get('retransmissions', 0)} "
            f"published={s.get('points_published', 0)} unpublished={s.get('points_unpublished', 0)} "
            f"ttl_expired={s.get('ttl_expired', 0)} alerts={s.get('alerts', 0)} sent={s.get('frames_sent', 0)}")
    return data, text


async def _run(args: argparse.Namespace, goose_map: GooseMap, tls: TlsFiles | None) -> int:
    runner = Runner("goose-gateway", args)
    runner.install()
    shared = GooseStats()
    gateway: GooseGateway | None = None
    publisher: GoosePublisherGateway | None = None
    try:
        if goose_map.subscribe:
            gateway = GooseGateway(GooseGatewayOptions(args.interface, args.edge, priority=args.priority,
                                                       edge_timeout_s=args.timeout), goose_map, tls=tls, stats=shared)
            gateway.open()
        if goose_map.publish:
            # In a pod its subscriber socket is on the pod's address (POD_IP), as sttp-server's is.
            publisher = GoosePublisherGateway(GoosePublisherOptions(
                args.interface, args.edge, name=args.name, latency_ms=args.latency_ms, edge_timeout_s=args.timeout,
                subscriber_host=os.environ.get(POD_IP_ENV, "").strip() or "127.0.0.1"), goose_map, tls=tls,
                stats=shared)
            publisher.open()
    except OSError as exc:
        raise ValidationError(f"--interface {args.interface}: cannot open a raw socket ({exc}); it needs root or "
                              f"CAP_NET_RAW", field="interface") from None
    tel = telemetry.RoleTelemetry.from_args("gateway", args.name, args)
    tel.add_collector(GooseCollector("goose-gateway", args.name, shared.as_dict))
    await tel.start()
    runner.line(f"READY name={args.name} interface={args.interface} edge={args.edge} "
                f"subscribe={len(goose_map.subscribe)} publish={len(goose_map.publish)}{tel.ready_suffix()}")
    tasks = [asyncio.ensure_future(part.run(runner.stop)) for part in (gateway, publisher) if part is not None]
    try:
        await runner.report_until_stopped(lambda: stats(args, runner, shared, final=False))
        await asyncio.gather(*tasks)
    finally:
        runner.stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await tel.stop()
        runner.emit(*stats(args, runner, shared, final=True))
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    goose_map = check(args)
    tls = tls_files(args)
    return serving.run(args, lambda: _run(args, goose_map, tls))
