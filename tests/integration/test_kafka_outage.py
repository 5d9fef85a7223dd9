"""Kafka stops while events flow: the data plane keeps its rate and the telemetry gap is counted.

A real router process exports its counters every 200 ms to its own real Kafka, with a buffer of
only 30 records so that an outage of a few seconds must lose some. Twenty 100 Hz variables flow
from a publisher through the router to a subscriber (2000 events/s). Kafka is killed (SIGKILL)
for four seconds and started again on the same data directory. Measured: the delivered rate
before and during the outage, the router's drops, and what the exporter reports -- the lost
records on /metrics, the ``gap`` record it writes once Kafka is back, and the holes in ``sequence``
of everything it exported, which must all agree.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gridstat.client import Publisher, Subscriber
from gridstat.core.model import FLOAT, VariableRegistry
from gridstat.telemetry import records
from gridstat.v1 import router_pb2 as pb

from .fixtures import free_port
from .kafkaprocs import consume, start_kafka
from .routerprocs import start_router

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

VARIABLES = 20
INTERVAL_MS = 10
PUB_ID, SUB_ID = 100, 201


def metrics(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from urllib.request import urlopen

    body = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(body) for s in fam.samples}


def total(m: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    return sum(v for (n, _), v in m.items() if n == name)


async def test_data_plane_keeps_its_rate_while_kafka_is_down_and_the_gap_is_counted(tmp_path: Path) -> None:
    kafka = await asyncio.to_thread(start_kafka, tmp_path / "kafka")
    mport = free_port()
    router = await asyncio.to_thread(start_router, "e1", 1, role="edge", extra=(
        "--kafka", kafka.bootstrap, "--telemetry-interval-ms", "200", "--telemetry-buffer", "30",
        "--metrics-port", str(mport)))
    reg = VariableRegistry()
    variables = [reg.register("pmu1", f"v{i}", FLOAT, interval_ms=INTERVAL_MS) for i in range(VARIABLES)]
    try:
        async with Publisher("pmu1", PUB_ID, router.address) as pub, Subscriber("sink", SUB_ID) as sink:
            router.stub.AddChannel(pb.AddChannelRequest(channel=pb.Channel(
                name="pub", peer_id=PUB_ID, kind=pb.CHANNEL_KIND_PUBLISHER)), timeout=5)
            router.stub.AddChannel(pb.AddChannelRequest(channel=pb.Channel(
                name="sink", peer_id=SUB_ID, kind=pb.CHANNEL_KIND_SUBSCRIBER, host="127.0.0.1",
                port=sink.address[1])), timeout=5)
            router.stub.InstallRoutes(pb.InstallRoutesRequest(routes=[pb.Route(
                route_id=f"r{v.variable_id}", variable_id=v.variable_id, channel="sink", sub_interval_ms=INTERVAL_MS,
                priority=1, pub_interval_ms=INTERVAL_MS) for v in variables]), timeout=5)
            subs = [sink.subscribe(v, interval_ms=INTERVAL_MS, latency_ms=200) for v in variables]
            handles = [pub.variable(v) for v in variables]
            stop = asyncio.Event()
            instants = [0]

            async def publish() -> None:
                ts = (time.time_ns() // 1_000_000 // INTERVAL_MS + 1) * INTERVAL_MS
                while not stop.is_set():
                    await asyncio.sleep(max(0.0, (ts - time.time_ns() / 1e6) / 1000))
                    pub.publish_many([(h, 60.0) for h in handles], ts_ms=ts)
                    instants[0] += 1
                    ts += INTERVAL_MS  # every instant once, catching up after a late wake-up

            def delivered() -> int:
                return sum(s.stats.delivered for s in subs)

            async def phase(seconds: float) -> tuple[float, int, int]:
                d0, i0, t0 = delivered(), instants[0], time.monotonic()
                await asyncio.sleep(seconds)
                return (delivered() - d0) / (time.monotonic() - t0), instants[0] - i0, delivered() - d0

            task = asyncio.create_task(publish())
            await asyncio.sleep(1.0)  # warm up; the exporter connects
            assert metrics(mport)[("gridstat_telemetry_kafka_connected", (("role", "router"), ("source", "e1")))] == 1
            rate_up, _, _ = await phase(3.0)
            await asyncio.to_thread(kafka.stop, signal.SIGKILL)
            rate_down, instants_down, delivered_down = await phase(4.0)
            during = metrics(mport)
            t_restart = time.monotonic()
            await asyncio.to_thread(kafka.start)
            restart_s = time.monotonic() - t_restart
            rate_back, _, _ = await phase(1.0)
            stop.set()
            await task

            # Until the exporter is back, has drained its buffer and loses nothing more (bounded).
            connected = ("gridstat_telemetry_kafka_connected", (("role", "router"), ("source", "e1")))
            buffered = ("gridstat_telemetry_buffered_records", (("role", "router"), ("source", "e1")))
            deadline = time.monotonic() + 30
            settled, last_lost = 0, -1.0
            while settled < 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                m = metrics(mport)
                lost_now = total(m, "gridstat_telemetry_records_lost_total")
                settled = settled + 1 if m[connected] == 1 and m[buffered] < 10 and lost_now == last_lost else 0
                last_lost = lost_now
            recovered_s = time.monotonic() - t_restart
            after = metrics(mport)
            t_consume = time.monotonic()
            exported: list[dict[str, Any]] = []
            gaps = [json.loads(v) for _, v in await consume(kafka.bootstrap, records.TOPICS.gaps, timeout_s=5)]
            gaps = [g for g in gaps if g["source"] == "e1"]
            for topic in (records.TOPICS.counters, records.TOPICS.drops, records.TOPICS.modes, records.TOPICS.gaps):
                exported += [json.loads(v) for _, v in await consume(kafka.bootstrap, topic, timeout_s=5)]
            print(f"rates up={rate_up:.0f} down={rate_down:.0f} back={rate_back:.0f} events/s; kafka restart "
                  f"{restart_s:.1f} s, export recovered after {recovered_s:.1f} s, consuming "
                  f"{time.monotonic() - t_consume:.1f} s")
    finally:
        router.stop()
        await asyncio.to_thread(kafka.stop)

    # The data plane did not notice: same rate, every event delivered, no drop at the router.
    expected_rate = VARIABLES * 1000 / INTERVAL_MS
    assert rate_up > 0.95 * expected_rate, rate_up
    assert rate_down > 0.95 * rate_up, (rate_down, rate_up)
    assert rate_back > 0.9 * rate_up, (rate_back, rate_up)
    assert delivered_down >= VARIABLES * instants_down - 2 * VARIABLES  # at most the instants in flight at the ends
    assert total(after, "gridstat_router_drops_total") == 0

    # The exporter saw the outage and counted what it could not keep.
    assert during[("gridstat_telemetry_kafka_connected", (("role", "router"), ("source", "e1")))] == 0
    lost = total(after, "gridstat_telemetry_records_lost_total")
    assert lost > 0
    assert after[("gridstat_telemetry_kafka_connected", (("role", "router"), ("source", "e1")))] == 1
    assert after[("gridstat_telemetry_export_gaps_total", (("role", "router"), ("source", "e1")))] >= 1

    # ... and told the analysts: gap records covering the outage, whose counts are the holes in sequence.
    assert gaps and sum(g["lost"] for g in gaps) == lost
    assert max(g["to_ms"] for g in gaps) - min(g["from_ms"] for g in gaps) >= 3000
    assert {x["reason"] for g in gaps for x in g["lost_by_reason"]} == {"buffer_full"}
    seqs = {r["sequence"] for r in exported if (r["exporter"], r["epoch"]) == (gaps[0]["exporter"], gaps[0]["epoch"])}
    holes = max(seqs) - len(seqs)
    assert holes == lost, (holes, lost)
