"""Admission decisions and mode changes of a QoS broker, recorded as they happen.

Decisions are events, not counters, so they cannot be sampled. Rather than add telemetry calls
inside the broker's commands, ``BrokerRecorder.attach`` wraps three bound methods of one broker
instance -- ``subscribe``, ``change_subscription`` and ``change_mode`` -- so every caller (the
gRPC servicers, the mode-change delegation) goes through the recorder, and the broker's own
modules stay unaware of telemetry. The wrapper times the call, records the outcome (admitted,
or rejected with the error's machine-readable ``reason``) and returns or re-raises unchanged.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from gridstat.errors import GridStatError

from . import records
from .records import TOPICS
from .sampling import BrokerModeSampler, Emitter

#: A leaf broker's answer when the variable is not published in its cloud; with a parent broker
#: the request goes up (``delegated``), without one it is a rejection.
UNKNOWN_VARIABLE = "UnknownVariable"

#: The machine-readable reasons a broker refuses a subscription with (``broker/rejections.py`` and
#: the checks before planning: registry, types, policy, arguments, duplicates). Their
#: ``gridstat_broker_admission_decisions_total{decision="rejected"}`` series exist at 0 from the start,
#: so that Prometheus's ``increase()`` sees the first rejection of each (a series born at 1 has no
#: increase; docs/telemetry.md, "What is tested of the dashboards and alerts"). A reason not listed
#: here is still counted, from its first occurrence on.
REJECTION_REASONS = ("NoFeasiblePath", "LatencyUnattainable", "CapacityExceeded", "AdmissionRejected",
                     UNKNOWN_VARIABLE, "TypeMismatch", "Unauthorized", "InvalidArgument", "AlreadyExists",
                     "NotFound")
#: The outcomes of a broker's mode change, each counted from 0 at the start for the same reason.
MODE_CHANGE_OUTCOMES = ("committed", "failed", "refused")
#: A mode change refused before anything changed (another one runs, an unknown mode, not allowed):
#: outcome ``refused``, which the ModeChangeFailed alert leaves alone (docs/telemetry.md).
MODE_CHANGE_REFUSALS = frozenset({"ModeChangeInProgress", "InvalidArgument", "UnknownMode", "NotFound", "Unauthorized",
                                  "PermissionDenied"})


def _modes(qos: Any) -> list[dict[str, Any]]:
    out = []
    for q in qos if isinstance(qos, (list, tuple)) else (qos,):
        out.append({"mode": int(q.mode), "interval_ms": int(q.interval_ms), "latency_ms": float(q.latency_ms),
                    "redundancy": int(getattr(q, "redundancy", 1))})
    return out


class BrokerRecorder:
    """Counts and exports a leaf broker's admission decisions and mode changes.

    Args:
        name: the broker's name.
        emitter: where records go (a ``TelemetryExporter``), or None to count only (Prometheus).
        modes: the broker's ``BrokerModeSampler``, told of changes reported here.
    """

    def __init__(self, name: str, emitter: Emitter | None, *, modes: BrokerModeSampler | None = None) -> None:
        self.name = name
        self.emitter = emitter
        self.modes = modes
        #: (decision, reason) -> count, for ``gridstat_broker_admission_decisions_total``; admissions and
        #: the known rejection reasons start at 0 (REJECTION_REASONS).
        self.decisions: Counter[tuple[str, str]] = Counter(
            {("admitted", ""): 0, **{("rejected", r): 0 for r in REJECTION_REASONS}})
        #: outcome -> count, for ``gridstat_broker_mode_changes_total``; every outcome starts at 0.
        self.mode_changes: Counter[str] = Counter({o: 0 for o in MODE_CHANGE_OUTCOMES})
        self.decision_seconds = 0.0

    def attach(self, broker: Any) -> None:
        """Wrap ``broker.subscribe``, ``change_subscription`` and ``change_mode`` (those it has)."""
        if hasattr(broker, "subscribe"):
            broker.subscribe = self._wrap_subscribe(broker, broker.subscribe)
        if hasattr(broker, "change_subscription"):
            broker.change_subscription = self._wrap_change(broker.change_subscription)
        if hasattr(broker, "change_mode"):
            broker.change_mode = self._wrap_mode(broker, broker.change_mode)

    # -- decisions ---------------------------------------------------------------------------
    def record(self, *, subscription_id: str, subscriber: str, variable: str, action: str, decision: str,
               reason: str, message: str, modes: list[dict[str, Any]], duration_s: float) -> None:
        self.decisions[(decision, reason)] += 1
        self.decision_seconds += duration_s
        if self.emitter is not None:
            self.emitter.emit(TOPICS.admission, records.admission(
                subscription_id=subscription_id, subscriber=subscriber, variable=variable, action=action,
                decision=decision, reason=reason, message=message, modes=modes, duration_ms=duration_s * 1000),
                key=subscription_id or f"{subscriber}/{variable}")

    def _wrap_subscribe(self, broker: Any, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(fn)
        async def subscribe(subscriber: str, variable: str, type_spec: Any, qos: Any, *args: Any,
                            **kwargs: Any) -> Any:
            qos = tuple(qos)
            t0 = time.perf_counter()
            try:
                record = await fn(subscriber, variable, type_spec, qos, *args, **kwargs)
            except GridStatError as exc:
                delegated = exc.reason == UNKNOWN_VARIABLE and getattr(broker, "uplink", None) is not None
                self.record(subscription_id=str(kwargs.get("subscription_id", "")), subscriber=subscriber,
                            variable=variable, action="subscribe", decision="delegated" if delegated else "rejected",
                            reason=exc.reason, message=exc.message, modes=_modes(qos),
                            duration_s=time.perf_counter() - t0)
                raise
            self.record(subscription_id=str(getattr(record, "subscription_id", "")), subscriber=subscriber,
                        variable=variable, action="subscribe", decision="admitted", reason="", message="",
                        modes=_modes(qos), duration_s=time.perf_counter() - t0)
            return record
        return subscribe

    def _wrap_change(self, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(fn)
        async def change_subscription(subscription_id: str, qos: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                record = await fn(subscription_id, qos, *args, **kwargs)
            except GridStatError as exc:
                self.record(subscription_id=subscription_id, subscriber="", variable="", action="change",
                            decision="rejected", reason=exc.reason, message=exc.message, modes=_modes(qos),
                            duration_s=time.perf_counter() - t0)
                raise
            self.record(subscription_id=subscription_id, subscriber=str(getattr(record, "subscriber", "")),
                        variable=str(getattr(record, "variable", "")), action="change", decision="admitted",
                        reason="", message="", modes=_modes(qos), duration_s=time.perf_counter() - t0)
            return record
        return change_subscription

    # -- mode changes ------------------------------------------------------------------------
    def _wrap_mode(self, broker: Any, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(fn)
        async def change_mode(target: int, *args: Any, **kwargs: Any) -> Any:
            before = int(getattr(broker, "current_mode", 0))
            t0 = time.perf_counter()
            try:
                result = await fn(target, *args, **kwargs)
            except GridStatError as exc:
                outcome = "refused" if exc.reason in MODE_CHANGE_REFUSALS else "failed"
                self._mode(int(target), before, outcome, time.perf_counter() - t0, exc.reason)
                raise
            if getattr(result, "changed", True):
                self._mode(int(getattr(result, "current_mode", target)), before, "committed",
                           time.perf_counter() - t0, "")
            return result
        return change_mode

    def _mode(self, mode: int, previous: int, outcome: str, duration_s: float, reason: str) -> None:
        self.mode_changes[outcome] += 1
        if self.modes is not None and outcome == "committed":
            self.modes.mode = mode  # the sampler must not report it a second time
        if self.emitter is not None:
            self.emitter.emit(TOPICS.modes, records.mode_change(
                mode=mode, previous_mode=previous, outcome=outcome, duration_ms=duration_s * 1000, reason=reason),
                key=f"broker/{self.name}")
