"""``gridstat alerts-exporter`` against real Kafka (docs/telemetry.md, "The QoS alerts on a dashboard"):
alert records of spark/qos_alerts.py's format, a repeat and bad records written to
``gridstat.alerts.qos`` -> counts, ratios, labels and bad records by reason on /metrics; Kafka stopped
-> the exporter says so and keeps serving; Kafka back -> it reads on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gridstat.core import children
from gridstat.core.waiting import wait_for

from .alertsproc import alert_record, produce, scrape, start_exporter
from .kafkaprocs import start_kafka

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

LAT = (("kind", "latency"), ("mode", "0"), ("subscriber", "ems"), ("variable", "pmu1/freq"))
INT = (("kind", "interval"), ("mode", "1"), ("subscriber", "ems"), ("variable", "pmu2/vmag"))
GAPS = (("kind", "gaps"), ("mode", "0"), ("subscriber", "ops"), ("variable", "pmu1/freq"))


def test_alerts_from_kafka_on_metrics(tmp_path: Path) -> None:
    kafka = start_kafka(tmp_path / "kafka")
    exporter = None
    try:
        first = alert_record("ems", "pmu1/freq", "latency", 150.0, 100.0, seq=1)
        records = [first,
                   alert_record("ems", "pmu1/freq", "latency", 180.0, 100.0, seq=2),
                   alert_record("ems", "pmu2/vmag", "interval", 40.0, 20.0, mode=1, seq=3),
                   alert_record("ops", "pmu1/freq", "gaps", 3.0, 0.0, seq=4),
                   first,  # a repeat (the job's Kafka sink is at least once)
                   b"not json", json.dumps({"schema": "gridstat.telemetry.delivery"}).encode(),
                   json.dumps({**first, "alert_id": "x", "kind": "weather"}).encode()]
        produce(kafka.bootstrap, records)
        exporter, port = start_exporter(kafka.bootstrap, "--log-level", "INFO")
        assert wait_for(lambda: scrape(port).get("gridstat_qos_alerts_exporter_records_total", {}).get(()) == 8,
                 timeout_s=30, step_s=0.3)
        m = scrape(port)
        assert m["gridstat_qos_alerts_total"] == {LAT: 2, INT: 1, GAPS: 1}
        assert m["gridstat_qos_alert_ratio"] == {LAT: 1.8, INT: 2.0}
        assert m["gridstat_qos_alert_last_timestamp_seconds"][LAT] == records[1]["ts_ms"] / 1000  # type: ignore[index]
        assert m["gridstat_qos_alerts_exporter_duplicates_total"][()] == 1
        bad = {dict(k)["reason"]: v for k, v in m["gridstat_qos_alerts_exporter_bad_records_total"].items()}
        assert {r: n for r, n in bad.items() if n} == {"not_json": 1, "wrong_schema": 1, "unknown_kind": 1}
        assert m["gridstat_qos_alerts_exporter_kafka_connected"][()] == 1
        assert m["gridstat_qos_alerts_exporter_series"][()] == 3

        # Kafka away: the exporter keeps serving and says it is disconnected; back: it reads on.
        kafka.stop()
        assert wait_for(lambda: scrape(port)["gridstat_qos_alerts_exporter_kafka_connected"][()] == 0, timeout_s=40,
                 step_s=0.5)
        assert exporter.poll() is None
        kafka.start()
        assert wait_for(lambda: scrape(port)["gridstat_qos_alerts_exporter_kafka_connected"][()] == 1, timeout_s=60,
                 step_s=0.5)
        produce(kafka.bootstrap, [alert_record("ems", "pmu1/freq", "latency", 90.0, 100.0, seq=5)])
        assert wait_for(lambda: scrape(port)["gridstat_qos_alerts_total"].get(LAT) == 3, timeout_s=30, step_s=0.3)
        assert scrape(port)["gridstat_qos_alert_ratio"][LAT] == 0.9
    finally:
        if exporter is not None:
            children.stop(exporter)
        kafka.stop()


def test_a_missing_kafka_flag_is_named(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "GRIDSTAT_KAFKA"}
    r = subprocess.run([sys.executable, "-m", "gridstat.cli.main", "alerts-exporter", "--metrics-port", "0"],
                       capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 2 and "--kafka" in (r.stdout + r.stderr), r.stdout + r.stderr
