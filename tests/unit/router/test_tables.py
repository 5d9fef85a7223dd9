"""Routing tables in both variants: chapter 4's walk-throughs and their equivalence."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridstat.errors import NotFound, ValidationError
from gridstat.router.tables import (
    MODE_SLOTS,
    CompiledEntry,
    Route,
    RoutingTable,
    Variant,
    select_close,
    select_sparse,
)


class Queue:
    def __init__(self, channel: str, priority: int) -> None:
        self.channel = channel
        self.priority = priority
        self.filtered = 0
        self.events: list[bytes] = []

    def push(self, event: bytes) -> None:
        self.events.append(event)


class Channels:
    def __init__(self, *names: str) -> None:
        self.queues = {(n, p): Queue(n, p) for n in names for p in range(7)}

    def resolve(self, channel: str, priority: int) -> Queue:
        try:
            return self.queues[(channel, priority)]
        except KeyError:
            raise NotFound(f"no channel {channel!r}", field="channel") from None


def names(targets: list[Queue]) -> list[str]:  # type: ignore[type-arg]
    return sorted(t.channel for t in targets)


def make(variant: Variant, *channels: str) -> RoutingTable:
    return RoutingTable(variant, Channels(*channels).resolve)


def closes(entry: CompiledEntry) -> dict[str, tuple[int, ...]]:
    return {t.channel: el for t, el in entry.close}  # type: ignore[attr-defined]


@pytest.mark.parametrize("variant", list(Variant))
def test_filtering_example_10ms_pub_20_and_30ms_subs(variant: Variant) -> None:
    table = make(variant, "out")
    table.install(Route("s20", 1, 0, "out", 20, 1), pub_interval_ms=10)
    table.install(Route("s30", 1, 0, "out", 30, 1), pub_interval_ms=10)
    entry = table.active[1]
    select = select_close if variant is Variant.CLOSE else select_sparse
    sent = [ts for ts in range(0, 70, 10) if select(entry, ts)]
    assert sent == [0, 20, 30, 40, 60]
    assert len(select(entry, 60)) == 1  # one copy per channel per timestamp


def test_chapter_4_add_and_remove_walk_through_90_90_180() -> None:
    table = make(Variant.CLOSE, "e1")
    table.install(Route("p1", 7, 0, "e1", 90, 1), pub_interval_ms=30)
    table.install(Route("p2", 7, 0, "e1", 90, 1), pub_interval_ms=30)
    table.install(Route("p3", 7, 0, "e1", 180, 1), pub_interval_ms=30)
    assert closes(table.active[7]) == {"e1": (90,)}
    table.remove("p1", 7, 0)
    assert closes(table.active[7]) == {"e1": (90,)}
    table.remove("p2", 7, 0)
    assert closes(table.active[7]) == {"e1": (180,)}
    table.remove("p3", 7, 0)
    assert 7 not in table.active  # empty entries are deleted


def test_section_4_3_worked_example_filters_near_the_source() -> None:
    # Publication at 30 ms; 90, 180, 630 via e1; 240 via e2; 630 via e3; all through i0.
    e0 = make(Variant.CLOSE, "i0")
    for rid, s in [("a", 90), ("b", 180), ("c", 630), ("d", 240), ("e", 630)]:
        e0.install(Route(rid, 5, 0, "i0", s, 1), pub_interval_ms=30)
    assert closes(e0.active[5]) == {"i0": (90, 240)}
    i0 = make(Variant.CLOSE, "e1", "e2", "e3")
    for rid, ch, s in [("a", "e1", 90), ("b", "e1", 180), ("c", "e1", 630), ("d", "e2", 240), ("e", "e3", 630)]:
        i0.install(Route(rid, 5, 0, ch, s, 1), pub_interval_ms=30)
    assert closes(i0.active[5]) == {"e1": (90,), "e2": (240,), "e3": (630,)}
    # Everything i0 sends on any channel was let through by e0 (nothing is lost by filtering early).
    for ts in range(0, 30 * 200, 30):
        if select_close(i0.active[5], ts):
            assert select_close(e0.active[5], ts)


def test_intervals_are_rounded_down_at_install() -> None:
    table = make(Variant.SPARSE, "o")
    r = table.install(Route("x", 1, 0, "o", 95, 1), pub_interval_ms=30)
    assert r.sub_interval_ms == 90


def test_mode_switch_is_a_pointer_swap_and_modes_are_independent() -> None:
    table = make(Variant.CLOSE, "a", "b")
    table.install(Route("r", 1, 0, "a", 20, 1), pub_interval_ms=10)
    table.install(Route("r", 1, 3, "b", 40, 1), pub_interval_ms=10)
    assert names(select_close(table.active[1], 0)) == ["a"]
    table.set_mode(3)
    assert names(select_close(table.active[1], 0)) == ["b"]
    assert table.entry(1, mode=0) is not None
    table.set_mode(MODE_SLOTS - 1)  # the temporary slot exists
    assert 1 not in table.active
    with pytest.raises(ValidationError):
        table.set_mode(MODE_SLOTS)


def test_alert_variables_use_the_alert_queue() -> None:
    table = make(Variant.CLOSE, "a")
    table.install(Route("r", 1, 0, "a", 100, 3), pub_interval_ms=100, alert=True)
    (target, _), = table.active[1].close
    assert target.priority == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("variant", list(Variant))
def test_every_alert_passes_whatever_the_subscription_interval(variant: Variant) -> None:
    """Alerts are aperiodic: off the interval grid, a rate filter would drop them (docs/management-plane.md,
    "Alerts"); a periodic variable with the same routes is filtered as 4.1 says."""
    table = make(variant, "a", "b")
    table.install(Route("r1", 1, 0, "a", 10, 0), pub_interval_ms=1, alert=True)
    table.install(Route("r2", 1, 0, "b", 1000, 0), pub_interval_ms=1, alert=True)
    table.install(Route("p1", 2, 0, "a", 10, 1), pub_interval_ms=1)
    select = select_close if variant is Variant.CLOSE else select_sparse
    stamps = range(1_700_000_000_000, 1_700_000_000_100)
    assert all(len(select(table.active[1], ts)) == 2 for ts in stamps)
    assert sum(len(select(table.active[2], ts)) for ts in stamps) == 10  # one in ten at 10 ms


def test_channel_priority_is_the_highest_of_its_routes() -> None:
    table = make(Variant.CLOSE, "a")
    table.install(Route("r1", 1, 0, "a", 20, 5), pub_interval_ms=10)
    table.install(Route("r2", 1, 0, "a", 40, 2), pub_interval_ms=10)
    (target, _), = table.active[1].close
    assert target.priority == 2  # type: ignore[attr-defined]


def test_older_version_does_not_replace_newer() -> None:
    table = make(Variant.CLOSE, "a", "b")
    table.install(Route("r", 1, 0, "a", 20, 1, version=5), pub_interval_ms=10)
    kept = table.install(Route("r", 1, 0, "b", 20, 1, version=4), pub_interval_ms=10)
    assert kept.channel == "a" and closes(table.active[1]) == {"a": (20,)}


def test_bad_routes_are_rejected_before_any_change() -> None:
    table = make(Variant.CLOSE, "a")
    with pytest.raises(NotFound):
        table.install(Route("r", 1, 0, "zz", 20, 1), pub_interval_ms=10)
    with pytest.raises(ValidationError) as err:
        Route("r", 1, 17, "a", 20, 1)
    assert err.value.field == "mode"
    with pytest.raises(ValidationError):
        Route("r", 1, 0, "a", 0, 1)
    with pytest.raises(ValidationError):
        Route("r", 1, 0, "a", 10, 9)
    table.install(Route("r", 1, 0, "a", 20, 1), pub_interval_ms=10)
    with pytest.raises(ValidationError) as err:
        table.install(Route("q", 1, 0, "a", 20, 1), pub_interval_ms=20)
    assert err.value.field == "pub_interval_ms"
    assert len(table) == 1
    with pytest.raises(NotFound):
        table.remove("nope", 1, 0)


def test_set_pub_interval_rerounds_routes() -> None:
    table = make(Variant.CLOSE, "a")
    table.install(Route("r", 1, 0, "a", 90, 1), pub_interval_ms=30)
    table.set_pub_interval(1, 40)
    assert [r.sub_interval_ms for r in table.routes()] == [80]
    assert table.active[1].pub == 40


route_sets = st.lists(
    st.tuples(st.sampled_from("abcdef"), st.integers(1, 24)), min_size=1, max_size=25)


@settings(max_examples=300)
@given(pub=st.integers(1, 40), routes=route_sets, timestamps=st.lists(st.integers(0, 10**9), max_size=40),
       phase=st.integers(0, 39))
def test_close_and_sparse_forward_exactly_the_same_events(
    pub: int, routes: list[tuple[str, int]], timestamps: list[int], phase: int
) -> None:
    close = make(Variant.CLOSE, *"abcdef")
    sparse = make(Variant.SPARSE, *"abcdef")
    for i, (ch, k) in enumerate(routes):
        for table in (close, sparse):
            table.install(Route(f"r{i}", 9, 0, ch, pub * k, 1), pub_interval_ms=pub)
    aligned = [t - t % pub for t in timestamps] + [t + phase for t in timestamps]
    for ts in aligned + list(range(0, pub * 60, pub)):
        assert names(select_close(close.active[9], ts)) == names(select_sparse(sparse.active[9], ts))


# -- phase 2 of a mode change: the temporary slot (dissertation 6.3.2) -------------------------

def test_temporary_slot_keeps_only_variables_of_both_modes_at_the_old_interval() -> None:
    table = make(Variant.CLOSE, "out")
    table.install(Route("both-old", 1, 0, "out", 100, 1), pub_interval_ms=50)
    table.install(Route("both-new", 1, 3, "out", 50, 1), pub_interval_ms=50)
    table.install(Route("old-only", 2, 0, "out", 50, 1), pub_interval_ms=50)
    table.install(Route("new-only", 3, 3, "out", 50, 1), pub_interval_ms=50)
    old_entry = table.active[1]
    kept = table.prepare_temporary(3)
    assert kept == 1
    assert table.current_mode == MODE_SLOTS - 1
    assert set(table.active) == {1}                 # old-only stopped, new-only not started
    assert table.active[1] is old_entry             # a reference to the old mode's entry
    assert closes(table.active[1]) == {"out": (100,)}
    assert table.prepare_temporary(3) == 1          # repeating phase 2 changes nothing
    table.set_mode(3)                               # phase 4
    assert set(table.active) == {1, 3}
    assert closes(table.active[1]) == {"out": (50,)}


def test_old_mode_changes_during_a_mode_change_reach_the_temporary_slot() -> None:
    table = make(Variant.SPARSE, "out", "other")
    table.install(Route("a", 1, 0, "out", 100, 1), pub_interval_ms=50)
    table.install(Route("b", 1, 0, "other", 100, 1), pub_interval_ms=50)
    table.install(Route("a", 1, 1, "out", 100, 1), pub_interval_ms=50)
    table.prepare_temporary(1)
    table.remove("b", 1, 0)
    assert [t.channel for t in table.active[1].sparse_targets] == ["out"]  # type: ignore[attr-defined]
    table.remove("a", 1, 0)
    assert 1 not in table.active


def test_temporary_slot_refuses_a_mode_outside_the_sixteen() -> None:
    table = make(Variant.CLOSE, "out")
    with pytest.raises(ValidationError) as err:
        table.prepare_temporary(16)
    assert err.value.field == "mode"
