"""``gridstat mode list|define|change``: operating modes, through QoSBroker on a leaf or parent broker.

``mode change`` runs the five-phase change (dissertation 6.3.2) on a leaf broker, or the
depth-first delegation on a parent, and prints the time of every phase; asking for the current
mode prints that nothing changed. Exit codes: see gridstat.cli.common (2 for an unknown mode or a
change already running, 4 when the broker or a router cannot be reached).
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from gridstat.cli import common
from gridstat.cli.formatting import to_json
from gridstat.v1 import broker_pb2 as bpb


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = common.EXIT_CODES_HELP
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = actions.add_parser("list", help="the defined modes, the current one and subscriptions per mode")
    common.add_common_arguments(ls)
    define = actions.add_parser("define", help="define (or rename) a mode: gridstat mode define 1 contingency")
    define.add_argument("mode", type=int, metavar="ID", help="0..15")
    define.add_argument("name", metavar="NAME")
    common.add_common_arguments(define)
    change = actions.add_parser("change", help="switch every cloud under the broker to a mode (name or id)")
    change.add_argument("target", metavar="MODE", help="a mode name or id")
    common.add_common_arguments(change)


def modes_data(reply: bpb.ListModesReply) -> dict[str, Any]:
    return {"current_mode": reply.current_mode, "changing": reply.changing,
            "modes": [{"mode": m.mode, "name": m.name, "current": m.current, "subscriptions": m.subscriptions}
                      for m in reply.modes]}


def change_data(reply: bpb.ChangeModeReply) -> dict[str, Any]:
    return {"previous_mode": reply.previous_mode, "current_mode": reply.current_mode, "changed": reply.changed,
            "duration_ms": round(reply.duration_ms, 3), "clouds": list(reply.clouds),
            "phases": [{"cloud": p.cloud, "phase": p.phase, "name": p.name, "routers": p.routers,
                        "duration_ms": round(p.duration_ms, 3)} for p in reply.phases]}


def change_lines(data: dict[str, Any]) -> list[str]:
    if not data["changed"]:
        return [f"mode {data['current_mode']} is already current; nothing changed"]
    lines = [f"mode {data['previous_mode']} -> {data['current_mode']} in {data['duration_ms']:.1f} ms "
             f"({', '.join(data['clouds'])})"]
    for p in data["phases"]:
        lines.append(f"  {p['cloud']:<12} {p['phase']} {p['name']:<16} {p['routers']:>4} routers "
                     f"{p['duration_ms']:8.1f} ms")
    return lines


def run_action(args: argparse.Namespace) -> int:
    if args.action == "list":
        data = modes_data(common.broker_call(args, "ListModes", bpb.ListModesRequest()))
        if args.output == "json":
            print(to_json(data))
        else:
            for m in data["modes"]:
                mark = "*" if m["current"] else " "
                print(f"{mark} {m['mode']:>2} {m['name']:<24} {m['subscriptions']:>7} subscriptions")
            if data["changing"]:
                print("a mode change is running")
        return common.EXIT_OK
    if args.action == "define":
        info = common.broker_call(args, "DefineMode", bpb.DefineModeRequest(mode=args.mode, name=args.name))
        print(to_json({"mode": info.mode, "name": info.name}) if args.output == "json"
              else f"mode {info.mode} is {info.name!r}")
        return common.EXIT_OK
    request = (bpb.ChangeModeRequest(mode=int(args.target)) if args.target.isdigit()
               else bpb.ChangeModeRequest(name=args.target))
    data = change_data(common.broker_call(args, "ChangeMode", request))
    print(to_json(data) if args.output == "json" else "\n".join(change_lines(data)))
    return common.EXIT_OK


def run(args: argparse.Namespace) -> int:
    return common.guarded("mode", functools.partial(run_action, args), output=getattr(args, "output", None))
