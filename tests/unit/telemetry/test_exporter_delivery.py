"""The exporter's producer is idempotent, and what it does not get acknowledged in time is sent again.

A stand-in producer (unit tests only; real Kafka: tests/integration/test_archive_exactly_once.py)
whose acknowledgements the test controls.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from gridstat.telemetry import ExporterConfig, TelemetryExporter, buffering


class Cluster:
    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0}

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return {0}


class Builder:
    def __init__(self) -> None:
        self.values: list[bytes] = []

    def append(self, *, key: bytes | None, value: bytes, timestamp: int | None) -> object:
        self.values.append(value)
        return object()


class Producer:
    """What ``TelemetryExporter._send`` uses of an ``AIOKafkaProducer``; acknowledgements by hand."""

    def __init__(self) -> None:
        self.client = SimpleNamespace(cluster=Cluster())
        self.acks: list[asyncio.Future[Any]] = []

    def create_batch(self) -> Builder:
        return Builder()

    async def send_batch(self, builder: Builder, topic: str, *, partition: int) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.acks.append(fut)
        return fut


def exporter(request_timeout_ms: int = 200) -> TelemetryExporter:
    return TelemetryExporter(ExporterConfig(bootstrap="127.0.0.1:1", role="archive", source="hist", linger_ms=0,
                                            request_timeout_ms=request_timeout_ms))


async def test_the_producer_is_idempotent_with_acks_from_all_replicas(monkeypatch: pytest.MonkeyPatch) -> None:
    import aiokafka

    made: list[dict[str, Any]] = []

    class Recorder:
        def __init__(self, **kwargs: Any) -> None:
            made.append(kwargs)

        async def start(self) -> None:
            return None

        async def stop(self) -> None:
            return None

    monkeypatch.setattr(aiokafka, "AIOKafkaProducer", Recorder)
    exp = exporter()
    assert await exp._connect()
    (kwargs,) = made
    assert kwargs["enable_idempotence"] is True and kwargs["acks"] == "all"
    monkeypatch.undo()
    # ... settings the installed aiokafka accepts together (it refuses idempotence without acks="all")
    real = aiokafka.AIOKafkaProducer(**kwargs)
    assert real._txn_manager is not None  # aiokafka's idempotence state (producer id and sequences)
    await real.stop()
    await exp.stop(timeout_s=0.1)


async def test_records_not_acknowledged_in_time_go_back_to_the_buffer_in_order() -> None:
    exp = exporter(request_timeout_ms=200)
    exp._producer = producer = Producer()
    for n in range(5):
        exp.emit("gridstat.archive.measurements", {"n": n}, key="p/x")
    batch = exp._buffer.take(5)
    t0 = asyncio.get_running_loop().time()
    assert not await exp._send(batch)  # no acknowledgement within the request timeout
    assert 0.15 < asyncio.get_running_loop().time() - t0 < 2.0
    assert exp.stats.retried == 5 and sum(exp.stats.sent.values()) == 0 and exp.stats.lost_total == 0
    again = exp._buffer.take(10)
    assert [p.record["sequence"] for p in again] == [1, 2, 3, 4, 5]  # the same records, same stamps
    assert [p.record for p in again] == [p.record for p in batch]
    # The abandoned acknowledgement fails later (the producer is closed): nothing is logged or raised.
    producer.acks[0].set_exception(RuntimeError("producer closed"))
    await asyncio.sleep(0)
    exp._producer = None
    await exp.stop(timeout_s=0.1)


async def test_acknowledged_records_are_counted_as_sent() -> None:
    exp = exporter(request_timeout_ms=2000)
    exp._producer = producer = Producer()
    for n in range(3):
        exp.emit("gridstat.archive.measurements", {"n": n}, key="p/x")
    batch: list[buffering.Pending] = exp._buffer.take(3)
    send = asyncio.create_task(exp._send(batch))
    while not producer.acks:
        await asyncio.sleep(0.01)
    producer.acks[0].set_result(None)
    assert await send
    assert exp.stats.sent["gridstat.archive.measurements"] == 3 and exp.stats.retried == 0
    exp._producer = None
    await exp.stop(timeout_s=0.1)
