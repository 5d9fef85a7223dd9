"""Telemetry records: topics, schema names and the builders every producer of records uses.

Every record is one JSON object with a common head and a kind-specific body; each kind has a
JSON Schema (draft 2020-12) in ``telemetry/schemas/v2/<kind>.schema.json``, documented in
docs/telemetry.md. The head:

* ``schema`` -- the record kind's name, e.g. ``gridstat.telemetry.delivery``;
* ``version`` -- the schema's major version (``SCHEMA_VERSION``); a consumer that reads a version
  it does not know must skip the record. Adding an optional field keeps the version; removing,
  renaming or retyping one, or making one required, bumps it (and its folder, ``schemas/vN``).
  Version 2 replaced version 1's ``instance`` and ``seq`` by ``exporter``, ``epoch`` and
  ``sequence``; the version 1 schemas stay in ``schemas/v1`` for the records still in Kafka;
* ``ts_ms`` -- when the record was made, milliseconds since the Unix epoch (the role's clock);
* ``role``, ``source``, ``exporter``, ``epoch``, ``sequence`` -- stamped by the exporter
  (``exporting``); ``(exporter, epoch, sequence)`` identifies a record (docs/telemetry.md,
  "Exactly once").

The builders here fill ``schema``, ``version``, ``ts_ms`` and the body; they never raise on
values a role produced and never emit NaN (JSON has none).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Major version of the records made now (every schema in ``schemas/v2``).
SCHEMA_VERSION = 2
#: Every major version a reader may meet in Kafka, oldest first (``schemas/v1``, ``schemas/v2``).
SCHEMA_VERSIONS = (1, 2)
#: Where the JSON Schema files of ``SCHEMA_VERSION`` are (package data).
SCHEMA_DIR = Path(__file__).with_name("schemas") / f"v{SCHEMA_VERSION}"
#: The fields that identify a record (stamped by the exporter; docs/telemetry.md, "Exactly once").
RECORD_KEY = ("exporter", "epoch", "sequence")
#: Latency samples carried by one delivery record; the rest are counted in ``latency_samples_omitted``.
MAX_LATENCY_SAMPLES = 1024


@dataclass(frozen=True)
class Topics:
    """The Kafka topics (one per record kind); one name space, ``gridstat.*``."""

    counters: str = "gridstat.telemetry.counters"
    delivery: str = "gridstat.telemetry.delivery"
    drops: str = "gridstat.telemetry.drops"
    admission: str = "gridstat.telemetry.admission"
    modes: str = "gridstat.telemetry.modes"
    gaps: str = "gridstat.telemetry.gaps"
    measurements: str = "gridstat.archive.measurements"
    alerts: str = "gridstat.alerts.qos"
    model_brokers: str = "gridstat.telemetry.model_brokers"


TOPICS = Topics()

#: Record kind -> (schema name, topic). The schema file is ``<kind>.schema.json``.
KINDS: dict[str, tuple[str, str]] = {
    "counters": ("gridstat.telemetry.counters", TOPICS.counters),
    "delivery": ("gridstat.telemetry.delivery", TOPICS.delivery),
    "drops": ("gridstat.telemetry.drops", TOPICS.drops),
    "admission": ("gridstat.telemetry.admission", TOPICS.admission),
    "mode_change": ("gridstat.telemetry.mode_change", TOPICS.modes),
    "gap": ("gridstat.telemetry.gap", TOPICS.gaps),
    "measurement": ("gridstat.archive.measurement", TOPICS.measurements),
    "qos_alert": ("gridstat.alerts.qos_violation", TOPICS.alerts),
    "model_broker": ("gridstat.telemetry.model_broker", TOPICS.model_brokers),
}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def schema_path(kind: str, version: int = SCHEMA_VERSION) -> Path:
    """The JSON Schema file of a record kind (a key of ``KINDS``) in a major version (``SCHEMA_VERSIONS``)."""
    if kind not in KINDS:
        raise KeyError(f"no telemetry record kind {kind!r}; known: {sorted(KINDS)}")
    if version not in SCHEMA_VERSIONS:
        raise KeyError(f"no telemetry schema version {version}; known: {list(SCHEMA_VERSIONS)}")
    return SCHEMA_DIR.with_name(f"v{version}") / f"{kind}.schema.json"


def _head(kind: str, ts_ms: int | None) -> dict[str, Any]:
    return {"schema": KINDS[kind][0], "version": SCHEMA_VERSION, "ts_ms": now_ms() if ts_ms is None else ts_ms}


def finite(x: float | None) -> float | None:
    """``x`` rounded to microseconds, or None for None, NaN and infinities (JSON has no NaN)."""
    if x is None or not math.isfinite(x):
        return None
    return round(float(x), 3)


def counters(*, period_ms: int, channel: str, events_in: int, events_out: int, datagrams_in: int,
             datagrams_out: int, filtered: int, dropped: int, events_in_total: int, events_out_total: int,
             dropped_total: int, up: bool | None = None, queued: int | None = None,
             queue_capacity: int | None = None, rtt_ms: float | None = None, cpu_seconds: float | None = None,
             mode: int | None = None, ts_ms: int | None = None) -> dict[str, Any]:
    """A router's (``channel == ""``) or one event channel's counters over the last period."""
    return {**_head("counters", ts_ms), "period_ms": period_ms, "channel": channel, "up": up,
            "events_in": events_in, "events_out": events_out, "datagrams_in": datagrams_in,
            "datagrams_out": datagrams_out, "filtered": filtered, "dropped": dropped,
            "events_in_total": events_in_total, "events_out_total": events_out_total,
            "dropped_total": dropped_total, "queued": queued, "queue_capacity": queue_capacity,
            "rtt_ms": finite(rtt_ms), "cpu_seconds": finite(cpu_seconds), "mode": mode}


def delivery(*, subscriber: str, variable: str, variable_id: int, mode: int, period_ms: int,
             requested_interval_ms: int, latency_bound_ms: float, delivered: int, gaps: int, duplicates: int,
             stale: int, violations: int, extrapolated: int, latency_ms: list[int],
             delivered_interval_ms: float | None, previous_ts_ms: int | None, last_ts_ms: int | None,
             in_mode: bool = True, suspended: bool = False, ts_ms: int | None = None) -> dict[str, Any]:
    """One subscription's deliveries over the last period, with the period's latency samples."""
    omitted = max(0, len(latency_ms) - MAX_LATENCY_SAMPLES)
    samples = latency_ms[-MAX_LATENCY_SAMPLES:] if omitted else latency_ms
    expected = period_ms / requested_interval_ms if requested_interval_ms > 0 else None
    deviation = None if delivered_interval_ms is None else delivered_interval_ms - requested_interval_ms
    return {**_head("delivery", ts_ms), "subscription": f"{subscriber}/{variable}", "subscriber": subscriber,
            "variable": variable, "variable_id": variable_id, "mode": mode, "period_ms": period_ms,
            "requested_interval_ms": requested_interval_ms, "latency_bound_ms": finite(latency_bound_ms),
            "delivered": delivered, "expected": finite(expected),
            "delivered_interval_ms": finite(delivered_interval_ms), "interval_deviation_ms": finite(deviation),
            "gaps": gaps, "duplicates": duplicates, "stale": stale, "violations": violations,
            "extrapolated": extrapolated, "latency_ms": samples, "latency_samples_omitted": omitted,
            "previous_ts_ms": previous_ts_ms, "last_ts_ms": last_ts_ms, "in_mode": in_mode, "suspended": suspended}


def drops(*, channel: str, reason: str, count: int, total: int, ts_ms: int | None = None) -> dict[str, Any]:
    """Drops of one reason (``core.wire.DropReason`` values and a few role-specific ones) in the last period."""
    return {**_head("drops", ts_ms), "channel": channel, "reason": reason, "count": count, "total": total}


def admission(*, subscription_id: str, subscriber: str, variable: str, action: str, decision: str, reason: str,
              message: str, modes: list[dict[str, Any]], duration_ms: float,
              ts_ms: int | None = None) -> dict[str, Any]:
    """A broker's admission decision: ``admitted``, ``rejected`` (with the machine-readable reason),
    ``delegated`` (to the parent broker) or ``error``."""
    return {**_head("admission", ts_ms), "subscription_id": subscription_id, "subscriber": subscriber,
            "variable": variable, "action": action, "decision": decision, "reason": reason,
            "message": message[:500], "modes": modes, "duration_ms": finite(duration_ms)}


def mode_change(*, mode: int, previous_mode: int | None, outcome: str, duration_ms: float | None = None,
                reason: str = "", ts_ms: int | None = None) -> dict[str, Any]:
    """A mode change seen by a role: ``committed`` / ``failed`` (broker), ``prepare`` / ``commit`` /
    ``abort`` (subscriber notices), ``observed`` (a sampled change of the current mode)."""
    return {**_head("mode_change", ts_ms), "mode": mode, "previous_mode": previous_mode, "outcome": outcome,
            "duration_ms": finite(duration_ms), "reason": reason}


def gap(*, from_ms: int, to_ms: int, lost: dict[str, int], ts_ms: int | None = None) -> dict[str, Any]:
    """The exporter's own record of an export outage and the records lost in it."""
    return {**_head("gap", ts_ms), "from_ms": from_ms, "to_ms": to_ms, "lost": sum(lost.values()),
            "lost_by_reason": [{"reason": r, "count": n} for r, n in sorted(lost.items()) if n]}


def measurement(*, variable: str, variable_id: int, event_ts_ms: int, value: Any, value_type: str,
                received_ms: int, interval_ms: int, extrapolated: bool = False,
                pub_interval_ms: int | None = None, frames_per_s: int | None = None,
                ts_ms: int | None = None) -> dict[str, Any]:
    """One archived value of a status variable (the historian path), keyed by variable in Kafka.

    ``pub_interval_ms`` and ``frames_per_s`` (optional fields) are the publication's: with them the
    history service applies the live rate filter with the publication's own phase (docs/history.md).
    """
    publisher = variable.split("/", 1)[0]
    num: float | None = None
    if isinstance(value, bool):
        num = 1.0 if value else 0.0
    elif isinstance(value, (int, float)):
        num = finite(float(value))
        if num is None:
            value = None
    out = {**_head("measurement", ts_ms), "variable": variable, "publisher": publisher,
           "variable_id": variable_id, "event_ts_ms": event_ts_ms, "value": value, "value_num": num,
           "value_type": value_type, "received_ms": received_ms, "latency_ms": received_ms - event_ts_ms,
           "interval_ms": interval_ms, "extrapolated": extrapolated}
    if pub_interval_ms is not None:
        out["pub_interval_ms"] = pub_interval_ms
    if frames_per_s is not None:
        out["frames_per_s"] = frames_per_s
    return out


def model_broker(*, run: str, strategy: str, broker: str, parent: str | None, depth: int, time_scale: float,
                 period_ms: int, entries: int, entries_avg: float, local_subscriptions_avg: float, control_sent: int,
                 control_received: int, notifications_sent: int, notifications_received: int,
                 notifications_published: int, subscriptions_started: int,
                 ts_ms: int | None = None) -> dict[str, Any]:
    """One sampling period of a broker of a live run of the capacity model (``gridstat analyze --live``)."""
    return {**_head("model_broker", ts_ms), "run": run, "strategy": strategy, "broker": broker, "parent": parent,
            "depth": depth, "time_scale": finite(time_scale), "period_ms": period_ms, "entries": entries,
            "entries_avg": finite(entries_avg), "local_subscriptions_avg": finite(local_subscriptions_avg),
            "control_sent": control_sent, "control_received": control_received,
            "notifications_sent": notifications_sent, "notifications_received": notifications_received,
            "notifications_published": notifications_published, "subscriptions_started": subscriptions_started}
