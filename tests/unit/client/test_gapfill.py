"""Gap recovery driven with explicit clocks and a fake history service (docs/gap-recovery.md): windows,
retries, the deadline, bounds, delivery by callback or in order, no duplicates, the holder never
moving back; then the asyncio driver and a ``Subscriber`` wired to a fake source."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from gridstat.cli.main import main
from gridstat.client import GapFiller, Holder, Publisher, Subscriber, Subscription
from gridstat.client.gapfill import drive
from gridstat.core import wire
from gridstat.core.model import FLOAT, INT, StatusVariable
from gridstat.errors import ValidationError

VAR = StatusVariable("pmu1", "freq", FLOAT, 10, variable_id=7)
ALERT = StatusVariable("pmu1", "trip", INT, 0, priority=0, alert=True, min_interval_ms=100, variable_id=8)


@dataclass(frozen=True)
class Archived:
    timestamp_ms: int
    value: object
    extrapolated: bool = False


def value_at(ts: int) -> float:
    return 60.0 + ts / 100_000


def ev(ts: int, var: StatusVariable = VAR) -> wire.Event:
    return wire.Event(ts, var.variable_id, wire.encode_value(var.type, value_at(ts)), 0, ())


def archive(*stamps: int) -> list[Archived]:
    return [Archived(ts, value_at(ts)) for ts in stamps]


class Recording:
    """A subscription with recovery on; what reached ``on_event`` and ``on_recovered``."""

    def __init__(self, filler: GapFiller, *, in_order: bool = False, interval_ms: int = 10,
                 var: StatusVariable = VAR) -> None:
        self.live: list[Holder] = []
        self.recovered: list[Holder] = []
        self.sub = Subscription(var, interval_ms=interval_ms, latency_ms=1000,
                                on_event=lambda s, h: self.live.append(h))
        self.sub.enable_recovery(filler, on_recovered=None if in_order else lambda s, h: self.recovered.append(h),
                                 in_order=in_order)

    def feed(self, *stamps: int, now_ms: int = 0) -> None:
        for ts in stamps:
            self.sub.handle_event(ev(ts, self.sub.variable), now_ms or ts + 1)

    def balanced(self) -> bool:
        st = self.sub.stats
        return st.lost == st.recovered + st.unrecoverable + st.recovery_pending


def test_a_gap_becomes_one_window_of_its_lost_instants_due_after_the_wait() -> None:
    filler = GapFiller(recover_after_ms=3000)
    r = Recording(filler)
    r.feed(1000, 1010, 1050, now_ms=2000)  # 1020, 1030, 1040 lost
    [w] = filler.windows(r.sub)
    assert sorted(r.sub.span_ms(t)[0] for t in w.missing) == [1015, 1025, 1035]
    assert (w.from_ms, w.to_ms) == (1015, 1044)  # the filter slots of 1020 and 1040 (half = 5 ms)
    assert r.sub.stats.lost == r.sub.stats.recovery_pending == 3
    assert filler.next_due_ms() == 5000
    assert filler.due(4999) == []
    assert filler.due(5000) == [w] and w.in_flight and filler.due(5000) == []


def test_found_instants_are_delivered_with_their_archived_value_and_timestamp() -> None:
    filler = GapFiller()
    r = Recording(filler)
    r.feed(1000, 1010, 1050)
    [w] = filler.due(10_000)
    filler.answer(w, archive(1010, 1020, 1030, 1040, 1050), now_ms=10_000)  # neighbours are not delivered again
    assert [(h.timestamp_ms, h.value, h.recovered, h.received_ms) for h in r.recovered] == \
        [(ts, value_at(ts), True, 10_000) for ts in (1020, 1030, 1040)]
    assert [h.timestamp_ms for h in r.live] == [1000, 1010, 1050] and not any(h.recovered for h in r.live)
    st = r.sub.stats
    assert (st.lost, st.recovered, st.unrecoverable, st.recovery_pending) == (3, 3, 0, 0)
    assert len(filler) == 0 and filler.windows() == []


def test_never_published_instants_are_not_looked_for() -> None:
    pub = Publisher("pmu1", 11, ("127.0.0.1", 9))
    h = pub.variable(VAR)
    events = [wire.decode_datagram(wire.encode_datagram(11, 1, [h.encode(1.0, ts)])).events[0]
              for ts in (1000, 1010, 1040)]  # 1020 and 1030 skipped at the publisher
    filler = GapFiller()
    sub = Subscription(VAR, interval_ms=10, latency_ms=1000)
    sub.enable_recovery(filler, on_recovered=lambda s, h: None)
    for e in events[:2]:
        sub.handle_event(e, 2000)
    sub.handle_event(events[2], 2000)
    assert sub.stats.unpublished == 2 and sub.stats.lost == 0 and filler.windows() == []
    # 1050 lost, 1060 unpublished... the next event's note tells them apart: only 1050 is asked for.
    events = [wire.decode_datagram(wire.encode_datagram(11, 1, [h.encode(1.0, ts)])).events[0]
              for ts in (1050, 1070)]
    sub.handle_event(events[1], 2000)  # 1050 and 1060 missing; 1060 skipped, 1050 published (lost)
    [w] = filler.windows(sub)
    assert sorted(sub.span_ms(t)[0] + 5 for t in w.missing) == [1050]
    assert sub.stats.lost == 1 and sub.stats.unpublished == 3


def test_what_is_still_missing_is_asked_again_with_back_off_until_the_deadline() -> None:
    filler = GapFiller(recover_after_ms=1000, retry_after_ms=500, give_up_after_ms=4000)
    r = Recording(filler)
    r.feed(1000, 1040, now_ms=2000)  # 1010, 1020, 1030 lost; deadline 6000
    [w] = filler.due(3000)
    filler.answer(w, archive(1010), now_ms=3000)  # the archive is late: 1020 and 1030 not yet written
    assert [h.timestamp_ms for h in r.recovered] == [1010]
    assert filler.next_due_ms() == 3500
    [w] = filler.due(3500)
    filler.failed(w, now_ms=3500)  # the history service is down: counted, retried
    assert filler.stats.query_errors == 1 and filler.next_due_ms() == 4500
    [w] = filler.due(4500)
    filler.answer(w, archive(1020), now_ms=4500)
    assert filler.next_due_ms() == 6000  # 4500 + 2000 is past the deadline: the last try is at it
    assert r.balanced() and r.sub.stats.recovery_pending == 1
    [w] = filler.due(6000)
    filler.answer(w, [], now_ms=6000)
    st = r.sub.stats
    assert (st.lost, st.recovered, st.unrecoverable, st.recovery_pending) == (3, 2, 1, 0)
    assert filler.windows() == [] and filler.stats.queries == 4 and w.attempts == 4
    # A copy of the given-up instant that turns up after all is stale: not delivered, counts unchanged.
    r.feed(1030)
    assert [h.timestamp_ms for h in r.live] == [1000, 1040] and st.lost == 3 and st.stale == 1


def test_in_order_delivery_goes_to_on_event_in_timestamp_order_and_the_holder_stays_newest() -> None:
    filler = GapFiller(retry_after_ms=100)
    r = Recording(filler, in_order=True)
    r.feed(1000, 1050)  # 1010 .. 1040 lost
    newest = r.sub.holder
    [w] = filler.due(10_000)
    # 1030 and 1040 are found first: held behind the older missing 1010 and 1020.
    filler.answer(w, archive(1040, 1030), now_ms=10_000)
    assert [h.timestamp_ms for h in r.live] == [1000, 1050]
    assert r.sub.stats.recovery_pending == 4 and r.balanced()
    [w] = filler.due(10_100)
    filler.answer(w, archive(1010, 1020), now_ms=10_100)
    assert [(h.timestamp_ms, h.recovered) for h in r.live[2:]] == [(1010, True), (1020, True), (1030, True),
                                                                 (1040, True)]
    assert r.sub.holder is newest and r.sub.value == value_at(1050)
    assert r.sub.stats.recovered == 4 and r.balanced()


def test_in_order_held_instants_are_delivered_when_the_older_ones_are_given_up() -> None:
    filler = GapFiller(recover_after_ms=0, retry_after_ms=100, give_up_after_ms=100)
    r = Recording(filler, in_order=True)
    r.feed(1000, 1030, now_ms=5000)  # 1010 and 1020 lost
    [w] = filler.due(5000)
    filler.answer(w, archive(1020), now_ms=5000)
    assert [h.timestamp_ms for h in r.live] == [1000, 1030]
    [w] = filler.due(5100)
    filler.answer(w, [], now_ms=5100)
    assert [h.timestamp_ms for h in r.live] == [1000, 1030, 1020]
    assert (r.sub.stats.recovered, r.sub.stats.unrecoverable) == (1, 1) and r.balanced()


def test_a_late_copy_before_recovery_is_delivered_in_its_place_once() -> None:
    filler = GapFiller()
    r = Recording(filler)
    r.feed(1000, 1040)  # 1010, 1020, 1030 lost
    r.feed(1020)  # a slower path's copy: out of order, taken out of lost and of the window
    st = r.sub.stats
    assert st.out_of_order == 1 and st.lost == 2 and st.recovery_pending == 2
    assert [(h.timestamp_ms, h.value, h.recovered) for h in r.recovered] == [(1020, value_at(1020), True)]
    [w] = filler.due(10_000)
    filler.answer(w, archive(1010, 1020, 1030), now_ms=10_000)
    assert [h.timestamp_ms for h in r.recovered] == [1020, 1010, 1030]
    assert (st.recovered, st.unrecoverable, st.recovery_pending) == (2, 0, 0)


def test_a_late_copy_after_recovery_is_stale() -> None:
    filler = GapFiller()
    r = Recording(filler)
    r.feed(1000, 1030)
    [w] = filler.due(10_000)
    filler.answer(w, archive(1010, 1020), now_ms=10_000)
    r.feed(1010)
    st = r.sub.stats
    assert st.stale == 1 and st.out_of_order == 0 and st.lost == 2 and st.recovered == 2
    assert [h.timestamp_ms for h in r.live] == [1000, 1030]


def test_a_late_copy_of_a_found_instant_held_in_order_is_not_delivered_twice() -> None:
    filler = GapFiller()
    r = Recording(filler, in_order=True)
    r.feed(1000, 1030)  # 1010 and 1020 lost
    [w] = filler.due(10_000)
    filler.answer(w, archive(1020), now_ms=10_000)  # held behind 1010
    r.feed(1020)  # arrives live after all: still held behind 1010
    assert [h.timestamp_ms for h in r.live] == [1000, 1030]
    [w] = filler.due(20_000)
    filler.answer(w, archive(1010), now_ms=20_000)
    assert [h.timestamp_ms for h in r.live] == [1000, 1030, 1010, 1020]
    st = r.sub.stats
    assert (st.lost, st.out_of_order, st.recovered) == (1, 1, 1) and r.balanced() and filler.windows() == []


def test_extrapolated_archive_values_are_not_recoveries() -> None:
    filler = GapFiller(recover_after_ms=0, give_up_after_ms=1)
    r = Recording(filler)
    r.feed(1000, 1020, now_ms=5000)
    [w] = filler.due(5000)
    filler.answer(w, [Archived(1010, 60.0, extrapolated=True)], now_ms=5001)
    assert r.recovered == [] and r.sub.stats.unrecoverable == 1


def test_windows_are_bounded_per_subscription_and_overall() -> None:
    filler = GapFiller(max_windows_per_subscription=2, max_windows=3)
    a = Recording(filler)
    a.feed(1000, 1020, 1040, 1060)  # three gaps of one: the third is dropped
    assert len(filler.windows(a.sub)) == 2 and filler.stats.dropped_windows == 1
    assert a.sub.stats.unrecoverable == 1 and a.balanced()
    b = Recording(filler, var=StatusVariable("pmu2", "freq", FLOAT, 10, variable_id=9))
    b.feed(1000, 1020, 1040)  # one fits overall, the other does not
    assert len(filler) == 3 and filler.stats.dropped_windows == 2 and b.sub.stats.unrecoverable == 1
    # A copy of a dropped instant arriving late is stale, not a gap filled (counts stay balanced).
    b.feed(1030)
    assert b.sub.stats.stale == 1 and b.balanced()


def test_a_window_keeps_its_newest_instants_up_to_the_bound() -> None:
    filler = GapFiller(max_window_instants=5)
    r = Recording(filler)
    r.feed(1000, 1100)  # 9 lost
    [w] = filler.windows()
    assert sorted(r.sub.span_ms(t)[0] + 5 for t in w.missing) == [1050, 1060, 1070, 1080, 1090]
    assert filler.stats.truncated_instants == 4 and r.sub.stats.unrecoverable == 4 and r.balanced()
    assert w.from_ms == 1045
    r.feed(1100 + 10 * 10_000_000)  # a day's gap is reported without walking all of it
    assert len(filler.windows()[-1].missing) == 5 and r.balanced()


def test_a_frame_rate_variable_maps_archived_timestamps_to_its_frames() -> None:
    var = StatusVariable("pmu3", "freq", FLOAT, 33, variable_id=10, frames_per_s=30)
    filler = GapFiller()
    r = Recording(filler, interval_ms=33, var=var)
    frames = [k * 1000 // 30 for k in range(30, 36)]  # 1000, 1033, 1066, 1100, 1133, 1166
    r.feed(frames[0], frames[1], frames[5])
    [w] = filler.due(10_000)
    assert (w.from_ms, w.to_ms) == (1050, 1149)
    filler.answer(w, archive(*frames), now_ms=10_000)
    assert [h.timestamp_ms for h in r.recovered] == frames[2:5]


def test_a_window_keeps_the_interval_it_was_seen_at_across_a_mode_change() -> None:
    filler = GapFiller()
    r = Recording(filler)
    r.sub.mode_intervals = {0: 10, 1: 40}
    r.feed(1000, 1030)  # 1010 and 1020 lost at 10 ms
    r.sub.begin_mode_change(1)
    r.sub.end_mode_change(1, now_ms=1035)
    assert r.sub.interval_ms == 40
    [w] = filler.due(10_000)
    assert w.interval_ms == 10
    filler.answer(w, archive(1010, 1020), now_ms=10_000)
    assert [h.timestamp_ms for h in r.recovered] == [1010, 1020] and r.balanced()


def test_a_failing_recovered_callback_is_guarded_and_counted() -> None:
    filler = GapFiller()
    sub = Subscription(VAR, interval_ms=10, latency_ms=1000)

    def boom(s: Subscription, h: Holder) -> None:
        raise RuntimeError("user bug")

    sub.enable_recovery(filler, on_recovered=boom)
    for ts in (1000, 1030):
        sub.handle_event(ev(ts), ts + 1)
    [w] = filler.due(10_000)
    filler.answer(w, archive(1010, 1020), now_ms=10_000)
    assert sub.stats.callback_errors == 2 and sub.stats.recovered == 2


def test_an_ended_subscription_drops_its_windows() -> None:
    filler = GapFiller()
    r = Recording(filler)
    r.feed(1000, 1030)
    [w] = filler.due(10_000)
    r.sub.unsubscribe()
    assert filler.windows() == [] and r.sub.stats.unrecoverable == 2 and r.balanced()
    filler.answer(w, archive(1010, 1020), now_ms=10_000)  # the answer of a query already running
    assert r.recovered == []


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"recover_after_ms": -1}, "recover_after_ms"),
    ({"retry_after_ms": 0}, "retry_after_ms"),
    ({"give_up_after_ms": 100, "recover_after_ms": 200}, "give_up_after_ms"),
    ({"max_windows": 0}, "max_windows"),
    ({"max_window_instants": True}, "max_window_instants"),
])
def test_bad_bounds_are_refused_naming_the_field(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        GapFiller(**kwargs)
    assert err.value.field == field and field in str(err.value)


# -- the asyncio driver and the Subscriber ------------------------------------------------------------
class FakeHistory:
    """Answers from ``stored`` (variable -> events); fails the first ``failures`` queries."""

    def __init__(self, stored: dict[str, list[Archived]], *, failures: int = 0) -> None:
        self.stored = stored
        self.failures = failures
        self.queries: list[tuple[str, int, int, int]] = []

    async def fetch(self, variable: str, *, from_ms: int, to_ms: int, interval_ms: int = 0) -> Sequence[Archived]:
        self.queries.append((variable, from_ms, to_ms, interval_ms))
        if self.failures:
            self.failures -= 1
            raise ConnectionError("history service unavailable")
        return [e for e in self.stored.get(variable, []) if from_ms <= e.timestamp_ms <= to_ms]


async def wait_for(predicate: object, timeout_s: float = 3.0) -> None:
    async def poll() -> None:
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.005)
    await asyncio.wait_for(poll(), timeout_s)


async def test_the_driver_asks_at_the_subscription_interval_and_retries_a_failed_query() -> None:
    filler = GapFiller(recover_after_ms=20, retry_after_ms=20, give_up_after_ms=2000)
    r = Recording(filler, interval_ms=20)
    source = FakeHistory({"pmu1/freq": archive(*range(1000, 1100, 10))}, failures=1)
    now = [0]
    task = asyncio.create_task(drive(filler, source, now_ms=lambda: now[0], tick_ms=5))
    try:
        r.feed(1000, 1060, now_ms=1)  # 1020 and 1040 lost at this 20 ms interval
        now[0] = 21
        await wait_for(lambda: filler.stats.query_errors == 1)
        now[0] = 50
        await wait_for(lambda: r.sub.stats.recovered == 2)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert [h.timestamp_ms for h in r.recovered] == [1020, 1040]
    assert source.queries == [("pmu1/freq", 1015, 1044, 20)] * 2
    assert filler.stats.queries == 2


async def test_a_subscriber_with_a_history_source_recovers_a_gap_in_its_datagrams() -> None:
    source = FakeHistory({"pmu1/freq": archive(*range(1000, 1200, 10))})
    sub = Subscriber("ems", 5, history=source, recover_after_ms=10)
    got: list[Holder] = []
    async with sub:
        s = sub.subscribe(VAR, interval_ms=10, latency_ms=10_000, on_event=lambda _, h: got.append(h))
        sub.recover(s, recovered="in_order")
        for ts in (1000, 1010, 1080, 1090):  # 1020 .. 1070 lost
            sub.process(wire.encode_datagram(1, 1, [wire.encode_event(ev(ts))]), ts + 1)
        await wait_for(lambda: s.stats.recovered == 6)
    assert [(h.timestamp_ms, h.recovered) for h in got] == \
        [(1000, False), (1010, False), (1080, False), (1090, False), *((t, True) for t in range(1020, 1080, 10))]
    assert s.holder is not None and s.holder.timestamp_ms == 1090
    assert (s.stats.lost, s.stats.unrecoverable, s.stats.recovery_pending) == (6, 0, 0)


def test_recovery_is_refused_without_a_history_service_for_alerts_and_without_a_callback() -> None:
    plain = Subscriber("ems", 5)
    s = plain.subscribe(VAR, interval_ms=10, latency_ms=100)
    with pytest.raises(ValidationError) as err:
        plain.recover(s, recovered="in_order")
    assert err.value.field == "history"
    with_history = Subscriber("ops", 6, history=FakeHistory({}))
    s = with_history.subscribe(VAR, interval_ms=10, latency_ms=100)
    with pytest.raises(ValidationError) as err:
        with_history.recover(s)
    assert err.value.field == "on_recovered"
    with pytest.raises(ValidationError) as err:
        with_history.recover(s, recovered="sorted")  # type: ignore[arg-type]
    assert err.value.field == "recovered" and "'sorted'" in str(err.value)
    a = with_history.subscribe(ALERT, interval_ms=100, latency_ms=100)
    with pytest.raises(ValidationError) as err:
        with_history.recover(a, recovered="in_order")
    assert err.value.field == "recover"


@pytest.mark.parametrize(("flag", "value", "field"), [("--history", "nohost", "history"),
                                                     ("--recover-after-ms", "-1", "recover_after_ms")])
def test_gridstat_subscribe_refuses_a_bad_history_option(flag: str, value: str, field: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["subscribe", "--name", "ems", "--edge", "127.0.0.1:7802", "--variable", "pmu1/freq", "--history",
               "127.0.0.1:7950", flag, value, "-o", "json", "--once"])
    assert rc == 2
    assert json.loads(capsys.readouterr().out)["error"]["field"] == field
