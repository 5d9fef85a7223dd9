"""The history service answers from a real Kafka archive exactly what the live rule would deliver.

Measurements are archived through the real ``Archiver`` and ``TelemetryExporter`` (event-time Kafka
timestamps, the key's murmur2 partition) into a topic of three partitions: 3 minutes of
``hpmu/freq`` at 60 frames/s archived at full rate, ``hpub/volts`` published every 20 ms and
archived at 100 ms, and a third variable in between; some records are sent twice (the export is at
least once). ``gridstat history-server`` runs as its own process; the SDK's ``HistoryClient`` and
``gridstat history`` ask it. Expected answers come from ``core.filtering.should_forward``, the
routers' own rule (docs/history.md, docs/frame-rates.md).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gridstat.client import HistoryClient, HistoryEvent
from gridstat.core import filtering
from gridstat.core.model import FLOAT, StatusVariable
from gridstat.errors import GridStatError
from gridstat.telemetry import ExporterConfig, TelemetryExporter, archive_loading
from gridstat.telemetry.archiving import Archiver

from .brokerprocs import client_tls, tls_args
from .kafkaprocs import KafkaProc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "gridstat.test.history"
MINUTES = 3


@dataclass
class _Sub:
    variable: StatusVariable
    interval_ms: int


@dataclass
class _Holder:
    value: float
    timestamp_ms: int
    received_ms: int
    extrapolated: bool = False


@dataclass
class Archive:
    start_ms: int
    end_ms: int
    events: dict[str, list[HistoryEvent]]  # what each variable's archive subscription was delivered


def _frames(start_ms: int, seconds: int, fps: int) -> list[int]:
    return [start_ms + (2000 * f + fps) // (2 * fps) for f in range(seconds * fps)]


async def _archive(bootstrap: str) -> Archive:
    await archive_loading.create_topic(bootstrap, TOPIC, partitions=3)
    exporter = TelemetryExporter(ExporterConfig(bootstrap=bootstrap, role="archive", source="hist-test",
                                                buffer_records=50_000, batch_records=2048))
    await exporter.start()
    archiver = Archiver(exporter, topic=TOPIC)
    start = (int(time.time()) - MINUTES * 60 - 60) * 1000
    pmu = _Sub(StatusVariable("hpmu", "freq", FLOAT, 16, variable_id=1, frames_per_s=60), 16)
    volts = _Sub(StatusVariable("hpub", "volts", FLOAT, 20, variable_id=2), 100)
    other = _Sub(StatusVariable("hother", "x", FLOAT, 50, variable_id=3), 50)
    events: dict[str, list[HistoryEvent]] = {"hpmu/freq": [], "hpub/volts": [], "hother/x": []}
    rows: list[tuple[int, _Sub, float, bool]] = []
    for i, ts in enumerate(_frames(start, MINUTES * 60, 60)):
        rows.append((ts, pmu, 50.0 + i / 1024, i % 97 == 5))
    for ts in range(start, start + MINUTES * 60_000, 20):
        if filtering.should_forward(ts, 20, 100):  # what the routers deliver a 100 ms archive subscription
            rows.append((ts, volts, 230.0 + (ts % 1000) / 8, False))
    for ts in range(start, start + MINUTES * 60_000, 50):
        rows.append((ts, other, -1.5, False))
    rows.sort(key=lambda r: r[0])
    for n, (ts, sub, value, extrapolated) in enumerate(rows):
        name = str(sub.variable.full_name)
        archiver.on_event(sub, _Holder(value, ts, ts + 2, extrapolated))
        events[name].append(HistoryEvent(ts, value, extrapolated))
        if n % 1000 == 17:  # a copy, as a resent batch would leave: answered once
            archiver.on_event(sub, _Holder(value, ts, ts + 2, extrapolated))
        if n % 2000 == 0:
            await asyncio.sleep(0)  # let the exporter drain
    await exporter.flush(timeout_s=60)
    await exporter.stop()
    assert exporter.stats.lost_total == 0, exporter.stats.lost
    return Archive(start, rows[-1][0], events)


@pytest.fixture(scope="module")
def archive(kafka: KafkaProc) -> Archive:
    return asyncio.run(_archive(kafka.bootstrap))


#: The history server's /metrics port (the module's server fixture).
METRICS: dict[str, int] = {}


@pytest.fixture(scope="module")
def server(kafka: KafkaProc, archive: Archive) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "history-server", "--kafka", kafka.bootstrap,
                             "--topic", TOPIC, "--listen", "127.0.0.1:0", "--max-span-s", "600",
                             "--max-events", "8000", "--metrics-port", "0", "--exit-with-parent"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("READY name=history port="), line + (proc.stderr.read() if proc.stderr else "")
    port = line.split("port=", 1)[1].split()[0]
    METRICS["port"] = int(line.split("metrics_port=", 1)[1].split()[0])
    try:
        yield f"127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)


def _live(events: list[HistoryEvent], pub_ms: int, interval_ms: int, fps: int = 0) -> list[HistoryEvent]:
    granted = filtering.round_down_interval(interval_ms, pub_ms, fps)
    return [e for e in events if filtering.should_forward(e.timestamp_ms, pub_ms, granted, fps)]


async def _fetch(server: str, variable: str, frm: int, to: int, interval_ms: int = 0,
                 max_events: int = 0) -> tuple[list[HistoryEvent], Any]:
    client = await HistoryClient.connect(server)
    try:
        events = await client.fetch(variable, from_ms=frm, to_ms=to, interval_ms=interval_ms, max_events=max_events)
        return events, client.last_answer
    finally:
        await client.close()


def test_full_rate_and_100_ms_are_what_the_live_rule_delivers(archive: Archive,
                                                              server: tuple[str, subprocess.Popen[str]]) -> None:
    addr, _ = server
    archived = archive.events["hpmu/freq"]
    frm, to = archive.start_ms + 20_000, archive.start_ms + 79_999  # one minute: 3,600 frames
    window = [e for e in archived if frm <= e.timestamp_ms <= to]
    assert len(window) == 3600

    full, answer = asyncio.run(_fetch(addr, "hpmu/freq", frm, to))
    assert full == window  # in order, equal timestamps, values and flags, each copy answered once
    assert answer.interval_ms == 0 and answer.frames_per_s == 60 and answer.pub_interval_ms == 16

    at_100, answer = asyncio.run(_fetch(addr, "hpmu/freq", frm, to, 100))
    expected = _live(window, 16, 100, 60)
    assert at_100 == expected and len(expected) == 600
    assert [b.timestamp_ms - a.timestamp_ms for a, b in itertools.pairwise(at_100)] == [100] * 599
    assert answer.interval_ms == 100 and not answer.notes

    at_1s, _ = asyncio.run(_fetch(addr, "hpmu/freq", frm, to, 1000))
    assert at_1s == _live(window, 16, 1000, 60) and len(at_1s) == 60


def test_the_archives_interval_bounds_what_history_can_answer(archive: Archive,
                                                             server: tuple[str, subprocess.Popen[str]]) -> None:
    addr, _ = server
    archived = archive.events["hpub/volts"]
    frm, to = archive.start_ms, archive.start_ms + 120_000
    window = [e for e in archived if frm <= e.timestamp_ms <= to]

    below, answer = asyncio.run(_fetch(addr, "hpub/volts", frm, to, 40))
    assert below == window and answer.interval_ms == 100
    assert any("below the archive's 100 ms" in n for n in answer.notes)

    at_500, answer = asyncio.run(_fetch(addr, "hpub/volts", frm, to, 500))
    assert at_500 == _live(window, 20, 500) and len(at_500) == 241 and not answer.notes  # a multiple of 100

    at_1s, _ = asyncio.run(_fetch(addr, "hpub/volts", frm, to, 1010))  # rounded down to 1000, as live
    assert at_1s == _live(window, 20, 1000)


def test_the_cli_prints_the_same_events(archive: Archive, server: tuple[str, subprocess.Popen[str]]) -> None:
    addr, _ = server
    frm, to = archive.start_ms + 20_000, archive.start_ms + 79_999
    out = subprocess.run([sys.executable, "-m", "gridstat.cli.main", "history", "hpmu/freq", "--from", str(frm),
                          "--to", str(to), "--interval-ms", "100", "--server", addr, "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    events = [HistoryEvent(d["timestamp_ms"], d["value"], d["extrapolated"]) for d in lines[:-1]]
    window = [e for e in archive.events["hpmu/freq"] if frm <= e.timestamp_ms <= to]
    assert events == _live(window, 16, 100, 60)
    assert lines[-1]["events"] == 600 and lines[-1]["answer"]["interval_ms"] == 100

    text = subprocess.run([sys.executable, "-m", "gridstat.cli.main", "history", "hpmu/freq", "--from", str(frm),
                           "--to", str(frm + 999), "--interval-ms", "100", "--server", addr],
                          capture_output=True, text=True, timeout=60)
    assert text.returncode == 0 and len(text.stdout.splitlines()) == 10 and "# 10 events" in text.stderr


def history_metrics() -> dict[tuple[str, str], float]:
    """The history server's /metrics: (sample name, its reason label or "") -> value."""
    from urllib.request import urlopen

    from prometheus_client.parser import text_string_to_metric_families

    body = urlopen(f"http://127.0.0.1:{METRICS['port']}/metrics", timeout=5).read().decode()
    return {(s.name, s.labels.get("reason", "")): s.value for fam in text_string_to_metric_families(body)
            for s in fam.samples if s.name.startswith("gridstat_history_")}


def test_bounds_are_clear_errors(archive: Archive, server: tuple[str, subprocess.Popen[str]]) -> None:
    addr, _ = server
    before = history_metrics()
    assert before[("gridstat_history_queries_failed_total", "SpanTooLong")] == 0  # served at 0 from the start
    with pytest.raises(GridStatError) as info:
        asyncio.run(_fetch(addr, "hpmu/freq", archive.start_ms, archive.start_ms + 601_000))
    assert info.value.reason == "SpanTooLong" and info.value.field == "to_ms"
    # 3 minutes at 60 frames/s: 10,800 events, more than the server's 8,000
    with pytest.raises(GridStatError) as info:
        asyncio.run(_fetch(addr, "hpmu/freq", archive.start_ms, archive.end_ms))
    assert info.value.reason == "TooManyEvents" and info.value.field == "max_events"
    # the caller's own, lower bound
    with pytest.raises(GridStatError) as info:
        asyncio.run(_fetch(addr, "hpmu/freq", archive.start_ms, archive.start_ms + 60_000, max_events=100))
    assert info.value.reason == "TooManyEvents"
    with pytest.raises(GridStatError) as info:
        asyncio.run(_fetch(addr, "hpmu/freq", archive.start_ms + 10, archive.start_ms))
    assert info.value.field == "from_ms"
    out = subprocess.run([sys.executable, "-m", "gridstat.cli.main", "history", "hpmu/freq", "--from",
                          str(archive.start_ms), "--to", str(archive.end_ms), "--server", addr, "-o", "json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and json.loads(out.stdout)["error"]["reason"] == "TooManyEvents"
    # /metrics counts each refusal by its reason (docs/history.md, "Bounds")
    after = history_metrics()
    failed = {r: after[("gridstat_history_queries_failed_total", r)] -
              before[("gridstat_history_queries_failed_total", r)] for r in ("SpanTooLong", "TooManyEvents",
                                                                              "InvalidArgument")}
    assert failed == {"SpanTooLong": 1, "TooManyEvents": 3, "InvalidArgument": 1}, failed
    assert after[("gridstat_history_queries_total", "")] - before[("gridstat_history_queries_total", "")] == 5


def test_an_unknown_variable_answers_empty_with_a_note(archive: Archive,
                                                      server: tuple[str, subprocess.Popen[str]]) -> None:
    addr, _ = server
    events, answer = asyncio.run(_fetch(addr, "nobody/nothing", archive.start_ms, archive.end_ms))
    assert events == [] and any("no archived events of nobody/nothing" in n for n in answer.notes)


def test_health_says_kafka_and_the_bounds(server: tuple[str, subprocess.Popen[str]]) -> None:
    addr, _ = server

    async def health() -> Any:
        client = await HistoryClient.connect(addr)
        try:
            return await client.health()
        finally:
            await client.close()

    reply = asyncio.run(health())
    assert reply.kafka_reachable and reply.topic == TOPIC
    assert reply.max_span_ms == 600_000 and reply.max_events == 8000 and reply.queries >= 1


def test_with_mtls_clients_query_and_other_roles_are_refused(kafka: KafkaProc, archive: Archive,
                                                             tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    subprocess.run([str(ROOT / "scripts/gen-certs.sh"), str(certs), "history", "pmu1", "router", "observer"],
                   check=True, capture_output=True, timeout=120)
    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "history-server", "--kafka", kafka.bootstrap,
                             "--topic", TOPIC, "--listen", "127.0.0.1:0", *tls_args(certs, "history"),
                             "--exit-with-parent"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY"), line + (proc.stderr.read() if proc.stderr else "")
        addr = f"127.0.0.1:{line.split('port=', 1)[1].split()[0]}"
        frm, to = archive.start_ms + 20_000, archive.start_ms + 20_999

        async def ask(tls: Any) -> list[HistoryEvent]:
            client = await HistoryClient.connect(addr, tls=tls, timeout_s=10)
            try:
                return await client.fetch("hpmu/freq", from_ms=frm, to_ms=to)
            finally:
                await client.close()

        expected = [e for e in archive.events["hpmu/freq"] if frm <= e.timestamp_ms <= to]
        assert asyncio.run(ask(client_tls(certs, "pmu1"))) == expected and len(expected) == 60
        assert asyncio.run(ask(client_tls(certs, "observer"))) == expected
        with pytest.raises(GridStatError) as info:
            asyncio.run(ask(client_tls(certs, "router")))  # a router has no business reading history
        assert "History.Query refused" in str(info.value)
        with pytest.raises(GridStatError):
            asyncio.run(ask(None))  # plaintext against a TLS server
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_sigterm_stops_the_server_cleanly(server: tuple[str, subprocess.Popen[str]]) -> None:
    _, proc = server
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0


def test_kafka_away_is_a_warning_at_start_and_unavailable_per_query() -> None:
    from gridstat.core.ports import free_port

    dead = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "history-server", "--kafka", dead,
                             "--listen", "127.0.0.1:0", "--kafka-timeout-ms", "2000", "--exit-with-parent"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY"), line
        addr = f"127.0.0.1:{line.split('port=', 1)[1].split()[0]}"
        with pytest.raises(GridStatError) as info:
            asyncio.run(_fetch(addr, "hpmu/freq", 1_795_000_000_000, 1_795_000_060_000))
        assert info.value.reason == "KafkaUnavailable" and info.value.retriable
        out = subprocess.run([sys.executable, "-m", "gridstat.cli.main", "history", "hpmu/freq", "--from=-1m",
                              "--server", addr, "--json"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 4 and json.loads(out.stdout)["error"]["reason"] == "KafkaUnavailable"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    assert proc.stderr is not None and "does not answer (yet)" in proc.stderr.read()
