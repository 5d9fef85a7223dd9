"""``gridstat topology show``: the broker's view of its cloud (or, on a parent, its hierarchy).

Routers with role, capacity and state; channels with bandwidth and latency; inter-cloud channels;
child brokers. Exit codes: see gridstat.cli.common.
"""

from __future__ import annotations

import argparse
import functools

from gridstat.cli import common
from gridstat.cli.formatting import topology_data, topology_view
from gridstat.v1 import broker_pb2 as bpb


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = common.EXIT_CODES_HELP
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="routers, channels, inter-cloud channels and child brokers")
    common.add_common_arguments(show)


def get_topology(args: argparse.Namespace) -> tuple[str, bpb.TopologyView]:
    """The broker's address and its GetTopology reply (shared with ``gridstat routes``)."""
    view = common.broker_call(args, "GetTopology", bpb.GetTopologyRequest())
    return common.broker_address(args.broker), view


def show(args: argparse.Namespace) -> int:
    _, view = get_topology(args)
    common.emit(args.output, topology_data(view), topology_view)
    return common.EXIT_OK


def run(args: argparse.Namespace) -> int:
    return common.guarded(f"topology {args.action}", functools.partial(show, args),
                          output=getattr(args, "output", None))
