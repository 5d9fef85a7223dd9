"""The leaf broker's hands on its routers: gRPC clients, two-phase installs, reconciliation.

The broker is the only writer of its routers' tables (dissertation 3.3.1). Every
change goes out as one transaction per router (``PrepareRoutes`` on all routers of
the change, then ``CommitRoutes`` on all of them, or ``AbortRoutes`` on those
prepared if any prepare fails), so a subscription is installed whole or not at
all. ``reconcile`` makes a router hold exactly what the broker's state derives for
it, which is how a restarted router is rebuilt and how a restarted broker gets back
in step with routers that kept forwarding meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

import grpc

from gridstat.broker.state import DesiredChannel, DesiredRoute, RouterEndpoint
from gridstat.core import rpc
from gridstat.core.tls import ClientChannel, TlsFiles
from gridstat.errors import ChannelUnavailable, GridStatError
from gridstat.v1 import router_pb2 as pb
from gridstat.v1 import router_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 5.0
_KIND = {"router": pb.CHANNEL_KIND_ROUTER, "subscriber": pb.CHANNEL_KIND_SUBSCRIBER,
         "publisher": pb.CHANNEL_KIND_PUBLISHER}


class RouterUnavailable(ChannelUnavailable):
    reason = "RouterUnavailable"


def route_pb(d: DesiredRoute) -> pb.Route:
    return pb.Route(route_id=d.route_id, variable_id=d.variable_id, mode=d.mode, channel=d.channel,
                    sub_interval_ms=d.sub_interval_ms, priority=d.priority, pub_interval_ms=d.pub_interval_ms,
                    alert=d.alert, version=d.version, price=d.price, best_effort=d.best_effort,
                    frames_per_s=d.frames_per_s)


def route_key(d: DesiredRoute | pb.Route) -> tuple[str, int, int]:
    return (d.route_id, d.variable_id, d.mode)


def channel_pb(d: DesiredChannel, key: bytes = b"") -> pb.Channel:
    return pb.Channel(name=d.name, peer_id=d.peer_id, kind=_KIND[d.kind], host=d.host, port=d.port,
                      level=d.level, flood_all=d.flood_all, key=key)


#: Channels replaced by ``RouterLink.reconnect`` kept open for calls still on them.
MAX_RETIRED_CHANNELS = 2


class RouterLink:
    """One router's control API as the broker sees it."""

    def __init__(self, endpoint: RouterEndpoint, tls: TlsFiles | None = None) -> None:
        self.endpoint = endpoint
        self._tls = tls
        #: Follows its certificate files: a renewed broker certificate is used without a restart.
        self._client = ClientChannel(endpoint.control_address, tls, rpc.channel_options())
        self._retired: list[ClientChannel] = []
        self.boot_id: str | None = None
        self.up = False
        self.failures = 0
        #: The datagram authentication key of each desired channel (broker.channelkeys); None = no keys.
        self.keys: Callable[[DesiredChannel], bytes] | None = None

    def key_for(self, d: DesiredChannel) -> bytes:
        return self.keys(d) if self.keys is not None else b""

    def channel_pb(self, d: DesiredChannel) -> pb.Channel:
        return channel_pb(d, self.key_for(d))

    @property
    def name(self) -> str:
        return self.endpoint.name

    @property
    def channel(self) -> grpc.aio.Channel:
        return self._client.channel()

    @property
    def stub(self) -> pb_grpc.RouterControlStub:
        return self._client.stub(pb_grpc.RouterControlStub)

    async def close(self) -> None:
        for old in self._retired:
            await old.close()
        self._retired.clear()
        await self._client.close()

    async def reconnect(self) -> None:
        """A fresh channel: the router says it is back, so it is reached now rather than after the
        old channel's reconnect back-off (up to 5 s after a long outage; docs/redundancy.md, "Healing").
        The old one is closed later (a call may still be using it), the oldest first beyond a few."""
        self._retired.append(self._client)
        # A subchannel of its own: gRPC shares one per target and options in a process, and the shared
        # one would still be waiting out the old channel's back-off.
        self._client = ClientChannel(self.endpoint.control_address, self._tls,
                                     [*rpc.channel_options(), ("grpc.use_local_subchannel_pool", 1)])
        while len(self._retired) > MAX_RETIRED_CHANNELS:
            await self._retired.pop(0).close()

    async def health(self, timeout: float = 1.0) -> pb.HealthReply | None:
        try:
            reply: pb.HealthReply = await self.stub.Health(pb.HealthRequest(), timeout=timeout)
            return reply
        except grpc.aio.AioRpcError:
            return None


@dataclass(frozen=True)
class RouterChange:
    install: tuple[DesiredRoute, ...] = ()
    remove: tuple[tuple[str, int, int], ...] = ()


async def apply_transaction(links: Mapping[str, RouterLink], changes: Mapping[str, RouterChange],
                            *, ttl_ms: int = 10_000) -> None:
    """Prepare every router's change, then commit all; abort the prepared ones if any prepare fails."""
    txn = uuid.uuid4().hex
    items = [(name, change) for name, change in changes.items() if change.install or change.remove]

    async def prepare(name: str, change: RouterChange) -> None:
        link = links.get(name)
        if link is None:
            raise RouterUnavailable(f"router {name!r} has no control connection", field="router")
        await link.stub.PrepareRoutes(pb.PrepareRoutesRequest(
            transaction_id=txn, install=[route_pb(r) for r in change.install],
            remove=[pb.RouteKey(route_id=k[0], variable_id=k[1], mode=k[2]) for k in change.remove],
            ttl_ms=ttl_ms), timeout=RPC_TIMEOUT_S)

    results = await asyncio.gather(*(prepare(n, c) for n, c in items), return_exceptions=True)
    failed = [(n, r) for (n, _), r in zip(items, results, strict=True) if isinstance(r, BaseException)]
    if failed:
        prepared = [n for (n, _), r in zip(items, results, strict=True) if not isinstance(r, BaseException)]
        await asyncio.gather(*(links[n].stub.AbortRoutes(pb.RoutesTransaction(transaction_id=txn),
                                                         timeout=RPC_TIMEOUT_S) for n in prepared),
                             return_exceptions=True)
        name, exc = failed[0]
        detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
        raise RouterUnavailable(f"router {name!r} refused or missed the change: {detail}", field="router")
    async def commit(name: str) -> None:
        try:
            await links[name].stub.CommitRoutes(pb.RoutesTransaction(transaction_id=txn), timeout=RPC_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            # The router died between prepare and commit: it restarts empty and is rebuilt from
            # the broker's state by reconcile, which is the source of truth.
            log.warning("commit on router %s failed (%s); it will be reconciled", name, exc.code())

    await asyncio.gather(*(commit(n) for n, _ in items))


async def ensure_channel(link: RouterLink, d: DesiredChannel) -> bool:
    """Open one channel (a client's, at its edge router); True if an existing one had to be replaced.

    Replacing a channel drops the routes that use it on the router: the caller has the
    router reconciled to put them back.
    """
    try:
        await link.stub.AddChannel(pb.AddChannelRequest(channel=link.channel_pb(d)), timeout=RPC_TIMEOUT_S)
        return False
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.ALREADY_EXISTS:
            raise
    await link.stub.RemoveChannel(pb.RemoveChannelRequest(name=d.name), timeout=RPC_TIMEOUT_S)
    await link.stub.AddChannel(pb.AddChannelRequest(channel=link.channel_pb(d)), timeout=RPC_TIMEOUT_S)
    return True


async def call_routers(links: Mapping[str, RouterLink], names: Iterable[str],
                       call: Callable[[RouterLink], Awaitable[object]], *, what: str) -> list[str]:
    """Run ``call`` on every named router at once; the names of those that failed (logged, not raised).

    For changes every router takes on its own (a mode phase, a flooding setting): the caller decides
    what a failure means, typically marking the router for the supervisor to reconcile.
    """
    async def one(name: str) -> str | None:
        try:
            await call(links[name])
        except (TimeoutError, grpc.aio.AioRpcError, GridStatError) as exc:
            log.warning("%s: router %s: %s", what, name, exc)
            return name
        return None
    results = await asyncio.gather(*(one(n) for n in names))
    return [n for n in results if n is not None]


async def reconcile(link: RouterLink, channels: Iterable[DesiredChannel], routes: Iterable[DesiredRoute], *,
                    mode: int | None = None) -> int:
    """Make the router hold exactly the desired channels and routes, in ``mode`` when given;
    returns the number of changes."""
    stub = link.stub
    want_channels = {c.name: c for c in channels}
    have = {c.name: c for c in (await stub.ListChannels(pb.ListChannelsRequest(), timeout=RPC_TIMEOUT_S)).channels}
    changes = 0
    for name, ch in have.items():
        d = want_channels.get(name)
        if d is None or (ch.peer_id, ch.kind, ch.host, ch.port, ch.authenticated) \
                != (d.peer_id, _KIND[d.kind], d.host, d.port, bool(link.key_for(d))):
            await stub.RemoveChannel(pb.RemoveChannelRequest(name=name), timeout=RPC_TIMEOUT_S)
            changes += 1
    for name, d in want_channels.items():
        ch = have.get(name)
        if ch is None or (ch.peer_id, ch.kind, ch.host, ch.port, ch.authenticated) \
                != (d.peer_id, _KIND[d.kind], d.host, d.port, bool(link.key_for(d))):
            await stub.AddChannel(pb.AddChannelRequest(channel=link.channel_pb(d)), timeout=RPC_TIMEOUT_S)
            changes += 1
        elif (ch.level or 1, ch.flood_all) != (d.level, d.flood_all):
            # Flooding attributes change in place: the channel's routes and queued events stay.
            await stub.UpdateChannel(pb.UpdateChannelRequest(name=name, level=d.level, flood_all=d.flood_all),
                                     timeout=RPC_TIMEOUT_S)
            changes += 1
    want = {route_key(r): r for r in routes}
    listed = await stub.ListRoutes(pb.ListRoutesRequest(), timeout=RPC_TIMEOUT_S)
    current = {route_key(r): r for r in listed.routes}
    install = [r for k, r in want.items()
               if k not in current or (current[k].channel, current[k].sub_interval_ms, current[k].priority,
                                       current[k].pub_interval_ms, current[k].price if current[k].HasField("price")
                                       else 1.0, current[k].best_effort, current[k].frames_per_s)
               != (r.channel, r.sub_interval_ms, r.priority, r.pub_interval_ms, r.price, r.best_effort,
                   r.frames_per_s)]
    remove = [k for k in current if k not in want]
    if install or remove:
        await apply_transaction({link.name: link}, {link.name: RouterChange(tuple(install), tuple(remove))})
    if mode is not None:
        # Always, even in the same mode: it also tells the router its tables are complete (its /readyz).
        await stub.SetMode(pb.SetModeRequest(mode=mode), timeout=RPC_TIMEOUT_S)
        changes += listed.current_mode != mode
    return changes + len(install) + len(remove)
