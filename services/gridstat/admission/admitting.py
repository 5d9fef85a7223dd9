"""Hop-by-hop admission of a subscription against CPU, bandwidth and memory (RacsCBPS 4.1-4.2, Figs. 6-7).

The controller knows each router's CPU capacity (events/s it can forward, GridStat's ``msgPerSec``),
its memory (bytes) and each outgoing link's bandwidth (bits/s); brokers declare them. A subscription
arrives with its filter, its interval and the hops of its route (router, outgoing link, mode). Its
requirement comes from the covering graph (Theorem 1); the configured *bound* picks the rate to
reserve: the upper one (conservative: delivery is guaranteed, utilisation lower) or the lower one
(optimistic: more admitted, events may be discarded). Per hop it needs

* CPU:       ``rate`` events/s at the router;
* bandwidth: ``rate * event_bytes * 8`` bits/s on the link (subscriber links have no bandwidth
  model, as in the broker: the subscriber supplies its own socket);
* memory:    ``entry_bytes + rate * event_bytes * buffer_s`` bytes at the router (a routing entry and
  ``buffer_s`` seconds of queued events).

Two criteria (Fig. 7's ``PERCENTAGE_GUARANTEED`` flag):

* **full** ("fully guaranteed"): walk the hops in order and reject at the first one lacking any
  resource; nothing is reserved anywhere.
* **percentage**: walk every hop, collecting each one's verdicts; the subscription can be guaranteed
  the fraction ``f`` = the smallest share of its rate any hop can carry. It is admitted when
  ``f >= min_fraction`` (and ``f > 0``), reserving ``f`` of its need at every hop, and the decision
  reports ``f`` and the hops that limit it.

Reservations are kept per mode (a GridStat subscription has a path per operating mode, and only one
mode is active at a time), so one mode's paths do not compete with another's. No reservation ever
takes a resource beyond its capacity; a decision is idempotent per subscription id (a broker that
retries gets the same answer).
"""

from __future__ import annotations

import enum
import math
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gridstat.admission.covering import (
    AdvertisementGraph,
    Insertion,
    NoMatchingAdvertisement,
    Requirement,
    check_rate,
)
from gridstat.admission.filters import Filter
from gridstat.errors import NotFound, ValidationError

#: Bytes one event occupies on a link: GridStat's 24-byte scalar event plus its share of the 16-byte
#: datagram header and 28 bytes of UDP/IP header at about four events per datagram.
DEFAULT_EVENT_BYTES = 35.0
#: Memory one routing entry costs at a hop, and how many seconds of events a hop may have to buffer.
DEFAULT_ENTRY_BYTES = 512.0
DEFAULT_BUFFER_S = 1.0
#: Memory a router is assumed to have for routing state and queues when none is declared.
DEFAULT_ROUTER_MEMORY_BYTES = 64 * 1024 * 1024
_SLACK = 1e-9


class Policy(enum.Enum):
    """The admission criterion (RacsCBPS 4.2)."""

    FULL = "full"
    PERCENTAGE = "percentage"

    @classmethod
    def parse(cls, text: str) -> Policy:
        try:
            return cls(text)
        except ValueError:
            raise ValidationError(f"admission policy {text!r} is not 'full' or 'percentage'",
                                  field="policy") from None


class Bound(enum.Enum):
    """Which end of Theorem 1's interval is reserved."""

    UPPER = "upper"
    LOWER = "lower"

    @classmethod
    def parse(cls, text: str) -> Bound:
        try:
            return cls(text)
        except ValueError:
            raise ValidationError(f"rate bound {text!r} is not 'upper' or 'lower'", field="bound") from None


@dataclass(frozen=True)
class RouterCapacity:
    name: str
    cpu_eps: float
    memory_bytes: float = DEFAULT_ROUTER_MEMORY_BYTES


@dataclass(frozen=True)
class LinkCapacity:
    name: str
    bandwidth_bps: float


@dataclass(frozen=True)
class Hop:
    """One router of a route and the link it sends the subscription's events on, in one mode."""

    router: str
    link: str
    mode: int = 0


@dataclass(frozen=True)
class HopVerdict:
    """One resource at one hop: what the subscription needs and what is left."""

    hop: Hop
    resource: str  # "cpu", "bandwidth", "memory" or "undeclared"
    required: float
    available: float
    #: The part of ``required`` that does not shrink with the rate (memory's routing entry).
    fixed: float = 0.0

    @property
    def ok(self) -> bool:
        return self.required <= self.available + _SLACK * max(1.0, self.required)

    @property
    def fraction(self) -> float:
        """The share of the rate this resource can take."""
        if self.ok:
            return 1.0
        scaled = self.required - self.fixed
        if scaled <= 0:
            return 0.0
        return max(0.0, min(1.0, (self.available - self.fixed) / scaled))

    def describe(self) -> str:
        unit = {"cpu": "events/s", "bandwidth": "bit/s", "memory": "bytes"}.get(self.resource, "")
        if self.resource == "undeclared":
            return f"router {self.hop.router!r} has no declared resources"
        where = f"link {self.hop.link!r}" if self.resource == "bandwidth" else f"router {self.hop.router!r}"
        return f"{where} {self.resource}: needs {self.required:.6g} {unit}, {max(0.0, self.available):.6g} left"


@dataclass(frozen=True)
class Decision:
    """The controller's answer for one subscription."""

    subscription_id: str
    admitted: bool
    #: Admitted, PartiallyGuaranteed, CapacityExceeded or NoMatchingAdvertisement.
    reason: str
    message: str
    policy: Policy
    bound: Bound
    fraction: float
    requirement: Requirement | None
    reserved_eps: float
    hops: tuple[HopVerdict, ...] = ()

    @property
    def limiting(self) -> tuple[HopVerdict, ...]:
        return tuple(v for v in self.hops if not v.ok)


@dataclass
class _Reservation:
    decision: Decision
    amounts: dict[tuple[int, str, str], float] = field(default_factory=dict)


class AdmissionController:
    """The admission controller's state: advertisements, declared resources and reservations."""

    def __init__(self, *, policy: Policy = Policy.FULL, bound: Bound = Bound.UPPER, min_fraction: float = 0.0,
                 event_bytes: float = DEFAULT_EVENT_BYTES, entry_bytes: float = DEFAULT_ENTRY_BYTES,
                 buffer_s: float = DEFAULT_BUFFER_S,
                 default_memory_bytes: float = DEFAULT_ROUTER_MEMORY_BYTES, overlap_bound: bool = False) -> None:
        if not 0.0 <= min_fraction <= 1.0:
            raise ValidationError(f"min_fraction must be within 0..1, got {min_fraction}", field="min_fraction")
        for name, v in (("event_bytes", event_bytes), ("entry_bytes", entry_bytes), ("buffer_s", buffer_s),
                        ("default_memory_bytes", default_memory_bytes)):
            if not math.isfinite(v) or v < 0 or (name == "event_bytes" and v == 0):
                raise ValidationError(f"{name} must be a finite positive number, got {v}", field=name)
        self.graph = AdvertisementGraph()
        self.policy = policy
        self.bound = bound
        #: Upper bound: Theorem 1's (False) or the smaller of it and the overlapping advertisements' total.
        self.overlap_bound = overlap_bound
        self.min_fraction = min_fraction
        self.event_bytes = event_bytes
        self.entry_bytes = entry_bytes
        self.buffer_s = buffer_s
        self.default_memory_bytes = default_memory_bytes
        self.routers: dict[str, RouterCapacity] = {}
        self.links: dict[str, LinkCapacity] = {}
        #: (mode, resource kind, router or link) -> amount reserved.
        self.used: dict[tuple[int, str, str], float] = {}
        self._admitted: dict[str, _Reservation] = {}
        #: Advertisement ids by source (a broker), for SyncAdvertisements.
        self._sources: dict[str, set[str]] = {}
        #: New at every start: a broker that sees it change re-sends its advertisements and resources.
        self.epoch = uuid.uuid4().hex
        #: Decisions by reason, for the controller's stats.
        self.decisions: dict[str, int] = {}

    # -- advertisements ----------------------------------------------------------------------------
    def advertise(self, advertisement_id: str, filt: Filter, rate_eps: float, *, source: str = "") -> Insertion:
        ins = self.graph.advertise(advertisement_id, filt, rate_eps)
        self._sources.setdefault(source, set()).add(advertisement_id)
        return ins

    def unadvertise(self, advertisement_id: str) -> float:
        rate = self.graph.unadvertise(advertisement_id)
        for ids in self._sources.values():
            ids.discard(advertisement_id)
        return rate

    def sync(self, source: str, advertisements: Iterable[tuple[str, Filter, float]]) -> tuple[int, int]:
        """Make ``source``'s advertisements exactly these (validated whole first); returns (added, removed)."""
        if not source:
            raise ValidationError("a synchronising source must be named", field="source")
        want: dict[str, tuple[Filter, float]] = {}
        others = {a for s, ids in self._sources.items() if s != source for a in ids}
        known = self.graph.advertisements()
        for ad_id, filt, rate in advertisements:
            if ad_id in want or ad_id in others:
                raise ValidationError(f"advertisement {ad_id!r} is given twice or belongs to another source",
                                      field="advertisement_id")
            want[ad_id] = (filt, check_rate(rate))
        mine = self._sources.get(source, set())
        removed = 0
        for ad_id in sorted(mine):
            have = known.get(ad_id)
            w = want.get(ad_id)
            if w is None or have is None or have != (w[0].key, w[1]):
                if have is not None:
                    self.unadvertise(ad_id)
                    removed += 1
                mine.discard(ad_id)
        added = 0
        for ad_id, (filt, rate) in want.items():
            if ad_id not in self._sources.get(source, set()):
                self.advertise(ad_id, filt, rate, source=source)
                added += 1
        return added, removed

    # -- resources ---------------------------------------------------------------------------------
    def declare(self, routers: Iterable[RouterCapacity] = (), links: Iterable[LinkCapacity] = ()) -> None:
        """Add or update routers' and links' capacities (validated whole first)."""
        rs, ls = list(routers), list(links)
        for r in rs:
            if not r.name or not math.isfinite(r.cpu_eps) or r.cpu_eps <= 0 \
                    or not math.isfinite(r.memory_bytes) or r.memory_bytes < 0:
                raise ValidationError(f"router {r.name!r}: cpu_eps must be > 0 and memory_bytes >= 0, finite",
                                      field="routers")
        for link in ls:
            if not link.name or not math.isfinite(link.bandwidth_bps) or link.bandwidth_bps <= 0:
                raise ValidationError(f"link {link.name!r}: bandwidth_bps must be a finite number > 0", field="links")
        for r in rs:
            self.routers[r.name] = RouterCapacity(r.name, r.cpu_eps, r.memory_bytes or self.default_memory_bytes)
        for link in ls:
            self.links[link.name] = link

    # -- admission ---------------------------------------------------------------------------------
    def requirement(self, filt: Filter, interval_ms: int = 0) -> Requirement:
        return self.graph.requirement(filt, interval_ms=interval_ms, overlap_bound=self.overlap_bound)

    def admit(self, subscription_id: str, filt: Filter, hops: Sequence[Hop], *, interval_ms: int = 0,
              policy: Policy | None = None, bound: Bound | None = None) -> Decision:
        """Decide one subscription and reserve what it is granted (see the module docstring)."""
        if not subscription_id:
            raise ValidationError("subscription id must not be empty", field="subscription_id")
        previous = self._admitted.get(subscription_id)
        if previous is not None:
            return previous.decision  # a retried request: the same answer, nothing reserved twice
        if not hops:
            raise ValidationError("a subscription needs at least one hop", field="hops")
        policy = policy or self.policy
        bound = bound or self.bound
        try:
            req = self.requirement(filt, interval_ms)
        except NoMatchingAdvertisement as exc:
            return self._count(Decision(subscription_id, False, exc.reason, str(exc), policy, bound, 0.0, None, 0.0))
        rate = req.bound(bound is Bound.UPPER)
        unique = list(dict.fromkeys(hops))
        verdicts: list[HopVerdict] = []
        pending: dict[tuple[int, str, str], float] = {}
        fraction = 1.0
        for hop in unique:
            hop_verdicts = self._hop(hop, rate, pending)
            verdicts.extend(hop_verdicts)
            hop_fraction = min(v.fraction for v in hop_verdicts)
            if policy is Policy.FULL and any(not v.ok for v in hop_verdicts):
                return self._reject(subscription_id, policy, bound, req, verdicts, 0.0)
            fraction = min(fraction, hop_fraction)
            for key, (fixed, per_rate) in self._needs(hop).items():
                pending[key] = pending.get(key, 0.0) + fixed + per_rate * rate
        if fraction <= 0.0 or fraction < self.min_fraction:
            return self._reject(subscription_id, policy, bound, req, verdicts, fraction)
        amounts = self._fit(unique, rate, fraction)
        if amounts is None:  # cannot happen with the conservative per-hop check; refuse rather than overbook
            return self._reject(subscription_id, policy, bound, req, verdicts, 0.0)
        fraction, totals = amounts
        for key, amount in totals.items():
            self.used[key] = self.used.get(key, 0.0) + amount
        full = fraction >= 1.0 - _SLACK
        reason = "Admitted" if full else "PartiallyGuaranteed"
        message = (f"admitted: {rate * fraction:.6g} events/s reserved on {len(unique)} hop(s) "
                   f"(requirement {req.min_rate:.6g}..{req.max_rate:.6g} events/s, {bound.value} bound)")
        if not full:
            message = (f"partially guaranteed: {100 * fraction:.1f} % of {rate:.6g} events/s can be guaranteed; "
                       + "; ".join(v.describe() for v in verdicts if not v.ok))
        decision = Decision(subscription_id, True, reason, message, policy, bound, 1.0 if full else fraction, req,
                            rate * fraction, tuple(verdicts))
        self._admitted[subscription_id] = _Reservation(decision, totals)
        return self._count(decision)

    def release(self, subscription_id: str) -> bool:
        """Free what a subscription reserved; False if it held nothing."""
        held = self._admitted.pop(subscription_id, None)
        if held is None:
            return False
        for key, amount in held.amounts.items():
            left = self.used.get(key, 0.0) - amount
            if left <= _SLACK * max(1.0, amount):
                self.used.pop(key, None)
            else:
                self.used[key] = left
        return True

    def decision(self, subscription_id: str) -> Decision:
        held = self._admitted.get(subscription_id)
        if held is None:
            raise NotFound(f"no admitted subscription {subscription_id!r}", field="subscription_id")
        return held.decision

    def admitted(self) -> list[Decision]:
        return [r.decision for r in self._admitted.values()]

    # -- helpers -----------------------------------------------------------------------------------
    def _needs(self, hop: Hop) -> dict[tuple[int, str, str], tuple[float, float]]:
        """Per resource: (fixed amount, amount per event/s)."""
        needs = {(hop.mode, "cpu", hop.router): (0.0, 1.0),
                 (hop.mode, "memory", hop.router): (self.entry_bytes, self.event_bytes * self.buffer_s)}
        if hop.link in self.links:
            needs[(hop.mode, "bandwidth", hop.link)] = (0.0, self.event_bytes * 8)
        return needs

    def _capacity(self, key: tuple[int, str, str]) -> float:
        _, kind, name = key
        if kind == "bandwidth":
            return self.links[name].bandwidth_bps
        router = self.routers[name]
        return router.cpu_eps if kind == "cpu" else router.memory_bytes

    def _hop(self, hop: Hop, rate: float, pending: dict[tuple[int, str, str], float]) -> list[HopVerdict]:
        if hop.router not in self.routers:
            return [HopVerdict(hop, "undeclared", rate, 0.0)]
        out = []
        for key, (fixed, per_rate) in self._needs(hop).items():
            left = self._capacity(key) - self.used.get(key, 0.0) - pending.get(key, 0.0)
            out.append(HopVerdict(hop, key[1], fixed + per_rate * rate, left, fixed))
        return out

    def _fit(self, hops: list[Hop], rate: float, fraction: float
             ) -> tuple[float, dict[tuple[int, str, str], float]] | None:
        """Totals per resource at the largest share of the rate, at most ``fraction``, that fits exactly."""
        parts: dict[tuple[int, str, str], tuple[float, float]] = {}
        for hop in hops:
            for key, (fixed, per_rate) in self._needs(hop).items():
                f0, p0 = parts.get(key, (0.0, 0.0))
                parts[key] = (f0 + fixed, p0 + per_rate * rate)
        for key, (fixed, scaled) in parts.items():
            room = self._capacity(key) - self.used.get(key, 0.0)
            if fixed + scaled * fraction > room:
                fraction = (room - fixed) / scaled if scaled > 0 else 0.0
        if fraction <= 0.0 or fraction < self.min_fraction:
            return None
        return fraction, {key: fixed + scaled * fraction for key, (fixed, scaled) in parts.items()}

    def _reject(self, sid: str, policy: Policy, bound: Bound, req: Requirement, verdicts: list[HopVerdict],
                fraction: float) -> Decision:
        failing = [v for v in verdicts if not v.ok]
        rate = req.bound(bound is Bound.UPPER)
        if policy is Policy.FULL:
            what = "rejected at the first hop without resources: " + "; ".join(v.describe() for v in failing)
        else:
            what = (f"only {100 * fraction:.1f} % of {rate:.6g} events/s can be guaranteed"
                    f"{f' (at least {100 * self.min_fraction:.0f} % needed)' if self.min_fraction else ''}: "
                    + "; ".join(v.describe() for v in failing))
        return self._count(Decision(sid, False, "CapacityExceeded", what, policy, bound, fraction, req, 0.0,
                                    tuple(verdicts)))

    def _count(self, d: Decision) -> Decision:
        self.decisions[d.reason] = self.decisions.get(d.reason, 0) + 1
        return d


__all__ = ["DEFAULT_ENTRY_BYTES", "DEFAULT_EVENT_BYTES", "AdmissionController", "Bound", "Decision", "Hop",
           "HopVerdict", "LinkCapacity", "Policy", "RouterCapacity"]
