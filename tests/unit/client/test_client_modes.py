"""Mode notices at the subscriber (dissertation 6.3.2 phases 1 and 5): no false QoS callbacks."""

from __future__ import annotations

from gridstat.client import Subscriber, Subscription, Violation
from gridstat.core import wire
from gridstat.core.model import FLOAT, StatusVariable

VAR = StatusVariable("pmu1", "freq", FLOAT, 10, variable_id=7)
OTHER = StatusVariable("pmu1", "volt", FLOAT, 10, variable_id=8)


def events(*ts: int, var: StatusVariable = VAR) -> bytes:
    return wire.encode_datagram(1, 1, [wire.encode_event(wire.Event(t, var.variable_id,
                                                                     wire.encode_value(FLOAT, 1.0))) for t in ts])


def notice(phase: int, mode: int, previous: int, change_id: int = 1) -> bytes:
    return wire.encode_mode_notice(1, 0, phase=phase, mode=mode, previous_mode=previous, change_id=change_id)


def make() -> tuple[Subscriber, Subscription, Subscription, list[Violation], list[tuple[str, int, int]]]:
    s = Subscriber("ems", 5)
    bad: list[Violation] = []
    told: list[tuple[str, int, int]] = []
    s.on_mode_change = lambda phase, mode, prev: told.append((phase, mode, prev))
    both = s.subscribe(VAR, interval_ms=20, latency_ms=5, on_violation=lambda sub, v: bad.append(v))
    both.mode_intervals = {0: 20, 1: 40}
    old = s.subscribe(OTHER, interval_ms=10, latency_ms=5, on_violation=lambda sub, v: bad.append(v))
    old.mode_intervals = {0: 10}
    return s, both, old, bad, told


def test_no_violation_during_a_change_then_the_new_modes_interval_and_membership() -> None:
    s, both, old, bad, told = make()
    s.process(events(1000), 1001)
    s.process(events(1000, var=OTHER), 1001)
    s.process(notice(wire.MODE_PREPARE, 1, 0), 1002)
    s.process(notice(wire.MODE_PREPARE, 1, 0), 1002)  # every notice is sent twice
    assert s.is_mode_change and s.next_mode == 1 and told == [("prepare", 1, 0)]
    # Streams pause during the change: the monitor reports nothing.
    assert s.check_deadlines(1100) == 0 and bad == []
    s.process(notice(wire.MODE_COMMIT, 1, 0), 1110)
    assert not s.is_mode_change and s.current_mode == 1 and told[-1] == ("commit", 1, 0)
    assert both.interval_ms == 40 and both.in_mode and not old.in_mode
    # The old-only subscription expects nothing in mode 1; the common one at 40 ms from now on.
    assert both.expected_ts_ms == 1120
    s.process(events(1120, 1160), 1161)
    assert s.check_deadlines(1190) == 0
    assert s.check_deadlines(1300) == 1 and bad[-1].kind == "late" and bad[-1].expected_ts_ms == 1200
    assert old.check(5000) is None
    assert s.stats.mode_notices == 2


def test_an_instant_received_ahead_of_the_commit_is_not_expected_again() -> None:
    # Publishers stamp the nearest instant, so the event for 1120 can arrive at 1116, before the
    # commit at 1117; the next event, 1160, is then on time, not a gap after 1120.
    s, both, _, bad, _ = make()
    s.process(events(1000), 1001)
    s.process(notice(wire.MODE_PREPARE, 1, 0), 1002)
    s.process(events(1120), 1116)
    s.process(notice(wire.MODE_COMMIT, 1, 0), 1117)
    assert both.expected_ts_ms == 1160
    s.process(events(1160), 1157)
    assert bad == [] and both.stats.violations == 0


def test_the_filter_accepts_either_modes_phases_during_the_change() -> None:
    s, both, _, _, _ = make()
    both.mode_intervals = {0: 40, 1: 20}
    both.interval_ms = 40
    s.process(notice(wire.MODE_PREPARE, 1, 0), 1000)
    s.process(events(1000, 1020, 1040), 1041)  # 1020 is a phase of the new 20 ms interval
    assert both.stats.delivered == 3 and both.stats.filtered == 0


def test_an_abandoned_change_restores_the_old_mode_and_violations_resume() -> None:
    s, both, _, bad, told = make()
    s.process(events(1000), 1001)
    s.process(notice(wire.MODE_PREPARE, 1, 0, change_id=7), 1002)
    s.process(notice(wire.MODE_ABORT, 0, 0, change_id=7), 1010)
    assert told[-1] == ("abort", 0, 0) and s.current_mode == 0 and not s.is_mode_change
    assert both.interval_ms == 20 and both.in_mode
    assert s.check_deadlines(1100) == 2 and {v.kind for v in bad} == {"late"}  # both subscriptions


def test_a_violation_during_a_change_is_counted_not_reported() -> None:
    s, both, _, bad, _ = make()
    s.process(events(1000), 1001)
    s.process(notice(wire.MODE_PREPARE, 1, 0), 1002)
    s.process(events(1080), 1081)  # a gap across the change
    assert bad == [] and both.stats.suppressed == 1


def test_a_failing_mode_callback_is_counted_and_never_stops_the_loop() -> None:
    s, *_ = make()

    def boom(phase: str, mode: int, prev: int) -> None:
        raise RuntimeError("user bug")

    s.on_mode_change = boom
    s.process(notice(wire.MODE_PREPARE, 1, 0), 1000)
    s.process(notice(wire.MODE_COMMIT, 1, 0), 1001)
    assert s.stats.callback_errors == 2 and s.current_mode == 1


def test_malformed_mode_notices_are_counted_drops() -> None:
    s, *_ = make()
    good = notice(wire.MODE_PREPARE, 1, 0)
    s.process(good[:-1], 1000)
    s.process(good[:16] + bytes([9]) + good[17:], 1000)
    assert s.stats.drops["malformed"] == 2 and s.stats.mode_notices == 0
