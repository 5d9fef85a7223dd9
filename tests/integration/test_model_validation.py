"""The capacity model validated end to end (docs/analysis.md): live brokers -> Kafka -> ``spark/model_validation.py``.

``gridstat analyze TOPOLOGY.yaml --live`` runs seven broker processes (identity-based routing)
on 127.0.0.1 that export ``model_broker`` records through the real telemetry exporter; the
Spark job, under ``spark-submit`` as an analyst runs it, reads them with Spark's Kafka source
and must find every broker's measured routing-table size and message rates within the stated
tolerance of the model. The same job, fed a deliberately wrong prediction (and a broker that
never ran), must report exactly those figures as out of tolerance.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gridstat.cli import main as cli
from gridstat.telemetry import records

from .kafkaprocs import ROOT, KafkaProc, consume

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: 7 brokers (levels 1, 2, 4), 200 classes, 60 concurrent subscriptions per broker; 60x faster
#: than the file (30 s lifetimes become 0.5 s), so 20 s measure about 40 lifetimes.
TOPOLOGY = "generate: {brokers: 7, max_per_level: 4}\n" \
           "uniform: {subscriptions: 420, classes: 200, lifetime_s: 30, publication_rate: 8}\n"
TOLERANCE, ABS_TOLERANCE = 0.10, 0.5


def test_live_run_matches_the_model_and_a_wrong_prediction_fails(kafka: KafkaProc, spark: Any, spark_jobs: Path,
                                                                 tmp_path: Path) -> None:
    import model_validation

    topo = tmp_path / "t7.yaml"
    topo.write_text(TOPOLOGY)
    pred_path = tmp_path / "pred.json"
    assert cli.main(["analyze", str(topo), "--live", "20", "--time-scale", "60", "--kafka", kafka.bootstrap,
                     "--predictions", str(pred_path), "-o", "json"]) == 0
    pred = json.loads(pred_path.read_text())
    assert len(pred["brokers"]) == 7 and pred["strategy"] == "identity"
    assert all(r["within"] for r in pred["comparison"]), [r for r in pred["comparison"] if not r["within"]]

    got = [json.loads(v) for _, v in asyncio.run(consume(kafka.bootstrap, records.TOPICS.model_brokers))]
    mine = [r for r in got if r["run"] == pred["run"]]
    schema = json.loads(records.schema_path("model_broker").read_text())
    for r in mine[:20]:
        jsonschema.validate(r, schema)
    assert {r["broker"] for r in mine} == {f"B{i}" for i in range(7)}

    out = tmp_path / "report"
    proc = subprocess.run([str(ROOT / "scripts" / "spark-submit.sh"), str(ROOT / "spark" / "model_validation.py"),
                           "--kafka", kafka.bootstrap, "--predictions", str(pred_path), "--out", str(out),
                           "--tolerance", str(TOLERANCE), "--abs-tolerance", str(ABS_TOLERANCE)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "verdict=PASS" in proc.stdout and "figures=42 within=42" in proc.stdout
    rows = [r.asDict() for r in spark.read.parquet(str(out / "errors")).collect()]
    assert len(rows) == 42 and all(r["within"] for r in rows)
    for r in rows:
        assert r["samples"] == 20 and r["seconds"] == pytest.approx(20, abs=0.5)
        assert abs(r["abs_error"]) <= TOLERANCE * abs(r["predicted"]) + ABS_TOLERANCE
    assert "**Verdict: PASS**" in (out / "report.md").read_text()

    wrong = json.loads(json.dumps(pred))
    by = {b["broker"]: b for b in wrong["brokers"]}
    by["B1"]["table_entries"] *= 1.5
    by["B3"]["control_sent_per_s"] *= 0.5
    wrong["brokers"].append({**by["B6"], "broker": "ghost"})  # predicted, never ran
    ok, bad_rows, _ = model_validation.run(spark, kafka.bootstrap, wrong, tmp_path / "wrong",
                                           tolerance=TOLERANCE, abs_tolerance=ABS_TOLERANCE)
    assert not ok
    out_of = {(r["broker"], r["metric"]) for r in bad_rows if not r["within"]}
    assert ("B1", "table_entries") in out_of and ("B3", "control_sent_per_s") in out_of
    # a broker without records fails every figure, even those the model puts at zero
    assert out_of - {("B1", "table_entries"), ("B3", "control_sent_per_s")} == {
        ("ghost", m) for m in model_validation.METRICS}
    assert "**Verdict: FAIL**" in (tmp_path / "wrong" / "report.md").read_text()


def test_live_flooding_without_kafka_prints_the_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topo = tmp_path / "t7.yaml"
    topo.write_text(TOPOLOGY)
    pred_path = tmp_path / "pred.json"
    assert cli.main(["analyze", str(topo), "--live", "4", "--time-scale", "30", "--strategy", "flooding",
                     "--predictions", str(pred_path)]) == 0
    assert "LIVE run=" in capsys.readouterr().out
    data = json.loads(pred_path.read_text())
    meas = data["measured_locally"]
    assert len(meas) == 7 and all(m["seconds"] == pytest.approx(4, abs=0.2) for m in meas)
    # flooding: no routing table, no control message; every notification sent is received once
    assert all(m["table_entries"] == 0 and m["control_sent_per_s"] == 0 for m in meas)
    sent = sum(m["notifications_sent_per_s"] for m in meas)
    assert sent == pytest.approx(sum(m["notifications_received_per_s"] for m in meas), rel=0.02)
    assert sent == pytest.approx(sum(p["notifications_sent_per_s"] for p in data["brokers"]), rel=0.25)
