"""The streaming QoS alerts on Prometheus /metrics: ``gridstat alerts-exporter`` (docs/telemetry.md,
"Spark jobs", "The QoS alerts on a dashboard").

spark/qos_alerts.py writes one ``gridstat.alerts.qos_violation`` record (schema ``qos_alert``) per
broken guarantee to ``gridstat.alerts.qos``. :class:`AlertsConsumer` reads that topic in a consumer
group (from the latest offset by default: an operator wants what happens now, not a replay),
:func:`parse_alert` checks each record and :class:`AlertSeries` keeps, per (subscriber, variable,
mode, kind), a count, the newest ratio observed / bound (latency and interval alerts; gaps and
violations have a bound of 0) and the newest alert's time. :class:`QosAlertsCollector` serves them:

* ``gridstat_qos_alerts_total{subscriber,variable,mode,kind}`` -- counter;
* ``gridstat_qos_alert_ratio{...}`` -- gauge, observed / bound of the newest latency or interval alert;
* ``gridstat_qos_alert_last_timestamp_seconds{...}`` -- gauge, the newest alert's ``ts_ms``;
* ``gridstat_qos_alerts_exporter_*`` -- the exporter's own health: records read, bad records by
  reason (served from 0), repeats dropped on ``alert_id`` (the job's Kafka sink is at least once),
  series held and forgotten, whether Kafka answers.

Memory is bounded: a series not updated for ``forget_after_s`` (1 h by default) is forgotten (its
counter starts again from 0 if the alert comes back, which Prometheus' ``increase`` reads as a
reset), at most ``max_series`` are held (the least recently updated go first), and the ``alert_id``
set that drops repeats holds the newest ``DEDUP_IDS`` ids. A bad record is counted, never fatal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from . import kafka_security
from .kafka_security import KafkaSecurity
from .records import KINDS as RECORD_KINDS
from .records import TOPICS

log = logging.getLogger(__name__)

SCHEMA = RECORD_KINDS["qos_alert"][0]  # "gridstat.alerts.qos_violation"
#: Alert kinds of spark/qos_alerts.py; only these two have a bound to divide by.
KINDS = ("latency", "gaps", "interval", "violations")
RATIO_KINDS = ("latency", "interval")
LABELS = ("subscriber", "variable", "mode", "kind")
#: A record larger than this is not an alert (the job's are about 400 bytes).
MAX_RECORD_BYTES = 64 * 1024
#: Longest subscriber or variable name kept as a label (longer: a bad record).
MAX_LABEL_CHARS = 256
#: Recent alert ids remembered to drop repeats of the at-least-once sink.
DEDUP_IDS = 100_000
DEFAULT_FORGET_AFTER_S = 3600.0
DEFAULT_MAX_SERIES = 10_000
DEFAULT_GROUP = "gridstat-alerts-exporter"


class BadRecord(StrEnum):
    """Why a record of the topic is not an alert (label ``reason`` of the bad-records counter)."""

    TOO_LARGE = "too_large"
    NOT_JSON = "not_json"
    NOT_AN_OBJECT = "not_an_object"
    WRONG_SCHEMA = "wrong_schema"
    MISSING_FIELD = "missing_field"
    BAD_FIELD = "bad_field"
    UNKNOWN_KIND = "unknown_kind"


class InvalidAlert(ValueError):
    def __init__(self, reason: BadRecord, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class QosAlert:
    """The fields of a ``qos_alert`` record the exporter uses."""

    alert_id: str
    kind: str
    subscriber: str
    variable: str
    mode: int
    observed: float
    bound: float
    ts_ms: int

    @property
    def labels(self) -> tuple[str, str, str, str]:
        return (self.subscriber, self.variable, str(self.mode), self.kind)

    @property
    def ratio(self) -> float | None:
        """observed / bound for a latency or interval alert with a positive bound, else None."""
        if self.kind in RATIO_KINDS and self.bound > 0:
            return self.observed / self.bound
        return None


def _field(record: dict[str, Any], name: str) -> Any:
    if name not in record or record[name] is None:
        raise InvalidAlert(BadRecord.MISSING_FIELD, f"no {name!r}")
    return record[name]


def _text(record: dict[str, Any], name: str) -> str:
    value = _field(record, name)
    if not isinstance(value, str) or not value or len(value) > MAX_LABEL_CHARS:
        raise InvalidAlert(BadRecord.BAD_FIELD, f"{name!r} is not a name of 1 to {MAX_LABEL_CHARS} characters")
    return value


def _number(record: dict[str, Any], name: str, *, integral: bool = False) -> float:
    value = _field(record, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or (integral and value != int(value)):
        raise InvalidAlert(BadRecord.BAD_FIELD, f"{name!r} is not a finite {'integer' if integral else 'number'}")
    return float(value)


def parse_alert(value: bytes | None) -> QosAlert:
    """One record's value as a :class:`QosAlert`; :class:`InvalidAlert` (with its reason) otherwise."""
    if value is None:
        raise InvalidAlert(BadRecord.NOT_JSON, "no value (a tombstone)")
    if len(value) > MAX_RECORD_BYTES:
        raise InvalidAlert(BadRecord.TOO_LARGE, f"{len(value)} bytes")
    try:
        record = json.loads(value)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidAlert(BadRecord.NOT_JSON, str(exc)) from None
    if not isinstance(record, dict):
        raise InvalidAlert(BadRecord.NOT_AN_OBJECT, type(record).__name__)
    if record.get("schema") != SCHEMA:
        raise InvalidAlert(BadRecord.WRONG_SCHEMA, f"schema {record.get('schema')!r}, not {SCHEMA!r}")
    kind = _text(record, "kind")
    if kind not in KINDS:
        raise InvalidAlert(BadRecord.UNKNOWN_KIND, f"kind {kind!r}")
    mode = _number(record, "mode", integral=True)
    if not 0 <= mode <= 16:
        raise InvalidAlert(BadRecord.BAD_FIELD, f"mode {mode:g} is not 0..16")
    ts_ms = _number(record, "ts_ms", integral=True)
    return QosAlert(alert_id=str(record.get("alert_id") or ""), kind=kind, subscriber=_text(record, "subscriber"),
                    variable=_text(record, "variable"), mode=int(mode), observed=_number(record, "observed"),
                    bound=_number(record, "bound"), ts_ms=int(ts_ms))


@dataclass(slots=True)
class _Series:
    count: int = 0
    ratio: float | None = None
    last_ts_ms: int = 0
    updated_s: float = 0.0


@dataclass
class ExporterHealth:
    """The exporter's own counts (``gridstat_qos_alerts_exporter_*``)."""

    records: int = 0
    bad: dict[str, int] = field(default_factory=lambda: dict.fromkeys([r.value for r in BadRecord], 0))
    duplicates: int = 0
    forgotten_stale: int = 0
    forgotten_limit: int = 0
    kafka_connected: bool = False
    connects: int = 0


class AlertSeries:
    """The alert series, bounded in number and age (see the module's docstring)."""

    def __init__(self, *, forget_after_s: float = DEFAULT_FORGET_AFTER_S, max_series: int = DEFAULT_MAX_SERIES,
                 dedup_ids: int = DEDUP_IDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.forget_after_s, self.max_series, self.dedup_ids = forget_after_s, max_series, dedup_ids
        self.clock = clock
        self.health = ExporterHealth()
        #: least recently updated first
        self._series: OrderedDict[tuple[str, str, str, str], _Series] = OrderedDict()
        self._seen: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._series)

    def add_record(self, value: bytes | None) -> QosAlert | None:
        """Count one record of the topic: the alert taken, or None (a bad record or a repeat, counted)."""
        self.health.records += 1
        try:
            alert = parse_alert(value)
        except InvalidAlert as exc:
            self.health.bad[exc.reason.value] += 1
            log.debug("bad alert record: %s", exc)
            return None
        return alert if self.add(alert) else None

    def add(self, alert: QosAlert) -> bool:
        """Count ``alert``; False if its ``alert_id`` was seen already (a repeat of the sink)."""
        if alert.alert_id:
            if alert.alert_id in self._seen:
                self.health.duplicates += 1
                return False
            self._seen[alert.alert_id] = None
            while len(self._seen) > self.dedup_ids:
                self._seen.popitem(last=False)
        now = self.clock()
        key = alert.labels
        s = self._series.pop(key, None) or _Series()
        s.count += 1
        if alert.ts_ms >= s.last_ts_ms:
            s.last_ts_ms = alert.ts_ms
            ratio = alert.ratio
            if ratio is not None:
                s.ratio = ratio
        s.updated_s = now
        self._series[key] = s
        while len(self._series) > self.max_series:
            self._series.popitem(last=False)
            self.health.forgotten_limit += 1
        return True

    def forget_stale(self) -> int:
        """Forget the series not updated for ``forget_after_s``; how many."""
        horizon = self.clock() - self.forget_after_s
        n = 0
        while self._series:
            key, s = next(iter(self._series.items()))
            if s.updated_s > horizon:
                break
            del self._series[key]
            n += 1
        self.health.forgotten_stale += n
        return n

    def items(self) -> Iterator[tuple[tuple[str, str, str, str], int, float | None, int]]:
        """(labels, count, ratio, newest ts_ms) of every series held."""
        for key, s in self._series.items():
            yield key, s.count, s.ratio, s.last_ts_ms


class QosAlertsCollector(Collector):
    """Serves :class:`AlertSeries` (stale series forgotten at each scrape as well)."""

    def __init__(self, series: AlertSeries) -> None:
        self.series = series

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        self.series.forget_stale()
        labels = list(LABELS)
        total = CounterMetricFamily("gridstat_qos_alerts", "QoS violation alerts of the streaming job "
                                    "(spark/qos_alerts.py) read from Kafka", labels=labels)
        ratio = GaugeMetricFamily("gridstat_qos_alert_ratio", "Observed / bound of the newest latency or "
                                  "interval alert (above 1: the guarantee is broken)", labels=labels)
        last = GaugeMetricFamily("gridstat_qos_alert_last_timestamp_seconds", "Time of the newest alert "
                                 "(its ts_ms)", labels=labels)
        for key, count, r, ts_ms in self.series.items():
            values = list(key)
            total.add_metric(values, float(count))
            if r is not None:
                ratio.add_metric(values, r)
            last.add_metric(values, ts_ms / 1000)
        yield total
        yield ratio
        yield last
        h = self.series.health
        records = CounterMetricFamily("gridstat_qos_alerts_exporter_records", "Records read from the alerts topic")
        records.add_metric([], float(h.records))
        yield records
        bad = CounterMetricFamily("gridstat_qos_alerts_exporter_bad_records", "Records of the alerts topic that "
                                  "are not alerts, by reason", labels=["reason"])
        for reason, n in h.bad.items():
            bad.add_metric([reason], float(n))
        yield bad
        dup = CounterMetricFamily("gridstat_qos_alerts_exporter_duplicates", "Alerts dropped as repeats of an "
                                  "alert_id already counted (the job's Kafka sink is at least once)")
        dup.add_metric([], float(h.duplicates))
        yield dup
        forgotten = CounterMetricFamily("gridstat_qos_alerts_exporter_series_forgotten", "Alert series "
                                        "forgotten, by cause (stale: not updated for --forget-after-s; limit: "
                                        "past --max-series)", labels=["cause"])
        forgotten.add_metric(["stale"], float(h.forgotten_stale))
        forgotten.add_metric(["limit"], float(h.forgotten_limit))
        yield forgotten
        held = GaugeMetricFamily("gridstat_qos_alerts_exporter_series", "Alert series held")
        held.add_metric([], float(len(self.series)))
        yield held
        connected = GaugeMetricFamily("gridstat_qos_alerts_exporter_kafka_connected",
                                      "1 while Kafka answers the exporter's consumer")
        connected.add_metric([], 1.0 if h.kafka_connected else 0.0)
        yield connected
        connects = CounterMetricFamily("gridstat_qos_alerts_exporter_kafka_connects", "Consumer (re)starts "
                                       "that reached Kafka")
        connects.add_metric([], float(h.connects))
        yield connects


def registry(series: AlertSeries) -> CollectorRegistry:
    """A registry serving ``series`` only (the exporter's /metrics)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(QosAlertsCollector(series))
    return reg


@dataclass(frozen=True)
class ConsumerConfig:
    bootstrap: str
    topic: str = TOPICS.alerts
    group: str = DEFAULT_GROUP
    from_beginning: bool = False
    security: KafkaSecurity = kafka_security.PLAINTEXT
    request_timeout_ms: int = 10_000
    #: Backoff between attempts to reach Kafka: doubles from the first to the last.
    retry_min_s: float = 0.5
    retry_max_s: float = 15.0
    #: How often the consumer checks that Kafka answers (a metadata request).
    probe_interval_s: float = 5.0


class AlertsConsumer:
    """Reads the alerts topic into ``series`` until :meth:`stop`; reconnects while Kafka is away."""

    def __init__(self, config: ConsumerConfig, series: AlertSeries) -> None:
        self.config, self.series = config, series
        self._client_kwargs = config.security.client_kwargs()
        self._stopping = asyncio.Event()
        self.problem = ""

    def stop(self) -> None:
        self._stopping.set()

    def _consumer(self) -> Any:
        from aiokafka import AIOKafkaConsumer

        c = self.config
        return AIOKafkaConsumer(
            c.topic, bootstrap_servers=c.bootstrap, group_id=c.group, client_id=c.group, enable_auto_commit=True,
            auto_offset_reset="earliest" if c.from_beginning else "latest", request_timeout_ms=c.request_timeout_ms,
            max_partition_fetch_bytes=MAX_RECORD_BYTES * 16, **self._client_kwargs)

    async def run(self) -> None:
        from aiokafka.errors import KafkaError

        delay = self.config.retry_min_s
        health = self.series.health
        while not self._stopping.is_set():
            consumer = self._consumer()
            try:
                with kafka_security.capturing_connect_errors() as causes:
                    try:
                        await asyncio.wait_for(consumer.start(), self.config.request_timeout_ms / 1000)
                    except (KafkaError, TimeoutError, OSError) as exc:
                        _, self.problem = kafka_security.describe_failure(self.config.bootstrap, self.config.security,
                                                                         exc, causes)
                        log.warning("%s; trying again in %.1f s", self.problem, delay)
                        health.kafka_connected = False
                        await self._sleep(delay)
                        delay = min(delay * 2, self.config.retry_max_s)
                        continue
                health.kafka_connected, self.problem = True, ""
                health.connects += 1
                delay = self.config.retry_min_s
                await self._consume(consumer)
            except KafkaError as exc:  # the consumer failed past its own retries: start a new one
                health.kafka_connected = False
                self.problem = f"Kafka at {self.config.bootstrap}: {type(exc).__name__}: {exc}"
                log.warning("%s; reconnecting", self.problem)
                await self._sleep(delay)
            finally:
                with contextlib.suppress(Exception):
                    await consumer.stop()
        health.kafka_connected = False

    async def _consume(self, consumer: Any) -> None:
        next_probe = time.monotonic() + self.config.probe_interval_s
        while not self._stopping.is_set():
            batch = await consumer.getmany(timeout_ms=500, max_records=1000)
            for records in batch.values():
                for r in records:
                    self.series.add_record(r.value)
            if time.monotonic() >= next_probe:
                next_probe = time.monotonic() + self.config.probe_interval_s
                self.series.health.kafka_connected = await self._answers(consumer)
                self.series.forget_stale()

    async def _answers(self, consumer: Any) -> bool:
        """Whether Kafka answers a metadata request (aiokafka's consumer retries a lost broker by itself,
        quietly: this is how the exporter knows)."""
        try:
            await asyncio.wait_for(consumer._client.fetch_all_metadata(), self.config.request_timeout_ms / 1000)
        except Exception as exc:  # any failure means "not answering"
            self.problem = f"Kafka at {self.config.bootstrap} does not answer: {type(exc).__name__}: {exc}"
            return False
        self.problem = ""
        return True

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
