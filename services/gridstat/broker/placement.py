"""Where the leaf QoS broker places a condensation function (dissertation 7.3.2), without I/O.

GridStat's rule: if all of the function's inputs are published at one edge router, the
function goes there (the inputs then never leave it). Otherwise a brute-force search
tests every status router of the cloud as the host and keeps those where a path from
each input's publisher edge router meets that input's QoS: its latency bound, and
channel and router capacity after filtering, counting the inputs admitted before it
(they share channels and the host's sending budget). Among the feasible hosts we take
the one with the smallest worst input latency (then the smallest total, then the
name), which is what a creator asking for near-source condensation wants; the
dissertation leaves the choice among feasible routers open. A creator may name the
router (``placement_router``, GridStat's ``placementEdge``); it is checked the same way.

Each candidate is tried on the live reservations: the inputs are planned and reserved
one after the other and everything is released before the next candidate, so the
reservations are exactly as before when ``plan_placement`` returns or raises (the leaf
broker calls it under its lock). It decides only the host; the broker then admits the
input subscriptions for real.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from gridstat.broker import allocation as alloc
from gridstat.broker.paths import DEFAULT_FORWARDING_MS, Usable
from gridstat.broker.rejections import AdmissionRejected, CapacityExceeded, LatencyUnattainable, NoFeasiblePath
from gridstat.broker.resources import Reservations
from gridstat.broker.topology import Topology
from gridstat.core.model import PRIORITY_HIGH
from gridstat.errors import ChannelUnavailable, GridStatError, NotFound, ValidationError

SHARED_EDGE = "shared-edge"
SEARCH = "search"
REQUESTED = "requested"


@dataclass(frozen=True)
class PlacementInput:
    """One input as placement sees it: where it is published and the QoS the function asks of it."""

    variable_id: int
    publisher_router: str
    pub_interval_ms: int
    interval_ms: int
    latency_ms: float
    priority: int = PRIORITY_HIGH


@dataclass(frozen=True)
class Placement:
    router: str
    reason: str  # SHARED_EDGE, SEARCH or REQUESTED
    #: The worst and the total latency of the input paths to ``router`` (ms).
    worst_latency_ms: float
    total_latency_ms: float
    #: Routers tested (1 unless the search ran).
    tried: int = 1


#: The channels an input's search may use to reach a candidate (the leaf passes its loop-free tree rule).
AllowedFor = Callable[[PlacementInput, str], Usable | None]

_FIELDS = {"latency_bound_ms": "latency_ms", "redundancy": "variable", "sub_interval_ms": "interval_ms"}


class _Infeasible(Exception):
    def __init__(self, index: int, error: AdmissionRejected) -> None:
        super().__init__(str(error))
        self.index = index
        self.error = error


def _try(topology: Topology, reservations: Reservations, inputs: Sequence[PlacementInput], router: str, *,
         forwarding_ms: float, allowed: AllowedFor | None) -> tuple[float, float]:
    """Reserve every input to ``router`` in turn and release them all; (worst, total) latency or _Infeasible."""
    held: list[str] = []
    worst = total = 0.0
    try:
        for i, inp in enumerate(inputs):
            request = alloc.SubscriptionRequest(
                f"~placement.{i}", inp.variable_id, inp.publisher_router, router, f"placement.{router}",
                inp.pub_interval_ms, max(inp.interval_ms, inp.pub_interval_ms), inp.latency_ms, 1, inp.priority)
            try:
                plan = alloc.plan_subscription(topology, reservations, request, forwarding_ms=forwarding_ms,
                                               allowed=None if allowed is None else allowed(inp, router))
                alloc.commit(reservations, plan)
            except AdmissionRejected as exc:
                raise _Infeasible(i, exc) from None
            held.append(request.subscription_id)
            latency = plan.paths[0].latency_ms
            worst, total = max(worst, latency), total + latency
    finally:
        for sid in held:
            alloc.release(reservations, sid)
    return worst, total


def _rejection(inputs: Sequence[PlacementInput], failures: dict[str, _Infeasible], tried: int) -> GridStatError:
    """The refusal of the candidate that got furthest (most inputs admitted; then by name)."""
    router, worst = max(failures.items(), key=lambda kv: (kv[1].index, [-ord(c) for c in kv[0]]))
    err, i = worst.error, worst.index
    where = f"no router keeps every input's QoS ({tried} tried); at {router!r}, input {i} "
    text = f"{where}(variable {inputs[i].variable_id} from {inputs[i].publisher_router!r}): {err}"
    field = f"inputs[{i}].{_FIELDS.get(err.field or '', err.field or 'latency_ms')}"
    if isinstance(err, CapacityExceeded):
        return CapacityExceeded(text, shortfall=err.shortfall, offer=err.offer)
    if isinstance(err, LatencyUnattainable):
        return LatencyUnattainable(text, offer=err.offer, field=field)
    return NoFeasiblePath(text, offer=err.offer, field=field)


def plan_placement(
    topology: Topology,
    reservations: Reservations,
    inputs: Sequence[PlacementInput],
    *,
    requested: str = "",
    down: Collection[str] = (),
    forwarding_ms: float = DEFAULT_FORWARDING_MS,
    allowed: AllowedFor | None = None,
) -> Placement:
    """Choose the router a condensation function runs on.

    Args:
        topology: the cloud.
        reservations: what the mode's admitted subscriptions hold; unchanged on return.
        inputs: the function's inputs (publisher edge router and QoS of each).
        requested: a router the creator asked for ("" = choose).
        down: routers that do not answer (never chosen, never on an input path).
        forwarding_ms: per-router forwarding latency of the path search.
        allowed: narrows the channels an input may use to reach a candidate.

    Returns:
        The router, the rule that chose it ("shared-edge", "search" or "requested") and the
        input-path latencies there.

    Raises:
        ValidationError: no inputs.
        NotFound: the requested router is not in the cloud (field ``placement_router``).
        ChannelUnavailable: the requested router is down (reason ``RouterUnavailable``).
        NoFeasiblePath, LatencyUnattainable, CapacityExceeded: no router (or not the requested
            one) keeps every input's QoS; the refusal of the candidate that got furthest, with its
            field naming the input (``inputs[i].latency_ms``).
    """
    if not inputs:
        raise ValidationError("a condensation function needs at least one input", field="inputs")
    down = frozenset(down)
    if allowed is None and down:
        def allowed(_inp: PlacementInput, _router: str) -> Usable:
            return lambda ch: ch.src not in down and ch.dst not in down

    def attempt(router: str) -> tuple[float, float]:
        return _try(topology, reservations, inputs, router, forwarding_ms=forwarding_ms, allowed=allowed)

    if requested:
        if requested not in topology.routers:
            raise NotFound(f"placement router {requested!r} is not a router of this cloud", field="placement_router")
        if requested in down:
            raise ChannelUnavailable(f"placement router {requested!r} does not answer", reason="RouterUnavailable",
                                     field="placement_router")
        try:
            worst, total = attempt(requested)
        except _Infeasible as exc:
            raise _rejection(inputs, {requested: exc}, 1) from None
        return Placement(requested, REQUESTED, worst, total)

    failures: dict[str, _Infeasible] = {}
    edges = {inp.publisher_router for inp in inputs}
    if len(edges) == 1:
        (edge,) = edges
        if edge not in down:
            try:
                worst, total = attempt(edge)
            except _Infeasible as exc:
                failures[edge] = exc  # the shared edge is full: search the others
            else:
                return Placement(edge, SHARED_EDGE, worst, total)
    best: tuple[float, float, str] | None = None
    candidates = [r for r in sorted(topology.routers) if r not in down and r not in failures]
    for router in candidates:
        try:
            worst, total = attempt(router)
        except _Infeasible as exc:
            failures[router] = exc
            continue
        if best is None or (worst, total, router) < best:
            best = (worst, total, router)
    tried = len(candidates) + (1 if len(edges) == 1 and edges <= failures.keys() else 0)
    if best is None:
        if not failures:
            raise NoFeasiblePath("no router of the cloud answers", field="placement_router")
        raise _rejection(inputs, failures, tried)
    return Placement(best[2], SEARCH, best[0], best[1], tried)
