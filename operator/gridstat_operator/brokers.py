"""gRPC calls to the QoS brokers, with deadlines, retries and a typed error per outcome.

The operator never lets a gRPC error reach kopf: every call goes through :meth:`Brokers.call`,
which retries what is worth retrying right away (``UNAVAILABLE``, a missed deadline, a broker
saying ``ModeChangeInProgress``) a few times with exponential backoff and jitter, then raises:

* :class:`BrokerUnavailable` (``retriable``): no answer; the handler turns it into a
  ``kopf.TemporaryError`` with a growing delay and a condition that says so;
* :class:`BrokerRefused`: the broker understood and said no, with its machine-readable
  ``gridstat-reason`` and ``gridstat-field`` trailing metadata (``UnknownMode``,
  ``AlreadyExists``, ``InvalidArgument``...); ``retriable`` for the few reasons that pass.

Admission rejections come in the reply, not as errors (``SubscribeReply.admitted = false``);
``gridstat_operator.installing`` reads those. Channels are kept per address and closed at exit.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import grpc.aio

from gridstat.core.tls import ClientChannel
from gridstat.v1 import broker_pb2_grpc as bpb_grpc
from gridstat_operator import conditions
from gridstat_operator import config as configs

T = TypeVar("T")

#: Refusals that pass on their own: retried in place, then reported as retriable.
RETRIABLE_REASONS = frozenset({"ModeChangeInProgress", "Unavailable", "RouterUnavailable", "BrokerUnavailable",
                               "BrokerBusy"})  # BrokerBusy: over the broker's admission bound (broker.gate)
#: gRPC codes that mean "no answer", as opposed to "no".
UNAVAILABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                               grpc.StatusCode.CANCELLED})


class BrokerError(Exception):
    """Base of the operator's broker errors: a ``reason`` word, a message and maybe a field."""

    retriable = False

    def __init__(self, message: str, *, reason: str, field: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.field = field

    @property
    def message(self) -> str:
        return str(self)


class BrokerUnavailable(BrokerError):
    """The broker did not answer (down, unreachable, or past the deadline every time)."""

    retriable = True

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="BrokerUnavailable")


class BrokerRefused(BrokerError):
    """The broker answered with an error status and a ``gridstat-reason``."""

    def __init__(self, message: str, *, reason: str, field: str = "", code: grpc.StatusCode | None = None) -> None:
        super().__init__(message, reason=reason, field=field)
        self.code = code
        self.retriable = reason in RETRIABLE_REASONS


def _metadata(error: grpc.aio.AioRpcError, key: str) -> str:
    for k, v in error.trailing_metadata() or ():
        if k == key:
            return v.decode() if isinstance(v, bytes) else str(v)
    return ""


def classify(error: grpc.aio.AioRpcError, *, target: str) -> BrokerError:
    """Map a failed call to the operator's error types."""
    code = error.code()
    details = error.details() or code.name
    if code in UNAVAILABLE_CODES:
        return BrokerUnavailable(f"broker at {target} is unavailable: {details}")
    reason = _metadata(error, "gridstat-reason") or "".join(p.capitalize() for p in code.name.split("_"))
    return BrokerRefused(conditions.without_reason(reason, details), reason=reason,
                         field=_metadata(error, "gridstat-field"), code=code)


class Brokers:
    """The utility's brokers: one channel per address, calls with retries and backoff."""

    def __init__(
            self,
            config: configs.OperatorConfig,
            *,
            attempts: int = 3,
            backoff_s: float = 0.2,
    ) -> None:
        self.config = config
        self.attempts = attempts
        self.backoff_s = backoff_s
        #: One channel per broker, following its certificate files (renewed without a restart).
        self._channels: dict[str, ClientChannel] = {}

    def stub(self, address: str) -> bpb_grpc.QoSBrokerStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = ClientChannel(address, self.config.tls)
        return channel.stub(bpb_grpc.QoSBrokerStub)

    def leaf(self, cloud: str) -> str:
        """The address of ``cloud``'s leaf broker; :class:`BrokerRefused` ``UnknownCloud`` if none."""
        try:
            return self.config.broker_for(cloud)
        except KeyError:
            known = ", ".join(sorted(self.config.brokers))
            raise BrokerRefused(f"cloud {cloud!r} has no broker in this release (clouds: {known})",
                                reason="UnknownCloud", field="spec.cloud") from None

    async def call(
            self,
            address: str,
            method: str,
            request: Any,
            *,
            timeout_s: float | None = None,
            attempts: int | None = None,
    ) -> Any:
        """``QoSBroker.<method>(request)`` at ``address``, retried while it is worth it."""
        def bound() -> Callable[..., Awaitable[Any]]:
            return getattr(self.stub(address), method)  # type: ignore[no-any-return]
        return await self._retrying(address, lambda: bound()(request, timeout=timeout_s or self.config.timeout_s),
                                    attempts or self.attempts)

    async def _retrying(self, address: str, fn: Callable[[], Awaitable[T]], attempts: int) -> T:
        last: BrokerError | None = None
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1) * (0.5 + random.random()))
            try:
                return await fn()
            except grpc.aio.AioRpcError as exc:
                last = classify(exc, target=address)
                if not last.retriable:
                    raise last from None
        assert last is not None
        raise last

    async def close(self) -> None:
        """Close every channel (idempotent)."""
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            await channel.close()
