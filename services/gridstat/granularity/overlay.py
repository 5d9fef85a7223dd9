"""The relay overlay of seed 004, Algorithm 1, as pure message handlers over frozen peer states.

Who it is for: best-effort, delay-tolerant subscribers (dashboards, archives, historians)
that would otherwise each cost a router path and a reservation. Hard-guaranteed GridStat
subscriptions never use it; they stay on the router paths the QoS broker admits
(``gridstat.granularity.serving`` decides which is which).

How it works (Tariq et al., section 4): every peer ``p`` has a peer-level subscription
``DZ(p)`` (a set of dz-expressions), a delay tolerance ``Delta(p)`` and an out-degree limit
``m``. Periodically it looks for a parent for every ``dz_i`` that is not covered, either by a
*subscriber* parent whose own subscription covers ``dz_i`` or by *all* relevant publishers
(``connection_management``, lines 1-6). A parent ``q`` accepts only a strictly more tolerant
child, ``Delta(p) > Delta(q)`` (publishers have ``Delta = 0``), so the overlay is a DAG ordered by
tolerance and the tightest peers sit next to the publishers (``on_connect``, lines 7-20). A
parent over ``m`` children evicts those with the most selective subscription and the largest
tolerance and hints them towards a better parent, often one of its own children that covers
them (lines 10-15). A child keeps each ``dz_i`` covered exactly once, dropping redundant
parents (``on_ack``, lines 21-30), so no event arrives twice.

Parents and children are kept as *edges* ``(peer, dz)``: the edge's dz is the part of the
child's subscription the parent forwards (the paper's ``dz(a_i)``), so an event goes to a child
iff it falls in one of the child's edges.

Unspecified by the paper, ours (docs/granularity.md): ``find_best_parent`` prefers a parent whose own
delay leaves room (``hops + 1 <= Delta(p)``), then one with free out-degree, then the finest
covering sub-space (fewest false positives), then the largest tolerance (leave tight places to
tight peers); ``peers_to_disconnect`` evicts the smallest subscription volume first, ties by the
largest tolerance. Line 7 of the paper passes ``Delta(q)``; the sender transmits ``Delta(p)``
(line 6), so the requester's tolerance is what travels (a typo in the paper's listing).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from gridstat.errors import ValidationError
from gridstat.granularity import dz


class Kind(enum.Enum):
    CONNECT = "CONNECT"
    ACK = "ACK"
    DISCONNECT = "DISCONNECT"
    POTENTIAL_PARENT = "POTENTIALPARENT"
    #: ours: after refining (Algorithm 2, line 5) the child narrows what an existing parent forwards
    NARROW = "NARROW"


@dataclass(frozen=True)
class Message:
    kind: Kind
    sender: str
    receiver: str
    #: CONNECT: the requested ``dz_i``; ACK / DISCONNECT / NARROW: the edge it is about
    dz: str = ""
    #: CONNECT: the requester's ``Delta(p)``; ACK: the parent's ``Delta(q)``
    delta: float = 0.0
    #: ACK: whether the parent is a publisher
    publisher: bool = False
    #: POTENTIAL_PARENT: the suggested parent (None: rejected without a suggestion)
    hint: str | None = None
    #: NARROW: the finer sub-spaces that replace ``dz`` on the edge
    narrowed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Edge:
    """One overlay connection: the other ``peer`` and the ``dz`` forwarded over it."""

    peer: str
    dz: str
    delta: float
    publisher: bool = False


@dataclass(frozen=True)
class ViewEntry:
    """What a peer knows of another (its ``pView`` cache, section 4): kept fresh by gossip."""

    peer: str
    mapping: frozenset[str]
    delta: float
    hops: float = math.inf
    free_slots: int = 1
    publisher: bool = False


@dataclass(frozen=True)
class PeerState:
    """One peer: subscription ``DZ(p)`` (or a publisher's advertisement), ``Delta(p)``, ``m``, ``F_in``, ``F_out``."""

    peer: str
    mapping: frozenset[str]
    delta: float
    out_degree: int
    publisher: bool = False
    parents: tuple[Edge, ...] = ()
    children: tuple[Edge, ...] = ()
    #: ``dz_i`` with a CONNECT outstanding (not asked again until answered)
    pending: frozenset[str] = frozenset()
    #: peers not to ask again (the paper's ``pView = pView - parent``) until the next coarsening
    tried: frozenset[str] = frozenset()
    #: POTENTIALPARENT hints to add to the view
    hints: frozenset[str] = field(default=frozenset())

    def __post_init__(self) -> None:
        if self.publisher:
            if self.delta != 0:
                raise ValidationError(f"publisher {self.peer!r} must have Delta = 0", field="delta")
        elif not (math.isfinite(self.delta) and self.delta > 0):
            raise ValidationError(
                f"peer {self.peer!r}: delay tolerance {self.delta!r} is impossible; a subscriber must tolerate "
                "more than the publishers' 0 (at least one hop)", field="delta", reason="ImpossibleDelayTolerance")
        if self.out_degree < 0:
            raise ValidationError(f"peer {self.peer!r}: out-degree must be >= 0", field="out_degree")
        for x in self.mapping:
            dz.check(x)

    @property
    def child_peers(self) -> frozenset[str]:
        return frozenset(e.peer for e in self.children)

    def entry(self, *, hops: float = math.inf) -> ViewEntry:
        """How this peer appears in others' views."""
        return ViewEntry(self.peer, self.mapping, self.delta, 0.0 if self.publisher else hops,
                         self.out_degree - len(self.child_peers), self.publisher)


# -- coverage --------------------------------------------------------------------------------------


def covering_element(mapping: Iterable[str], target: str) -> str | None:
    """The finest element of ``mapping`` that covers ``target``, or None."""
    found = [x for x in mapping if dz.covers(x, target)]
    return min(found, key=lambda x: (dz.volume(x), x)) if found else None


def is_covered(state: PeerState, target: str, relevant: Callable[[str], frozenset[str]]) -> bool:
    """Line 3: covered by a subscriber parent, or by *all* relevant publishers (one edge each)."""
    pubs = set()
    for e in state.parents:
        if dz.covers(e.dz, target):
            if not e.publisher:
                return True
            pubs.add(e.peer)
    return relevant(target) <= pubs


def uncovered(state: PeerState, relevant: Callable[[str], frozenset[str]]) -> tuple[str, ...]:
    return tuple(sorted(x for x in state.mapping if not is_covered(state, x, relevant)))


# -- the paper's two unspecified routines (ours) ---------------------------------------------------


def find_best_parent(candidates: Iterable[ViewEntry], target: str, *, delta: float, me: str,
                     exclude: Iterable[str] = ()) -> ViewEntry | None:
    """The best subscriber parent for ``target`` among ``candidates`` (ranking in the module docstring)."""
    skip = set(exclude) | {me}
    best: tuple[tuple[float | str, ...], ViewEntry] | None = None
    for c in candidates:
        if c.publisher or c.peer in skip or not c.delta < delta:
            continue
        cover = covering_element(c.mapping, target)
        if cover is None:
            continue
        key = (0.0 if c.hops + 1 <= delta else 1.0, 0.0 if c.free_slots > 0 else 1.0, dz.volume(cover), -c.delta,
               c.peer)
        if best is None or key < best[0]:
            best = (key, c)
    return None if best is None else best[1]


def peers_to_disconnect(children: Sequence[Edge], m: int) -> tuple[str, ...]:
    """Children to evict when more than ``m`` (line 11): most selective subscription, then largest tolerance."""
    by_peer: dict[str, tuple[float, float]] = {}
    for e in children:
        vol, delta = by_peer.get(e.peer, (0.0, e.delta))
        by_peer[e.peer] = (vol + dz.volume(e.dz), max(delta, e.delta))
    excess = len(by_peer) - m
    if excess <= 0:
        return ()
    ranked = sorted(by_peer, key=lambda p: (by_peer[p][0], -by_peer[p][1], p))
    return tuple(ranked[:excess])


# -- Algorithm 1 -----------------------------------------------------------------------------------


def connection_management(state: PeerState, view: Sequence[ViewEntry], publishers: Sequence[ViewEntry],
                          relevant: Callable[[str], frozenset[str]], *,
                          unsatisfied: Iterable[str] = ()) -> tuple[PeerState, tuple[Message, ...]]:
    """Lines 1-6, one iteration: a CONNECT for every uncovered ``dz_i`` (and every ``dz_i`` in ``unsatisfied``).

    ``unsatisfied`` are covered sub-spaces whose parent breaks the delay tolerance; for those
    only delay-feasible parents are asked. Without a subscriber parent the peer asks every
    relevant publisher it is not yet connected to for that ``dz_i`` (section 4).
    """
    if state.publisher:
        return state, ()
    msgs: list[Message] = []
    pending = set(state.pending)
    tried = set(state.tried)
    late = set(unsatisfied)
    for target in sorted(set(uncovered(state, relevant)) | late):
        if target in pending:
            continue
        parent = find_best_parent(view, target, delta=state.delta, me=state.peer, exclude=tried)
        if parent is not None and parent.hops + 1 <= state.delta:
            tried.add(parent.peer)
            pending.add(target)
            msgs.append(Message(Kind.CONNECT, state.peer, parent.peer, dz=target, delta=state.delta))
            continue
        # No delay-feasible subscriber parent: the relevant publishers are one hop away. A full
        # publisher may still take us by evicting a more selective child (lines 10-15).
        have = {e.peer for e in state.parents if e.publisher and dz.covers(e.dz, target)}
        missing = [pub for pub in publishers if pub.peer in relevant(target) and pub.peer not in have]
        if missing and all(pub.peer not in tried for pub in missing):
            for pub in missing:
                tried.add(pub.peer)
                msgs.append(Message(Kind.CONNECT, state.peer, pub.peer, dz=target, delta=state.delta))
            pending.add(target)
        elif parent is not None and target not in late:
            # Coverage first, even if the delay breaks: Algorithm 2's TimeOut will coarsen.
            tried.add(parent.peer)
            pending.add(target)
            msgs.append(Message(Kind.CONNECT, state.peer, parent.peer, dz=target, delta=state.delta))
    return replace(state, pending=frozenset(pending), tried=frozenset(tried)), tuple(msgs)


def on_connect(q: PeerState, msg: Message, *, view: Sequence[ViewEntry] = ()) -> tuple[PeerState, tuple[Message, ...]]:
    """Lines 7-20 at the potential parent ``q``."""
    p = msg.sender
    if msg.delta > q.delta:
        edges = tuple(e for e in q.children if not (e.peer == p and e.dz == msg.dz))
        children = (*edges, Edge(p, msg.dz, msg.delta))
        out: list[Message] = []
        evicted = peers_to_disconnect(children, q.out_degree)
        if evicted:
            gone = set(evicted)
            children = tuple(e for e in children if e.peer not in gone)
            remaining = {e.peer: e for e in children}
            pool = [*view, *(ViewEntry(e.peer, _edge_mapping(children, e.peer), e.delta) for e in remaining.values())]
            for t in evicted:
                t_edges = [e for e in (*edges, Edge(p, msg.dz, msg.delta)) if e.peer == t]
                hint = find_best_parent(pool, t_edges[0].dz, delta=t_edges[0].delta, me=t)
                if t != p:
                    for e in t_edges:
                        out.append(Message(Kind.DISCONNECT, q.peer, t, dz=e.dz))
                out.append(Message(Kind.POTENTIAL_PARENT, q.peer, t, dz=t_edges[0].dz,
                                   hint=None if hint is None else hint.peer))
        if p not in evicted:
            out.append(Message(Kind.ACK, q.peer, p, dz=msg.dz, delta=q.delta, publisher=q.publisher))
        return replace(q, children=children), tuple(out)
    pool = [*view, *(ViewEntry(e.peer, frozenset({e.dz}), e.delta, publisher=e.publisher) for e in q.parents)]
    hint = find_best_parent(pool, msg.dz, delta=msg.delta, me=p)
    return q, (Message(Kind.POTENTIAL_PARENT, q.peer, p, dz=msg.dz, hint=None if hint is None else hint.peer),)


def _edge_mapping(children: Iterable[Edge], peer: str) -> frozenset[str]:
    return frozenset(e.dz for e in children if e.peer == peer)


def on_ack(p: PeerState, msg: Message) -> tuple[PeerState, tuple[Message, ...]]:
    """Lines 21-30 at the child: add the parent, then keep every sub-space covered exactly once."""
    new = Edge(msg.sender, msg.dz, msg.delta, msg.publisher)
    parents = [e for e in p.parents if e != new] + [new]
    out: list[Message] = []
    # iCon: subscriber parents only (Delta != 0); oldest edges are dropped first, so a newer,
    # delay-feasible parent for the same dz_i replaces the old one.
    i = 0
    while i < len(parents):
        ei = parents[i]
        icon = [e for e in parents if not e.publisher and e is not ei]
        if any(dz.covers(ej.dz, ei.dz) for ej in icon):
            parents.pop(i)
            out.append(Message(Kind.DISCONNECT, p.peer, ei.peer, dz=ei.dz))
            continue
        i += 1
    return replace(p, parents=tuple(parents), pending=p.pending - {msg.dz}), tuple(out)


def on_disconnect(state: PeerState, msg: Message) -> PeerState:
    """A parent evicted us, or a child dropped us, for the edge ``msg.dz``."""
    parents = tuple(e for e in state.parents if not (e.peer == msg.sender and e.dz == msg.dz))
    children = tuple(e for e in state.children if not (e.peer == msg.sender and e.dz == msg.dz))
    return replace(state, parents=parents, children=children)


def on_potential_parent(state: PeerState, msg: Message) -> PeerState:
    """A rejection or eviction: the request is answered; remember the hint for the next iteration."""
    hints = state.hints | {msg.hint} if msg.hint is not None else state.hints
    return replace(state, pending=state.pending - {msg.dz}, hints=hints)


def on_narrow(q: PeerState, msg: Message) -> PeerState:
    """Ours: a child refined; forward only the finer sub-spaces on that edge from now on."""
    kept = [e for e in q.children if not (e.peer == msg.sender and e.dz == msg.dz)]
    old = next((e for e in q.children if e.peer == msg.sender and e.dz == msg.dz), None)
    if old is None:
        return q
    return replace(q, children=(*kept, *(Edge(old.peer, x, old.delta) for x in msg.narrowed)))


def handle(state: PeerState, msg: Message, *, view: Sequence[ViewEntry] = ()) -> tuple[PeerState, tuple[Message, ...]]:
    """Dispatch one message to its handler."""
    if msg.kind is Kind.CONNECT:
        return on_connect(state, msg, view=view)
    if msg.kind is Kind.ACK:
        return on_ack(state, msg)
    if msg.kind is Kind.DISCONNECT:
        return on_disconnect(state, msg), ()
    if msg.kind is Kind.POTENTIAL_PARENT:
        return on_potential_parent(state, msg), ()
    return on_narrow(state, msg), ()


# -- Algorithm 2's overlay side --------------------------------------------------------------------


def adopt_mapping(state: PeerState, mapping: frozenset[str]) -> tuple[PeerState, tuple[Message, ...]]:
    """Switch ``DZ(p)`` after Algorithm 2 changed it.

    Coarser (TimeOut): old parent edges stay until a parent covering the new sub-space ACKs
    and ``on_ack`` prunes them; children stay (a coarser mapping covers them). Finer
    (BandwidthViolated, lines 5-6): parents stay but each edge is narrowed to the new
    sub-spaces it covers (NARROW), and children the new mapping does not cover are dropped
    with a DISCONNECT.
    """
    out: list[Message] = []
    parents: list[Edge] = []
    for e in state.parents:
        inside = sorted(x for x in mapping if dz.covers(e.dz, x) and x != e.dz)
        if inside and not dz.covered_by(e.dz, mapping):
            parents.extend(Edge(e.peer, x, e.delta, e.publisher) for x in inside)
            out.append(Message(Kind.NARROW, state.peer, e.peer, dz=e.dz, narrowed=tuple(inside)))
        else:
            parents.append(e)
    children: list[Edge] = []
    for e in state.children:
        if dz.covered_by(e.dz, mapping):
            children.append(e)
        else:
            out.append(Message(Kind.DISCONNECT, state.peer, e.peer, dz=e.dz))
    return replace(state, mapping=mapping, parents=tuple(parents), children=tuple(children), tried=frozenset(),
                   pending=frozenset()), tuple(out)


def forward_targets(state: PeerState, point: Sequence[float]) -> tuple[str, ...]:
    """Children an event at ``point`` goes to (once per child, whatever the number of its edges)."""
    out = []
    seen = set()
    for e in state.children:
        if e.peer not in seen and dz.contains(e.dz, point):
            seen.add(e.peer)
            out.append(e.peer)
    return tuple(out)
