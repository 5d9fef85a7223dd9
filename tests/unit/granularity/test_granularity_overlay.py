"""Algorithm 1 (overlay maintenance) and Algorithm 2's overlay side, handler by handler (seed 004, 4-5)."""

from __future__ import annotations

import pytest

from gridstat.errors import ValidationError
from gridstat.granularity import accuracy, overlay
from gridstat.granularity.overlay import Edge, Kind, Message, PeerState, ViewEntry


def peer(name: str, mapping: set[str], delta: float, m: int = 2, **kw: object) -> PeerState:
    return PeerState(name, frozenset(mapping), delta, m, **kw)  # type: ignore[arg-type]


def connect(p: PeerState, dz_: str) -> Message:
    return Message(Kind.CONNECT, p.peer, "?", dz=dz_, delta=p.delta)


def test_a_parent_rejects_a_child_that_is_not_more_tolerant_and_hints() -> None:
    q = peer("q", {"0"}, 3.0, parents=(Edge("a", "0", 1.0),))
    p = peer("p", {"01"}, 3.0)
    view = [ViewEntry("a", frozenset({"0"}), 1.0, hops=1)]
    q2, out = overlay.on_connect(q, connect(p, "01"), view=view)
    assert q2 == q
    assert out == (Message(Kind.POTENTIAL_PARENT, "q", "p", dz="01", hint="a"),)


def test_a_full_parent_evicts_the_most_selective_most_tolerant_child() -> None:
    q = peer("q", {""}, 0.0, m=2, publisher=True, children=(Edge("a", "0", 2.0), Edge("b", "10", 5.0)))
    p = peer("p", {"1"}, 3.0)
    q2, out = overlay.on_connect(q, connect(p, "1"))
    assert q2.child_peers == {"a", "p"}
    kinds = [(m.kind, m.receiver) for m in out]
    assert (Kind.DISCONNECT, "b") in kinds
    assert (Kind.POTENTIAL_PARENT, "b") in kinds
    hint = next(m for m in out if m.kind is Kind.POTENTIAL_PARENT)
    assert hint.hint == "p"                        # p covers b's "10" and is less tolerant: adopt it
    assert (Kind.ACK, "p") in kinds


def test_an_evicted_newcomer_gets_a_hint_instead_of_an_ack() -> None:
    q = peer("q", {""}, 0.0, m=1, publisher=True, children=(Edge("a", "0", 2.0),))
    p = peer("p", {"001"}, 3.0)
    _, out = overlay.on_connect(q, connect(p, "001"))
    assert [m.kind for m in out] == [Kind.POTENTIAL_PARENT]
    assert out[0].receiver == "p" and out[0].hint == "a"


def test_ack_keeps_each_sub_space_covered_exactly_once() -> None:
    p = peer("p", {"01"}, 5.0, parents=(Edge("P0", "01", 0.0, publisher=True), Edge("old", "01", 2.0)))
    p2, out = overlay.on_ack(p, Message(Kind.ACK, "new", "p", dz="01", delta=3.0))
    assert [e.peer for e in p2.parents] == ["new"]
    assert {(m.kind, m.receiver) for m in out} == {(Kind.DISCONNECT, "P0"), (Kind.DISCONNECT, "old")}


def test_connection_management_asks_a_subscriber_or_else_all_relevant_publishers() -> None:
    p = peer("p", {"01", "11"}, 4.0)
    view = [ViewEntry("s", frozenset({"0"}), 2.0, hops=1)]
    pubs = [ViewEntry("P0", frozenset({"0"}), 0.0, hops=0, publisher=True),
            ViewEntry("P1", frozenset({"1"}), 0.0, hops=0, publisher=True)]

    def relevant(x: str) -> frozenset[str]:
        return frozenset({"P0"} if x.startswith("0") else {"P1"})

    p2, out = overlay.connection_management(p, view, pubs, relevant)
    assert {(m.receiver, m.dz) for m in out} == {("s", "01"), ("P1", "11")}
    assert p2.pending == {"01", "11"}
    # nothing is asked twice while an answer is pending
    assert overlay.connection_management(p2, view, pubs, relevant)[1] == ()


def test_fig3_coarsening_places_s5_between_p1_and_s2() -> None:
    # P1 is full with S1 and S2; S5 is selective ("11") and tighter than S2, so it can neither join
    # P1 (it is the most selective child, evicted at once) nor S2 (Delta(S5) < Delta(S2)).
    p1 = peer("P1", {""}, 0.0, m=2, publisher=True, children=(Edge("S1", "0", 2.0), Edge("S2", "1", 3.0)))
    s2 = peer("S2", {"1"}, 3.0, parents=(Edge("P1", "1", 0.0, publisher=True),))
    s5 = peer("S5", {"11"}, 2.5)
    p1, out = overlay.on_connect(p1, connect(s5, "11"))
    assert [m.kind for m in out] == [Kind.POTENTIAL_PARENT] and out[0].hint is None
    _, out = overlay.on_connect(s2, connect(s5, "11"))
    assert out[0].kind is Kind.POTENTIAL_PARENT    # rejected: not more tolerant than S2
    # Algorithm 2, TimeOut: S5 coarsens within its bandwidth budget.
    rates = accuracy.UniformRates(100.0)
    new = accuracy.coarsen(s5.mapping, rates, accuracy.Budget(60.0 * 3, 2), step=1, target="11")
    assert new == {"1"}
    s5, _ = overlay.adopt_mapping(s5, new)
    p1, out = overlay.on_connect(p1, connect(s5, "1"))
    assert p1.child_peers == {"S1", "S5"}
    hint = next(m for m in out if m.kind is Kind.POTENTIAL_PARENT and m.receiver == "S2")
    assert hint.hint == "S5"
    s5, _ = overlay.on_ack(s5, next(m for m in out if m.kind is Kind.ACK))
    s2 = overlay.on_disconnect(s2, next(m for m in out if m.kind is Kind.DISCONNECT))
    s5, out = overlay.on_connect(s5, connect(s2, "1"))
    s2, _ = overlay.on_ack(s2, out[0])
    assert [e.peer for e in s5.parents] == ["P1"] and [e.peer for e in s2.parents] == ["S5"]


def test_refining_drops_uncovered_children_and_narrows_parents() -> None:
    s = peer("s", {"1"}, 2.0, parents=(Edge("P", "1", 0.0, publisher=True),),
             children=(Edge("c1", "11", 3.0), Edge("c2", "10", 4.0)))
    s2, out = overlay.adopt_mapping(s, frozenset({"11"}))
    assert s2.child_peers == {"c1"}
    assert Message(Kind.DISCONNECT, "s", "c2", dz="10") in out
    narrow = next(m for m in out if m.kind is Kind.NARROW)
    assert narrow.receiver == "P" and narrow.narrowed == ("11",)
    assert [e.dz for e in s2.parents] == ["11"]
    p = peer("P", {""}, 0.0, publisher=True, children=(Edge("s", "1", 2.0),))
    assert [e.dz for e in overlay.on_narrow(p, narrow).children] == ["11"]


def test_events_go_once_to_each_child_whose_edge_holds_them() -> None:
    s = peer("s", {""}, 1.0, children=(Edge("a", "0", 2.0), Edge("a", "1", 2.0), Edge("b", "11", 3.0)))
    assert overlay.forward_targets(s, (0.9, 0.9)) == ("a", "b")
    assert overlay.forward_targets(s, (0.1, 0.9)) == ("a",)


@pytest.mark.parametrize("delta", [0.0, -1.0, float("nan"), float("inf")])
def test_impossible_delay_tolerances(delta: float) -> None:
    with pytest.raises(ValidationError) as err:
        peer("s", {"0"}, delta)
    assert err.value.reason == "ImpossibleDelayTolerance"
