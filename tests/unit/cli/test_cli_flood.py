"""``gridstat flood set|remove|list``: options and what the listing shows."""

from __future__ import annotations

from gridstat.cli.flood import flooding_data
from gridstat.cli.main import build_parser
from gridstat.v1 import broker_pb2 as bpb


def test_options() -> None:
    args = build_parser("flood").parse_args(["flood", "set", "pmu/freq", "--level", "2", "--mode", "0", "3"])
    assert (args.action, args.variable, args.level, args.mode) == ("set", "pmu/freq", 2, [0, 3])
    args = build_parser("flood").parse_args(["flood", "remove", "pmu/freq"])
    assert (args.action, args.mode) == ("remove", None)
    assert build_parser("flood").parse_args(["flood", "list", "-o", "json"]).output == "json"


def test_a_local_setting_under_a_parent_one_is_shown_overridden() -> None:
    reply = bpb.BrokerFloodingReply(flooding=[
        bpb.FloodingEntry(variable="p/v", variable_id=5, mode=0, level=2, from_parent=True),
        bpb.FloodingEntry(variable="p/v", variable_id=5, mode=0, level=1),
        bpb.FloodingEntry(variable="p/v", variable_id=5, mode=1, level=1)])
    assert [(r["mode"], r["level"], r["set_by"], r["effective"]) for r in flooding_data(reply)] == [
        (0, 2, "parent", True), (0, 1, "local", False), (1, 1, "local", True)]
