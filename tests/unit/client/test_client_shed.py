"""Shed notices at the subscriber: a router's overload handling reaches the affected subscriptions."""

from __future__ import annotations

from gridstat.client import Subscriber, Violation
from gridstat.core import wire
from gridstat.core.model import FLOAT, StatusVariable

VAR = StatusVariable("pmu1", "freq", FLOAT, 10, variable_id=7)
OTHER = StatusVariable("pmu1", "volt", FLOAT, 10, variable_id=8)


def notice(reason: int, action: int, *entries: tuple[int, int]) -> bytes:
    return wire.encode_shed_notices(3, 0, reason=reason, action=action, entries=list(entries))[0]


def test_shed_restored_and_dropped_notices() -> None:
    s = Subscriber("ems", 5)
    seen: list[tuple[str, Violation]] = []
    sub = s.subscribe(VAR, interval_ms=20, latency_ms=5, on_violation=lambda x, v: seen.append((x.full_name, v)))
    other = s.subscribe(OTHER, interval_ms=20, latency_ms=5)
    s.process(notice(wire.SHED_CPU_OVERLOAD, wire.SHED_ACTION_SHED, (7, 0), (99, 0)), 1000)
    assert sub.shed_reason == "cpu_overload" and other.shed_reason is None
    assert len(seen) == 1 and seen[0][1].kind == "shed" and seen[0][1].reason == "cpu_overload"
    s.process(notice(wire.SHED_CPU_OVERLOAD, wire.SHED_ACTION_RESTORED, (7, 0)), 2000)
    assert sub.shed_reason is None and len(seen) == 1
    s.process(notice(wire.SHED_LINK_OVERLOAD, wire.SHED_ACTION_DROPPED, (7, 12)), 3000)
    assert seen[-1][1].reason == "link_overload" and seen[-1][1].dropped == 12
    assert sub.stats.shed_notices == 3 and sub.stats.shed_dropped == 12 and sub.stats.violations == 2
    assert s.stats.shed_notices == 3 and not s.stats.drops


def test_a_malformed_notice_is_a_counted_drop() -> None:
    s = Subscriber("ems", 5)
    s.subscribe(VAR, interval_ms=20, latency_ms=5)
    s.process(notice(1, 1, (7, 0))[:-2], 1000)
    assert s.stats.drops["malformed"] == 1 and s.stats.shed_notices == 0
