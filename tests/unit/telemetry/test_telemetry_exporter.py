"""The exporter with no Kafka listening: ``emit`` never waits, loss is bounded and counted."""

from __future__ import annotations

import asyncio
import time

import pytest

from gridstat.core.ports import free_port
from gridstat.errors import ValidationError
from gridstat.telemetry import ExporterConfig, LossReason, TelemetryClosed, TelemetryExporter


def config(buffer_records: int = 10) -> ExporterConfig:
    # A port free when asked: nothing listens there.
    return ExporterConfig(bootstrap=f"127.0.0.1:{free_port()}", role="router", source="e1",
                          buffer_records=buffer_records, request_timeout_ms=500)


async def test_emit_never_blocks_and_counts_what_the_buffer_cannot_hold() -> None:
    exp = TelemetryExporter(config(buffer_records=10))
    await exp.start()
    t0 = time.perf_counter()
    kept = [exp.emit("gridstat.telemetry.counters", {"n": n}, key="e1") for n in range(1000)]
    elapsed = time.perf_counter() - t0
    assert elapsed < 0.5  # ~1 us each; nothing waits for Kafka
    assert kept.count(False) == 990 and exp.buffered == 10
    assert exp.stats.lost[LossReason.BUFFER_FULL.value] == 990
    await asyncio.sleep(0.3)  # the task keeps trying to connect in the background
    assert not exp.stats.connected
    await exp.stop(timeout_s=0.2)
    assert exp.stats.lost[LossReason.STOPPED.value] == 10
    assert exp.stats.lost_total == 1000


async def test_records_are_stamped_with_exporter_epoch_and_sequence() -> None:
    exp = TelemetryExporter(config())
    a, b = {"x": 1}, {"x": 2}
    exp.emit("t", a)
    exp.emit("t", b)
    assert (a["role"], a["source"], a["exporter"], a["sequence"], b["sequence"]) == ("router", "e1", "router/e1", 1, 2)
    assert a["epoch"] == b["epoch"] == exp.epoch
    assert exp.last_sequence == 2
    # within a second of now, in microseconds since the Unix epoch
    assert abs(exp.epoch - time.time_ns() // 1000) < 1_000_000
    await exp.stop()


async def test_a_restarted_exporter_keeps_its_id_and_starts_a_new_epoch() -> None:
    first, second = TelemetryExporter(config()), TelemetryExporter(config())
    assert first.exporter_id == second.exporter_id == "router/e1"
    assert second.epoch > first.epoch  # even when made in the same microsecond
    a, b = {}, {}  # type: ignore[var-annotated]
    first.emit("t", a)
    second.emit("t", b)
    assert a["sequence"] == b["sequence"] == 1
    assert (a["exporter"], a["epoch"], a["sequence"]) != (b["exporter"], b["epoch"], b["sequence"])
    configured = TelemetryExporter(ExporterConfig(bootstrap="h:1", role="router", source="e1", exporter="site-7/e1"))
    assert configured.exporter_id == "site-7/e1"
    for exp in (first, second, configured):
        await exp.stop()


async def test_stop_is_idempotent_and_irreversible() -> None:
    exp = TelemetryExporter(config())
    await exp.start()
    await exp.start()
    await exp.stop(timeout_s=0.1)
    await exp.stop(timeout_s=0.1)
    assert exp.emit("t", {}) is False
    with pytest.raises(TelemetryClosed):
        await exp.start()


def test_config_is_checked() -> None:
    with pytest.raises(ValidationError):
        ExporterConfig(bootstrap="", role="router", source="e1")
    with pytest.raises(ValidationError):
        ExporterConfig(bootstrap="h:1", role="router", source="e1", compression="brotli")
    with pytest.raises(ValidationError):
        ExporterConfig(bootstrap="h:1", role="router", source="e1", exporter=" e1")
    with pytest.raises(ValidationError):
        ExporterConfig(bootstrap="h:1", role="router", source="e1", exporter="x" * 201)
