"""gRPC servicer of the router control API (protos/gridstat/v1/router.proto).

Thin by design: it converts messages to the router's own calls and maps
``GridStatError`` to gRPC status codes, putting the machine-readable reason and
the offending field in trailing metadata (``gridstat-reason``, ``gridstat-field``).
"""

from __future__ import annotations

import asyncio
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import grpc

from gridstat.core import access, rpc
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError, ValidationError
from gridstat.router.channels import ChannelKind, EventChannel
from gridstat.router.condensation import setup_from_message
from gridstat.router.process import RouteInstall, StatusRouter
from gridstat.router.shaping import DropPolicy, ShapingConfig
from gridstat.router.tables import Route
from gridstat.v1 import condensation_pb2 as cpb
from gridstat.v1 import router_pb2 as pb
from gridstat.v1 import router_pb2_grpc as pb_grpc

T = TypeVar("T")

_KINDS = {
    pb.CHANNEL_KIND_ROUTER: ChannelKind.ROUTER,
    pb.CHANNEL_KIND_SUBSCRIBER: ChannelKind.SUBSCRIBER,
    pb.CHANNEL_KIND_PUBLISHER: ChannelKind.PUBLISHER,
}
_KIND_CODES = {v: k for k, v in _KINDS.items()}


async def _guard(context: grpc.aio.ServicerContext[Any, Any], call: Callable[[], T]) -> T:
    try:
        return call()
    except GridStatError as exc:
        await rpc.abort(context, exc)


def route_to_pb(r: Route, pub_interval_ms: int, alert: bool = False, frames_per_s: int = 0) -> pb.Route:
    return pb.Route(route_id=r.route_id, variable_id=r.variable_id, mode=r.mode, channel=r.channel,
                    sub_interval_ms=r.sub_interval_ms, priority=r.priority, pub_interval_ms=pub_interval_ms,
                    alert=alert, version=r.version, price=r.price, best_effort=r.best_effort,
                    frames_per_s=frames_per_s)


def route_from_pb(m: pb.Route) -> RouteInstall:
    return RouteInstall(Route(m.route_id, m.variable_id, m.mode, m.channel, m.sub_interval_ms, m.priority,
                              m.version, m.price if m.HasField("price") else 1.0, m.best_effort),
                        m.pub_interval_ms, m.alert, m.frames_per_s)


def shaping_from_pb(m: pb.Shaping) -> ShapingConfig | None:
    """The shaping of a request; None (stop shaping) for a zero bandwidth."""
    if not m.bandwidth_bps:
        return None
    return ShapingConfig(m.bandwidth_bps, DropPolicy.parse(m.drop_policy), m.drop_start_ms or 500.0,
                         m.drop_all_ms or 1000.0, m.window_ms or 1000.0,
                         m.overhead_bytes if m.HasField("overhead_bytes") else 28)


def shaping_to_pb(ch: EventChannel) -> pb.Shaping | None:
    sh = ch.shaper
    if sh is None:
        return None
    c = sh.config
    return pb.Shaping(bandwidth_bps=c.bandwidth_bps, drop_policy=c.policy.value, drop_start_ms=c.drop_start_ms,
                      drop_all_ms=c.drop_all_ms, window_ms=c.window_ms, overhead_bytes=c.overhead_bytes)


class RouterControlServicer(pb_grpc.RouterControlServicer):
    def __init__(self, router: StatusRouter) -> None:
        self.router = router

    async def AddChannel(self, request: pb.AddChannelRequest, context: Any) -> pb.AddChannelReply:
        c = request.channel

        def call() -> pb.AddChannelReply:
            kind = _KINDS.get(c.kind)
            if kind is None:
                raise ValidationError(f"channel {c.name!r}: kind must be router, subscriber or publisher",
                                      field="channel.kind")
            address = (c.host, c.port) if c.host else None
            shaping = shaping_from_pb(c.shaping)  # validated before the channel exists
            self.router.add_channel(c.name, peer_id=c.peer_id, kind=kind, address=address, mtu=c.mtu,
                                    capacity=c.capacity, level=c.level or 1, flood_all=c.flood_all,
                                    key=c.key or None)
            if shaping is not None:
                self.router.shape_channel(c.name, shaping)
            return pb.AddChannelReply(table_version=self.router.table.table_version)

        return await _guard(context, call)

    async def UpdateChannel(self, request: pb.UpdateChannelRequest, context: Any) -> pb.AddChannelReply:
        def call() -> pb.AddChannelReply:
            self.router.update_channel(request.name, level=request.level, flood_all=request.flood_all,
                                       key=request.key or None, set_key=request.HasField("key"))
            return pb.AddChannelReply(table_version=self.router.table.table_version)
        return await _guard(context, call)

    async def SetChannelShaping(self, request: pb.SetChannelShapingRequest, context: Any) -> pb.AddChannelReply:
        def call() -> pb.AddChannelReply:
            self.router.shape_channel(request.name, shaping_from_pb(request.shaping))
            return pb.AddChannelReply(table_version=self.router.table.table_version)
        return await _guard(context, call)

    async def RemoveChannel(self, request: pb.RemoveChannelRequest, context: Any) -> pb.RemoveChannelReply:
        def call() -> pb.RemoveChannelReply:
            removed = self.router.remove_channel(request.name)
            return pb.RemoveChannelReply(routes_removed=len(removed),
                                         table_version=self.router.table.table_version)
        return await _guard(context, call)

    async def InstallRoutes(self, request: pb.InstallRoutesRequest, context: Any) -> pb.InstallRoutesReply:
        def call() -> pb.InstallRoutesReply:
            installed = self.router.install_routes([route_from_pb(m) for m in request.routes])
            return pb.InstallRoutesReply(table_version=self.router.table.table_version,
                                         installed=len(installed))
        return await _guard(context, call)

    async def RemoveRoutes(self, request: pb.RemoveRoutesRequest, context: Any) -> pb.RemoveRoutesReply:
        def call() -> pb.RemoveRoutesReply:
            removed = self.router.remove_routes((k.route_id, k.variable_id, k.mode) for k in request.routes)
            return pb.RemoveRoutesReply(table_version=self.router.table.table_version, removed=len(removed))
        return await _guard(context, call)

    async def PrepareRoutes(self, request: pb.PrepareRoutesRequest, context: Any) -> pb.PrepareRoutesReply:
        def call() -> pb.PrepareRoutesReply:
            n = self.router.prepare_routes(
                request.transaction_id, [route_from_pb(m) for m in request.install],
                [(k.route_id, k.variable_id, k.mode) for k in request.remove], ttl_ms=request.ttl_ms or 30_000)
            return pb.PrepareRoutesReply(prepared=n)
        return await _guard(context, call)

    async def CommitRoutes(self, request: pb.RoutesTransaction, context: Any) -> pb.CommitRoutesReply:
        def call() -> pb.CommitRoutesReply:
            installed, removed = self.router.commit_routes(request.transaction_id)
            return pb.CommitRoutesReply(table_version=self.router.table.table_version, installed=installed,
                                        removed=removed)
        return await _guard(context, call)

    async def AbortRoutes(self, request: pb.RoutesTransaction, context: Any) -> pb.AbortRoutesReply:
        return pb.AbortRoutesReply(existed=self.router.abort_routes(request.transaction_id))

    async def SetPubInterval(self, request: pb.SetPubIntervalRequest, context: Any) -> pb.SetPubIntervalReply:
        def call() -> pb.SetPubIntervalReply:
            self.router.table.set_pub_interval(request.variable_id, request.pub_interval_ms)
            return pb.SetPubIntervalReply(table_version=self.router.table.table_version)
        return await _guard(context, call)

    async def SetMode(self, request: pb.SetModeRequest, context: Any) -> pb.SetModeReply:
        def call() -> pb.SetModeReply:
            previous = self.router.set_mode(request.mode)
            return pb.SetModeReply(previous_mode=previous, table_version=self.router.table.table_version)
        return await _guard(context, call)

    async def PrepareMode(self, request: pb.SetModeRequest, context: Any) -> pb.SetModeReply:
        def call() -> pb.SetModeReply:
            previous = self.router.prepare_mode(request.mode)
            return pb.SetModeReply(previous_mode=previous, table_version=self.router.table.table_version)
        return await _guard(context, call)

    async def NotifyMode(self, request: pb.NotifyModeRequest, context: Any) -> pb.NotifyModeReply:
        def call() -> pb.NotifyModeReply:
            if request.phase not in (pb.MODE_PHASE_PREPARE, pb.MODE_PHASE_COMMIT, pb.MODE_PHASE_ABORT):
                raise ValidationError(f"phase {request.phase} is not PREPARE, COMMIT or ABORT", field="phase")
            told = self.router.notify_mode(int(request.phase), request.mode, request.previous_mode,
                                           request.change_id)
            return pb.NotifyModeReply(subscribers=told)
        return await _guard(context, call)

    async def ListRoutes(self, request: pb.ListRoutesRequest, context: Any) -> pb.ListRoutesReply:
        table = self.router.table
        routes = [route_to_pb(r, table.pub_interval(r.variable_id), frames_per_s=table.frames_per_s(r.variable_id))
                  for r in table.routes()]
        flooding = [pb.SetFloodingRequest(variable_id=e.variable_id, pub_interval_ms=e.pub_interval_ms,
                                          level=e.level, modes=e.modes, alert=e.alert)
                    for e in self.router.flooding.entries()]
        return pb.ListRoutesReply(routes=routes, current_mode=table.current_mode,
                                  table_version=table.table_version, flooding=flooding)

    async def ListChannels(self, request: pb.ListChannelsRequest, context: Any) -> pb.ListChannelsReply:
        return pb.ListChannelsReply(channels=[
            pb.Channel(name=ch.name, peer_id=ch.peer_id, kind=_KIND_CODES[ch.kind],
                       host=ch.address[0] if ch.address else "", port=ch.address[1] if ch.address else 0,
                       mtu=ch.mtu, capacity=ch.capacity, level=ch.level, up=ch.up, rtt_ms=ch.rtt_ms,
                       flood_all=ch.flood_all, shaping=shaping_to_pb(ch), authenticated=ch.key is not None)
            for ch in self.router.channels.values()])

    async def SetFlooding(self, request: pb.SetFloodingRequest, context: Any) -> pb.RouterFloodingReply:
        def call() -> pb.RouterFloodingReply:
            self.router.flooding.set(request.variable_id, pub_interval_ms=request.pub_interval_ms,
                                     level=request.level, modes=request.modes, alert=request.alert)
            return pb.RouterFloodingReply(table_version=self.router.table.table_version)
        return await _guard(context, call)

    async def RemoveFlooding(self, request: pb.RemoveFloodingRequest, context: Any) -> pb.RouterFloodingReply:
        def call() -> pb.RouterFloodingReply:
            self.router.flooding.remove(request.variable_id, request.modes)
            return pb.RouterFloodingReply(table_version=self.router.table.table_version)
        return await _guard(context, call)

    async def GetStats(self, request: pb.GetStatsRequest, context: Any) -> pb.RouterStats:
        s = self.router.stats()
        channels = [pb.ChannelStats(**c) for c in s.pop("channels")]
        condensations = [cpb.CondensationStatus(**c) for c in s.pop("condensations", ())]
        if tracemalloc.is_tracing():  # router --tracemalloc (soaks); read here, never on the data path
            s["traced_current_bytes"], s["traced_peak_bytes"] = tracemalloc.get_traced_memory()
            s["tracemalloc"] = True
        s["python_allocated_blocks"] = sys.getallocatedblocks()
        return pb.RouterStats(channels=channels, condensations=condensations, **s)

    async def SetupCondensation(self, request: cpb.CondensationSetup, context: Any) -> pb.SetupCondensationReply:
        def call() -> pb.SetupCondensationReply:
            channel = self.router.condensations.setup(setup_from_message(request))
            return pb.SetupCondensationReply(channel=channel, table_version=self.router.table.table_version)
        return await _guard(context, call)

    async def TerminateCondensation(self, request: pb.TerminateCondensationRequest,
                                    context: Any) -> pb.TerminateCondensationReply:
        return pb.TerminateCondensationReply(existed=self.router.condensations.terminate(request.function_id))

    async def Health(self, request: pb.HealthRequest, context: Any) -> pb.HealthReply:
        r = self.router
        return pb.HealthReply(serving=True, router=r.config.name, table_version=r.table.table_version,
                              channels_down=sum(1 for ch in r.channels.values() if not ch.up),
                              uptime_s=r.uptime_s(), boot_id=r.boot_id, routes=len(r.table),
                              channels=len(r.channels), event_host=r.config.advertise_host,
                              event_port=r.address[1] if r.config.advertise_host else 0)


    async def WatchLinks(self, request: pb.WatchLinksRequest, context: Any) -> AsyncIterator[pb.LinkEvent]:
        queue: asyncio.Queue[pb.LinkEvent] = asyncio.Queue(maxsize=1024)

        def listener(channel: EventChannel, up: bool) -> None:
            if queue.full():  # a slow watcher loses the oldest change, never blocks the router
                queue.get_nowait()
            queue.put_nowait(pb.LinkEvent(channel=channel.name, up=up, at_ms=time.time_ns() // 1_000_000))

        self.router.link_listeners.append(listener)
        try:
            now = time.time_ns() // 1_000_000
            for ch in list(self.router.channels.values()):
                if ch.kind is ChannelKind.ROUTER:
                    yield pb.LinkEvent(channel=ch.name, up=ch.up, at_ms=now, snapshot=True)
            while True:
                yield await queue.get()
        finally:
            self.router.link_listeners.remove(listener)


async def serve(router: StatusRouter, host: str, port: int, tls: TlsFiles | None = None,
                add_services: Callable[[grpc.aio.Server], None] | None = None,
                grants: access.Grants | None = None) -> tuple[grpc.aio.Server, int]:
    """Start the control server on ``host:port`` (0 = any free port); returns it and its port.

    With ``tls`` it serves TLS only (mutual TLS when ``tls.ca`` is set, and then every call is checked
    against the caller's role: ``core.access``). ``add_services`` may add more servicers to the same
    server before it starts (the edge router's ``EdgeProxy``).
    """
    server = grpc.aio.server(interceptors=access.interceptors(tls.ca if tls else "", grants))
    pb_grpc.add_RouterControlServicer_to_server(RouterControlServicer(router), server)  # type: ignore[no-untyped-call]
    if add_services is not None:
        add_services(server)
    if tls is None:
        bound = server.add_insecure_port(f"{host}:{port}")
    else:
        bound = server.add_secure_port(f"{host}:{port}", tls.server_credentials())
    await server.start()
    return server, bound


