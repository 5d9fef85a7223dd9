"""``gridstat up --kafka HOST:PORT --metrics``: every role of the example utility exports to a real Kafka,
serves /metrics, and the runner archives every published variable."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import pytest

from gridstat.demo.topology import DEFAULT_TOPOLOGY_PATH, load_topology
from gridstat.telemetry import records

from .kafkaprocs import KafkaProc, consume

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_up_with_kafka_exports_every_role_and_archives_every_variable(kafka: KafkaProc) -> None:
    topology = load_topology(str(DEFAULT_TOPOLOGY_PATH))
    proc = subprocess.run([sys.executable, "-m", "gridstat.cli.main", "up", "--kafka", kafka.bootstrap, "--metrics",
                           "--duration", "5", "--plain", "--summary-every", "100"],
                          capture_output=True, text=True, timeout=180, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert f"telemetry kafka={kafka.bootstrap} (given)" in out
    variables = {v.full_name for p in topology.publishers for v in p.variables}
    assert f"archive of {len(variables)} variables" in out
    metrics = dict(re.findall(r"(\S+)=(\d+)", out.split("metrics http://127.0.0.1:PORT/metrics", 1)[1].splitlines()[0]))
    assert {r.name for r in topology.routers} <= set(metrics) and "gridstat-up" in metrics

    async def read(topic: str) -> list[dict[str, object]]:
        return [json.loads(v) for _, v in await consume(kafka.bootstrap, topic)]

    archived = [r for r in asyncio.run(read(records.TOPICS.measurements)) if r["source"] == "gridstat-up"]
    assert {r["variable"] for r in archived} == variables
    delivery = [r for r in asyncio.run(read(records.TOPICS.delivery)) if r["source"] == "gridstat-up"]
    assert {r["subscriber"] for r in delivery} >= {s.name for s in topology.subscriptions}
    assert sum(int(r["delivered"]) for r in delivery) > 0  # type: ignore[call-overload]
    counters = asyncio.run(read(records.TOPICS.counters))
    assert {r.name for r in topology.routers} <= {r["source"] for r in counters}
    assert "ERROR" not in proc.stderr
