"""Snapshot groups: complete in-phase sets, history, runtime membership, incomplete sets."""

from __future__ import annotations

import operator

import pytest

from gridstat.client import Snapshot, SnapshotGroup, Subscription
from gridstat.core import wire
from gridstat.core.model import FLOAT, StatusVariable
from gridstat.errors import DuplicateName, NotFound

A = StatusVariable("pmu1", "va", FLOAT, 10, variable_id=1)
B = StatusVariable("pmu1", "vb", FLOAT, 10, variable_id=2)
C = StatusVariable("pmu2", "vc", FLOAT, 20, variable_id=3)


def subs(*vs: StatusVariable, interval: int = 20) -> list[Subscription]:
    return [Subscription(v, interval_ms=interval, latency_ms=100) for v in vs]


def feed(sub: Subscription, ts: int, value: float) -> None:
    sub.handle_event(wire.Event(ts, sub.variable.variable_id, wire.encode_value(FLOAT, value)), ts + 1)


def test_a_set_fires_once_when_every_member_has_the_timestamp() -> None:
    a, b, c = subs(A, B, C)
    fired: list[Snapshot] = []
    g = SnapshotGroup("bus", [a, b, c], history=3, on_snapshot=lambda grp, s: fired.append(s))
    feed(a, 1000, 1.0)
    feed(b, 1000, 2.0)
    assert fired == [] and g.latest() is None and g.pending == 1
    feed(c, 1000, 3.0)
    assert len(fired) == 1
    snap = fired[0]
    assert snap.ts_ms == 1000
    assert dict(snap.values) == {"pmu1/va": 1.0, "pmu1/vb": 2.0, "pmu2/vc": 3.0}
    with pytest.raises(TypeError):
        operator.setitem(snap.values, "pmu1/va", 9.0)
    assert g.latest() is snap and g.pending == 0
    assert g.stats.complete == 1


def test_jittered_timestamps_within_the_smallest_publication_interval_form_one_set() -> None:
    a, b = subs(A, B, interval=10)
    g = SnapshotGroup("g", [a, b])
    feed(a, 1001, 1.0)
    feed(b, 998, 2.0)
    latest = g.latest()
    assert latest is not None and latest.ts_ms == 1000


def test_history_and_incomplete_sets() -> None:
    a, b = subs(A, B)
    g = SnapshotGroup("g", [a, b], history=2)
    for ts in (1000, 1020, 1040):
        feed(a, ts, float(ts))
        if ts != 1020:
            feed(b, ts, float(ts))
    # 1020 can never complete once 1040 did: discarded and counted.
    assert g.stats.incomplete == 1 and g.pending == 0
    assert [s.ts_ms for s in g.history()] == [1000, 1040]
    assert [s.ts_ms for s in g.history(1)] == [1040]
    assert g.history(0) == []


def test_incomplete_sets_older_than_the_age_bound_are_discarded() -> None:
    a, b = subs(A, B)
    g = SnapshotGroup("g", [a, b], max_age_ms=50)
    for ts in range(1000, 1200, 20):
        feed(a, ts, 0.0)
    assert g.pending <= 3
    assert g.stats.incomplete >= 7


def test_members_can_be_added_and_removed_at_runtime() -> None:
    a, b, c = subs(A, B, C)
    g = SnapshotGroup("g", [a, b])
    with pytest.raises(DuplicateName):
        g.add(a)
    g.add(c)
    feed(a, 1000, 1.0)
    feed(b, 1000, 2.0)
    assert g.latest() is None
    g.remove(c)
    assert c.groups == []
    with pytest.raises(NotFound):
        g.remove(c)
    feed(a, 1020, 1.0)
    feed(b, 1020, 2.0)
    latest = g.latest()
    assert latest is not None and set(latest.values) == {"pmu1/va", "pmu1/vb"}
    b.unsubscribe()
    assert [s.full_name for s in g.members] == ["pmu1/va"]


def test_a_failing_snapshot_callback_is_counted() -> None:
    def boom(grp: SnapshotGroup, s: Snapshot) -> None:
        raise ValueError("user bug")

    a, b = subs(A, B)
    g = SnapshotGroup("g", [a, b], on_snapshot=boom)
    feed(a, 1000, 1.0)
    feed(b, 1000, 1.0)
    assert g.stats.callback_errors == 1 and g.stats.complete == 1
