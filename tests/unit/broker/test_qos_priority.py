"""Priority 0 (alert) survives the gRPC boundary: the proto field has presence."""

from __future__ import annotations

from gridstat.broker.service import qos_from_pb
from gridstat.core.model import PRIORITY_HIGH
from gridstat.core.protoconv import priority_of
from gridstat.v1 import broker_pb2 as pb


def test_an_explicit_zero_is_alert_priority_and_unset_is_the_default() -> None:
    assert qos_from_pb(pb.ModeQoS(mode=0, interval_ms=10, latency_ms=5, priority=0)).priority == 0
    assert qos_from_pb(pb.ModeQoS(mode=0, interval_ms=10, latency_ms=5)).priority == PRIORITY_HIGH
    assert qos_from_pb(pb.ModeQoS(mode=0, interval_ms=10, latency_ms=5, priority=4)).priority == 4
    assert priority_of(pb.Publication(publisher="p", variable="v", priority=0)) == 0
    assert priority_of(pb.Publication(publisher="p", variable="v")) == PRIORITY_HIGH
    # The presence survives serialisation, as it crosses the edge proxy and the broker.
    wire = pb.ModeQoS.FromString(pb.ModeQoS(mode=1, priority=0).SerializeToString())
    assert wire.HasField("priority") and priority_of(wire) == 0
