"""Names of the custom resources and the typed shapes of their bodies.

The CRDs themselves are generated from ``operator/crds/src`` into ``charts/gridstat/crds``
(``gridstat_operator.crdgen``); these TypedDicts mirror their ``spec`` sections for the planner.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

GROUP = "gridstat.io"
VERSION = "v1alpha1"
SUBSCRIPTIONS = "subscriptions"
MODES = "modes"
ACTIVE_MODES = "activemodes"
CONDENSATIONS = "condensationfunctions"

#: Annotation that pauses reconciliation of one resource (Strimzi's pause-reconciliation).
PAUSE_ANNOTATION = f"{GROUP}/pause-reconciliation"
#: Prefix of the operator's own bookkeeping annotations (kopf progress and diff base) and finalizer.
FINALIZER = f"{GROUP}/operator"
#: Name of mode 0, which every broker defines.
NORMAL = "normal"


class Extrapolation(TypedDict, total=False):
    method: str
    order: int
    orders: list[int]
    window: int
    maxConsecutive: int


class QoS(TypedDict, total=False):
    intervalMs: int
    latencyMs: int
    redundancy: int
    priority: int
    extrapolation: Extrapolation


class ModeQoS(QoS, total=False):
    mode: str


class SubscriptionSpec(TypedDict):
    subscriber: str
    edgeRouter: str
    variables: list[str]
    qos: QoS
    cloud: NotRequired[str]
    type: NotRequired[str]
    modes: NotRequired[list[ModeQoS]]


class LabelSelector(TypedDict, total=False):
    matchLabels: dict[str, str]
    matchExpressions: list[dict[str, object]]


class ModeSpec(TypedDict):
    id: int
    description: NotRequired[str]
    subscriptionSelector: NotRequired[LabelSelector]
    subscriptions: NotRequired[list[str]]


class ActiveModeSpec(TypedDict):
    mode: str


class Condition(TypedDict, total=False):
    type: str
    status: str
    lastTransitionTime: str
    reason: str
    message: str
    observedGeneration: int
