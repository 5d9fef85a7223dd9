"""Why the leaf QoS broker refused a subscription, and what it could offer instead (docs/management-plane.md).

The prototype answered ``ERROR_SUB_LATENCY_NOTSATISFIABLE`` /
``ERROR_SUB_INTERVAL_NOTSATISFIABLE`` (dissertation 3.1 admission control). We keep
the machine-readable ``reason`` of :class:`~gridstat.errors.GridStatError` and add
an :class:`Offer` so a subscriber can re-ask with QoS the broker can honour. The
reasons decided elsewhere (``UnknownVariable``, ``TypeMismatch`` from the variable
registry; ``Unauthorized`` from the control layer) are not raised here.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from gridstat.errors import GridStatError


@dataclass(frozen=True)
class Offer:
    """QoS the broker could grant instead; a field is None when it does not apply."""

    #: The worst per-path latency of the best path set found (ms).
    best_latency_ms: float | None = None
    #: How many disjoint paths the broker could give (within the latency bound where that was the problem).
    max_redundancy: int | None = None
    #: The smallest subscription interval (a multiple of the publication interval) that capacity allows.
    min_interval_ms: int | None = None


class AdmissionRejected(GridStatError):
    """Base of the broker's admission refusals; never retriable unchanged."""

    reason = "AdmissionRejected"

    def __init__(self, message: str, *, offer: Offer | None = None, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.offer = offer if offer is not None else Offer()


class NoFeasiblePath(AdmissionRejected):
    """The topology holds no path, or fewer disjoint paths than the redundancy asked."""

    reason = "NoFeasiblePath"


class LatencyUnattainable(AdmissionRejected):
    """Paths exist but not all of them within the latency bound; ``offer.best_latency_ms`` says what is."""

    reason = "LatencyUnattainable"


@dataclass(frozen=True)
class Shortfall:
    """One resource that cannot take an allocation: ``kind`` is ``"channel"`` or ``"router"``."""

    resource: str
    kind: str
    remaining_eps: Fraction
    required_eps: Fraction

    def describe(self) -> str:
        return (f"{self.kind} {self.resource!r} has {float(self.remaining_eps):.6g} events/s left but the "
                f"subscription needs {float(self.required_eps):.6g}")


class CapacityExceeded(AdmissionRejected):
    """Reserving the subscription would overload ``shortfall.resource``."""

    reason = "CapacityExceeded"

    def __init__(self, message: str, *, shortfall: Shortfall, offer: Offer | None = None) -> None:
        super().__init__(message, offer=offer, field=shortfall.kind)
        self.shortfall = shortfall
        self.resource = shortfall.resource
        self.remaining_eps = shortfall.remaining_eps
        self.required_eps = shortfall.required_eps
