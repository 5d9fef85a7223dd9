"""``gridstat routes ROUTER``: a router's route table and channels, as the router itself holds them.

The broker's GetTopology gives the router's control address; ListRoutes and ListChannels then go
to the router directly (with the same TLS options), so what is printed is the router's own table,
not the broker's idea of it. Exit codes: see gridstat.cli.common (4 also when the router is down).
"""

from __future__ import annotations

import argparse
import functools

from gridstat.cli import common
from gridstat.cli.formatting import find_router, routes_data, routes_view
from gridstat.cli.topology import get_topology
from gridstat.v1 import router_pb2 as rpb
from gridstat.v1 import router_pb2_grpc as rpb_grpc


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = common.EXIT_CODES_HELP
    p.add_argument("router", metavar="ROUTER", help="router name as the broker knows it")
    common.add_common_arguments(p)


def show(args: argparse.Namespace) -> int:
    timeout = common.check_timeout(args.timeout)
    broker, view = get_topology(args)
    info = find_router(view, args.router)
    if info is None:
        known = ", ".join(sorted(r.name for r in view.routers)) or "none"
        raise common.CommandFailed(f"router {args.router!r} is not in the topology of the broker at {broker} "
                                   f"(known: {known})", exit_code=common.EXIT_USAGE, reason="NotFound",
                                   field="router")
    if not info.control_address:
        raise common.CommandFailed(f"the broker at {broker} has no control address for router {args.router!r}",
                                   exit_code=common.EXIT_USAGE, reason="NotFound", field="control_address")
    address = common.parse_address(info.control_address, "router control")
    target = f"router {args.router} at {address}"
    with common.open_channel(address, common.Tls.from_args(args)) as channel:
        stub = rpb_grpc.RouterControlStub(channel)  # type: ignore[no-untyped-call]
        routes = common.call(target, functools.partial(stub.ListRoutes, rpb.ListRoutesRequest(), timeout=timeout))
        channels = common.call(target, functools.partial(stub.ListChannels, rpb.ListChannelsRequest(), timeout=timeout))
    common.emit(args.output, routes_data(args.router, address, routes, channels), routes_view)
    return common.EXIT_OK


def run(args: argparse.Namespace) -> int:
    return common.guarded("routes", functools.partial(show, args), output=getattr(args, "output", None))
