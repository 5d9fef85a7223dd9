"""``gridstat sttp-server``: serve GridStat status variables to STTP (IEEE 2664) subscribers.

    gridstat sttp-server --name sttp1 --edge 127.0.0.1:7802 --interval-ms 33 \\
        --where "signal = 'FREQ'" [--variables sub1/va:phasor,sub2/p] \\
        [--latency-ms 50 --redundancy 1] [--listen 127.0.0.1:7165] [--follow-s 1] [--stats-every-s 1] [-o json]

It registers with the leaf broker through its edge router and subscribes, at ``--interval-ms`` with
``--latency-ms`` and ``--redundancy``, to every variable ``--where`` matches (a query subscription,
docs/queries.md) and to every ``--variables`` entry. The admitted variables' attributes become the
STTP metadata (docs/sttp.md, "Metadata"): STTP subscribers connect on ``--listen`` (loopback unless
``--allow-remote``), select measurements with filter expressions (``FILTER ActiveMeasurements WHERE
SignalType = 'FREQ'``) and may throttle them (``publishInterval``). Every ``--follow-s`` the variables
``--where`` matches are looked at again, and the metadata defined again when they changed. Once
serving it prints ``READY name=<name> listen=<host:port> variables=<n> measurements=<n>
unserved=<n>`` and, every ``--stats-every-s``, a stats line. SIGTERM or SIGINT (or ``--duration-s``)
print a final line, remove its subscriptions and exit 0.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from gridstat.cli.pdc_server import parse_host_port, parse_variables
from gridstat.cli.subscribe import POD_IP_ENV
from gridstat.cli.traffic import Runner, add_client_arguments, check_common, check_positive, listening, tls_files
from gridstat.core import clock, expressions, serving
from gridstat.errors import ValidationError
from gridstat.gateways.sttp import SttpServer, SttpServerOptions
from gridstat.gateways.sttp.library import load

#: The port openPDC and the STTP reference implementations listen on by default.
DEFAULT_LISTEN = "127.0.0.1:7165"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--where", default="", metavar="EXPR",
                   help="serve every variable this where-expression matches (docs/queries.md)")
    p.add_argument("--variables", action="append", default=[], metavar="LIST",
                   help="PUBLISHER/VARIABLE[:TYPE] entries, comma-separated, or @FILE; TYPE float (default), int, "
                        "bool or phasor; repeatable")
    p.add_argument("--interval-ms", type=int, required=True, metavar="MS",
                   help="interval of every subscription (at a device frame rate: whole frames, docs/frame-rates.md)")
    p.add_argument("--latency-ms", type=int, default=50, metavar="MS", help="latency bound (default 50)")
    p.add_argument("--redundancy", type=int, default=1, metavar="K", help="node-disjoint paths (default 1)")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"TCP address STTP subscribers connect to (default {DEFAULT_LISTEN}; port 0: any free port)")
    p.add_argument("--allow-remote", action="store_true", help="allow a --listen address beyond loopback")
    p.add_argument("--max-clients", type=int, default=64, metavar="N", help="STTP subscribers at once (default 64)")
    p.add_argument("--follow-s", type=float, default=1.0, metavar="S",
                   help="refresh --where's variables and the metadata every S seconds (0: fixed at start; default 1)")
    add_client_arguments(p)


def options_of(args: argparse.Namespace) -> SttpServerOptions:
    """Every option checked (ValidationError names the flag; main exits 2)."""
    check_common(args, "subscriber")
    for flag, value in (("--interval-ms", args.interval_ms), ("--latency-ms", args.latency_ms),
                        ("--redundancy", args.redundancy), ("--max-clients", args.max_clients)):
        if value < 1:
            raise ValidationError(f"{flag} must be at least 1, not {value}", field=flag[2:].replace("-", "_"))
    check_positive(args.follow_s, "--follow-s", allow_zero=True)
    where = args.where.strip()
    if where:
        where = expressions.render(expressions.parse(where))  # a fault: ExpressionError with its column
    variables = parse_variables(args.variables) if args.variables else []
    if not where and not variables:
        raise ValidationError("give --where or --variables: the STTP server serves nothing otherwise", field="where")
    load()  # sttpapi missing: exit 2 with what to install, before any broker is asked
    return SttpServerOptions(
        name=args.name, edge=args.edge.strip(), interval_ms=args.interval_ms, where=where, variables=variables,
        latency_ms=args.latency_ms, redundancy=args.redundancy,
        listen=parse_host_port(args.listen, "--listen", allow_remote=args.allow_remote),
        max_clients=args.max_clients, follow_s=args.follow_s, tls=tls_files(args),
        also_edges=[e.strip() for e in args.also_edge],
        # In a pod the subscriber's socket is on the pod's address (as `gridstat subscribe` does).
        subscriber_host=os.environ.get(POD_IP_ENV, "").strip() or "127.0.0.1")


class SttpServerApp:
    """Start the server (retrying while the broker or a publisher is not there yet), report, stop."""

    def __init__(self, args: argparse.Namespace, options: SttpServerOptions) -> None:
        self.args = args
        self.options = options
        self.runner = Runner("sttp-server", args)

    async def _attempt(self) -> SttpServer:
        server = SttpServer(self.options)
        await listening(server.start, self.options.listen)
        return server

    def stats(self, server: SttpServer, final: bool) -> tuple[dict[str, Any], str]:
        s = server.stats()
        data = {"kind": "sttp-server", "name": self.args.name, "final": final, "ts_ms": clock.now_ms(),
                "uptime_s": round(time.monotonic() - self.runner.started, 3), **s}
        drops = " ".join(f"{k}={v}" for k, v in sorted(s.get("drops", {}).items())) or "none"
        text = (f"{'FINAL ' if final else ''}sttp-server {self.args.name}: clients={s.get('clients', 0)} "
                f"variables={s.get('variables', 0)} events={s.get('events', 0)} "
                f"measurements={s.get('measurements', 0)} drops: {drops}")
        return data, text

    def ready(self, server: SttpServer) -> str:
        host = self.options.listen[0]
        return (f"READY name={self.args.name} listen={host}:{server.port} variables={len(server.served)} "
                f"measurements={server.measurement_count} unserved={len(server.unserved)}")

    async def run(self) -> int:
        return await self.runner.serve(self._attempt, what=f"subscribing through edge router {self.args.edge}",
                                       ready=self.ready, stats=self.stats, stop=SttpServer.stop)


def run(args: argparse.Namespace) -> int:
    options = options_of(args)
    return serving.run(args, SttpServerApp(args, options).run)
