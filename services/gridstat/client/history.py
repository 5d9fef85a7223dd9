"""The history service's client: archived values of a status variable over a time range (docs/history.md).

``HistoryClient`` talks gRPC to ``gridstat history-server`` (service ``History``, protos/gridstat/v1/
history.proto); it knows nothing of Kafka. An answer streams in chunks of many events; ``query``
yields them one :class:`HistoryEvent` at a time, oldest first, already rate-filtered by the server
with the live rule (dissertation 4.2.1, Function 4.1; docs/frame-rates.md), so a history answer at
100 ms holds exactly the timestamps a live 100 ms subscription would have been delivered.
``fetch`` collects a whole answer into a list.

Errors are :class:`gridstat.errors.GridStatError` with the server's machine-readable ``reason``
(``InvalidArgument``, ``SpanTooLong``, ``TooManyEvents``, ``KafkaUnavailable``) and ``field``;
an unreachable server is :class:`gridstat.errors.ChannelUnavailable` (retriable).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from itertools import repeat
from typing import Any, NamedTuple

import grpc

from gridstat.client.session import error_from_rpc
from gridstat.core.rpc import channel_options
from gridstat.core.tls import ClientChannel, TlsFiles
from gridstat.errors import ValidationError
from gridstat.v1 import history_pb2 as pb
from gridstat.v1 import history_pb2_grpc as pb_grpc

#: Bytes one answer's chunk may take on the wire (the server keeps its chunks well below).
MAX_MESSAGE_BYTES = 16 * 2**20


class HistoryEvent(NamedTuple):
    """One archived value: the publisher's timestamp, the value as published, and whether the archive's
    subscription extrapolated it (a missed instant it filled, docs/telemetry.md). A named tuple: an
    hour of a 60 Hz variable is 216,000 of them."""

    timestamp_ms: int
    value: object
    extrapolated: bool = False


@dataclass(frozen=True, slots=True)
class HistoryAnswer:
    """What a query was answered with: the interval applied (rounded like a live subscription; 0 = every
    archived event), the archive's own interval, the filter's phase parameters, and notes (e.g. that an
    interval below the archive's was answered at the archive's)."""

    variable: str
    from_ms: int
    to_ms: int
    interval_ms: int
    archive_interval_ms: int
    pub_interval_ms: int
    frames_per_s: int
    notes: tuple[str, ...]


def _converter(value_type: str) -> Any:
    if value_type in ("int", "int32", "int64"):
        return int
    if value_type == "bool":
        return bool
    return None


def events_of(chunk: pb.HistoryChunk) -> list[HistoryEvent]:
    """The events of one chunk, values typed back from their wire form (numbers, or JSON for structs)."""
    stamps = chunk.timestamps_ms
    flags = chunk.extrapolated
    if chunk.values_json:
        values: list[object] = [json.loads(v) for v in chunk.values_json]
    else:
        conv = _converter(chunk.value_type)
        values = list(chunk.values) if conv is None else [conv(v) for v in chunk.values]
    if len(values) != len(stamps):
        raise ValidationError(f"history chunk with {len(stamps)} timestamps and {len(values)} values",
                              field="values")
    if flags:
        if len(flags) != len(stamps):
            raise ValidationError(f"history chunk with {len(stamps)} timestamps and {len(flags)} flags",
                                  field="extrapolated")
        return list(map(HistoryEvent, stamps, values, flags))
    return list(map(HistoryEvent, stamps, values, repeat(False)))


def answer_of(a: pb.HistoryAnswer) -> HistoryAnswer:
    return HistoryAnswer(variable=a.variable, from_ms=a.from_ms, to_ms=a.to_ms, interval_ms=a.interval_ms,
                         archive_interval_ms=a.archive_interval_ms, pub_interval_ms=a.pub_interval_ms,
                         frames_per_s=a.frames_per_s, notes=tuple(a.notes))


class HistoryClient:
    """A connection to one history server. Create it with :meth:`connect` inside a running event loop;
    :meth:`close` (or ``async with``) releases the channel."""

    def __init__(self, target: str, *, tls: TlsFiles | None = None, timeout_s: float = 60.0) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self._channel = ClientChannel(target, tls, options=[
            *channel_options(), ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)])
        #: The :class:`HistoryAnswer` of the last query that got one (its notes say what was applied).
        self.last_answer: HistoryAnswer | None = None

    @classmethod
    async def connect(cls, target: str, *, tls: TlsFiles | None = None, timeout_s: float = 60.0) -> HistoryClient:
        """A client of the history server at ``target`` (``HOST:PORT``); ``tls`` for mTLS. Does not wait
        for the server: the first query does (``ChannelUnavailable`` if it cannot be reached)."""
        host, sep, port = target.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValidationError(f"history server address {target!r} must be HOST:PORT", field="target")
        return cls(target, tls=tls, timeout_s=timeout_s)

    async def __aenter__(self) -> HistoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    def _stub(self) -> pb_grpc.HistoryStub:
        return self._channel.stub(pb_grpc.HistoryStub)

    async def chunks(self, variable: str, *, from_ms: int, to_ms: int, interval_ms: int = 0,
                     max_events: int = 0) -> AsyncIterator[pb.HistoryChunk]:
        """The answer's raw chunks (``HistoryChunk``), for callers that keep the columnar form."""
        request = pb.HistoryQuery(variable=variable, from_ms=int(from_ms), to_ms=int(to_ms),
                                  interval_ms=int(interval_ms), max_events=int(max_events))
        call = self._stub().Query(request, timeout=self.timeout_s)
        try:
            async for chunk in call:
                if chunk.HasField("answer"):
                    self.last_answer = answer_of(chunk.answer)
                yield chunk
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from exc
        finally:
            call.cancel()

    async def query(self, variable: str, *, from_ms: int, to_ms: int, interval_ms: int = 0,
                    max_events: int = 0) -> AsyncIterator[HistoryEvent]:
        """The archived events of ``variable`` (``publisher/variable``) stamped in ``[from_ms, to_ms]``
        (milliseconds since the Unix epoch, both inclusive), oldest first, rate-filtered at
        ``interval_ms`` as a live subscription would be (0: every archived event).

        Raises:
            GridStatError: ``InvalidArgument`` / ``SpanTooLong`` / ``TooManyEvents`` with ``field``;
                ``ChannelUnavailable`` when the server (or its Kafka) cannot be reached.
        """
        async for chunk in self.chunks(variable, from_ms=from_ms, to_ms=to_ms, interval_ms=interval_ms,
                                       max_events=max_events):
            for ev in events_of(chunk):
                yield ev

    async def fetch(self, variable: str, *, from_ms: int, to_ms: int, interval_ms: int = 0,
                    max_events: int = 0) -> list[HistoryEvent]:
        """The whole answer of :meth:`query` as a list."""
        out: list[HistoryEvent] = []
        async for chunk in self.chunks(variable, from_ms=from_ms, to_ms=to_ms, interval_ms=interval_ms,
                                       max_events=max_events):
            out.extend(events_of(chunk))
        return out

    async def health(self) -> pb.HistoryHealthReply:
        try:
            reply: pb.HistoryHealthReply = await self._stub().Health(pb.HistoryHealthRequest(),
                                                                     timeout=self.timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from exc
        return reply
