"""The measurement archive: status variables to a Kafka topic, keyed by variable (the historian path).

An archive is an ordinary subscriber (``gridstat archive``, ``cli/archive.py``): it subscribes
through its edge router with the interval and latency bound the analysts chose, so the routers
rate-filter for it like for any subscriber, and every delivered value becomes one
``measurement`` record on ``gridstat.archive.measurements`` with the variable's full name as
the Kafka key (so one variable's values stay in order in one partition). Export goes through
the same bounded, non-blocking exporter as telemetry, with the value's event time as the Kafka
record timestamp (so the history service finds a time range with ``offsets_for_times``,
docs/history.md); a Kafka outage longer than the buffer
loses the oldest values, counted (``gridstat_telemetry_records_lost_total``) and visible as
holes in ``sequence``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Protocol

from . import records
from .records import TOPICS


class Emitter(Protocol):
    """What the archiver emits through: ``TelemetryExporter`` (``timestamp_ms``: the Kafka record's)."""

    def emit(self, topic: str, record: dict[str, Any], *, key: str | bytes | None = None,
             timestamp_ms: int | None = None) -> bool: ...


class Archiver:
    """Turns delivered events into measurement records; ``on_event`` is a subscription callback."""

    def __init__(self, emitter: Emitter, *, topic: str = TOPICS.measurements) -> None:
        self.emitter = emitter
        self.topic = topic
        #: Records emitted per variable.
        self.archived: Counter[str] = Counter()

    def on_event(self, subscription: Any, holder: Any) -> None:
        """``Subscription`` ``on_event`` callback: one measurement record per delivered value."""
        var = subscription.variable
        name = str(var.full_name)
        value = holder.value
        if isinstance(value, tuple):
            value = list(value)
        ts = int(holder.timestamp_ms)
        record = records.measurement(
            variable=name, variable_id=int(var.variable_id), event_ts_ms=ts, value=value,
            value_type=str(var.type.name), received_ms=int(holder.received_ms),
            interval_ms=int(subscription.interval_ms), extrapolated=bool(holder.extrapolated),
            pub_interval_ms=int(var.interval_ms), frames_per_s=int(var.frames_per_s))
        self.emitter.emit(self.topic, record, key=name, timestamp_ms=ts)
        self.archived[name] += 1
