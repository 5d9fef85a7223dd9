"""The operator's planning of a Subscription with spec.selector (gridstat_operator.selectors): one
query subscription per resource, replaced when what it asks for changes, and its status and
conditions from what the broker reports of each matching variable."""

from __future__ import annotations

from typing import Any

import pytest

from gridstat.v1 import broker_pb2 as bpb
from gridstat_operator import conditions, plan, selectors

SPEC: dict[str, Any] = {"subscriber": "ems", "edgeRouter": "e2", "selector": "kind='freq' AND region = 'west'",
                        "qos": {"intervalMs": 20, "latencyMs": 50, "redundancy": 2}}
CONTINGENCY = plan.ModeRef("contingency", 1, selector={"matchLabels": {"tier": "protection"}})


def desired(spec: dict[str, Any] = SPEC, labels: dict[str, str] | None = None) -> selectors.DesiredQuery:
    return selectors.desired_query(namespace="grid", name="west-freq", labels=labels or {}, spec=spec,
                                   modes=plan.known_modes([CONTINGENCY]))


def actual_of(d: selectors.DesiredQuery, *members: selectors.Member) -> selectors.ActualQuery:
    return selectors.ActualQuery(d.query_id, d.subscriber, d.where, d.edge_router, d.qos_keys, members)


def test_the_query_id_and_expression_come_from_the_resource_and_the_modes_from_its_membership() -> None:
    d = desired(labels={"tier": "protection"})
    assert d.query_id == "k8s:grid:west-freq:query" and d.query_id.startswith(plan.id_prefix("grid", "west-freq"))
    assert d.where == "kind = 'freq' and region = 'west'"  # normalised, so an equal spec plans nothing
    assert [(q.mode, q.interval_ms, q.redundancy) for q in d.qos] == [("normal", 20, 2), ("contingency", 20, 2)]


@pytest.mark.parametrize(("change", "reason", "field", "says"), [
    ({"selector": "kind = 'freq' or"}, "InvalidSelector", "spec.selector", "spec.selector at column 17"),
    ({"selector": "interval_ms = 'x'"}, "InvalidSelector", "spec.selector", "interval_ms is a number"),
    ({"variables": ["pmu1/freq"]}, "InvalidArgument", "spec.selector", "not both"),
    ({"type": "float"}, "InvalidArgument", "spec.type", "type = 'float'"),
    ({"modes": [{"mode": "storm"}]}, "UnknownMode", "spec.modes[0].mode", "create a Mode"),
])
def test_what_cannot_be_planned_is_refused_with_the_field(change: dict[str, Any], reason: str, field: str,
                                                          says: str) -> None:
    with pytest.raises(plan.SpecError) as caught:
        desired({**SPEC, **change})
    assert (caught.value.reason, caught.value.field) == (reason, field)
    assert says in str(caught.value)


def test_the_plan_subscribes_keeps_replaces_and_removes() -> None:
    d = desired()
    (step,) = selectors.plan_query(d, None)
    assert isinstance(step, selectors.SubscribeQuery) and step.desired == d
    assert selectors.plan_query(d, actual_of(d)) == ()
    assert selectors.plan_query(desired({**SPEC, "selector": "region = 'west' and kind = 'freq'"}), actual_of(d))
    for other in ({"qos": {**SPEC["qos"], "latencyMs": 80}}, {"edgeRouter": "e3"}, {"selector": "kind = 'freq'"}):
        changed = desired({**SPEC, **other})
        gone, again = selectors.plan_query(changed, actual_of(d))
        assert isinstance(gone, selectors.UnsubscribeQuery) and gone.actual.query_id == d.query_id
        assert isinstance(again, selectors.SubscribeQuery) and again.desired == changed
    (gone,) = selectors.plan_query(None, actual_of(d))
    assert isinstance(gone, selectors.UnsubscribeQuery)
    assert selectors.plan_query(None, None) == ()
    assert selectors.query_fingerprint(d) != selectors.query_fingerprint(desired({**SPEC, "selector": "kind = 'x'"}))


def test_status_and_conditions_name_the_admitted_and_the_rejected_variables() -> None:
    d = desired()
    path = ((0, 0, ("e1", "e2"), 2.0),)
    a = actual_of(d, selectors.Member("pmu1/freq", True, "A-s1", paths=path),
                  selectors.Member("far/freq", False, reason="NoFeasiblePath", message="no path to e2"))
    status = selectors.query_status(a, {0: "normal"})
    assert status["query"] == {"id": d.query_id, "where": d.where, "matched": 2, "admitted": 1, "rejectedCount": 1,
                               "rejected": [{"variable": "far/freq", "reason": "NoFeasiblePath",
                                             "message": "no path to e2"}]}
    assert status["subscriptionIds"] == ["A-s1"] and status["pathCount"] == 1
    assert status["paths"][0]["routers"] == ["e1", "e2"] and status["paths"][0]["mode"] == "normal"
    admitted, ready, degraded = selectors.query_conditions(a)
    assert (admitted.type, admitted.status, admitted.reason) == (conditions.ADMITTED, True, "PartlyAdmitted")
    assert "far/freq: NoFeasiblePath" in admitted.message
    assert (ready.status, ready.reason) == (True, "Installed") and "1 of 2" in ready.message
    assert (degraded.status, degraded.reason) == (True, "VariablesRejected")

    all_in = actual_of(d, selectors.Member("pmu1/freq", True, "A-s1", paths=path))
    assert [c.status for c in selectors.query_conditions(all_in)] == [True, True, False]
    assert selectors.query_conditions(all_in, frozenset({"e2"}))[2].reason == "RouterDown"
    none = selectors.query_conditions(actual_of(d))
    assert none[0].status is True and none[1].status is True and "no variable matches yet" in none[1].message
    only_rejected = actual_of(d, selectors.Member("far/freq", False, reason="NoFeasiblePath", message="x"))
    assert selectors.query_conditions(only_rejected)[0].status is False


def test_a_broker_reply_reads_as_the_actual_query() -> None:
    reply = bpb.QueryReply(
        query=bpb.QuerySubscription(query_id="k8s:grid:west-freq:query", subscriber="ems", where="kind = 'freq'",
                                    edge_router="e2", qos=[bpb.ModeQoS(mode=0, interval_ms=20, latency_ms=50,
                                                                      redundancy=0, priority=1)]),
        members=[bpb.QueryMember(variable="pmu1/freq", admitted=True, subscription_id="A-s1",
                                 subscription=bpb.SubscribeReply(allocations=[bpb.Allocation(
                                     mode=0, paths=[bpb.Path(routers=["e1", "e2"], latency_ms=2.0)])])),
                 bpb.QueryMember(variable="far/freq", rejection=bpb.Rejection(reason="NoFeasiblePath",
                                                                               message="no path"))])
    a = selectors.actual_query_from_reply(reply)
    assert a.qos == {0: (0, 20, 50, 1, 1)}  # redundancy 0 reads as 1, as the broker does
    assert a.members == (selectors.Member("pmu1/freq", True, "A-s1", paths=((0, 0, ("e1", "e2"), 2.0),)),
                         selectors.Member("far/freq", False, "", "NoFeasiblePath", "no path"))
