"""The SDK's side of a query subscription (gridstat.client.querying): the broker's view of the query
applied to a subscriber's local subscriptions, without a network."""

from __future__ import annotations

from gridstat.client import Subscriber
from gridstat.client.querying import QuerySubscription
from gridstat.core.model import FLOAT, StatusVariable
from gridstat.v1 import broker_pb2 as bpb


def admitted(variable: str, sid: str, vid: int, *, granted_ms: int = 40) -> bpb.QueryMember:
    return bpb.QueryMember(variable=variable, admitted=True, subscription_id=sid, subscription=bpb.SubscribeReply(
        admitted=True, variable_id=vid, pub_interval_ms=20, attributes={"kind": "freq"},
        subscription=bpb.Subscription(subscription_id=sid, subscriber="ems", variable=variable,
                                      type=bpb.ValueType(kind=bpb.VALUE_KIND_FLOAT),
                                      qos=[bpb.ModeQoS(mode=0, interval_ms=45, latency_ms=100, redundancy=1)]),
        allocations=[bpb.Allocation(mode=0, interval_ms=granted_ms)]))


def reply(*members: bpb.QueryMember) -> bpb.QueryReply:
    return bpb.QueryReply(query=bpb.QuerySubscription(query_id="A-q1", subscriber="ems", where="kind = 'freq'"),
                          members=list(members))


def query(sub: Subscriber) -> QuerySubscription:
    return QuerySubscription(sub, None, "A-q1", "kind = 'freq'", latency_ms=100, mode=0,  # type: ignore[arg-type]
                             on_event=None, on_violation=None)


def test_admitted_variables_are_subscribed_locally_and_dropped_ones_forgotten() -> None:
    sub = Subscriber("ems", 7)
    q = query(sub)
    rejected = bpb.QueryMember(variable="far/freq", rejection=bpb.Rejection(reason="NoFeasiblePath", message="no"))
    changes = q.apply(reply(admitted("pmu1/freq", "A-s1", 11), admitted("pmu2/freq", "A-s2", 12), rejected))
    assert sorted(changes.added) == ["pmu1/freq", "pmu2/freq"] and changes.rejected == {"far/freq": "NoFeasiblePath"}
    local = q.members["pmu1/freq"]
    assert local.variable.variable_id == 11 and local.variable.attributes == {"kind": "freq"}
    assert local.interval_ms == 40  # the interval the broker granted, not the one asked
    assert {s.variable.variable_id for s in sub.subscriptions()} == {11, 12}
    assert sub._remote_ids == {11: "A-s1", 12: "A-s2"}
    assert q.rejected == {"far/freq": ("NoFeasiblePath", "no")}

    again = q.apply(reply(admitted("pmu2/freq", "A-s2", 12), admitted("pmu3/freq", "A-s3", 13), rejected))
    assert again.added == ("pmu3/freq",) and again.dropped == ("pmu1/freq",) and again.rejected == {}
    assert {s.variable.variable_id for s in sub.subscriptions()} == {12, 13} and 11 not in sub._remote_ids

    gone = q.apply(None)  # the broker no longer holds the query (the subscriber restarted)
    assert sorted(gone.dropped) == ["pmu2/freq", "pmu3/freq"] and not sub.subscriptions() and not q.rejected


def test_a_variable_already_subscribed_by_hand_is_reported_not_doubled() -> None:
    sub = Subscriber("ems", 7)
    mine = sub.subscribe(StatusVariable("pmu1", "freq", FLOAT, 20, variable_id=11), interval_ms=20, latency_ms=50)
    q = query(sub)
    changes = q.apply(reply(admitted("pmu1/freq", "A-s1", 11)))
    assert changes.added == () and changes.rejected == {"pmu1/freq": "AlreadyExists"}
    assert sub.subscriptions() == [mine]
