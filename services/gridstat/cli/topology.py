"""``gridstat topology show``: the broker's view of its cloud (or, on a parent, its hierarchy).

Routers with role, capacity and state; channels with bandwidth and latency; inter-cloud channels;
child brokers. ``gridstat topology stations FILE``: the stations of a topology file (docs/topology.md,
"Stations"), optionally only those a where-expression over their attributes matches (docs/queries.md),
e.g. for a map of stations. Exit codes: see gridstat.cli.common.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from rich.console import RenderableType
from rich.table import Table

from gridstat.cli import common
from gridstat.cli.formatting import topology_data, topology_view
from gridstat.v1 import broker_pb2 as bpb


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = common.EXIT_CODES_HELP
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="routers, channels, inter-cloud channels and child brokers")
    common.add_common_arguments(show)
    stations = actions.add_parser("stations", help="the stations of a topology file (gridstat up TOPOLOGY.yaml)")
    stations.add_argument("file", metavar="TOPOLOGY.yaml", help="a topology file (docs/topology.md)")
    stations.add_argument("--where", default="", metavar="EXPR",
                          help="only the stations this expression matches, over the attributes their variables "
                               "carry, e.g. \"region = 'west' and voltage_kv >= 345\" (docs/queries.md)")
    stations.add_argument("--output", "-o", choices=("table", "json"), default="table", help="output format")


def get_topology(args: argparse.Namespace) -> tuple[str, bpb.TopologyView]:
    """The broker's address and its GetTopology reply (shared with ``gridstat routes``)."""
    view = common.broker_call(args, "GetTopology", bpb.GetTopologyRequest())
    return common.broker_address(args.broker), view


def show(args: argparse.Namespace) -> int:
    _, view = get_topology(args)
    common.emit(args.output, topology_data(view), topology_view)
    return common.EXIT_OK


def stations(args: argparse.Namespace) -> int:
    from gridstat.core import expressions
    from gridstat.demo.topology import load_topology

    where = expressions.parse(args.where) if args.where.strip() else None  # a fault: exit 2
    topology = load_topology(args.file)  # TopologyError: exit 2, naming file, line and field
    rows = [{**s.attributes, "publishers": [p.name for p in topology.publishers if p.station is s]}
            for s in topology.stations if where is None or expressions.matches(where, s.attributes)]
    common.emit(args.output, {"file": args.file, "where": args.where.strip(), "stations": rows}, stations_view)
    return common.EXIT_OK


STATION_COLUMNS = ("station", "router", "region", "owner", "voltage_kv", "latitude", "longitude", "description")


def stations_view(data: dict[str, Any]) -> RenderableType:
    title = f"stations of {data['file']}" + (f" where {data['where']}" if data["where"] else "")
    table = Table(title=title, title_justify="left")
    for column in (*STATION_COLUMNS, "publishers"):
        table.add_column(column, overflow="fold")
    for row in data["stations"]:
        table.add_row(*(row.get(c, "") for c in STATION_COLUMNS), ",".join(row["publishers"]))
    table.caption = f"{len(data['stations'])} stations"
    return table


def run(args: argparse.Namespace) -> int:
    body = stations if args.action == "stations" else show
    return common.guarded(f"topology {args.action}", functools.partial(body, args),
                          output=getattr(args, "output", None))
