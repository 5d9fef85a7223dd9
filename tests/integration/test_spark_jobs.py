"""The Spark jobs of spark/ against a real Kafka, with Spark's built-in Kafka source.

* ``qos_compliance.py`` runs under ``spark-submit`` (scripts/spark-submit.sh), as an analyst
  runs it, over delivery samples exported through the real exporter;
* ``qos_alerts.py`` (Structured Streaming) turns a violating sample into an alert on Kafka within
  seconds;
* ``archive_ingest.py`` runs under ``spark-submit``, is killed (SIGKILL, driver and JVM) mid-stream
  and restarted on its checkpoint: the parquet table then holds every measurement exactly once;
  ``archive_analytics.py`` runs over that table.

The streaming and analytics jobs run in the suite's one shared SparkSession (``spark`` fixture).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gridstat.telemetry import ExporterConfig, TelemetryExporter, records

from .kafkaprocs import ROOT, KafkaProc, consume

#: A Spark session takes 10-20 s to start, spark-submit a JVM of its own: more than the default 120 s on a busy CI.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


def sample(subscriber: str, *, mode: int = 0, interval: int = 20, bound: float = 30.0, latencies: list[int],
           gaps: int = 0, violations: int = 0, delivered_interval: float | None = None, ts_ms: int) -> dict[str, Any]:
    n = len(latencies)
    return records.delivery(
        subscriber=subscriber, variable="pmu1/freq", variable_id=1, mode=mode, period_ms=n * interval,
        requested_interval_ms=interval, latency_bound_ms=bound, delivered=n, gaps=gaps, duplicates=0, stale=0,
        violations=violations, extrapolated=0, latency_ms=latencies,
        delivered_interval_ms=float(interval) if delivered_interval is None else delivered_interval,
        previous_ts_ms=ts_ms - n * interval, last_ts_ms=ts_ms, ts_ms=ts_ms)


async def export(bootstrap: str, role: str, source: str, items: list[tuple[str, str, dict[str, Any]]]) -> str:
    """Send records through a real exporter; returns ``exporter:epoch``, the prefix of its records' ids."""
    exp = TelemetryExporter(ExporterConfig(bootstrap=bootstrap, role=role, source=source))
    await exp.start()
    for topic, key, rec in items:
        exp.emit(topic, rec, key=key)
    await exp.flush(20)
    await exp.stop()
    assert exp.stats.lost_total == 0
    return f"{exp.exporter_id}:{exp.epoch}"


def test_qos_compliance_report_under_spark_submit(kafka: KafkaProc, spark: Any, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    good, slow, gappy, relay, archive = f"good-{tag}", f"slow-{tag}", f"gappy-{tag}", f"relay-{tag}", f"archive-{tag}"
    t0 = records.now_ms()
    items: list[tuple[str, str, dict[str, Any]]] = []
    archived: list[tuple[str, str, dict[str, Any]]] = []
    for k in range(10):
        ts = t0 + 1000 * k
        fast = [2 + (i % 9) for i in range(50)]
        items.append((records.TOPICS.delivery, good, sample(good, latencies=fast, ts_ms=ts)))
        items.append((records.TOPICS.delivery, good, sample(good, mode=1, interval=40, bound=60,
                                                            latencies=[3] * 25, ts_ms=ts)))
        # 2 of 500 events over the 30 ms bound: p99 is fine, p99.9 is not
        slow_lat = [4] * 50 if k not in (3, 7) else [4] * 49 + [45]
        items.append((records.TOPICS.delivery, slow, sample(slow, latencies=slow_lat, ts_ms=ts)))
        items.append((records.TOPICS.delivery, gappy, sample(gappy, latencies=[3] * (48 if k == 5 else 50),
                                                             gaps=2 if k == 5 else 0, violations=1 if k == 5 else 0,
                                                             delivered_interval=20.8 if k == 5 else 20.0, ts_ms=ts)))
        # a 58 ms breach of a 30 ms bound (twice in 500 events: p99.9 is 58 ms) ...
        items.append((records.TOPICS.delivery, relay, sample(relay, latencies=[5] * 49 + [58 if k in (2, 8) else 6],
                                                             ts_ms=ts)))
        # ... beside the archive's own subscription, 800 ms late against its 1,000 ms bound, compliant
        archived.append((records.TOPICS.delivery, archive, sample(archive, interval=100, bound=1000,
                                                                  latencies=[800] * 10, ts_ms=ts)))
    items.append((records.TOPICS.drops, "router/x", records.drops(channel="sub:x", reason="queue_full", count=7,
                                                                  total=7)))
    asyncio.run(export(kafka.bootstrap, "subscriber", f"spark-test-{tag}", items))
    asyncio.run(export(kafka.bootstrap, "archive", f"archive-{tag}", archived))
    out = tmp_path / "report"
    proc = subprocess.run([str(ROOT / "scripts" / "spark-submit.sh"), str(ROOT / "spark" / "qos_compliance.py"),
                           "--kafka", kafka.bootstrap, "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "COMPLIANCE subscription_modes=" in proc.stdout

    rows = {(r["subscription"], r["mode"]): r.asDict()
            for r in spark.read.parquet(str(out / "compliance")).collect()}
    g0 = rows[(f"{good}/pmu1/freq", 0)]
    assert g0["compliant"] and g0["samples"] == 10 and g0["delivered"] == 500 and g0["gaps"] == 0
    assert (g0["latency_p50_ms"], g0["latency_max_ms"], g0["delivered_interval_ms"]) == (6.0, 10, 20.0)
    assert rows[(f"{good}/pmu1/freq", 1)]["compliant"] and rows[(f"{good}/pmu1/freq", 1)]["requested_interval_ms"] == 40
    s = rows[(f"{slow}/pmu1/freq", 0)]
    assert not s["compliant"] and not s["latency_ok"] and s["interval_ok"] and s["gaps_ok"]
    assert s["latency_p99_ms"] <= 30 < s["latency_p999_ms"] and s["over_bound_fraction"] == pytest.approx(2 / 500)
    gp = rows[(f"{gappy}/pmu1/freq", 0)]
    assert not gp["compliant"] and gp["latency_ok"] and not gp["gaps_ok"] and gp["gaps"] == 2
    assert gp["violations"] == 1 and gp["delivered"] == 498
    drops = [r.asDict() for r in spark.read.parquet(str(out / "drops")).collect()]
    assert any(r["reason"] == "queue_full" and r["source"] == f"spark-test-{tag}" and r["dropped"] == 7 for r in drops)
    # the breach, against its own bound and with its reason; operational and archive apart
    r = rows[(f"{relay}/pmu1/freq", 0)]
    assert (r["kind"], r["compliant"], r["latency_p999_ms"], r["reasons"]) == ("operational", False, 58.0, ["late"])
    assert round(r["latency_ratio"], 2) == 1.93 and r["worst_latency_ratio"] == pytest.approx(58 / 30)
    a = rows[(f"{archive}/pmu1/freq", 0)]
    assert (a["kind"], a["compliant"], a["reasons"], a["latency_ratio"]) == ("archive", True, [], 0.8)
    assert {rows[(f"{gappy}/pmu1/freq", 0)]["kind"], g0["kind"]} == {"operational"}
    assert rows[(f"{gappy}/pmu1/freq", 0)]["reasons"] == ["gaps"] and s["reasons"] == ["late"]
    assert f"NOT COMPLIANT operational {relay}/pmu1/freq mode 0: late: p99.9 58 ms = 1.93" in proc.stdout
    report = (out / "report.html").read_text()
    assert report.count("data:image/png;base64,") == 2 and f"{slow} \u2192 pmu1/freq" in report
    assert f"<b>{relay} \u2192 pmu1/freq</b> mode 0: late: p99.9 58 ms = 1.93\u00d7 the 30 ms bound" in report
    arch = report.index("<h3>Archive subscriptions</h3>")
    assert (report.index(f"<td>{relay} \u2192 pmu1/freq</td>") < arch
            < report.index(f"<td>{archive} \u2192 pmu1/freq</td>"))
    for name in ("latency.png", "timeline.png", "report.png"):
        assert (out / name).stat().st_size > 1000
    saved = json.loads((out / "report-rows.json").read_text())
    assert any(t["subscription"] == f"{relay}/pmu1/freq" and t["max_latency_ms"] == 58 for t in saved["timeline"])


def test_alerts_reach_kafka_seconds_after_the_violation(kafka: KafkaProc, spark: Any, spark_jobs: Path,
                                                        tmp_path: Path) -> None:
    import qos_alerts

    tag = uuid.uuid4().hex[:6]
    ok, late = f"ok-{tag}", f"late-{tag}"
    query = qos_alerts.start(spark, kafka.bootstrap, str(tmp_path / "ckpt"), trigger_ms=500, starting="latest")
    try:
        deadline = time.monotonic() + 60
        while query.lastProgress is None and time.monotonic() < deadline:  # the query has its start offsets
            time.sleep(0.2)
        assert query.lastProgress is not None, query.exception()
        t_emit = time.time()
        ts = records.now_ms()
        exporter = asyncio.run(export(kafka.bootstrap, "subscriber", f"alerts-test-{tag}", [
            (records.TOPICS.delivery, ok, sample(ok, latencies=[3] * 50, ts_ms=ts)),
            (records.TOPICS.delivery, late, sample(late, latencies=[3] * 48 + [80, 95], ts_ms=ts)),
        ]))
        alerts: list[dict[str, Any]] = []
        while not alerts and time.monotonic() < deadline:
            got = [json.loads(v) for _, v in asyncio.run(consume(kafka.bootstrap, records.TOPICS.alerts,
                                                                 timeout_s=2))]
            alerts = [a for a in got if a["subscriber"] in (ok, late)]
            if not alerts:
                time.sleep(0.2)
        seen_after_s = time.time() - t_emit
    finally:
        query.stop()
    assert alerts, "no alert within 60 s"
    assert seen_after_s < 15, seen_after_s
    schema = json.loads(records.schema_path("qos_alert").read_text())
    (alert,) = alerts
    jsonschema.validate(alert, schema)
    assert (alert["subscriber"], alert["kind"], alert["observed"], alert["bound"]) == (late, "latency", 95.0, 30.0)
    assert alert["alert_id"] == f"{exporter}:2:latency"
    assert (alert["source_exporter"], alert["source_sequence"]) == (f"subscriber/alerts-test-{tag}", 2)
    print(f"alert seen {seen_after_s:.1f} s after the sample was exported")


@pytest.fixture(scope="module")
def ingested(kafka: KafkaProc, spark: Any, spark_jobs: Path,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Measurements of two PMUs through archive_ingest, killed mid-stream and restarted on its checkpoint."""
    import archive_ingest

    tag = uuid.uuid4().hex[:6]
    west, east = f"pmuw{tag}", f"pmue{tag}"
    base = (records.now_ms() // 100) * 100

    def batch(first: int, n: int) -> list[tuple[str, str, dict[str, Any]]]:
        out = []
        for k in range(first, first + n):
            for pmu, value in ((west, 60.0 + (0.1 if k % 2 else -0.1)), (east, 60.01)):
                var = f"{pmu}/freq"
                out.append((records.TOPICS.measurements, var, records.measurement(
                    variable=var, variable_id=1, event_ts_ms=base + 100 * k, value=value, value_type="float",
                    received_ms=base + 100 * k + 5, interval_ms=100)))
        return out

    work = tmp_path_factory.mktemp("archive")
    table, ckpt = str(work / "measurements"), str(work / "ckpt")
    asyncio.run(export(kafka.bootstrap, "archive", f"hist-{tag}", batch(0, 150)))  # 300 records
    # First run: spark-submit, at most 40 offsets per micro-batch, killed once two batches are committed.
    with open(work / "ingest.log", "wb") as log:
        job = subprocess.Popen([str(ROOT / "scripts" / "spark-submit.sh"), str(ROOT / "spark" / "archive_ingest.py"),
                                "--kafka", kafka.bootstrap, "--out", table, "--checkpoint", ckpt, "--trigger-ms", "200",
                                "--max-offsets-per-trigger", "40"], stdout=subprocess.DEVNULL, stderr=log,
                               start_new_session=True)
    commits = Path(ckpt) / "commits"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and job.poll() is None:
            if commits.is_dir() and len([f for f in os.listdir(commits) if f.isdigit()]) >= 2:
                break
            time.sleep(0.1)
        assert job.poll() is None, (work / "ingest.log").read_text()[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)  # mid-stream, likely mid-batch: a crash, no clean stop
        job.wait(timeout=30)
    committed_at_kill = len([f for f in os.listdir(commits) if f.isdigit()])
    ours_at_stop = spark.read.parquet(table).where(f"publisher in ('{west}', '{east}')").count()
    asyncio.run(export(kafka.bootstrap, "archive", f"hist-{tag}", batch(150, 150)))  # 300 more
    # Second run: the same job code on the same checkpoint, in the suite's Spark session.
    query = archive_ingest.start(spark, kafka.bootstrap, table, ckpt, trigger_ms=200)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    yield {"table": table, "west": west, "east": east, "ours_at_stop": ours_at_stop, "expected": 600,
           "base": base, "committed_at_kill": committed_at_kill}


def test_archive_ingest_is_exactly_once_across_a_kill_and_restart(spark: Any, ingested: dict[str, Any]) -> None:
    assert ingested["committed_at_kill"] >= 2
    assert ingested["ours_at_stop"] < ingested["expected"] / 2  # it really was killed mid-stream
    rows = (spark.read.parquet(ingested["table"])
            .where(f"publisher in ('{ingested['west']}', '{ingested['east']}')")
            .select("variable", "event_ts_ms", "exporter", "epoch", "sequence").collect())
    keys = [(r["variable"], r["event_ts_ms"]) for r in rows]
    assert len(keys) == ingested["expected"]  # no loss ...
    assert len(set(keys)) == len(keys)  # ... and no duplicates
    assert len({(r["exporter"], r["epoch"], r["sequence"]) for r in rows}) == len(rows)
    base = ingested["base"]
    assert set(keys) == {(f"{pmu}/freq", base + 100 * k) for pmu in (ingested["west"], ingested["east"])
                         for k in range(300)}


def test_archive_analytics_frequency_deviation_by_region(spark: Any, spark_jobs: Path, ingested: dict[str, Any],
                                                         tmp_path: Path) -> None:
    import archive_analytics

    m = spark.read.parquet(ingested["table"]).where(f"publisher in ('{ingested['west']}', '{ingested['east']}')")
    stats, freq = archive_analytics.run(spark, m, tmp_path, {ingested["west"]: "west", ingested["east"]: "east"},
                                        nominal_hz=60.0, band_hz=0.05)
    by_region = {r["region"]: r.asDict() for r in freq.collect()}
    assert by_region["west"]["samples"] == 300 and by_region["east"]["samples"] == 300
    assert by_region["west"]["mean_abs_deviation_hz"] == pytest.approx(0.1)
    assert by_region["west"]["outside_band_fraction"] == 1.0
    assert by_region["east"]["max_abs_deviation_hz"] == pytest.approx(0.01)
    assert by_region["east"]["outside_band_fraction"] == 0.0
    west = next(r.asDict() for r in stats.collect() if r["variable"] == f"{ingested['west']}/freq")
    assert west["mean"] == pytest.approx(60.0) and west["min"] == pytest.approx(59.9)
    assert west["latency_mean_ms"] == pytest.approx(5.0)
