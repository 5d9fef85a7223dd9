"""``gridstat topology show``: the broker's view of its cloud (or, on a parent, its hierarchy).

Routers with role, capacity and state; channels with bandwidth and latency; inter-cloud channels;
child brokers. Exit codes: see gridstat.cli.common.
"""

from __future__ import annotations

import argparse
import functools

from gridstat.cli.common import (
    EXIT_CODES_HELP,
    EXIT_OK,
    Tls,
    add_common_arguments,
    broker_address,
    call,
    check_timeout,
    guarded,
    open_channel,
    print_table,
)
from gridstat.cli.formatting import to_json, topology_data, topology_view
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import broker_pb2_grpc as bpb_grpc


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXIT_CODES_HELP
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="routers, channels, inter-cloud channels and child brokers")
    add_common_arguments(show)


def get_topology(args: argparse.Namespace) -> tuple[str, bpb.TopologyView]:
    """The broker's address and its GetTopology reply (shared with ``gridstat routes``)."""
    timeout = check_timeout(args.timeout)
    address = broker_address(args.broker)
    with open_channel(address, Tls.from_args(args)) as channel:
        stub = bpb_grpc.QoSBrokerStub(channel)  # type: ignore[no-untyped-call]
        view = call(f"broker at {address}", functools.partial(
            stub.GetTopology, bpb.GetTopologyRequest(), timeout=timeout))
    return address, view


def show(args: argparse.Namespace) -> int:
    _, view = get_topology(args)
    data = topology_data(view)
    if args.output == "json":
        print(to_json(data))
    else:
        print_table(topology_view(data))
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    return guarded(f"topology {args.action}", functools.partial(show, args), output=getattr(args, "output", None))
