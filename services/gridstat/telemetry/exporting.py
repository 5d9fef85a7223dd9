"""The telemetry exporter: records from a role to Kafka, off the data plane's back.

Shape (after aiokafka's own producer): a front object whose ``emit`` only stamps a record and
appends it to a bounded buffer (``buffering.RecordBuffer``), and one background task that owns
the ``AIOKafkaProducer``: it takes batches from the buffer, encodes them as compact JSON
(schemas in ``telemetry/schemas``, docs/telemetry.md), and hands them to the producer, which
batches per partition (``linger_ms``) and compresses (lz4 by default).

Kafka down never reaches the role: ``emit`` never waits and never raises. While Kafka does not
answer, records stay in the buffer; when it is full the oldest go and are counted as lost
(``buffer_full``). The background task reconnects with a bounded back-off; on the first
delivered batch after an outage it emits one ``gap`` record (``records.gap``) saying when export
stopped and resumed and how many records were lost.

Delivery to Kafka (docs/telemetry.md, "Exactly once"): the producer is idempotent
(``enable_idempotence``, ``acks="all"``), so its own retries within one producer session never
write a record twice. A batch the producer failed goes back to the head of the buffer and is
sent again by a *new* producer session after reconnecting; if Kafka had in fact written the
first attempt, Kafka now holds the record twice. So this hop is at least once, and every copy
of a record is byte-identical: consumers de-duplicate on ``(exporter, epoch, sequence)``
(``spark/archive_ingest.py`` does, into parquet).

Every record gets five stamps here: ``role`` and ``source`` (who exports); ``exporter`` (the
exporting process's stable id, ``role/source`` unless configured, the same after a restart);
``epoch`` (this incarnation of the exporter: its start in microseconds since the Unix epoch, new
at every start); ``sequence`` (1, 2, 3 ... per epoch in emit order, lost records included, so
holes in ``sequence`` are exactly the lost records). A killed process loses what it had
buffered and not yet sent; its successor starts a new epoch at sequence 1.

Lifecycle: ``start`` and ``stop`` are idempotent; ``stop`` is irreversible, flushes what it can
within its timeout and counts the rest as lost (``stopped``).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gridstat.core.aio import cancelled, create_guarded_task
from gridstat.errors import ValidationError

from . import buffering, kafka_security, records
from .errors import FlushTimeout, TelemetryClosed
from .kafka_security import KafkaSecurity

log = logging.getLogger(__name__)

#: Longest wait between reconnection attempts while Kafka is away.
MAX_BACKOFF_S = 2.0
#: A record larger than this is never sent (Kafka's default max.message.bytes is 1 MiB).
MAX_RECORD_BYTES = 900_000
#: Longest configured exporter id.
MAX_EXPORTER_ID_CHARS = 200
#: A failing connect (Kafka away, a refused login or TLS handshake) is logged again after this long if it
#: keeps failing for the same reason.
REPEAT_WARNING_S = 60.0

_last_epoch_us = 0


def new_epoch() -> int:
    """A new exporter incarnation: now in microseconds since the Unix epoch, and larger than any
    epoch this process made before (two exporters made in the same microsecond still differ)."""
    global _last_epoch_us
    _last_epoch_us = max(time.time_ns() // 1000, _last_epoch_us + 1)
    return _last_epoch_us


class LossReason(enum.Enum):
    """Why a record was not delivered to Kafka."""

    BUFFER_FULL = "buffer_full"  # the buffer was full (Kafka away or too slow): the oldest record went
    REJECTED = "rejected"  # Kafka refused the record with a non-retriable error
    TOO_LARGE = "too_large"  # encoded record above MAX_RECORD_BYTES
    ENCODE_ERROR = "encode_error"  # not JSON-serialisable (a bug in a sampler)
    STOPPED = "stopped"  # still buffered when the exporter stopped


@dataclass(frozen=True)
class ExporterConfig:
    """Where and how a role exports.

    Args:
        bootstrap: Kafka bootstrap servers, ``host:port[,host:port]``.
        role: the exporting role (``router``, ``broker``, ``subscriber``, ``archive``).
        source: the role's name (router or broker name, subscriber name).
        buffer_records: most records held while Kafka is slow or away.
        batch_records: most records handed to the producer at once.
        linger_ms: the producer's batching delay.
        compression: ``lz4`` (needs cramjam), ``zstd``, ``snappy``, ``gzip`` or ``none``.
        request_timeout_ms: the producer's request timeout; also how long a connect may take.
        exporter: the exporter's stable id, stamped on every record (``exporter``); empty means
            ``role/source``. Must be unique among the processes exporting at one time and the
            same for a restarted process (docs/telemetry.md, "Exactly once").
        security: TLS and SASL to Kafka (``kafka_security``; docs/telemetry.md, "Kafka security").
    """

    bootstrap: str
    role: str
    source: str
    buffer_records: int = 20_000
    batch_records: int = 512
    linger_ms: int = 50
    compression: str = "lz4"
    request_timeout_ms: int = 2_000
    client_id: str = ""
    exporter: str = ""
    security: KafkaSecurity = kafka_security.PLAINTEXT

    def __post_init__(self) -> None:
        if self.exporter != self.exporter.strip() or len(self.exporter) > MAX_EXPORTER_ID_CHARS:
            raise ValidationError(f"exporter id {self.exporter!r} has surrounding blanks or is longer than "
                                  f"{MAX_EXPORTER_ID_CHARS} characters", field="exporter")
        if not self.bootstrap.strip():
            raise ValidationError("the Kafka bootstrap address must not be empty", field="kafka")
        if self.buffer_records < 1 or self.batch_records < 1:
            raise ValidationError("buffer_records and batch_records must be positive", field="buffer_records")
        if self.compression not in ("lz4", "zstd", "snappy", "gzip", "none"):
            raise ValidationError(f"compression {self.compression!r} is not lz4, zstd, snappy, gzip or none",
                                  field="compression")

    @property
    def exporter_id(self) -> str:
        """What every record's ``exporter`` says: the configured id, else ``role/source``."""
        return self.exporter or f"{self.role}/{self.source}"


@dataclass
class ExporterStats:
    """What the exporter did since it was made (read by the Prometheus collector and the tests)."""

    emitted: Counter[str] = field(default_factory=Counter)  # by topic
    sent: Counter[str] = field(default_factory=Counter)  # by topic, acknowledged by Kafka
    lost: Counter[str] = field(default_factory=Counter)  # by LossReason value
    batches: int = 0
    bytes_sent: int = 0  # encoded record bytes before compression
    connects: int = 0
    disconnects: int = 0
    retried: int = 0  # records put back after a failed batch
    gaps: int = 0  # outages ended (gap records emitted)
    connected: bool = False
    #: Connection attempts that failed, by reason: ``unavailable``, ``authentication`` (SASL refused),
    #: ``tls`` (the handshake failed); and the last failure's message.
    connect_failures: Counter[str] = field(default_factory=Counter)
    last_error: str = ""

    @property
    def lost_total(self) -> int:
        return sum(self.lost.values())


class TelemetryExporter:
    """Non-blocking export of telemetry records to Kafka (see the module docstring)."""

    def __init__(self, config: ExporterConfig) -> None:
        self.config = config
        #: The stamps that identify this exporter's records: (exporter_id, epoch, sequence).
        self.exporter_id = config.exporter_id
        self.epoch = new_epoch()
        self.stats = ExporterStats()
        self._buffer = buffering.RecordBuffer(config.buffer_records)
        self._sequence = 0
        self._task: asyncio.Task[None] | None = None
        self._producer: Any = None
        self._started = self._closed = False
        self._inflight = 0
        self._down_since_ms: int | None = None
        #: Losses already reported in gap records, and when the last batch went through.
        self._reported_lost: Counter[str] = Counter()
        self._last_ok_ms = records.now_ms()
        self._wake = asyncio.Event()
        self._client_kwargs: dict[str, Any] | None = None
        self._warned: tuple[str, float] = ("", 0.0)  # the reason of the last connect failure warned about, and when

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the background task; does not wait for Kafka (it may come later)."""
        if self._closed:
            raise TelemetryClosed(f"telemetry exporter of {self.config.source} was stopped", field="state")
        if self._started:
            return
        self._started = True
        self._task = create_guarded_task(self._run(), name=f"telemetry-{self.config.source}")

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Flush within ``timeout_s``, then stop; what is still buffered is counted as lost."""
        if self._closed:
            return
        self._closed = True
        if self._started and self.stats.connected:
            with contextlib.suppress(FlushTimeout):
                await self.flush(timeout_s)
        await cancelled(self._task)
        await self._close_producer()
        left = len(self._buffer)
        if left:
            self.stats.lost[LossReason.STOPPED.value] += left
            self._buffer.take(left)

    async def __aenter__(self) -> TelemetryExporter:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def last_sequence(self) -> int:
        """The ``sequence`` of the last record emitted (0 before the first)."""
        return self._sequence

    # -- the roles' side -----------------------------------------------------------------------
    def emit(self, topic: str, record: dict[str, Any], *, key: str | bytes | None = None,
             timestamp_ms: int | None = None) -> bool:
        """Stamp ``record`` and buffer it for ``topic``; never waits, never raises on Kafka's state.

        ``timestamp_ms`` is the Kafka record's timestamp (an archived measurement's event time,
        docs/history.md); None leaves it to the producer's clock.

        Returns False when the record could not be kept (exporter stopped) or an older record had
        to be dropped to make room; either way the loss is counted.
        """
        self._sequence += 1
        record["role"] = self.config.role
        record["source"] = self.config.source
        record["exporter"] = self.exporter_id
        record["epoch"] = self.epoch
        record["sequence"] = self._sequence
        self.stats.emitted[topic] += 1
        if self._closed:
            self.stats.lost[LossReason.STOPPED.value] += 1
            return False
        k = key.encode() if isinstance(key, str) else key
        kept = self._buffer.put(buffering.Pending(topic, k, record, timestamp_ms))
        if not kept:
            self.stats.lost[LossReason.BUFFER_FULL.value] += 1
        return kept

    async def flush(self, timeout_s: float = 5.0) -> None:
        """Until everything emitted so far is acknowledged or lost; ``FlushTimeout`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while len(self._buffer) or self._inflight:
            if time.monotonic() >= deadline:
                raise FlushTimeout(f"{len(self._buffer)} records buffered and {self._inflight} in flight "
                                   f"after {timeout_s:g} s", field="timeout_s")
            self._wake.set()
            await asyncio.sleep(0.01)

    # -- the background task -------------------------------------------------------------------
    async def _run(self) -> None:
        backoff = 0.1
        while True:
            if self._producer is None:
                if not await self._connect():
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), backoff)
                    backoff = min(MAX_BACKOFF_S, backoff * 2)
                    continue
                backoff = 0.1
            if not await self._buffer.wait(0.2):
                continue
            batch = self._buffer.take(self.config.batch_records)
            if not await self._send(batch):
                await self._close_producer()

    async def _connect(self) -> bool:
        from aiokafka import AIOKafkaProducer  # only this module imports aiokafka (.importlinter)

        _quiet_topic_creation()
        cfg = self.config
        if self._client_kwargs is None:
            self._client_kwargs = cfg.security.client_kwargs()
        # Idempotent: the producer's own retries never write a batch twice (needs acks="all").
        # Across producer sessions (a reconnect) a resent batch may still be written twice; the
        # record key (exporter, epoch, sequence) is what consumers de-duplicate on (docs/telemetry.md).
        producer = AIOKafkaProducer(
            bootstrap_servers=cfg.bootstrap,
            client_id=cfg.client_id or f"gridstat-{cfg.role}-{cfg.source}",
            compression_type=_compression(cfg.compression),
            linger_ms=cfg.linger_ms,
            max_batch_size=256 * 1024,
            request_timeout_ms=cfg.request_timeout_ms,
            retry_backoff_ms=200,
            enable_idempotence=True,
            acks="all",
            **self._client_kwargs,
        )
        try:
            with kafka_security.capturing_connect_errors() as causes:
                await asyncio.wait_for(producer.start(), cfg.request_timeout_ms / 1000)
        except Exception as exc:  # KafkaConnectionError, timeouts: Kafka is away, try again later
            self._mark_down()
            self._connect_failed(exc, causes)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), 1.0)
            return False
        self._producer = producer
        self.stats.connects += 1
        self.stats.connected = True
        self._warned = ("", 0.0)
        log.info("telemetry %s: exporting to Kafka at %s (%s)", cfg.source, cfg.bootstrap, cfg.security.describe())
        return True

    def _connect_failed(self, exc: BaseException, causes: list[BaseException]) -> None:
        """Count a failed connect by reason and warn with its cause: once, then once a minute while it fails
        the same way (aiokafka's own log of it is dropped: ``kafka_security.capturing_connect_errors``)."""
        cfg = self.config
        reason, message = kafka_security.describe_failure(cfg.bootstrap, cfg.security, exc, causes)
        self.stats.connect_failures[reason] += 1
        self.stats.last_error = message
        now = time.monotonic()
        if self._warned[0] != reason or now - self._warned[1] >= REPEAT_WARNING_S:
            self._warned = (reason, now)
            log.warning("telemetry %s: %s; buffering up to %d records and retrying", cfg.source, message,
                        cfg.buffer_records)

    async def _send(self, batch: list[buffering.Pending]) -> bool:
        """Hand ``batch`` to Kafka and wait for the acknowledgements; False if Kafka failed.

        Records are grouped per topic and partition (the key's murmur2 partition, as Kafka's own
        clients choose it) into the producer's record batches (``create_batch`` / ``send_batch``):
        one coroutine per batch rather than per record, which is where a Python producer spends
        its time. A failed batch goes back to the buffer whole (retriable errors) or is counted as
        rejected.
        """
        from aiokafka.errors import KafkaError, KafkaTimeoutError
        from aiokafka.partitioner import DefaultPartitioner

        producer = self._producer
        timeout_s = self.config.request_timeout_ms / 1000
        partitioner = DefaultPartitioner()
        groups: dict[tuple[str, int], list[tuple[buffering.Pending, bytes]]] = {}
        unsent: list[buffering.Pending] = []
        #: topic -> (all partitions sorted, available partitions), looked up once per batch
        layout: dict[str, tuple[list[int], list[int]]] = {}
        self._inflight = len(batch)
        try:
            for i, item in enumerate(batch):
                value = self._encode(item)
                if value is None:
                    continue
                known = layout.get(item.topic)
                if known is None:
                    cluster = producer.client.cluster
                    parts = cluster.partitions_for_topic(item.topic)
                    if not parts:  # unknown yet (a new topic is created by Kafka on this request)
                        try:
                            parts = await asyncio.wait_for(producer.partitions_for(item.topic), timeout_s)
                        except (KafkaError, TimeoutError):
                            unsent = list(batch[i:])
                            break
                    known = layout[item.topic] = (
                        sorted(parts), list(cluster.available_partitions_for_topic(item.topic) or ()))
                partition = partitioner(item.key, *known)
                groups.setdefault((item.topic, partition), []).append((item, value))
            sends: list[tuple[list[tuple[buffering.Pending, bytes]], Any]] = []
            failed: list[buffering.Pending] = []

            async def submit(builder: Any, topic: str, partition: int,
                             members: list[tuple[buffering.Pending, bytes]]) -> None:
                try:
                    fut = await asyncio.wait_for(producer.send_batch(builder, topic, partition=partition), timeout_s)
                except (KafkaError, TimeoutError):
                    failed.extend(item for item, _ in members)
                    return
                sends.append((members, fut))

            for (topic, partition), entries in groups.items():
                builder = producer.create_batch()
                members: list[tuple[buffering.Pending, bytes]] = []
                for item, value in entries:
                    if builder.append(key=item.key, value=value, timestamp=item.timestamp_ms) is None:  # full: send it
                        if members:
                            await submit(builder, topic, partition, members)
                        builder, members = producer.create_batch(), []
                        if builder.append(key=item.key, value=value, timestamp=item.timestamp_ms) is None:
                            self.stats.lost[LossReason.TOO_LARGE.value] += 1
                            continue
                    members.append((item, value))
                if members:
                    await submit(builder, topic, partition, members)
            if sends:
                # An idempotent producer retries a batch until Kafka takes it (aiokafka never expires
                # it), so the wait for acknowledgements is bounded here: what is not acknowledged in
                # time is sent again by the next producer session (at least once; docs/telemetry.md).
                futures = [f for _, f in sends]
                for f in futures:
                    f.add_done_callback(_retrieve)  # also those given up on below
                await asyncio.wait(futures, timeout=timeout_s + self.config.linger_ms / 1000)
                for members, fut in sends:
                    result: BaseException | None = KafkaTimeoutError("no acknowledgement in time")
                    if fut.done() and not fut.cancelled():
                        result = fut.exception()
                    if result is not None:
                        if isinstance(result, KafkaError) and not result.retriable \
                                and not isinstance(result, _timeouts()):
                            self.stats.lost[LossReason.REJECTED.value] += len(members)
                            log.warning("telemetry %s: Kafka refused %d records: %s", self.config.source,
                                        len(members), result)
                        else:
                            failed.extend(item for item, _ in members)
                        continue
                    for item, value in members:
                        self.stats.sent[item.topic] += 1
                        self.stats.bytes_sent += len(value)
            retry = failed + unsent
            if retry:
                self.stats.retried += len(retry)
                dropped = self._buffer.push_front(retry)
                if dropped:
                    self.stats.lost[LossReason.BUFFER_FULL.value] += dropped
                self._mark_down()
                return False
            self.stats.batches += 1
            self._mark_up()
            return True
        finally:
            self._inflight = 0

    def _encode(self, item: buffering.Pending) -> bytes | None:
        try:
            value = json.dumps(item.record, separators=(",", ":"), allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            self.stats.lost[LossReason.ENCODE_ERROR.value] += 1
            log.warning("telemetry %s: record for %s is not JSON: %s", self.config.source, item.topic, exc)
            return None
        if len(value) > MAX_RECORD_BYTES:
            self.stats.lost[LossReason.TOO_LARGE.value] += 1
            return None
        return value

    def _mark_down(self) -> None:
        if self._down_since_ms is None:
            self._down_since_ms = records.now_ms()
            if self.stats.connected:
                self.stats.disconnects += 1
                log.warning("telemetry %s: Kafka at %s stopped answering; buffering up to %d records",
                            self.config.source, self.config.bootstrap, self.config.buffer_records)
        self.stats.connected = False

    def _mark_up(self) -> None:
        """A batch went through: report the outage or the losses since the last report, if any."""
        now = records.now_ms()
        since, self._down_since_ms = self._down_since_ms, None
        lost = self.stats.lost - self._reported_lost
        outage = since is not None and self.stats.connects > 1
        if outage or lost:
            # Every record lost is in exactly one gap record (a Kafka that was not there at start-up
            # and cost nothing is no gap; a slow Kafka that overflowed the buffer is one).
            start = since if since is not None else self._last_ok_ms
            self.stats.gaps += 1
            self._reported_lost = Counter(self.stats.lost)
            self.emit(records.TOPICS.gaps, records.gap(from_ms=start, to_ms=now, lost=dict(lost)),
                      key=self.config.source)
            log.warning("telemetry %s: export resumed after %.1f s; %d records lost meanwhile", self.config.source,
                        (now - start) / 1000, sum(lost.values()))
        self._last_ok_ms = now

    async def _close_producer(self) -> None:
        producer, self._producer = self._producer, None
        self.stats.connected = False
        if producer is not None:
            # stop() first waits until every batch the producer holds is acknowledged, and an idempotent
            # producer holds a batch until Kafka takes it: with Kafka away, forever. Those records are
            # back in our buffer (``_send``), so the producer's copies are failed first. aiokafka has no
            # public way to abandon them; ``fail_all`` is what its own fatal-error path calls.
            from aiokafka.errors import KafkaTimeoutError

            with contextlib.suppress(Exception):
                producer._message_accumulator.fail_all(KafkaTimeoutError("producer closed"))
            # its requests still in flight end within the request timeout
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), self.config.request_timeout_ms / 1000 + 1.0)


class _TopicCreatedFilter(logging.Filter):
    """aiokafka logs ERROR "Topic X not found in cluster metadata" when a produce creates a topic
    (Kafka's auto-create): expected on a fresh Kafka, and noise in every role's log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Topic %s not found in cluster metadata")


def _quiet_topic_creation() -> None:
    cluster_log = logging.getLogger("aiokafka.cluster")
    if not any(isinstance(f, _TopicCreatedFilter) for f in cluster_log.filters):
        cluster_log.addFilter(_TopicCreatedFilter())


def _compression(name: str) -> str | None:
    if name == "none":
        return None
    if name in ("lz4", "zstd", "snappy"):
        from aiokafka import codec

        if not codec.has_lz4():  # cramjam missing: gzip is always there
            log.warning("telemetry: %s compression needs cramjam; using gzip", name)
            return "gzip"
    return name


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Done-callback of an acknowledgement no longer awaited: take its exception, so asyncio does not log it."""
    if not fut.cancelled():
        fut.exception()


def _timeouts() -> tuple[type[BaseException], ...]:
    from aiokafka.errors import KafkaTimeoutError, RequestTimedOutError

    return (KafkaTimeoutError, RequestTimedOutError)
