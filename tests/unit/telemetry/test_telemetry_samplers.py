"""Samplers turn a role's own counters into per-period records (no data-plane instrumentation)."""

from __future__ import annotations

from typing import Any

from gridstat.client import Subscriber
from gridstat.core import wire
from gridstat.core.model import FLOAT, VariableRegistry
from gridstat.telemetry import records
from gridstat.telemetry.sampling import BrokerModeSampler, Reporter, RouterSampler, SubscriberSampler


def router_stats(events_in: int, fwd: int, *, drops: int = 0, mode: int = 0) -> dict[str, Any]:
    return {
        "router": "e1", "events_in": events_in, "events_forwarded": fwd, "events_filtered": 1, "datagrams_in": 5,
        "drops": {"unknown_variable": drops} if drops else {}, "current_mode": mode, "uptime_s": 2.0,
        "cpu_seconds": 0.5,
        "channels": [{"name": "sub-ems", "up": True, "events_in": 0, "datagrams_in": 0, "events_sent": fwd,
                      "datagrams_sent": fwd, "filtered": 0, "drops": {}, "queued": 2, "rtt_ms": None}],
    }


def test_router_sampler_emits_period_deltas_and_new_drops() -> None:
    state = {"s": router_stats(100, 50)}
    sampler = RouterSampler("e1", lambda: state["s"], lambda: {"sub-ems": 4096})
    first = sampler.sample(1_000)
    router = next(r for t, k, r in first if t == records.TOPICS.counters and r["channel"] == "")
    assert router["events_in"] == 100 and router["period_ms"] == 2000  # the first period is the uptime
    state["s"] = router_stats(160, 80, drops=3, mode=1)
    second = sampler.sample(2_000)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, _key, rec in second:
        by_topic.setdefault(topic, []).append(rec)
    router = next(r for r in by_topic[records.TOPICS.counters] if r["channel"] == "")
    chan = next(r for r in by_topic[records.TOPICS.counters] if r["channel"] == "sub-ems")
    assert (router["events_in"], router["events_out"], router["period_ms"]) == (60, 30, 1000)
    assert (chan["events_out"], chan["queue_capacity"], chan["queued"]) == (30, 4096, 2)
    assert [(d["reason"], d["count"], d["total"]) for d in by_topic[records.TOPICS.drops]] == [
        ("unknown_variable", 3, 3)]
    assert [(m["previous_mode"], m["mode"], m["outcome"]) for m in by_topic[records.TOPICS.modes]] == [
        (0, 1, "observed")]
    assert records.TOPICS.drops not in {t for t, _, _ in sampler.sample(3_000)}  # no new drops, no record


def test_subscriber_sampler_reports_deliveries_latencies_and_interval() -> None:
    var = VariableRegistry().register("pmu1", "freq", FLOAT, interval_ms=10)
    sub = Subscriber("ems", 201)
    s = sub.subscribe(var, interval_ms=20, latency_ms=15)
    sampler = SubscriberSampler(sub)
    t0 = 1_000_000

    def deliver(ts: int, latency: int) -> None:
        s.handle_event(wire.Event(ts, var.variable_id, wire.encode_value(FLOAT, 60.0)), ts + latency)

    deliver(t0, 2)
    sampler.sample(t0 + 10)
    for k, lat in enumerate([3, 4, 30, 5], start=1):  # 20 ms apart; one over the 15 ms bound
        deliver(t0 + 20 * k, lat)
    deliver(t0 + 120, 6)  # t0 + 100 was skipped: a gap
    (_topic, key, rec), = [e for e in sampler.sample(t0 + 1010) if e[0] == records.TOPICS.delivery]
    assert key == "ems/pmu1/freq"
    assert rec["delivered"] == 5 and rec["latency_ms"] == [3, 4, 30, 5, 6]
    assert rec["gaps"] == 1 and rec["violations"] >= 1
    assert rec["delivered_interval_ms"] == 24.0  # (t0+120 - t0) / 5
    assert rec["interval_deviation_ms"] == 4.0 and rec["requested_interval_ms"] == 20
    assert rec["period_ms"] == 1000 and rec["previous_ts_ms"] == t0 and rec["last_ts_ms"] == t0 + 120


def test_broker_mode_sampler_reports_a_changed_mode_once() -> None:
    mode = {"m": 0}
    sampler = BrokerModeSampler("A", lambda: mode["m"])
    assert sampler.sample(1) == []
    mode["m"] = 2
    out = sampler.sample(2)
    assert [(r["previous_mode"], r["mode"]) for _, _, r in out] == [(0, 2)]
    assert sampler.sample(3) == []


class ListEmitter:
    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []

    def emit(self, topic: str, record: dict[str, Any], *, key: str | bytes | None = None) -> bool:
        self.records.append((topic, record))
        return True


def test_reporter_survives_a_failing_sampler() -> None:
    class Broken:
        def sample(self, now_ms: int) -> list[Any]:
            raise RuntimeError("bug")

    out = ListEmitter()
    mode = {"m": 0}
    rep = Reporter(out, [Broken(), BrokerModeSampler("A", lambda: mode["m"])], interval_s=1)
    rep.run_once(1)
    mode["m"] = 1
    assert rep.run_once(2) == 1
    assert rep.stats.errors == 2 and len(out.records) == 1
