"""``gridstat flood set|remove|list``: limited flooding, through QoSBroker on a leaf or parent broker.

``flood set VARIABLE`` floods a variable to the broker's own scope (a leaf: its cloud, level 1;
a parent: the clouds below it, its height) or to ``--level``; ``--mode`` names the operating
modes (default: the current mode). ``flood remove`` stops this broker's own flooding in those
modes (an ancestor's setting, if any, stays in force). ``flood list`` prints every setting: the
parent's first within a mode, a local one overridden by it marked so. Exit codes: see
gridstat.cli.common (2 for an unknown variable, a level above the broker's height or a mode
outside 0..15; 4 when the broker or one of its children cannot be reached).
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from gridstat.cli import common
from gridstat.v1 import broker_pb2 as bpb


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = common.EXIT_CODES_HELP
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    set_ = actions.add_parser("set", help="flood a variable to a level of the hierarchy in some modes")
    set_.add_argument("variable", metavar="VARIABLE", help="PUBLISHER/VARIABLE")
    set_.add_argument("--level", type=int, default=0, metavar="L",
                      help="1 = the cloud, 2 = the clouds under its parent, ... (default: the broker's height)")
    set_.add_argument("--mode", type=int, nargs="+", action="extend", default=None, metavar="M",
                      help="operating modes 0..15 (default: the current mode)")
    common.add_common_arguments(set_)
    rm = actions.add_parser("remove", help="stop this broker's flooding of a variable in some modes")
    rm.add_argument("variable", metavar="VARIABLE", help="PUBLISHER/VARIABLE")
    rm.add_argument("--mode", type=int, nargs="+", action="extend", default=None, metavar="M",
                    help="operating modes 0..15 (default: the current mode)")
    common.add_common_arguments(rm)
    ls = actions.add_parser("list", help="the flooded variables, per mode, with the level and who set it")
    common.add_common_arguments(ls)


def flooding_data(reply: bpb.BrokerFloodingReply) -> list[dict[str, Any]]:
    """One row per entry; a local setting in a mode the parent also set is ``overridden``."""
    parent_modes = {(e.variable, e.mode) for e in reply.flooding if e.from_parent}
    return [{"variable": e.variable, "variable_id": e.variable_id, "mode": e.mode, "level": e.level,
             "set_by": "parent" if e.from_parent else "local",
             "effective": e.from_parent or (e.variable, e.mode) not in parent_modes,
             "cloud": e.publication.cloud}
            for e in reply.flooding]


def flooding_view(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="flooded variables", title_justify="left")
    for column in ("variable", "id", "mode", "level", "set by", "state"):
        table.add_column(column)
    for r in rows:
        table.add_row(r["variable"], str(r["variable_id"]), str(r["mode"]), str(r["level"]), r["set_by"],
                      "in force" if r["effective"] else "overridden by the parent")
    if not rows:
        table.caption = "none"
    return table


def run_action(args: argparse.Namespace) -> int:
    reply: bpb.BrokerFloodingReply
    if args.action == "list":
        reply = common.broker_call(args, "ListFlooding", bpb.ListFloodingRequest())
    elif args.action == "set":
        reply = common.broker_call(args, "SetFlooding", bpb.BrokerFloodingRequest(
            variable=args.variable, level=args.level, modes=args.mode or []))
    else:
        reply = common.broker_call(args, "RemoveFlooding", bpb.BrokerFloodingRequest(
            variable=args.variable, modes=args.mode or []))
    rows = flooding_data(reply)
    if args.output != "json" and args.action == "remove" and not rows:
        print(f"{args.variable} is no longer flooded")
    else:
        common.emit(args.output, rows, flooding_view)
    return common.EXIT_OK


def run(args: argparse.Namespace) -> int:
    return common.guarded("flood", functools.partial(run_action, args), output=getattr(args, "output", None))


__all__ = ["add_arguments", "flooding_data", "run"]
