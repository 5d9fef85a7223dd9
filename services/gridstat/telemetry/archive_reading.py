"""Reading one variable's time range back from the measurement archive (docs/history.md).

``gridstat archive`` writes every archived value as a ``measurement`` record to
``gridstat.archive.measurements``, keyed by the variable's full name and stamped with the value's
event time as the Kafka record timestamp (``archiving.Archiver``). So one variable's values sit in
one partition (the key's murmur2 partition, as the exporter and Kafka's own clients choose it),
in order, and Kafka's time index finds where a time range starts.

:meth:`ArchiveReader.read` therefore reads no more than it must:

* the partition of the variable's key only, assigned directly (no consumer group, nothing committed);
* from ``offsets_for_times(from_ms)`` (the first record stamped at or after ``from_ms``), not from
  the start of the log;
* forward until the first record of the variable stamped after ``to_ms``, or the end offset taken
  when the query started (records appended while it runs are not waited for);
* other variables' records in the partition are skipped on their key, and the rate filter is decided
  on the record timestamp, both before any JSON is decoded: only kept records are decoded;
* one record per timestamp: a record stamped at or before the last one kept is a copy (the export is
  at least once, docs/telemetry.md; or two archivers of one variable) and is skipped.

The filter itself is the caller's (``gridstat.history``, the live rule): ``choose`` gets the
archive's parameters, read from the variable's first record in the range, and returns the
predicate on timestamps, or None to keep every record. A kept record whose parameters differ (the
archive's subscription changed) is passed to ``choose`` again from there on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from . import kafka_security
from .errors import KafkaUnavailable
from .kafka_security import KafkaSecurity
from .records import TOPICS

#: Bytes one fetch may bring (Kafka caps it at the broker's ``fetch.max.bytes``, 55 MiB by default):
#: large, so that a 1-hour window of a 60 Hz variable is a handful of round trips.
FETCH_MAX_BYTES = 32 * 2**20
PARTITION_FETCH_BYTES = FETCH_MAX_BYTES
#: The first fetch of a read: a short range needs no more (about 28,000 records at 37 bytes each).
FIRST_FETCH_BYTES = 2**20
#: How long Kafka may wait to fill a fetch (it answers at once when the records are there).
FETCH_WAIT_MS = 100


@dataclass(frozen=True, slots=True)
class ArchiveParams:
    """What the archived records of a variable say about its publication and the archive subscription.

    ``pub_interval_ms`` and ``frames_per_s`` are None in records written before they were archived
    (docs/telemetry.md): the caller then falls back to the archive's own interval.
    """

    value_type: str
    interval_ms: int
    pub_interval_ms: int | None
    frames_per_s: int | None

    @classmethod
    def of(cls, record: dict[str, Any]) -> ArchiveParams:
        pub = record.get("pub_interval_ms")
        fps = record.get("frames_per_s")
        return cls(value_type=str(record.get("value_type", "")), interval_ms=int(record.get("interval_ms") or 0),
                   pub_interval_ms=int(pub) if isinstance(pub, int) else None,
                   frames_per_s=int(fps) if isinstance(fps, int) else None)


@dataclass(slots=True)
class ArchivedBatch:
    """Kept records, oldest first, as parallel lists; all with the same ``params``."""

    params: ArchiveParams
    timestamps_ms: list[int] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    extrapolated: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.timestamps_ms)


@dataclass(slots=True)
class ReadStats:
    """What one read did: records looked at (all keys), records of the variable, records decoded."""

    partition: int = -1
    start_offset: int = -1
    end_offset: int = -1
    scanned: int = 0
    matched: int = 0
    decoded: int = 0
    duplicates: int = 0


#: Given the archive's parameters, the predicate on a record's timestamp (None: keep every record).
Choose = Callable[[ArchiveParams], Callable[[int], bool] | None]


def partition_of(key: bytes, partitions: list[int]) -> int:
    """The partition Kafka's clients (and the exporter) put ``key`` in: murmur2, like Java's default."""
    from aiokafka.partitioner import DefaultPartitioner  # only the telemetry package imports aiokafka

    ordered = sorted(partitions)
    return int(DefaultPartitioner()(key, ordered, ordered))


class ArchiveReader:
    """Reads time ranges of archived variables from Kafka; one short-lived consumer per read."""

    def __init__(self, bootstrap: str, *, topic: str = TOPICS.measurements, request_timeout_ms: int = 10_000,
                 client_id: str = "gridstat-history", security: KafkaSecurity = kafka_security.PLAINTEXT) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.request_timeout_ms = request_timeout_ms
        self.client_id = client_id
        #: TLS and SASL to Kafka (docs/history.md); its TLS context is made once, shared by every read.
        self.security = security
        self._client_kwargs = security.client_kwargs()

    def _consumer(self) -> Any:
        from aiokafka import AIOKafkaConsumer

        return AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, client_id=self.client_id, group_id=None, enable_auto_commit=False,
            auto_offset_reset="earliest", fetch_max_bytes=FETCH_MAX_BYTES,
            max_partition_fetch_bytes=PARTITION_FETCH_BYTES, fetch_max_wait_ms=50,
            request_timeout_ms=self.request_timeout_ms, check_crcs=False, **self._client_kwargs)

    async def _start(self, consumer: Any) -> None:
        from aiokafka.errors import KafkaError

        try:
            with kafka_security.capturing_connect_errors() as causes:
                await asyncio.wait_for(consumer.start(), self.request_timeout_ms / 1000)
        except (KafkaError, TimeoutError, OSError) as exc:
            await _stop_quietly(consumer)
            # KafkaAuthenticationFailed for a refused login or TLS handshake, else KafkaUnavailable
            raise kafka_security.unavailable(self.bootstrap, self.security, exc, causes) from exc

    async def reachable(self) -> bool:
        """True if Kafka answers a metadata request in time."""
        return await self.problem() is None

    async def problem(self) -> KafkaUnavailable | None:
        """Why Kafka cannot be read (``KafkaAuthenticationFailed`` for a refused login or TLS handshake), or
        None if it answers a metadata request in time."""
        consumer = self._consumer()
        try:
            await self._start(consumer)
        except KafkaUnavailable as exc:
            return exc
        await _stop_quietly(consumer)
        return None

    async def read(self, variable: str, *, from_ms: int, to_ms: int, choose: Choose,
                   batch_events: int = 10_000, stats: ReadStats | None = None) -> AsyncIterator[ArchivedBatch]:
        """The records of ``variable`` stamped in ``[from_ms, to_ms]`` that ``choose``'s predicate keeps,
        oldest first, in batches of at most ``batch_events``. Nothing if the topic or the variable has
        no such records. :class:`KafkaUnavailable` if Kafka cannot be reached."""
        from aiokafka.errors import KafkaError
        from aiokafka.structs import TopicPartition

        stats = stats if stats is not None else ReadStats()
        key = variable.encode()
        consumer = self._consumer()
        await self._start(consumer)
        timeout_s = self.request_timeout_ms / 1000
        try:
            try:
                # The whole cluster's metadata (consumer.topics() fetches it too, but keeps it apart from
                # partitions_for_topic's): one request, no subscription.
                cluster = await asyncio.wait_for(consumer._client.fetch_all_metadata(), timeout_s)
                parts = cluster.partitions_for_topic(self.topic)
                if not parts:
                    return
                tp = TopicPartition(self.topic, partition_of(key, list(parts)))
                stats.partition = tp.partition
                consumer.assign([tp])
                consumer.pause(tp)  # the records are fetched by _batches, not by the consumer's fetcher
                end = (await asyncio.wait_for(consumer.end_offsets([tp]), timeout_s))[tp]
                found = (await asyncio.wait_for(consumer.offsets_for_times({tp: int(from_ms)}), timeout_s))[tp]
            except (KafkaError, TimeoutError) as exc:
                raise KafkaUnavailable(f"Kafka at {self.bootstrap} did not answer: {exc or type(exc).__name__}",
                                       field="kafka") from exc
            start = end if found is None else int(found.offset)
            stats.start_offset, stats.end_offset = start, end
            if start >= end:
                return
            consumer.seek(tp, start)
            async for batch in self._scan(consumer, tp, key, end, from_ms, to_ms, choose, batch_events, stats):
                yield batch
        finally:
            await _stop_quietly(consumer)

    async def _fetch(self, client: Any, tp: Any, offset: int, max_bytes: int) -> list[Any]:
        """One fetch of ``tp`` from ``offset`` (at most ``max_bytes``): its record batches, headers parsed
        (records are decompressed only when iterated)."""
        from aiokafka.errors import KafkaError, for_code
        from aiokafka.protocol.fetch import FetchRequest
        from aiokafka.record.memory_records import MemoryRecords

        node = client.cluster.leader_for_partition(tp)
        if node is None or node < 0:
            raise KafkaUnavailable(f"no leader for {tp.topic} partition {tp.partition}", field="kafka")
        request = FetchRequest(FETCH_WAIT_MS, 1, max_bytes, 0, [(tp.topic, [(tp.partition, offset, max_bytes)])])
        try:
            response = await asyncio.wait_for(client.send(node, request), self.request_timeout_ms / 1000)
        except (KafkaError, TimeoutError) as exc:
            raise KafkaUnavailable(f"fetching {tp.topic} partition {tp.partition} from Kafka at {self.bootstrap} "
                                   f"failed: {exc or type(exc).__name__}", field="kafka") from exc
        raw = b""
        for _topic, partitions in response.topics:
            for _partition, error_code, _highwater, *part_data in partitions:
                if error_code:
                    raise KafkaUnavailable(f"fetching {tp.topic} partition {tp.partition}: "
                                           f"{for_code(error_code).__name__}", field="kafka")
                raw = part_data[-1] or b""
        records = MemoryRecords(raw)
        out = []
        while records.has_next():
            batch = records.next_batch()
            if batch is None:
                break
            out.append(batch)
        return out

    async def _batches(self, consumer: Any, tp: Any, offset: int, end: int) -> AsyncIterator[Any]:
        """The record batches of ``tp`` from ``offset`` to ``end``, fetched directly from the partition's
        leader (the consumer's fetcher would wrap every record in a ``ConsumerRecord`` first: the larger
        part of a read's time at 60 Hz). Fetches grow from :data:`FIRST_FETCH_BYTES` to
        :data:`FETCH_MAX_BYTES` (a short range reads little, a long one in few round trips), and the next
        fetch is in flight while the caller reads the current one. Control batches (transaction markers)
        are skipped; records below ``offset`` in the first batch are the caller's to skip."""
        client = consumer._client  # the consumer's connections; its fetcher stays idle (the partition is paused)
        size = FIRST_FETCH_BYTES
        pending: asyncio.Task[list[Any]] | None = asyncio.ensure_future(self._fetch(client, tp, offset, size))
        try:
            while pending is not None:
                batches = await pending
                pending = None
                advanced = offset
                for batch in batches:
                    advanced = max(advanced, int(batch.next_offset))
                if advanced == offset:  # nothing new (an empty fetch, or a batch larger than the fetch size)
                    raise KafkaUnavailable(f"no records from {tp.topic} partition {tp.partition} at offset "
                                           f"{offset} before its end offset {end}", field="kafka")
                offset = advanced
                if offset < end:
                    size = min(FETCH_MAX_BYTES, size * 4)
                    pending = asyncio.ensure_future(self._fetch(client, tp, offset, size))
                for batch in batches:
                    if not batch.is_control_batch:
                        yield batch
        finally:
            if pending is not None:
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending

    async def _scan(self, consumer: Any, tp: Any, key: bytes, end: int, from_ms: int, to_ms: int, choose: Choose,
                    batch_events: int, stats: ReadStats) -> AsyncIterator[ArchivedBatch]:
        # The hot loop of a read: one pass per record of the partition, nothing decoded but kept records.
        start = await consumer.position(tp)
        params: ArchiveParams | None = None
        keep: Callable[[int], bool] | None = None
        fast: _FastValues | None = None
        out = ArchivedBatch(ArchiveParams("", 0, None, None))
        stamps, values, flags = out.timestamps_ms, out.values, out.extrapolated
        last_ts = from_ms - 1  # also skips what is stamped before from_ms
        scanned = matched = decoded = duplicates = 0
        done = False
        try:
            async for batch in self._batches(consumer, tp, start, end):
                edge = batch.base_offset < start or batch.next_offset > end
                for rec in batch:
                    scanned += 1
                    if edge:
                        offset = rec.offset
                        if offset < start:
                            continue
                        if offset >= end:
                            done = True
                            break
                    if rec.key != key:
                        continue
                    ts = rec.timestamp
                    if ts <= last_ts:
                        if ts >= from_ms:  # a copy (at-least-once export, two archivers) or out of order
                            duplicates += 1
                        continue
                    if ts > to_ms:
                        done = True
                        break
                    last_ts = ts
                    matched += 1
                    if keep is not None and not keep(ts):
                        continue
                    raw = rec.value
                    decoded += 1
                    got = fast.extract(raw) if fast is not None else None
                    if got is None:  # the first record, or one not in the usual layout: decode it whole
                        doc = json.loads(raw)
                        now = ArchiveParams.of(doc)
                        if now != params:  # the first record, or the archive's subscription changed
                            params, keep = now, choose(now)
                            fast = _FastValues.of(raw, now)
                            if stamps:
                                yield out
                            out = ArchivedBatch(now)
                            stamps, values, flags = out.timestamps_ms, out.values, out.extrapolated
                            if keep is not None and not keep(ts):
                                continue
                        value, flag = doc.get("value"), bool(doc.get("extrapolated", False))
                    else:
                        value, flag = got
                    stamps.append(ts)
                    values.append(value)
                    flags.append(flag)
                    if len(stamps) >= batch_events:
                        yield out
                        out = ArchivedBatch(out.params)
                        stamps, values, flags = out.timestamps_ms, out.values, out.extrapolated
                if done:
                    break
            if stamps:
                yield out
        finally:
            stats.scanned += scanned
            stats.matched += matched
            stats.decoded += decoded
            stats.duplicates += duplicates


class _FastValues:
    """The value of a measurement record without decoding all of it.

    The exporter writes every measurement with the same key order (``records.measurement``, then the
    exporter's stamps), so the value sits between ``,"value":`` and ``,"value_num":``, and the archive
    subscription's parameters are the same bytes in every record of one subscription:
    ``,"interval_ms":A,"extrapolated":`` then ``true`` or ``false``, then
    ``,"pub_interval_ms":P,"frames_per_s":R,``. A record whose parameters are not those bytes, or
    whose value does not parse, gives None: it is decoded whole (and may change the rule).
    """

    __slots__ = ("flagged", "numeric", "unflagged")

    def __init__(self, head: bytes, tail: bytes, numeric: bool) -> None:
        self.unflagged = head + b"false" + tail
        self.flagged = head + b"true" + tail
        self.numeric = numeric

    @classmethod
    def of(cls, raw: bytes, params: ArchiveParams) -> _FastValues | None:
        head = b',"interval_ms":%d,"extrapolated":' % params.interval_ms
        tail = b""
        if params.pub_interval_ms is not None and params.frames_per_s is not None:
            tail = b',"pub_interval_ms":%d,"frames_per_s":%d,' % (params.pub_interval_ms, params.frames_per_s)
        fast = cls(head, tail, params.value_type in ("float", "double"))
        return fast if fast.extract(raw) is not None else None

    def extract(self, raw: bytes) -> tuple[Any, bool] | None:
        if raw.rfind(self.unflagged) >= 0:
            flag = False
        elif raw.rfind(self.flagged) >= 0:
            flag = True
        else:
            return None
        i = raw.find(b',"value":')
        j = raw.find(b',"value_num":', i)
        if i < 0 or j < 0:
            return None
        text = raw[i + 9:j]
        try:
            value: Any = float(text) if self.numeric and text != b"null" else json.loads(text)
        except ValueError:
            return None
        return value, flag


async def _stop_quietly(consumer: Any) -> None:
    try:
        await asyncio.wait_for(consumer.stop(), 5.0)
    except Exception:  # closing a consumer whose Kafka went away: nothing left to do
        pass
