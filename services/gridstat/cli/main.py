"""``gridstat``: one command, a subcommand per role or tool.

Subcommands import their modules lazily so that ``gridstat --help`` is fast
and a role's dependencies are only loaded by that role.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gridstat.errors import GridStatError

#: subcommand -> (module with add_arguments(parser) and run(args) -> int, help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "up": ("gridstat.demo.main", "run the embedded example utility (or a topology file) on 127.0.0.1"),
    "demo": ("gridstat.demo.main", "alias of 'up'"),
    "router": ("gridstat.router.main", "run one status router process"),
    "broker": ("gridstat.broker.main", "run a QoS broker (--role leaf for a cloud, --role parent above clouds)"),
    "admission": ("gridstat.admission.main", "run the admission controller (advertised rates, covering graph, "
                                             "hop-by-hop admission)"),
    "bench": ("gridstat.bench.main", "benchmarks: gridstat bench router | tables | broker | modes | overload"),
    "sub": ("gridstat.cli.sub", "subscriptions on the QoS broker: 'gridstat sub add|list|rm'"),
    "variables": ("gridstat.cli.variables", "registered status variables and their attributes: "
                                            "'gridstat variables list [--where EXPR]'"),
    "topology": ("gridstat.cli.topology", "the QoS broker's topology: 'gridstat topology show'"),
    "mode": ("gridstat.cli.mode", "operating modes: 'gridstat mode list|define|change'"),
    "flood": ("gridstat.cli.flood", "limited flooding of variables: 'gridstat flood set|remove|list'"),
    "routes": ("gridstat.cli.routes", "a router's route table and channels: 'gridstat routes ROUTER'"),
    "publish": ("gridstat.cli.publish", "a long-running publisher (a PMU): register through the edge router, "
                                        "publish periodic values, print stats lines"),
    "subscribe": ("gridstat.cli.subscribe", "a long-running subscriber: register (and with --admit subscribe) "
                                            "through the edge router, count what arrives, print stats lines"),
    "archive": ("gridstat.cli.archive", "archive status variables to Kafka (the historian path for analysts)"),
    "history-server": ("gridstat.history.main", "run the history service: time-range queries of the Kafka archive "
                                                "(docs/history.md)"),
    "alerts-exporter": ("gridstat.cli.alerts_exporter", "the streaming job's QoS alerts (gridstat.alerts.qos) on "
                                                        "Prometheus /metrics, for the dashboards"),
    "history": ("gridstat.cli.history", "archived values of a variable over a time range, from a history server"),
    "analyze": ("gridstat.cli.analyze", "capacity model of a broker tree: routing tables, message rates, break-even"),
    "chaos": ("gridstat.cli.chaos", "the chaos suite: 'gridstat chaos list|run SCENARIO' (real processes)"),
    "pmu-gateway": ("gridstat.cli.pmu_gateway", "a C37.118 client gateway: publish a PMU's or PDC's channels as "
                                                "status variables"),
    "goose-gateway": ("gridstat.cli.goose_gateway", "an IEC 61850 GOOSE gateway: data-set members as alert variables, "
                                                    "and alert variables as GOOSE (docs/goose.md)"),
    "iec104-gateway": ("gridstat.cli.iec104_gateway", "an IEC 60870-5-104 controlling station: publish an "
                                                      "outstation's points and measured values as status variables"),
    "dnp3-gateway": ("gridstat.cli.dnp3_gateway", "a DNP3 master gateway: publish an outstation's analog inputs as "
                                                  "status variables and binary input changes as alerts"),
    "pdc-server": ("gridstat.cli.pdc_server", "a C37.118 server: serve status variables as one stream to PDCs"),
    "pdc-read": ("gridstat.cli.pdc_read", "a PDC in a shell: read a C37.118 device or server and print its frames"),
    "sttp-server": ("gridstat.cli.sttp_server", "an STTP (IEEE 2664) publisher: serve status variables to STTP "
                                                "subscribers"),
    "sttp-gateway": ("gridstat.cli.sttp_gateway", "an STTP subscriber gateway: republish an STTP publisher's "
                                                  "measurements as status variables"),
    "pmu-sim": ("gridstat.cli.pmu_sim", "a simulated C37.118 PMU (or PDC stream) on 127.0.0.1, to try the gateway"),
    "condense": ("gridstat.cli.condense",
                 "condensation functions: 'gridstat condense create|list|remove', or 'host' to run one here"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only the chosen subcommand's module is imported to add its options."""
    parser = argparse.ArgumentParser(prog="gridstat", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(_module=module)
        if name == command:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = ["up"]  # the embedded default: the demo utility
    parser = build_parser(argv[0])
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(args._module)
    try:
        return int(module.run(args))
    except GridStatError as exc:
        from gridstat.cli.common import EXIT_USAGE, report_error

        report_error(args.command, exc, EXIT_USAGE, output=getattr(args, "output", None))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
