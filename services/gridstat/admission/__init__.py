"""The admission controller role (RacsCBPS, seed 002): rate-based admission of subscriptions.

``filters`` is the filter language and its covering test; ``covering`` the extended advertisement
covering graph and Theorem 1's requirement interval; ``admitting`` the hop-by-hop admission against
CPU, bandwidth and memory with the two criteria; ``service`` and ``main`` the gRPC role
(``gridstat admission``). The first three are pure and I/O-free. docs/admission.md explains the
mapping onto GridStat's per-variable subscriptions.

Layer: runtime (the README's layout table; ``.importlinter`` keeps it from importing any tool).
"""

from gridstat.admission.admitting import AdmissionController, Bound, Decision, Hop, HopVerdict, Policy
from gridstat.admission.covering import AdvertisementGraph, NoMatchingAdvertisement, Requirement
from gridstat.admission.filters import Constraint, Filter

__all__ = [
    "AdmissionController",
    "AdvertisementGraph",
    "Bound",
    "Constraint",
    "Decision",
    "Filter",
    "Hop",
    "HopVerdict",
    "NoMatchingAdvertisement",
    "Policy",
    "Requirement",
]
