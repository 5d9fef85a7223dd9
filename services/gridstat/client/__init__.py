"""The GridStat client SDK: publishers and subscribers of status variables (dissertation 2.1).

``Publisher`` sends GPS-aligned events to its edge router; ``Subscriber`` receives them and
offers GridStat's three subscriber models (2.1.5): a pull holder, a push callback and a
QoS-violation callback, plus snapshot groups of in-phase variables and extrapolation of missed
values (2.2.2). Variable ids come from ``gridstat.core.model.VariableRegistry``; until the brokers
exist the caller installs routes.

Layer: runtime (the README's layout table; ``.importlinter`` keeps it from importing any tool).
"""

from gridstat.client.blocks import EventBlock
from gridstat.client.extrapolation import Extrapolation, register_extrapolation, unregister_extrapolation
from gridstat.client.gapfill import GapFiller, GapFillStats
from gridstat.client.history import HistoryAnswer, HistoryClient, HistoryEvent
from gridstat.client.holders import Holder, Violation
from gridstat.client.publisher import AlertTooEarly, PublicationHandle, Publisher
from gridstat.client.session import (
    AdmissionNote,
    EdgeSession,
    ModeQoS,
    Offer,
    SubscribeResult,
    SubscriptionRejected,
)
from gridstat.client.snapshot import Snapshot, SnapshotGroup
from gridstat.client.subscriber import Subscriber
from gridstat.client.subscription import Subscription

__all__ = [
    "AdmissionNote",
    "AlertTooEarly",
    "EdgeSession",
    "EventBlock",
    "Extrapolation",
    "GapFillStats",
    "GapFiller",
    "HistoryAnswer",
    "HistoryClient",
    "HistoryEvent",
    "Holder",
    "ModeQoS",
    "Offer",
    "PublicationHandle",
    "Publisher",
    "Snapshot",
    "SnapshotGroup",
    "SubscribeResult",
    "Subscriber",
    "Subscription",
    "SubscriptionRejected",
    "Violation",
    "register_extrapolation",
    "unregister_extrapolation",
]
