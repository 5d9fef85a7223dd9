"""What a subscriber sees is what happened: gaps split into never published and lost on the way
(the publisher's SKIPPED note, docs/wire-format.md 3.4), and late copies of a slower path."""

from __future__ import annotations

import random

from gridstat.client import Publisher, Subscription
from gridstat.client.holders import unpublished_among
from gridstat.core import wire
from gridstat.core.model import FLOAT, StatusVariable

VAR = StatusVariable("pmu1", "freq", FLOAT, 10, variable_id=7)


def published(instants: list[int]) -> tuple[Publisher, list[wire.Event]]:
    """The events a publisher encodes for ``instants`` (in order), decoded as a receiver sees them."""
    pub = Publisher("pmu1", 11, ("127.0.0.1", 9))
    h = pub.variable(VAR)
    events = [wire.decode_datagram(wire.encode_datagram(11, 1, [h.encode(float(ts), ts)])).events[0]
              for ts in instants]
    return pub, events


def skip_note(event: wire.Event) -> wire.DerivedValue | None:
    return next((o for o in event.options if o.kind == wire.OptionKind.SKIPPED), None)


def test_a_publisher_counts_the_instants_it_skipped_and_its_next_events_say_which() -> None:
    pub, events = published([1000, 1010, 1040, 1050, 1060])  # 1020 and 1030 skipped
    assert pub.stats.skipped == 2
    assert [skip_note(e) is None for e in events[:2]] == [True, True]  # nothing skipped yet: no bytes added
    note = skip_note(events[2])
    assert note is not None and (note.window, note.bits, note.value) == (2, 0, 2.0)
    # 1050: no run right before it; the run shows in the bitmap (bit i: instant ts - (run + 2 + i) * p).
    note = skip_note(events[3])
    assert note is not None and note.window == 0 and note.bits == 0b11
    assert skip_note(events[4]) is not None and skip_note(events[4]).bits == 0b110  # type: ignore[union-attr]


def test_the_note_stops_once_the_skips_are_older_than_its_window() -> None:
    instants = [1000, 1020] + [1020 + 10 * k for k in range(1, wire.SKIP_BITS + 3)]
    _pub, events = published(instants)
    notes = [skip_note(e) for e in events]
    assert notes[1] is not None and notes[1].window == 1
    assert all(n is not None for n in notes[2:wire.SKIP_BITS + 2])
    assert notes[-1] is None


def test_the_same_or_an_older_instant_again_is_not_a_skip() -> None:
    pub, events = published([1000, 1010, 1010, 1005, 1020])
    assert pub.stats.skipped == 0 and all(skip_note(e) is None for e in events)


def deliver(sub: Subscription, events: list[wire.Event]) -> None:
    for e in events:
        sub.handle_event(e, e.timestamp_ms + 1)


def test_gaps_at_the_publisher_are_unpublished_and_the_rest_lost() -> None:
    instants = list(range(1000, 1200, 10))
    skipped = {1030, 1040, 1100}
    lost_on_the_way = {1070, 1150}
    _pub, events = published([t for t in instants if t not in skipped])
    sub = Subscription(VAR, interval_ms=10, latency_ms=50)
    deliver(sub, [e for e in events if e.timestamp_ms not in lost_on_the_way])
    st = sub.stats
    assert (st.gaps, st.unpublished, st.lost) == (5, 3, 2)
    assert st.publisher_skipped == 3
    assert sub.holder is not None and sub.holder.options == ()  # the note is not a derived value


def test_a_subscriber_at_a_multiple_of_the_interval_classifies_only_its_own_instants() -> None:
    instants = list(range(1000, 1400, 10))
    skipped = {1020, 1030, 1110, 1250}
    _pub, events = published([t for t in instants if t not in skipped])
    # What a router's filter passes for a 20 ms subscription (phases on multiples of 20), less one lost.
    passed = [e for e in events if e.timestamp_ms % 20 == 0 and e.timestamp_ms != 1200]
    sub = Subscription(VAR, interval_ms=20, latency_ms=50)
    deliver(sub, passed)
    st = sub.stats
    # Missing 20 ms instants: 1020 (skipped), 1200 (lost); 1030, 1110, 1250 are not its instants.
    assert (st.gaps, st.unpublished, st.lost) == (2, 1, 1)


def test_a_long_stall_is_unpublished_whatever_its_length() -> None:
    _pub, events = published([1000, 1010, 1010 + 10 * 500, 1010 + 10 * 501])
    sub = Subscription(VAR, interval_ms=10, latency_ms=50)
    deliver(sub, events)
    assert (sub.stats.gaps, sub.stats.unpublished, sub.stats.lost) == (499, 499, 0)


def test_a_copy_from_a_slower_path_after_a_newer_event_is_not_a_gap() -> None:
    _pub, events = published(list(range(1000, 1100, 10)))
    by_ts = {e.timestamp_ms: e for e in events}
    sub = Subscription(VAR, interval_ms=10, latency_ms=50)
    # Path A delivers 1000..1030, then path B's 1050 overtakes A's 1040, which arrives after it.
    deliver(sub, [by_ts[t] for t in (1000, 1010, 1020, 1030, 1050, 1040, 1060)])
    st = sub.stats
    assert (st.gaps, st.lost, st.out_of_order, st.stale) == (0, 0, 1, 0)
    # A copy of an instant that was never a gap stays a stale copy.
    deliver(sub, [by_ts[1010]])
    assert (st.stale, st.duplicates) == (0, 1)


def test_unpublished_among_matches_a_walk_over_the_publishers_history() -> None:
    rng = random.Random(7)
    for _ in range(300):
        ratio = rng.choice([1, 2, 3, 6])
        # skipped[k]: was the instant k publication intervals before the event skipped (k >= 1)?
        skipped = [False] + [rng.random() < rng.choice([0.2, 0.6, 0.95]) for _ in range(200)]
        run = next(k for k in range(1, len(skipped)) if not skipped[k]) - 1
        bits = sum(1 << i for i in range(wire.SKIP_BITS) if skipped[run + 2 + i])
        note = wire.DerivedValue(wire.OptionKind.SKIPPED, run, 0.0, bits)
        missing = rng.randint(1, 150 // ratio)
        covered = run + 1 + wire.SKIP_BITS  # older instants: the note does not say, counted published
        want = sum(1 for j in range(1, missing + 1) if j * ratio <= covered and skipped[j * ratio])
        assert unpublished_among(missing, 10 * ratio, 10, note) == want, (ratio, run, missing)
