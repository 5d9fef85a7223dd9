"""Every role exports telemetry to a real Kafka, and the archive role writes measurements keyed by variable.

A cloud of real processes -- a leaf broker and three routers (e1 - r2 - e2), each started with
``--kafka`` and ``--metrics-port`` -- a publisher at e1 and a subscriber at e2 (client SDK, in
this process, with its own exporter), and ``gridstat archive`` as a subprocess at e2. Every
record read back from Kafka is validated against its JSON Schema.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gridstat.client import Publisher, Subscriber, SubscriptionRejected
from gridstat.core.model import FLOAT
from gridstat.telemetry import RoleTelemetry, records, roles
from gridstat.v1 import broker_pb2 as bpb

from . import brokerprocs
from .brokerprocs import BrokerProc
from .fixtures import free_port
from .kafkaprocs import KafkaProc, consume
from .routerprocs import RouterProc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

#: Names of their own: the suite shares one Kafka, and records are told apart by source.
ROUTERS = [("te1", 1, "edge"), ("tr2", 2, "internal"), ("te2", 3, "edge")]
LINKS = [("te1", "tr2", 1.0), ("tr2", "te2", 1.0)]
BROKER = "tel"
SCHEMAS = {kind: json.loads(records.schema_path(kind).read_text()) for kind in records.KINDS}


class Cloud:
    def __init__(self, broker: BrokerProc, routers: dict[str, RouterProc], metrics: dict[str, int], kafka: str):
        self.broker, self.routers, self.metrics, self.kafka = broker, routers, metrics, kafka

    def control(self, router: str) -> str:
        return f"127.0.0.1:{self.routers[router].control_port}"


@pytest.fixture(scope="module")
def cloud(kafka: KafkaProc, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    metrics = {name: free_port() for name in [BROKER, *(r for r, _, _ in ROUTERS)]}
    common = ("--kafka", kafka.bootstrap, "--telemetry-interval-ms", "500")
    with brokerprocs.cloud(tmp_path_factory.mktemp("telemetry-cloud"), ROUTERS, LINKS, name=BROKER,
                           broker_extra=(*common, "--metrics-port", str(metrics[BROKER])),
                           proxied=[r for r, _, role in ROUTERS if role == "edge"],
                           router_extra={r: (*common, "--metrics-port", str(metrics[r])) for r, _, _ in ROUTERS}) \
            as (broker, routers):
        broker.stub.DefineMode(bpb.DefineModeRequest(mode=1, name="contingency"), timeout=5)
        yield Cloud(broker, routers, metrics, kafka.bootstrap)


async def publish(handles: list[Any], seconds: float, interval_ms: int = 10) -> int:
    """Publish every handle at every aligned ``interval_ms`` instant for ``seconds``; returns instants sent.

    Every instant exactly once, catching up after a late wake-up: the publisher never leaves a gap."""
    sent = 0
    end = time.time() + seconds
    last = 0
    while time.time() < end:
        now = time.time_ns() // 1_000_000
        ts = last + interval_ms if last else (now // interval_ms + 1) * interval_ms
        await asyncio.sleep(max(0.0, (ts - now) / 1000))
        for h in handles:
            h.publish(60.0 + (ts % 1000) / 10_000, ts)
        last = ts
        sent += 1
    return sent


def by_source(recs: list[tuple[bytes | None, bytes]], sources: set[str]) -> list[dict[str, Any]]:
    out = []
    for _, value in recs:
        r = json.loads(value)
        if r.get("source") in sources:
            out.append(r)
    return out


def check(kind: str, rs: list[dict[str, Any]]) -> None:
    for r in rs:
        jsonschema.validate(r, SCHEMAS[kind])


async def test_every_role_exports_schema_valid_telemetry(cloud: Cloud) -> None:
    pub = await Publisher.connect("pmu1", cloud.control("te1"))
    sub = await Subscriber.connect("ems", cloud.control("te2"))
    tel = RoleTelemetry("subscriber", "ems-proc", kafka=cloud.kafka, interval_ms=500)
    try:
        freq = await pub.register("freq", FLOAT, 10)
        vmag = await pub.register("vmag", FLOAT, 10)  # published, never subscribed: e1 drops it as unknown
        await sub.subscribe_remote("pmu1/freq", FLOAT, interval_ms=20, latency_ms=200)
        with pytest.raises(SubscriptionRejected) as rejected:
            await sub.subscribe_remote("pmu1/vmag", FLOAT, interval_ms=20, latency_ms=1)  # 2 hops of 1 ms
        roles.add_subscriber(tel, sub)
        await tel.start()
        sent = await publish([freq, vmag], 2.0)
        await asyncio.to_thread(cloud.broker.stub.ChangeMode, bpb.ChangeModeRequest(name="contingency"), timeout=10)
        await publish([freq, vmag], 0.6)
        await asyncio.to_thread(cloud.broker.stub.ChangeMode, bpb.ChangeModeRequest(mode=0), timeout=10)
    finally:
        await tel.stop()
        await sub.stop()
        await pub.stop()
    await asyncio.sleep(1.2)  # the routers' and the broker's next sampling pass

    delivery = by_source(await consume(cloud.kafka, records.TOPICS.delivery), {"ems-proc"})
    check("delivery", delivery)
    ours = [r for r in delivery if r["subscription"] == "ems/pmu1/freq"]
    delivered = sum(r["delivered"] for r in ours)
    assert sent * 0.4 <= delivered <= sent // 2 + 2  # a 20 ms subscription to a 10 ms variable
    samples = [lat for r in ours for lat in r["latency_ms"]]
    assert len(samples) == delivered and max(samples) < 200
    assert {r["requested_interval_ms"] for r in ours} == {20}
    assert all(r["role"] == "subscriber" for r in ours)

    counters = by_source(await consume(cloud.kafka, records.TOPICS.counters),
                         {"te1", "tr2", "te2"})
    check("counters", counters)
    assert {r["source"] for r in counters} == {"te1", "tr2", "te2"}
    e1_in = sum(r["events_in"] for r in counters if r["source"] == "te1" and r["channel"] == "")
    assert e1_in >= sent  # freq and vmag of every instant reached e1 (the sums of the period deltas)
    e2_out = sum(r["events_out"] for r in counters if r["source"] == "te2" and r["channel"] == "sub:ems")
    assert delivered <= e2_out

    drops = by_source(await consume(cloud.kafka, records.TOPICS.drops), {"te1"})
    check("drops", drops)
    assert sum(r["count"] for r in drops if r["reason"] == "unknown_variable") >= sent * 0.9

    admission = by_source(await consume(cloud.kafka, records.TOPICS.admission), {BROKER})
    check("admission", admission)
    decisions = {(r["variable"], r["decision"], r["reason"]) for r in admission if r["subscriber"] == "ems"}
    assert ("pmu1/freq", "admitted", "") in decisions
    assert ("pmu1/vmag", "rejected", rejected.value.reason) in decisions

    modes = by_source(await consume(cloud.kafka, records.TOPICS.modes),
                      {BROKER, "te1", "tr2", "te2"})
    check("mode_change", modes)
    assert [(r["previous_mode"], r["mode"]) for r in modes if r["source"] == BROKER and r["outcome"] == "committed"] \
        == [(0, 1), (1, 0)]
    assert any(r["source"] == "te2" and r["outcome"] == "observed" for r in modes)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from urllib.request import urlopen

    from prometheus_client.parser import text_string_to_metric_families

    body = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(body) for s in fam.samples}


def test_every_role_serves_metrics(cloud: Cloud) -> None:
    e1 = scrape(cloud.metrics["te1"])
    assert e1[("gridstat_router_info", (("role", "edge"), ("router", "te1"), ("variant", "close")))] == 1
    assert e1[("gridstat_telemetry_kafka_connected", (("role", "router"), ("source", "te1")))] == 1
    broker = scrape(cloud.metrics[BROKER])
    assert broker[("gridstat_broker_routers", (("broker", BROKER), ("state", "down")))] == 0
    assert broker[("gridstat_broker_routers", (("broker", BROKER), ("state", "up")))] == 3


def test_archive_writes_each_variable_at_its_interval_keyed_by_variable(cloud: Cloud, tmp_path: Path) -> None:
    async def scenario() -> int:
        pub = await Publisher.connect("pmu7", cloud.control("te1"))
        try:
            freq = await pub.register("freq", FLOAT, 10)
            vmag = await pub.register("vmag", FLOAT, 10)
            archive = subprocess.Popen(
                [sys.executable, "-m", "gridstat.cli.main", "archive", "--name", "hist", "--edge", cloud.control("te2"),
                 "--kafka", cloud.kafka, "--interval-ms", "100", "--latency-ms", "500", "--exit-with-parent",
                 "pmu7/freq:50", "pmu7/vmag"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            try:
                assert archive.stdout is not None
                line = await asyncio.wait_for(asyncio.to_thread(archive.stdout.readline), 30)
                assert line.startswith("READY name=hist variables=2"), line + (archive.stderr.read()
                                                                             if archive.poll() is not None else "")
                sent = await publish([freq, vmag], 2.0)
            finally:
                archive.send_signal(signal.SIGTERM)
                out, err = await asyncio.to_thread(archive.communicate, timeout=20)
            assert archive.returncode == 0, err
            assert "STOPPED name=hist" in out and "lost=0" in out, out
            return sent
        finally:
            await pub.stop()

    asyncio.run(scenario())
    rows = asyncio.run(consume(cloud.kafka, records.TOPICS.measurements))
    by_key: dict[str, list[dict[str, Any]]] = {}
    for key, value in rows:
        r = json.loads(value)
        if r["source"] != "hist":
            continue
        jsonschema.validate(r, SCHEMAS["measurement"])
        assert key is not None and key.decode() == r["variable"]
        by_key.setdefault(r["variable"], []).append(r)
    assert set(by_key) == {"pmu7/freq", "pmu7/vmag"}
    for variable, interval in (("pmu7/freq", 50), ("pmu7/vmag", 100)):
        ts = [r["event_ts_ms"] for r in by_key[variable]]
        assert ts == sorted(ts) and len(ts) >= 2000 / interval * 0.7
        assert {t % interval for t in ts} == {0}  # only the instants of the archive interval
        steps = {b - a for a, b in itertools.pairwise(ts)}
        assert steps == {interval}, steps  # each instant once, none missing
        assert {r["interval_ms"] for r in by_key[variable]} == {interval}
        assert all(abs(r["value_num"] - 60.0) < 0.2 for r in by_key[variable])
