"""The edge router's proxy of its publishers' and subscribers' commands (edge.proto, docs/management-plane.md).

The edge status router is the sole proxy of end entities' commands to the management plane
(dissertation 1, 3.2.4): a client talks only to its edge router's control port, and the
``EdgeProxy`` service there relays each call to the cloud's leaf QoS broker (``QoSBroker`` in
broker.proto) with the router's own name filled in (the ``edge_router`` fields). The relay has a
deadline; gRPC's retry policy (``core.rpc.retry_options``) retries UNAVAILABLE with exponential
backoff and jitter within it; the broker's errors come back unchanged: status code, details and the
``gridstat-*`` trailing metadata, with the pushback that stops the client's own retries
(``core.rpc.NO_RETRY``: an answer is not retried twice). A broker that
cannot be reached comes back as UNAVAILABLE with reason ``BrokerUnavailable``. An edge router that
its broker has not registered and built yet (a pod started before the topology registered it,
docs/kubernetes.md) answers UNAVAILABLE with reason ``EdgeRouterNotReady`` instead of the broker's
"not an edge router" refusal: a client retries that, as it retries an unreachable broker. The data plane
never waits on any of this (the relay is a coroutine on the router's loop, nothing more).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from gridstat.core import rpc
from gridstat.core.tls import ANONYMOUS, IDENTITY_KEY, ClientChannel, TlsFiles, peer_identities
from gridstat.errors import ValidationError
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import broker_pb2_grpc as bpb_grpc
from gridstat.v1 import edge_pb2_grpc as epb_grpc

log = logging.getLogger(__name__)

#: Trailing metadata keys passed back from the broker (and set by the proxy itself).
REASON_KEY = rpc.REASON_KEY
FIELD_KEY = rpc.FIELD_KEY
BROKER_UNAVAILABLE = "BrokerUnavailable"
BROKER_TIMEOUT = "BrokerTimeout"
EDGE_ROUTER_NOT_READY = "EdgeRouterNotReady"

DEFAULT_DEADLINE_S = 5.0
DEFAULT_ATTEMPTS = 3
DEFAULT_BACKOFF_BASE_S = 0.1

#: Reconnect quickly after a broker restart: the retries above are short.
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.keepalive_time_ms", 30_000),
)


def _gridstat_metadata(exc: grpc.aio.AioRpcError) -> tuple[tuple[str, str], ...]:
    """The broker's ``gridstat-*`` trailing metadata, in order (string values only)."""
    md = exc.trailing_metadata() or ()
    return tuple((str(k), str(v)) for k, v in md if str(k).startswith("gridstat-") and isinstance(v, str))


def _relayed(method: str, doc: str = "") -> Callable[[EdgeProxyServicer, Any, Any], Awaitable[Any]]:
    """An ``EdgeProxy`` method relaying ``method`` to the broker unchanged (``EdgeProxyServicer._relay``)."""
    async def relay(self: EdgeProxyServicer, request: Any, context: Any) -> Any:
        return await self._relay(method, request, context)

    relay.__name__ = relay.__qualname__ = method
    relay.__doc__ = doc or f"``{method}``, relayed to the leaf broker unchanged."
    return relay


class EdgeProxyServicer(epb_grpc.EdgeProxyServicer):
    """Relays ``EdgeProxy`` calls to the leaf broker's ``QoSBroker`` service."""

    def __init__(self, router_name: str, broker_address: str, *, tls: TlsFiles | None = None,
                 deadline_s: float = DEFAULT_DEADLINE_S, attempts: int = DEFAULT_ATTEMPTS,
                 backoff_base_s: float = DEFAULT_BACKOFF_BASE_S,
                 readiness: Callable[[], tuple[bool, str]] | None = None) -> None:
        if not broker_address or ":" not in broker_address:
            raise ValidationError(f"broker address {broker_address!r} must be HOST:PORT", field="broker")
        if attempts < 1:
            raise ValidationError(f"attempts must be >= 1, got {attempts}", field="attempts")
        if deadline_s <= 0:
            raise ValidationError(f"deadline must be positive, got {deadline_s}", field="deadline_s")
        self.router_name = router_name
        self.broker_address = broker_address
        self.deadline_s = deadline_s
        self.attempts = attempts
        self.backoff_base_s = backoff_base_s
        #: The router's own readiness (``StatusRouter.readiness``): has its broker built it this boot?
        self.readiness = readiness
        #: Relayed calls by outcome, for tests and logs.
        self.relayed = 0
        self.failed = 0
        options = (*CHANNEL_OPTIONS, *rpc.retry_options(attempts, backoff_base_s))
        try:  # follows its certificate files: a renewed certificate is used without a restart
            self._client = ClientChannel(broker_address, tls, options)
        except ValidationError as exc:  # name the router's own option: --broker-tls-*
            raise ValidationError(f"broker {exc.args[0]}", field=f"broker_{exc.field}") from exc

    async def close(self) -> None:
        await self._client.close()

    # -- the relay ---------------------------------------------------------------------------------
    def _deadline(self, context: Any) -> float:
        """The relay's deadline: the default, or less when the client's own deadline is sooner."""
        remaining = None
        try:
            remaining = context.time_remaining()
        except (AttributeError, RuntimeError):  # pragma: no cover - defensive
            remaining = None
        if remaining is not None and 0 < remaining < self.deadline_s:
            return float(remaining)
        return self.deadline_s

    async def _relay(self, method: str, request: Any, context: Any) -> Any:
        call: Callable[..., Awaitable[Any]] = getattr(self._client.stub(bpb_grpc.QoSBrokerStub), method)
        # The client's verified certificate identities (mTLS at this proxy), for the broker to bind the
        # request's client name to (broker.authz.IdentityBinding); nothing without a client certificate.
        metadata = tuple((IDENTITY_KEY, i) for i in peer_identities(context)) or ((IDENTITY_KEY, ANONYMOUS),)
        try:  # gRPC retries UNAVAILABLE itself (the channel's retry policy), within the deadline
            reply = await call(request, timeout=self._deadline(context), metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            self.failed += 1
            await self._abort(method, exc, context)
            raise  # unreachable: abort raises
        self.relayed += 1
        return reply

    async def _abort(self, method: str, exc: grpc.aio.AioRpcError, context: Any) -> None:
        code = exc.code()
        metadata = _gridstat_metadata(exc)
        has_reason = any(k == REASON_KEY for k, _ in metadata)
        details = exc.details() or ""
        if not has_reason and code is grpc.StatusCode.UNAVAILABLE:
            # Not the broker's answer but the transport's: the broker could not be reached.
            log.warning("%s: broker %s unreachable for %s after %d attempts: %s", self.router_name,
                        self.broker_address, method, self.attempts, details)
            details = f"{BROKER_UNAVAILABLE}: leaf broker {self.broker_address} unreachable from edge router " \
                      f"{self.router_name} ({details})"
            metadata = ((REASON_KEY, BROKER_UNAVAILABLE), (FIELD_KEY, ""))
        elif not has_reason and code is grpc.StatusCode.DEADLINE_EXCEEDED:
            log.warning("%s: broker %s did not answer %s in time", self.router_name, self.broker_address, method)
            details = f"{BROKER_TIMEOUT}: leaf broker {self.broker_address} did not answer {method} in time " \
                      f"({details})"
            metadata = ((REASON_KEY, BROKER_TIMEOUT), (FIELD_KEY, ""))
        elif (self.readiness is not None and dict(metadata).get(REASON_KEY) == "Unauthorized"
              and dict(metadata).get(FIELD_KEY) == "edge_router"):
            ready, why = self.readiness()
            if not ready:  # the broker does not know this router yet: transient, not a refusal
                code = grpc.StatusCode.UNAVAILABLE
                details = f"{EDGE_ROUTER_NOT_READY}: edge router {self.router_name} is not ready ({why}); " \
                          f"its broker answered: {details}"
                metadata = ((REASON_KEY, EDGE_ROUTER_NOT_READY), (FIELD_KEY, "edge_router"))
        context.set_trailing_metadata((*metadata, rpc.NO_RETRY))
        await context.abort(code, details)

    # -- EdgeProxy ---------------------------------------------------------------------------------
    async def RegisterClient(self, request: bpb.RegisterClientRequest, context: Any) -> bpb.RegisterClientReply:
        request.edge_router = self.router_name
        if request.kind == bpb.CLIENT_KIND_SUBSCRIBER and request.port and not request.host:
            request.host = _peer_host(context)
        reply: bpb.RegisterClientReply = await self._relay("RegisterClient", request, context)
        return reply

    async def RegisterPublication(self, request: bpb.RegisterPublicationRequest,
                                  context: Any) -> bpb.RegisterPublicationReply:
        request.publication.edge_router = self.router_name
        reply: bpb.RegisterPublicationReply = await self._relay("RegisterPublication", request, context)
        return reply

    async def Subscribe(self, request: bpb.SubscribeRequest, context: Any) -> bpb.SubscribeReply:
        request.subscription.edge_router = self.router_name
        reply: bpb.SubscribeReply = await self._relay("Subscribe", request, context)
        return reply

    async def SubscribeQuery(self, request: bpb.SubscribeQueryRequest, context: Any) -> bpb.QueryReply:
        request.query.edge_router = self.router_name
        reply: bpb.QueryReply = await self._relay("SubscribeQuery", request, context)
        return reply

    # The calls that name no edge router go to the broker as they are.
    UnregisterClient = _relayed("UnregisterClient")
    UnregisterPublication = _relayed("UnregisterPublication")
    Unsubscribe = _relayed("Unsubscribe")
    ChangeSubscription = _relayed("ChangeSubscription")
    ListSubscriptions = _relayed("ListSubscriptions")
    UnsubscribeQuery = _relayed("UnsubscribeQuery")
    ListQueries = _relayed("ListQueries")
    ListModes = _relayed("ListModes", "The cloud's operating modes (dissertation 6.3), for clients subscribing "
                                      "per mode.")
    SetFloodAll = _relayed("SetFloodAll", "A flood-all subscription (dissertation 5.1): the broker sets the flag of "
                                          "the subscriber's channel.")


def _peer_host(context: Any) -> str:
    """The client's IP from the gRPC peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``), or ''."""
    try:
        peer = str(context.peer())
    except Exception:  # pragma: no cover - defensive
        return ""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    return ""


def add_to_server(servicer: EdgeProxyServicer, server: grpc.aio.Server) -> None:
    epb_grpc.add_EdgeProxyServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
