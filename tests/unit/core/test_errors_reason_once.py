"""An error relayed or re-raised by its text names its reason once.

``GridStatError.__str__`` is ``"Reason: message"``; an error made again from that text (a peer's
reply, a rejection relayed by a parent broker, ``Cls(str(exc))``) must not read
``"UnknownVariable: UnknownVariable: ..."`` (docs/management-plane.md).
"""

from __future__ import annotations

from gridstat.broker.delegation import Rejected
from gridstat.broker.rejections import AdmissionRejected
from gridstat.broker.service import rejection
from gridstat.client.session import rejection_error
from gridstat.errors import GridStatError, UnknownVariable, strip_reason
from gridstat.v1 import broker_pb2 as bpb


def test_re_raised_error_prints_its_reason_once() -> None:
    first = UnknownVariable("no publication pmu9/freq")
    assert str(first) == "UnknownVariable: no publication pmu9/freq"
    again = UnknownVariable(str(first))
    assert str(again) == "UnknownVariable: no publication pmu9/freq"
    assert again.message == "no publication pmu9/freq"
    twice = GridStatError(str(again), reason="UnknownVariable")
    assert str(twice).count("UnknownVariable") == 1
    # another reason's text is part of the message, not stripped
    other = GridStatError(str(first), reason="PeerFailed")
    assert str(other) == "PeerFailed: UnknownVariable: no publication pmu9/freq"


def test_rejection_relayed_to_a_client_names_its_reason_once() -> None:
    exc = UnknownVariable("no publication pmu9/freq", field="variable")
    r = rejection(exc)
    assert (r.reason, r.message, r.field) == ("UnknownVariable", "no publication pmu9/freq", "variable")
    err = rejection_error(r, "pmu9/freq")
    assert str(err) == "UnknownVariable: subscription to 'pmu9/freq' refused: no publication pmu9/freq"
    # a peer of an older version that still puts str(exc) in the message
    old = bpb.Rejection(reason="UnknownVariable", message="UnknownVariable: no publication pmu9/freq")
    assert str(rejection_error(old, "pmu9/freq")).count("UnknownVariable") == 1


def test_parent_relays_a_childs_rejection_once() -> None:
    child = AdmissionRejected("no path within 30 ms")
    relayed = Rejected(bpb.Rejection(reason=child.reason, message=str(child)))
    assert str(relayed) == "AdmissionRejected: no path within 30 ms"
    relayed_again = Rejected(rejection(relayed))
    assert str(relayed_again) == "AdmissionRejected: no path within 30 ms"


def test_strip_reason() -> None:
    assert strip_reason("A: A: x", "A") == "x"
    assert strip_reason("A: x", "") == "A: x"
    assert strip_reason("B: x", "A") == "B: x"
