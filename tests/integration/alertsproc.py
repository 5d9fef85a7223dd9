"""``gridstat alerts-exporter`` as a child process, and alert records of spark/qos_alerts.py's format
written to Kafka without Spark (for test_alerts_exporter.py and test_prometheus_live.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from typing import Any

from gridstat.core import children

TOPIC = "gridstat.alerts.qos"


def alert_record(subscriber: str, variable: str, kind: str, observed: float, bound: float, *, mode: int = 0,
                 seq: int = 0, exporter: str = "role/test") -> dict[str, Any]:
    """One record as spark/qos_alerts.py's alerts() writes it (to_json of its columns)."""
    ts_ms = int(time.time() * 1000)
    return {"schema": "gridstat.alerts.qos_violation", "version": 1, "ts_ms": ts_ms,
            "alert_id": f"{exporter}:1:{seq}:{kind}", "kind": kind,
            "subscription": f"{subscriber}/{variable}", "subscriber": subscriber, "variable": variable,
            "mode": mode, "observed": observed, "bound": bound, "sample_ts_ms": ts_ms - 1000,
            "source_exporter": exporter, "source_epoch": 1, "source_sequence": seq,
            "message": f"{subscriber}/{variable}: {kind} {observed:.1f} against {bound:.1f} in mode {mode}"}


def produce(bootstrap: str, values: Sequence[bytes | dict[str, Any]], topic: str = TOPIC) -> None:
    """Write ``values`` (records as dicts, or raw bytes) to ``topic``, keyed like the job (by subscription)."""
    from aiokafka import AIOKafkaProducer

    async def go() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            for v in values:
                if isinstance(v, dict):
                    await producer.send_and_wait(topic, json.dumps(v).encode(), key=v["subscription"].encode())
                else:
                    await producer.send_and_wait(topic, v)
        finally:
            await producer.stop()

    asyncio.run(go())


def start_exporter(bootstrap: str, *extra: str) -> tuple[subprocess.Popen[str], int]:
    """The exporter reading ``bootstrap`` from the oldest alert (a new group): (process, metrics port)."""
    proc, ready = children.spawn(
        [sys.executable, "-m", "gridstat.cli.main", "alerts-exporter", "--kafka", bootstrap, "--from-beginning",
         "--metrics-port", "0", "--exit-with-parent", *extra], what="alerts exporter", timeout_s=30)
    return proc, int(ready["metrics_port"])


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The exporter's /metrics: sample name -> sorted labels -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out
