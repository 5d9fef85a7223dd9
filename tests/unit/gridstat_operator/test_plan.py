"""The operator's pure planning: membership in modes, effective QoS, and the broker calls a
Subscription resource needs (gridstat_operator.plan)."""

from __future__ import annotations

from typing import Any

import pytest

from gridstat_operator import plan

SPEC: dict[str, Any] = {"subscriber": "ems", "edgeRouter": "e2", "variables": ["pmu1/freq", "pmu1/volt"],
                        "qos": {"intervalMs": 20, "latencyMs": 50, "redundancy": 2, "priority": 1}}
CONTINGENCY = plan.ModeRef("contingency", 1, selector={"matchLabels": {"tier": "protection"}})


def desired(spec: dict[str, Any] = SPEC, labels: dict[str, str] | None = None,
            modes: list[plan.ModeRef] | None = None) -> list[plan.DesiredSubscription]:
    return plan.desired_subscriptions(namespace="grid", name="ems-freq", labels=labels or {}, spec=spec,
                                      modes=plan.known_modes(modes or [CONTINGENCY]))


def actual_of(d: plan.DesiredSubscription) -> plan.ActualSubscription:
    return plan.ActualSubscription(d.subscription_id, d.subscriber, d.variable, d.edge_router, d.qos_keys)


def test_one_broker_subscription_per_variable_with_ids_derived_from_the_resource() -> None:
    ds = desired()
    assert [d.subscription_id for d in ds] == ["k8s:grid:ems-freq:pmu1#freq", "k8s:grid:ems-freq:pmu1#volt"]
    assert all(d.subscription_id.startswith(plan.id_prefix("grid", "ems-freq")) for d in ds)
    assert [q.mode for q in ds[0].qos] == ["normal"]


def test_listed_modes_override_the_default_qos_field_by_field() -> None:
    spec = {**SPEC, "modes": [{"mode": "normal"}, {"mode": "contingency", "intervalMs": 100, "redundancy": 1}]}
    (q0, q1) = desired(spec)[0].qos
    assert (q0.mode_id, q0.interval_ms, q0.latency_ms, q0.redundancy) == (0, 20, 50, 2)
    assert (q1.mode_id, q1.interval_ms, q1.latency_ms, q1.redundancy) == (1, 100, 50, 1)


def test_a_mode_selector_adds_its_mode_with_the_default_qos() -> None:
    assert [q.mode for q in desired(labels={"tier": "protection"})[0].qos] == ["normal", "contingency"]
    assert [q.mode for q in desired(labels={"tier": "other"})[0].qos] == ["normal"]
    by_name = plan.ModeRef("storm", 2, names=frozenset({"ems-freq"}))
    assert [q.mode for q in desired(modes=[by_name])[0].qos] == ["normal", "storm"]


@pytest.mark.parametrize(("selector", "labels", "matches"), [
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {}, True),
    ({}, {"a": "1"}, False),  # an empty selector picks nothing: membership is opt-in
])
def test_label_selectors_follow_kubernetes(selector: dict[str, Any], labels: dict[str, str], matches: bool) -> None:
    assert plan.label_selector_matches(selector, labels) is matches


def test_an_unknown_mode_is_a_spec_error_that_names_the_field() -> None:
    with pytest.raises(plan.SpecError) as e:
        desired({**SPEC, "modes": [{"mode": "nope"}]})
    assert e.value.reason == "UnknownMode" and e.value.field == "spec.modes[0].mode"
    assert "create a Mode named 'nope'" in str(e.value)


def test_a_mode_not_yet_defined_at_the_brokers_waits() -> None:
    pending = plan.ModeRef("contingency", 1, defined=False)
    with pytest.raises(plan.SpecError) as e:
        desired({**SPEC, "modes": [{"mode": "contingency"}]}, modes=[pending])
    assert e.value.reason == "ModeNotDefined"


def test_extrapolation_is_checked_as_the_subscriber_sdk_checks_it() -> None:
    bad = {**SPEC, "qos": {**SPEC["qos"], "extrapolation": {"method": "polynomial", "window": 0}}}
    with pytest.raises(plan.SpecError) as e:
        desired(bad)
    assert e.value.reason == "InvalidExtrapolation" and "window" in str(e.value)
    own = {**SPEC, "qos": {**SPEC["qos"], "extrapolation": {"method": "my-method", "window": 8}}}
    assert desired(own)[0].qos[0].extrapolation == {"method": "my-method", "window": 8}


def test_nothing_to_do_when_the_broker_holds_what_is_wanted() -> None:
    ds = desired()
    assert plan.plan_subscription(ds, [actual_of(d) for d in ds]).empty


def test_missing_variables_are_subscribed_and_extra_ones_removed_last() -> None:
    ds = desired()
    stale = plan.ActualSubscription("k8s:grid:ems-freq:pmu1#old", "ems", "pmu1/old", "e2", {0: (0, 20, 50, 2, 1)})
    steps = plan.plan_subscription(ds, [actual_of(ds[0]), stale]).actions
    assert [type(a).__name__ for a in steps] == ["Subscribe", "Unsubscribe"]
    assert isinstance(steps[0], plan.Subscribe) and steps[0].desired.variable == "pmu1/volt"


def test_a_changed_or_added_mode_is_changed_in_place() -> None:
    before = desired()
    after = desired({**SPEC, "modes": [{"mode": "normal", "intervalMs": 40}, {"mode": "contingency"}]})
    steps = plan.plan_subscription(after[:1], [actual_of(before[0])]).actions
    assert [(type(a).__name__, a.qos.mode_id, a.old) for a in steps if isinstance(a, plan.Change)] == [
        ("Change", 0, (0, 20, 50, 2, 1)), ("Change", 1, None)]


def test_a_removed_mode_or_a_moved_edge_replaces_the_subscription() -> None:
    both = desired({**SPEC, "modes": [{"mode": "normal"}, {"mode": "contingency"}]})
    steps = plan.plan_subscription(desired()[:1], [actual_of(both[0])]).actions
    assert [type(a).__name__ for a in steps] == ["Replace"]
    moved = desired({**SPEC, "edgeRouter": "e3"})
    assert [type(a).__name__ for a in plan.plan_subscription(moved[:1], [actual_of(desired()[0])]).actions] == [
        "Replace"]


def test_priority_zero_matches_what_the_broker_stores() -> None:
    ds = desired({**SPEC, "qos": {**SPEC["qos"], "priority": 0}})
    held = plan.ActualSubscription(ds[0].subscription_id, "ems", "pmu1/freq", "e2", {0: (0, 20, 50, 2, 0)})
    assert plan.plan_subscription(ds[:1], [held]).empty
    # A broker holding it at priority 1 (before the field had presence) is brought to 0.
    stale = plan.ActualSubscription(ds[0].subscription_id, "ems", "pmu1/freq", "e2", {0: (0, 20, 50, 2, 1)})
    assert not plan.plan_subscription(ds[:1], [stale]).empty


def test_the_fingerprint_moves_with_membership_only() -> None:
    assert plan.fingerprint(desired()) == plan.fingerprint(desired())
    assert plan.fingerprint(desired()) != plan.fingerprint(desired(labels={"tier": "protection"}))


def test_paths_status_lists_every_path_by_variable_and_mode() -> None:
    a = plan.ActualSubscription("s", "ems", "pmu1/freq", "e2", {}, paths=[(1, 0, ("e1", "i2", "e2"), 5.0),
                                                                           (0, 1, ("e1", "i2", "e2"), 5.0),
                                                                           (0, 0, ("e1", "i1", "e2"), 3.0)])
    rows = plan.paths_status([a], {0: "normal", 1: "contingency"})
    assert [(r["mode"], r["index"], r["routers"]) for r in rows] == [
        ("normal", 0, ["e1", "i1", "e2"]), ("normal", 1, ["e1", "i2", "e2"]), ("contingency", 0, ["e1", "i2", "e2"])]


def test_mode_change_target_and_id_clash() -> None:
    modes = plan.known_modes([CONTINGENCY])
    assert plan.plan_mode_change({"mode": "contingency"}, modes).id == 1
    with pytest.raises(plan.SpecError):
        plan.plan_mode_change({"mode": "storm"}, modes)
    assert plan.mode_clash(plan.ModeRef("storm", 1), [CONTINGENCY]) == "contingency"
    assert plan.mode_clash(CONTINGENCY, [CONTINGENCY]) is None


def test_condensation_request_carries_the_spec_in_the_brokers_terms() -> None:
    spec = {"output": {"variable": "avg-freq", "intervalMs": 100}, "calculator": "average",
            "inputs": [{"variable": "pmu1/freq", "latencyMs": 20}, {"variable": "pmu2/freq", "latencyMs": 20}],
            "trigger": {"kind": "time", "intervalMs": 100}, "outputFilter": {"low": 59.9, "passOutside": True}}
    data = plan.condensation_request("grid", "area1", spec, mode_id=0, creator="op")
    assert data["function_id"] == "grid.area1" and data["spec"]["trigger"]["kind"] == 1
    assert data["spec"]["output_filter"] == {"enabled": True, "pass_outside": True, "low": 59.9}
    assert data["spec"]["input_filter"] == {"enabled": False}
    assert plan.condensation_fingerprint(data) != plan.condensation_fingerprint({**data, "mode": 1})


# -- switch plans (ActiveMode status.plan) --------------------------------------------------------
def ref(name: str, modes: list[dict[str, Any]] | None = None, labels: dict[str, str] | None = None,
        qos: dict[str, Any] | None = None) -> plan.SubscriptionRef:
    body: dict[str, Any] = {"metadata": {"name": name, "labels": labels or {}},
                            "spec": {**SPEC, "qos": qos or SPEC["qos"], **({"modes": modes} if modes else {})}}
    return plan.subscription_ref(body)


SUBS = [
    ref("only-normal"),                                                               # stops
    ref("both-same", modes=[{"mode": "normal"}, {"mode": "contingency"}]),            # unchanged
    ref("both-slower", modes=[{"mode": "normal"}, {"mode": "contingency", "intervalMs": 100}]),  # changes
    ref("picked", labels={"tier": "protection"}),                                     # picked by selector
    ref("only-contingency", modes=[{"mode": "contingency"}]),                         # starts
]


def test_a_switch_plan_names_what_stops_changes_and_starts() -> None:
    modes = plan.known_modes([CONTINGENCY])
    switch = plan.plan_mode_switch("normal", "contingency", SUBS, modes)
    assert switch.stopping == ("only-normal",)
    assert switch.changing == ("both-slower",)
    assert switch.starting == ("only-contingency",)
    status = switch.as_status()
    assert status["from"] == "normal" and status["to"] == "contingency"
    assert status["stopping"] == {"count": 1, "names": ["only-normal"]}
    assert "stops 1 subscription(s) (only-normal)" in switch.summary
    back = plan.plan_mode_switch("contingency", "normal", SUBS, modes)
    assert back.stopping == ("only-contingency",) and back.starting == ("only-normal",)
    assert back.changing == ("both-slower",)


def test_a_switch_to_the_current_mode_stops_nothing_and_an_unknown_current_counts_every_non_member() -> None:
    modes = plan.known_modes([CONTINGENCY])
    assert plan.plan_mode_switch("normal", "normal", SUBS, modes).as_status()["stopping"]["count"] == 0
    unknown = plan.plan_mode_switch(None, "contingency", SUBS, modes)
    assert unknown.stopping == ("only-normal",) and unknown.starting == () and unknown.from_mode == "unknown"


def test_a_switch_plan_counts_everything_and_lists_a_bounded_number_of_names() -> None:
    many = [ref(f"s{i:03d}") for i in range(plan.PLAN_NAMES_MAX + 5)]
    switch = plan.plan_mode_switch("normal", "contingency", many, plan.known_modes([CONTINGENCY]))
    status = switch.as_status()
    assert status["stopping"]["count"] == plan.PLAN_NAMES_MAX + 5
    assert len(status["stopping"]["names"]) == plan.PLAN_NAMES_MAX
    assert "(5 more)" in switch.summary


def test_the_default_qos_fields_do_not_count_as_a_change() -> None:
    explicit = ref("x", modes=[{"mode": "normal"}, {"mode": "contingency", "redundancy": 1, "priority": 1}],
                   qos={"intervalMs": 20, "latencyMs": 50})
    switch = plan.plan_mode_switch("normal", "contingency", [explicit], plan.known_modes([CONTINGENCY]))
    assert switch.changing == ()


def test_dry_run_is_only_an_explicit_true() -> None:
    assert plan.dry_run({"mode": "x", "dryRun": True})
    assert not plan.dry_run({"mode": "x"}) and not plan.dry_run({"mode": "x", "dryRun": False})


def test_a_new_subscription_is_pending_on_its_broker_at_once() -> None:
    admitted, ready, degraded = plan.pending_conditions("broker-a:7700", "A")
    assert (admitted.type, admitted.status, admitted.reason) == ("Admitted", None, "Pending")
    assert (ready.type, ready.status, ready.reason) == ("Ready", False, "Pending")
    assert "broker-a:7700" in ready.message and "cloud A" in ready.message
    assert degraded.status is False
