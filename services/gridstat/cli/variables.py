"""``gridstat variables list [--where EXPR] [--all-clouds]``: the registered status variables and their attributes.

The leaf broker filters them by the where-expression (ListPublications' ``where``; the language is
docs/queries.md); the expression is parsed here first, so a fault is reported with its column
(exit 2) before any broker is asked. ``--all-clouds`` lists every cloud of the hierarchy (the
leaf broker asks its parent; docs/queries.md, "Across clouds"), with each variable's cloud, and names
the brokers that did not answer. Exit codes: see gridstat.cli.common.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from rich.console import RenderableType
from rich.table import Table

from gridstat.cli import common
from gridstat.cli.formatting import to_json
from gridstat.core import expressions
from gridstat.v1 import broker_pb2 as bpb

_KINDS = {bpb.VALUE_KIND_FLOAT: "float", bpb.VALUE_KIND_INT: "int", bpb.VALUE_KIND_BOOL: "bool"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = common.EXIT_CODES_HELP
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = actions.add_parser("list", help="list the registered variables with their attributes")
    ls.add_argument("--where", default="", metavar="EXPR",
                    help="only those this expression matches, e.g. \"kind = 'freq' and station like 'WEST%%'\" "
                         "(docs/queries.md)")
    ls.add_argument("--all-clouds", action="store_true",
                    help="every cloud of the hierarchy, not only the broker's (asked of its parent)")
    common.add_common_arguments(ls)


def variable_data(p: bpb.Publication) -> dict[str, Any]:
    kind = p.type.struct_name if p.type.kind == bpb.VALUE_KIND_STRUCT else _KINDS.get(p.type.kind, "")
    return {"variable": f"{p.publisher}/{p.variable}", "variable_id": p.variable_id, "type": kind,
            "interval_ms": p.interval_ms, "frames_per_s": p.frames_per_s, "alert": p.alert,
            "edge_router": p.edge_router, "cloud": p.cloud, "attributes": dict(sorted(p.attributes.items()))}


def variables_view(data: dict[str, Any]) -> RenderableType:
    title = "variables" + (f" where {data['where']}" if data["where"] else "")
    table = Table(title=title, title_justify="left")
    clouds = any(v["cloud"] for v in data["variables"])
    for column in ("variable", "id", "type", "interval", *(("cloud",) if clouds else ()), "edge", "attributes"):
        table.add_column(column, overflow="fold")
    for v in data["variables"]:
        interval = f"{v['frames_per_s']} frames/s" if v["frames_per_s"] else f"{v['interval_ms']} ms"
        table.add_row(v["variable"], str(v["variable_id"]), v["type"], interval,
                      *((v["cloud"],) if clouds else ()), v["edge_router"],
                      ", ".join(f"{k}={val}" for k, val in v["attributes"].items()))
    if not data["variables"]:
        table.caption = "no variables match" if data["where"] else "no variables registered"
    if data.get("unreachable"):
        table.caption = ((table.caption + "; ") if table.caption else "") + \
            f"not answering, their variables missing: {', '.join(data['unreachable'])}"
    return table


def list_(args: argparse.Namespace) -> int:
    where = ""
    if args.where.strip():  # parsed as typed, so that a fault's column is the user's
        where = expressions.render(expressions.parse(args.where))  # a fault: ExpressionError, exit 2
    reply = common.broker_call(args, "ListPublications", bpb.ListPublicationsRequest(where=where,
                                                                                     all_clouds=args.all_clouds))
    data = {"where": where, "variables": [variable_data(p) for p in sorted(
        reply.publications, key=lambda p: (p.cloud, p.publisher, p.variable))],
        "unreachable": list(reply.unreachable)}
    if args.output == "json":
        print(to_json(data))
    else:
        common.print_table(variables_view(data))
    return common.EXIT_OK


ACTIONS = {"list": list_}


def run(args: argparse.Namespace) -> int:
    return common.guarded(f"variables {args.action}", functools.partial(ACTIONS[args.action], args),
                          output=getattr(args, "output", None))
