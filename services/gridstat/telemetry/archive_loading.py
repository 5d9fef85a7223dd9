"""Bulk loading of archive records into Kafka, for the history benchmark and tests (docs/history.md).

The archive's records normally arrive one value at a time through ``archiving.Archiver`` and the
bounded exporter. To measure a query over 24 hours of a 60 Hz variable the archive must first hold
24 hours of it (5,184,000 records): :func:`load` writes ready-made ``(key, timestamp_ms, value)``
records straight into the producer's record batches, to the partition the exporter would choose
(:func:`archive_reading.partition_of`), with the event time as the record timestamp, as fast as
one producer goes. :func:`create_topic` makes the topic with a chosen partition count and
``retention.ms`` (a broker whose ``log.retention.hours`` is shorter than the archive's age would
otherwise delete the old end of it: retention counts from the record timestamps, i.e. event time).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from . import kafka_security
from .archive_reading import partition_of
from .kafka_security import KafkaSecurity

#: Most record batches in flight before the loader waits for acknowledgements.
MAX_INFLIGHT_BATCHES = 64
BATCH_BYTES = 1_000_000


async def create_topic(bootstrap: str, topic: str, *, partitions: int = 1, retention_ms: int = -1,
                       timeout_s: float = 30.0, security: KafkaSecurity = kafka_security.PLAINTEXT) -> bool:
    """Create ``topic`` (False if it exists already); ``retention_ms`` -1 keeps records forever."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000),
                                **security.client_kwargs())
    try:
        with kafka_security.capturing_connect_errors() as causes:
            await asyncio.wait_for(admin.start(), timeout_s)
    except Exception as exc:
        raise kafka_security.unavailable(bootstrap, security, exc, causes) from exc
    try:
        try:
            await admin.create_topics([NewTopic(topic, partitions, 1,
                                                topic_configs={"retention.ms": str(retention_ms)})])
        except TopicAlreadyExistsError:
            return False
        return True
    finally:
        await admin.close()


async def load(bootstrap: str, topic: str, rows: Iterable[tuple[bytes, int, bytes]], *, compression: str = "lz4",
               progress: Callable[[int], None] | None = None, timeout_s: float = 60.0,
               security: KafkaSecurity = kafka_security.PLAINTEXT) -> int:
    """Write ``(key, timestamp_ms, value)`` rows to ``topic``, each to its key's partition with its
    timestamp; returns the records acknowledged. ``progress(n)`` is called every million records."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=None if compression == "none"
                                else compression, max_batch_size=BATCH_BYTES, linger_ms=0, acks=1,
                                request_timeout_ms=int(timeout_s * 1000), **security.client_kwargs())
    try:
        with kafka_security.capturing_connect_errors() as causes:
            await asyncio.wait_for(producer.start(), timeout_s)
    except Exception as exc:
        raise kafka_security.unavailable(bootstrap, security, exc, causes) from exc
    try:
        parts = sorted(await asyncio.wait_for(producer.partitions_for(topic), timeout_s))
        by_key: dict[bytes, int] = {}
        builders: dict[int, Any] = {}
        counts: dict[int, int] = {}
        inflight: deque[tuple[Any, int]] = deque()
        acked = 0

        async def send(partition: int) -> None:
            nonlocal acked
            builder = builders.pop(partition)
            n = counts.pop(partition)
            fut = await producer.send_batch(builder, topic, partition=partition)
            inflight.append((fut, n))
            while len(inflight) > MAX_INFLIGHT_BATCHES:
                f, m = inflight.popleft()
                await asyncio.wait_for(f, timeout_s)
                acked += m

        for n_rows, (key, ts, value) in enumerate(rows, 1):
            p = by_key.get(key)
            if p is None:
                p = by_key[key] = partition_of(key, parts)
            b = builders.get(p)
            if b is None:
                b = builders[p] = producer.create_batch()
                counts[p] = 0
            if b.append(key=key, value=value, timestamp=ts) is None:
                await send(p)
                b = builders[p] = producer.create_batch()
                counts[p] = 0
                if b.append(key=key, value=value, timestamp=ts) is None:
                    raise ValueError(f"a record of {len(value)} bytes does not fit a batch")
            counts[p] += 1
            if progress is not None and n_rows % 1_000_000 == 0:
                progress(n_rows)
        for p in list(builders):
            await send(p)
        while inflight:
            f, m = inflight.popleft()
            await asyncio.wait_for(f, timeout_s)
            acked += m
        return acked
    finally:
        await producer.stop()
