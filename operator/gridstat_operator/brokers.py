"""gRPC calls to the QoS brokers, with deadlines, retries and a typed error per outcome.

The operator never lets a gRPC error reach kopf: every call goes through :meth:`Brokers.call`,
whose channel's gRPC retry policy (``gridstat.core.rpc.retry_options``) retries what is worth
retrying right away (``UNAVAILABLE``: no connection, or a broker saying ``ModeChangeInProgress``;
``RESOURCE_EXHAUSTED``: a busy broker, after the delay it asks for) a few times with exponential
backoff and jitter, within the call's deadline, then raises:

* :class:`BrokerUnavailable` (``retriable``): no answer; the handler turns it into a
  ``kopf.TemporaryError`` with a growing delay and a condition that says so;
* :class:`BrokerRefused`: the broker understood and said no, with its machine-readable
  ``gridstat-reason`` and ``gridstat-field`` trailing metadata (``UnknownMode``,
  ``AlreadyExists``, ``InvalidArgument``...); ``retriable`` for the few reasons that pass.

Admission rejections come in the reply, not as errors (``SubscribeReply.admitted = false``);
``gridstat_operator.installing`` reads those. Channels are kept per address and closed at exit.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

from gridstat.core import rpc
from gridstat.core.tls import ClientChannel
from gridstat.v1 import broker_pb2_grpc as bpb_grpc
from gridstat_operator import conditions
from gridstat_operator import config as configs

#: Refusals that pass on their own: retried in place, then reported as retriable.
RETRIABLE_REASONS = frozenset({"ModeChangeInProgress", "Unavailable", "RouterUnavailable", "BrokerUnavailable",
                               "BrokerBusy"})  # BrokerBusy: over the broker's admission bound (broker.gate)
#: What a channel's retry policy retries at once: no connection or a retriable refusal
#: (``UNAVAILABLE``), a busy broker (``RESOURCE_EXHAUSTED``, with the delay it asks for).
RETRIED_CODES = ("UNAVAILABLE", "RESOURCE_EXHAUSTED")
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
        #: A channel per broker and number of attempts (its retry policy), following its certificate
        #: files (renewed without a restart).
        self._channels: dict[tuple[str, int], ClientChannel] = {}

    def stub(self, address: str, attempts: int | None = None) -> bpb_grpc.QoSBrokerStub:
        n = attempts or self.attempts
        channel = self._channels.get((address, n))
        if channel is None:
            options = rpc.retry_options(n, self.backoff_s, codes=RETRIED_CODES)
            channel = self._channels[(address, n)] = ClientChannel(address, self.config.tls, options)
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
        """``QoSBroker.<method>(request)`` at ``address``, retried by gRPC while it is worth it
        (``attempts`` in all, within ``timeout_s``); a typed :class:`BrokerError` otherwise."""
        call: Callable[..., Awaitable[Any]] = getattr(self.stub(address, attempts), method)
        try:
            return await call(request, timeout=timeout_s or self.config.timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise classify(exc, target=address) from None

    async def close(self) -> None:
        """Close every channel (idempotent)."""
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            await channel.close()
