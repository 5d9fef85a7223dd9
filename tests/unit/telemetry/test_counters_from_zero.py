"""Labelled counters that alerts take ``increase()`` or ``rate()`` of exist at 0 from the start.

Prometheus computes no increase for a series whose first sample is already 1, so a counter made at
its first event hides that event from ``increase(...) > 0`` alerts (docs/telemetry.md, "What is
tested of the dashboards and alerts"). The collectors therefore serve the known label values at 0.
"""

from __future__ import annotations

import inspect
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gridstat.broker import rejections
from gridstat.core.wire import DropReason
from gridstat.telemetry import metrics
from gridstat.telemetry.metrics import LeafBrokerCollector, RouterCollector, SubscriberCollector
from gridstat.telemetry.recording import MODE_CHANGE_OUTCOMES, REJECTION_REASONS, BrokerRecorder


def samples(collector: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    body = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(body) for s in fam.samples}


def test_every_admission_refusal_of_the_broker_is_a_known_rejection_reason() -> None:
    refusals = {cls.reason for _, cls in inspect.getmembers(rejections, inspect.isclass)
                if issubclass(cls, rejections.AdmissionRejected)}
    assert refusals and refusals <= set(REJECTION_REASONS), refusals - set(REJECTION_REASONS)


class _State:
    def __init__(self) -> None:
        self.subscriptions: dict[str, object] = {}
        self.down: set[str] = set()
        self.endpoints: dict[str, object] = {}
        self.registry: list[object] = []


class _Broker:
    name = "A"
    current_mode = 0
    mode_changing = False
    rebuilds = 0
    healing = None
    gate = None

    def __init__(self) -> None:
        self.state = _State()


def test_a_new_broker_serves_its_decisions_and_mode_changes_at_zero() -> None:
    rec = BrokerRecorder("A", None)
    got = samples(LeafBrokerCollector(_Broker(), rec))
    for reason in REJECTION_REASONS:
        key = ("gridstat_broker_admission_decisions_total",
               (("broker", "A"), ("decision", "rejected"), ("reason", reason)))
        assert got.get(key) == 0.0, f"{reason}: {got.get(key)}"
    assert got[("gridstat_broker_admission_decisions_total",
                (("broker", "A"), ("decision", "admitted"), ("reason", "")))] == 0.0
    for outcome in MODE_CHANGE_OUTCOMES:
        assert got[("gridstat_broker_mode_changes_total", (("broker", "A"), ("outcome", outcome)))] == 0.0
    rec.decisions[("rejected", "LatencyUnattainable")] += 1
    rec.mode_changes["failed"] += 1
    got = samples(LeafBrokerCollector(_Broker(), rec))
    assert got[("gridstat_broker_admission_decisions_total",
                (("broker", "A"), ("decision", "rejected"), ("reason", "LatencyUnattainable")))] == 1.0
    assert got[("gridstat_broker_mode_changes_total", (("broker", "A"), ("outcome", "failed")))] == 1.0


def test_a_new_router_serves_every_drop_reason_at_zero() -> None:
    def stats() -> dict[str, Any]:
        return {"router": "e1", "role": "edge", "variant": "close", "drops": {"malformed": 2},
                "channels": [{"name": "c1", "up": True, "drops": {}}]}

    got = samples(RouterCollector(stats))
    every = set(metrics.ROUTER_DROP_REASONS) | set(metrics.CHANNEL_DROP_REASONS)
    assert every == {r.value for r in DropReason}
    for reason in metrics.ROUTER_DROP_REASONS:
        want = 2.0 if reason == "malformed" else 0.0
        assert got[("gridstat_router_drops_total", (("channel", ""), ("reason", reason), ("router", "e1")))] == want
    for reason in metrics.CHANNEL_DROP_REASONS:
        assert got[("gridstat_router_drops_total", (("channel", "c1"), ("reason", reason), ("router", "e1")))] == 0


def test_a_new_subscriber_serves_its_drop_reasons_at_zero() -> None:
    class Stats:
        drops = {"replayed": 3}
        callback_errors = 0
        datagrams = 0
        events = 0

    class Sub:
        name = "ems"
        stats = Stats()
        current_mode = 0

        def subscriptions(self) -> list[object]:
            return []

    got = samples(SubscriberCollector(Sub()))  # type: ignore[arg-type]
    for reason in metrics.SUBSCRIBER_DROP_REASONS:
        want = 3.0 if reason == "replayed" else 0.0
        assert got[("gridstat_subscriber_drops_total", (("reason", reason), ("subscriber", "ems")))] == want


def test_kafka_connect_failures_are_served_by_reason_from_zero() -> None:
    from gridstat.telemetry.exporting import ExporterStats
    from gridstat.telemetry.metrics import ExporterCollector

    stats = ExporterStats()
    stats.connect_failures["authentication"] += 2
    samples = {(s.labels["reason"]): s.value for fam in ExporterCollector("router", "e1", lambda: stats, lambda: 0, 10)
               .collect() if fam.name == "gridstat_telemetry_kafka_connect_failures" for s in fam.samples}
    assert samples == {"unavailable": 0.0, "authentication": 2.0, "tls": 0.0}
