"""The one status writer (gridstat_operator.conditions): Strimzi's rules with positive polarity."""

from __future__ import annotations

import datetime
from typing import Any

from gridstat_operator import conditions
from gridstat_operator.conditions import Condition

T0 = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=5)


def body(generation: int = 1, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"generation": generation}, "status": status or {}}


def test_first_write_sets_every_field_and_the_observed_generation() -> None:
    patch: dict[str, Any] = {}
    assert conditions.write_status(patch, body(3), [Condition("Ready", True, "Installed", "ok")], now=T0, paths=[])
    s = patch["status"]
    assert s["observedGeneration"] == 3 and s["paths"] == []
    assert s["conditions"] == [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T12:00:00Z",
                                "reason": "Installed", "message": "ok", "observedGeneration": 3}]


def test_the_transition_time_moves_only_when_the_status_flips() -> None:
    first: dict[str, Any] = {}
    conditions.write_status(first, body(), [Condition("Ready", False, "BrokerUnavailable", "down")], now=T0)
    same_status: dict[str, Any] = {}
    conditions.write_status(same_status, body(1, first["status"]), [Condition("Ready", False, "Rejected", "no")],
                            now=T1)
    assert same_status["status"]["conditions"][0]["lastTransitionTime"] == "2026-01-01T12:00:00Z"
    flipped: dict[str, Any] = {}
    conditions.write_status(flipped, body(1, same_status["status"]), [Condition("Ready", True, "Installed")], now=T1)
    assert flipped["status"]["conditions"][0]["lastTransitionTime"] == "2026-01-01T12:05:00Z"


def test_nothing_is_written_when_only_a_timestamp_would_change() -> None:
    first: dict[str, Any] = {}
    conditions.write_status(first, body(), [Condition("Ready", True, "Installed", "ok")], now=T0, pathCount=2)
    again: dict[str, Any] = {}
    assert not conditions.write_status(again, body(1, first["status"]), [Condition("Ready", True, "Installed", "ok")],
                                       now=T1, pathCount=2)
    assert again == {}


def test_none_removes_a_field() -> None:
    patch: dict[str, Any] = {}
    old = {"observedGeneration": 1, "conditions": [], "rejection": {"reason": "NoFeasiblePath"}}
    assert conditions.write_status(patch, body(1, old), [], rejection=None)
    assert patch["status"]["rejection"] is None


def test_ready_means_generation_observed_and_ready_true() -> None:
    patch: dict[str, Any] = {}
    conditions.write_status(patch, body(2), [Condition("Ready", True, "Installed")], now=T0)
    assert conditions.is_ready(body(2, patch["status"]))
    assert not conditions.is_ready(body(3, patch["status"]))  # a newer spec not yet acted on
    unknown: dict[str, Any] = {}
    conditions.write_status(unknown, body(2), [Condition("Ready", None, "Pending")], now=T0)
    assert unknown["status"]["conditions"][0]["status"] == "Unknown"
    assert not conditions.is_ready(body(2, unknown["status"]))


def test_a_message_loses_a_leading_copy_of_its_reason() -> None:
    assert conditions.without_reason("NoFeasiblePath", "NoFeasiblePath: 1 path") == "1 path"
    assert conditions.without_reason("NoFeasiblePath", "NoFeasiblePath: NoFeasiblePath: 1 path") == "1 path"
    assert conditions.without_reason("NoFeasiblePath", "only 1 path (NoFeasiblePath)") == "only 1 path (NoFeasiblePath)"
    assert conditions.without_reason("", ": x") == ": x"


def test_a_condition_is_carried_over_as_it_was() -> None:
    patch: dict[str, Any] = {}
    conditions.write_status(patch, body(), [Condition("Planned", True, "DryRun", "stops 2"),
                                            Condition("Ready", None, "Pending")], now=T0)
    b = body(1, patch["status"])
    assert conditions.carried(b, "Planned") == Condition("Planned", True, "DryRun", "stops 2")
    assert conditions.carried(b, "Ready") == Condition("Ready", None, "Pending", "")
    assert conditions.carried(b, "Admitted") is None
