"""The admission controller's decision reaches the subscriber through the SDK (docs/admission.md)."""

from __future__ import annotations

import pytest

from gridstat.client import ModeQoS, SubscriptionRejected
from gridstat.client.session import qos_to_pb, result_from_pb
from gridstat.v1 import admission_pb2 as apb
from gridstat.v1 import broker_pb2 as bpb


def decision(**kw: object) -> apb.AdmissionDecision:
    return apb.AdmissionDecision(requirement=apb.Requirement(min_rate_eps=18, max_rate_eps=31), **kw)  # type: ignore[arg-type]


def test_admitted_with_a_partial_guarantee() -> None:
    reply = bpb.SubscribeReply(admitted=True, variable_id=3, pub_interval_ms=10, subscription=bpb.Subscription(
        subscription_id="A-s1", subscriber="ems", variable="pmu1/freq",
        qos=[bpb.ModeQoS(mode=0, interval_ms=10, latency_ms=50, price=2.5, best_effort=True)]),
        admission=bpb.AdmissionNote(consulted=True, decided_by="controller", controller="h:1", note="partial",
                                    decision=decision(admitted=True, reason="PartiallyGuaranteed",
                                                      guaranteed_fraction=0.4, reserved_eps=12.4)))
    r = result_from_pb(reply)
    assert r.qos[0].price == 2.5 and r.qos[0].best_effort
    assert r.admission is not None and r.admission.reason == "PartiallyGuaranteed"
    assert r.admission.guaranteed_fraction == 0.4
    assert (r.admission.required_min_eps, r.admission.required_max_eps) == (18, 31)


def test_refused_by_the_controller_with_its_hops() -> None:
    reply = bpb.SubscribeReply(admitted=False, subscription=bpb.Subscription(variable="pmu1/volt"),
                               rejection=bpb.Rejection(reason="CapacityExceeded", message="admission controller: full",
                                                       field="admission"),
                               admission=bpb.AdmissionNote(consulted=True, decided_by="controller", note="full",
                                                           decision=decision(reason="CapacityExceeded", hops=[
                                                               apb.HopVerdict(router="e1", link="x", resource="cpu",
                                                                              required=60, available=40)])))
    with pytest.raises(SubscriptionRejected) as err:
        result_from_pb(reply)
    e = err.value
    assert e.reason == "CapacityExceeded" and e.admission is not None and not e.admission.fallback
    assert [(h.router, h.resource, h.ok) for h in e.admission.hops] == [("e1", "cpu", False)]


def test_fallback_note_and_plain_replies() -> None:
    reply = bpb.SubscribeReply(admitted=True, subscription=bpb.Subscription(subscription_id="A-s2"),
                               admission=bpb.AdmissionNote(consulted=True, fallback=True, decided_by="broker",
                                                           note="controller unreachable"))
    note = result_from_pb(reply).admission
    assert note is not None and note.fallback and note.decided_by == "broker" and note.guaranteed_fraction == 1.0
    assert result_from_pb(bpb.SubscribeReply(admitted=True)).admission is None
    assert qos_to_pb(ModeQoS(0, 10, 50)).price == 1.0 and not qos_to_pb(ModeQoS(0, 10, 50)).best_effort
