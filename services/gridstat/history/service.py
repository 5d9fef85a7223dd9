"""The ``History`` gRPC service (protos/gridstat/v1/history.proto; docs/history.md).

``Query`` checks the request (:mod:`gridstat.history.querying`), reads the variable's range with
:class:`gridstat.telemetry.archive_reading.ArchiveReader` (one partition, from Kafka's time index,
the live filter decided before decoding) and streams chunks of up to :data:`CHUNK_EVENTS` events as
parallel arrays. The first chunk carries the :class:`HistoryAnswer` (the interval applied and
notes) even when there are no events; the last one is marked ``last`` with the total. Errors end
the call with the error's status and the ``gridstat-reason`` / ``gridstat-field`` trailing metadata
(``core.rpc``). Nothing is logged per event or per query beyond debug level.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from gridstat.core import rpc
from gridstat.errors import GridStatError
from gridstat.history import querying
from gridstat.telemetry.archive_reading import ArchivedBatch, ArchiveParams, ArchiveReader, ReadStats
from gridstat.v1 import history_pb2 as pb
from gridstat.v1 import history_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

#: Events per chunk: ~10 bytes each on the wire as packed numbers, so a chunk is ~100-200 kB.
CHUNK_EVENTS = 10_000
MAX_EXACT_INT = 2**53
NUMERIC_TYPES = frozenset(("float", "double", "int", "int32", "int64", "bool"))


@dataclass
class ServiceStats:
    queries: int = 0
    failed: int = 0
    events_sent: int = 0
    #: Failed queries by reason (KafkaUnavailable, TooManyEvents, InvalidArgument ...), for /metrics.
    failed_by_reason: Counter[str] = field(default_factory=Counter)


def _exact_double(v: object) -> bool:
    """True if ``v`` travels as a double and comes back equal (finite floats, bools, ints up to 2**53)."""
    t = type(v)
    if t is float:
        return math.isfinite(v)  # type: ignore[arg-type]
    if t is bool:
        return True
    return t is int and -MAX_EXACT_INT <= v <= MAX_EXACT_INT  # type: ignore[operator]


def chunk_of(batch: ArchivedBatch, start: int = 0, stop: int | None = None) -> pb.HistoryChunk:
    """Events ``[start, stop)`` of ``batch`` as one chunk: numbers packed, anything else as JSON."""
    ts = batch.timestamps_ms[start:stop]
    values = batch.values[start:stop]
    flags = batch.extrapolated[start:stop]
    chunk = pb.HistoryChunk(timestamps_ms=ts, value_type=batch.params.value_type)
    numeric = batch.params.value_type in NUMERIC_TYPES and all(map(_exact_double, values))
    if numeric:
        chunk.values.extend(float(v) for v in values)
    else:
        chunk.values_json.extend(json.dumps(v, separators=(",", ":")) for v in values)
    if any(flags):
        chunk.extrapolated.extend(flags)
    return chunk


class HistoryServicer(pb_grpc.HistoryServicer):
    def __init__(self, reader: ArchiveReader, bounds: querying.Bounds | None = None) -> None:
        self.reader = reader
        self.bounds = bounds or querying.Bounds()
        self.stats = ServiceStats()

    async def Query(self, request: pb.HistoryQuery, context: Any) -> AsyncIterator[pb.HistoryChunk]:
        self.stats.queries += 1
        try:
            async for chunk in self.answer(request):
                yield chunk
        except GridStatError as exc:
            self.stats.failed += 1
            self.stats.failed_by_reason[exc.reason] += 1
            # Kafka away is retriable, but not by gRPC's own retry policy within the call: each try would
            # wait for Kafka again; the caller (the SDK's gap filler) retries with its own backoff.
            context.set_trailing_metadata(((rpc.REASON_KEY, exc.reason), (rpc.FIELD_KEY, exc.field or ""),
                                           rpc.NO_RETRY))
            await context.abort(rpc.status_code(exc), str(exc))

    async def answer(self, request: pb.HistoryQuery, stats: ReadStats | None = None) -> AsyncIterator[pb.HistoryChunk]:
        """The chunks of one answer; :class:`GridStatError` for a bad query, a bound passed or Kafka away."""
        query = querying.validate(request.variable, from_ms=request.from_ms, to_ms=request.to_ms,
                                  interval_ms=request.interval_ms, max_events=request.max_events, bounds=self.bounds)
        answering = querying.Answering(query)

        def choose(p: ArchiveParams) -> Any:
            return answering.choose(archive_interval_ms=p.interval_ms, pub_interval_ms=p.pub_interval_ms,
                                    frames_per_s=p.frames_per_s)

        first = True
        value_type = ""
        async for batch in self.reader.read(query.variable, from_ms=query.from_ms, to_ms=query.to_ms, choose=choose,
                                            batch_events=CHUNK_EVENTS, stats=stats):
            value_type = batch.params.value_type
            room = answering.room()
            n = min(len(batch), room)
            if n > 0:
                chunk = chunk_of(batch, 0, n)
                if first:
                    chunk.answer.CopyFrom(self._answer(query, answering))
                    first = False
                answering.count(n)
                self.stats.events_sent += n
                yield chunk
            if len(batch) > room:
                raise answering.over()
        last = pb.HistoryChunk(value_type=value_type, last=True, events_total=answering.sent)
        if first:
            answer = self._answer(query, answering)
            if not answering.rules:
                answer.notes.append(f"no archived events of {query.variable} in [{query.from_ms}, {query.to_ms}] "
                                    "(an unknown variable, one not archived, or not archived then)")
            last.answer.CopyFrom(answer)
        yield last

    def _answer(self, query: querying.Query, answering: querying.Answering) -> pb.HistoryAnswer:
        rule = answering.rule
        answer = pb.HistoryAnswer(variable=query.variable, from_ms=query.from_ms, to_ms=query.to_ms,
                                  interval_ms=query.interval_ms if rule is None else rule.interval_ms)
        if rule is not None:
            answer.archive_interval_ms = rule.archive_interval_ms
            answer.pub_interval_ms = rule.pub_interval_ms
            answer.frames_per_s = rule.frames_per_s
        answer.notes.extend(answering.notes())
        return answer

    async def Health(self, request: pb.HistoryHealthRequest, context: Any) -> pb.HistoryHealthReply:
        return pb.HistoryHealthReply(kafka_reachable=await self.reader.reachable(), topic=self.reader.topic,
                                     max_span_ms=self.bounds.max_span_ms, max_events=self.bounds.max_events,
                                     queries=self.stats.queries, events_sent=self.stats.events_sent)


def add_to_server(servicer: HistoryServicer, server: Any) -> None:
    pb_grpc.add_HistoryServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
