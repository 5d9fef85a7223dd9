"""``gridstat up --kafka`` / ``--metrics``: what the runner reads of its children and tells the user."""

from __future__ import annotations

import os

import pytest

from gridstat.core.children import parse_ready
from gridstat.demo.telemetry import DemoTelemetry, metrics_port


def test_router_ready_line_may_carry_the_metrics_port() -> None:
    plain = "READY name=e1 port=4000 control_port=4001"
    with_metrics = plain + " metrics_port=4002"
    for line in (plain, with_metrics):
        fields = parse_ready(line)
        assert fields is not None and (fields["port"], fields["control_port"]) == ("4000", "4001")
    assert metrics_port(with_metrics) == 4002 and metrics_port(plain) is None


def test_lines_name_kafka_and_every_metrics_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    # setenv first, so that what start_kafka() exports is undone after the test
    monkeypatch.setenv("GRIDSTAT_KAFKA", "")
    monkeypatch.setenv("GRIDSTAT_METRICS_PORT", "-1")
    t = DemoTelemetry(kafka="127.0.0.1:9092", metrics=True)
    assert t.start_kafka() == "127.0.0.1:9092"
    assert os.environ["GRIDSTAT_KAFKA"] == "127.0.0.1:9092" and os.environ["GRIDSTAT_METRICS_PORT"] == "0"
    lines = t.lines({"e1": "READY name=e1 port=1 control_port=2 metrics_port=9101", "A": "READY name=A port=3"})
    assert lines[0].startswith("  telemetry kafka=127.0.0.1:9092 (given)")
    assert "e1=9101" in lines[1] and "A=" not in lines[1]
