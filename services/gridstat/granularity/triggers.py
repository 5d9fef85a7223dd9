"""Algorithm 2's BandwidthViolated trigger (seed 004, section 5): which rate, which limit, what then.

Which rate. Section 2 bounds the rate ``R(s)`` of the events a peer *receives* over its
incoming connections ``F_in(s)``: the out-degree constraint obliges the peer to be ready to
forward every received event up to ``m`` times, so receiving ``R(s)`` and sending up to
``m * R(s)`` must fit its access link, ``R(s) <= B(s)/(m+1)`` (``accuracy.Budget``). What the
peer sends follows from what it receives: one child gets at most ``R(s)``, all of them at most
``m * R(s)``. So the peer measures ``R(s)``, the events arriving from its parents, duplicates
included (they cost bandwidth too), and section 5.1 gets the rates of the finer sub-spaces
``DZ_+1`` the same way, by counting what arrives.

Which limit. BandwidthViolated is raised when the measured ``R(s)`` exceeds ``B(s)/(m+1)``
(``bandwidth_violated``). With constant event rates it cannot happen to a mapping chosen
within the budget (coarsening admits only mappings within it); it happens when the event rate
changes (section 5, "if changes in the event rate violate the bandwidth constraints").

What then (Algorithm 2, lines 4-6, ``on_bandwidth_violated``): the peer increases the accuracy
of its peer-level subscription, ``accuracy.refine`` replacing the sub-space with the most false
positives by its relevant part of ``DZ_+1`` until the budget holds, and ``overlay.adopt_mapping``
applies it: the parents stay (the finer mapping is covered by the old one) and are told to
forward only the finer part (``NARROW``, ours), and children the new ``DZ(p)`` no longer covers
are removed (``DISCONNECT``, line 6). Those messages go to the neighbours.

Where the rate comes from: the simulation computes it per round from the event rates in force
(``incoming_rate_eps``); a live relay counts the events that arrive and samples the count on
the relay overlay's timer (``gridstat.granularity.relays.RelayOverlay``). docs/granularity.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gridstat.granularity import accuracy, dz, overlay
from gridstat.granularity.space import Rectangle


def bandwidth_violated(rate_eps: float, budget: accuracy.Budget) -> bool:
    """Whether the measured incoming rate ``R(s)`` breaks ``B(s)/(m+1)`` (the event BandwidthViolated)."""
    return not budget.admits(rate_eps)


def check_bandwidth(state: overlay.PeerState, rect: Rectangle, rates: accuracy.RateModel, budget: accuracy.Budget,
                    *, rate_eps: float, step: int, max_depth: int) -> Refined | None:
    """The trigger and its handler: None while ``rate_eps <= B(s)/(m+1)``, else ``on_bandwidth_violated``."""
    if not bandwidth_violated(rate_eps, budget):
        return None
    return on_bandwidth_violated(state, rect, rates, budget, step=step, max_depth=max_depth)


def incoming_rate_eps(state: overlay.PeerState, rates: accuracy.RateModel,
                      advertisements: Mapping[str, frozenset[str]]) -> float:
    """``R(s)`` in events per second: what arrives over the parent edges under ``rates``.

    A parent sends an event once to a child whatever the number of edges between them
    (``overlay.forward_targets``), so each parent's edges count as one union; a publisher (its
    advertisement in ``advertisements``) sends only the part of an edge it publishes, a
    subscriber parent the whole edge (it covers it). Events from two parents count twice.
    """
    total = 0.0
    by_parent: dict[str, list[str]] = {}
    for e in state.parents:
        by_parent.setdefault(e.peer, []).append(e.dz)
    for parent, edges in by_parent.items():
        advert = advertisements.get(parent)
        if advert is not None:
            edges = [x for e in edges for a in advert if (x := dz.intersection(e, a)) is not None]
        total += accuracy.mapping_rate(edges, rates)
    return total


@dataclass(frozen=True)
class Refined:
    """The peer after BandwidthViolated: new state, messages to its neighbours, and how the refinement ended."""

    state: overlay.PeerState
    messages: tuple[overlay.Message, ...]
    refinement: accuracy.Refinement
    #: whether ``DZ(p)`` became finer (False: nothing to refine under the peer's rates)
    refined: bool


def on_bandwidth_violated(state: overlay.PeerState, rect: Rectangle, rates: accuracy.RateModel,
                          budget: accuracy.Budget, *, step: int, max_depth: int) -> Refined:
    """Algorithm 2, lines 4-6: refine ``DZ(p)`` within the budget and tell the neighbours.

    ``rates`` are the peer's estimates of its sub-spaces (counted arrivals for ``DZ_+1``). If the
    mapping needs no refining under them (the excess came from duplicate arrivals, say) or
    cannot be refined further, the state is returned unchanged with no messages.
    """
    current = dz.minimal(state.mapping)
    refinement = accuracy.refine(current, rect, rates, budget, step=step, max_depth=max_depth)
    if refinement.mapping == current:
        return Refined(state, (), refinement, False)
    new, messages = overlay.adopt_mapping(state, refinement.mapping)
    return Refined(new, messages, refinement, True)
