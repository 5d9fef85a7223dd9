"""``PdcServer``: GridStat subscriptions served as one C37.118.2-2011 stream (docs/pdc-server.md).

The front object owns its parts by name: ``subscriber`` (the SDK's, one subscription per served variable,
admitted through the broker with the latency bound and redundancy asked), ``stream`` (``ServedStream``:
configuration and aligner, sans I/O), ``commands`` (the counters every client session shares),
``listener`` (TCP, PDC clients) and ``udp`` (spontaneous data, optional). Events go from the
subscriptions' callbacks to the aligner; a ticker task sends the frames whose wait window ended.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gridstat.client import Holder, Subscriber, Subscription
from gridstat.core import clock
from gridstat.core.aio import cancelled, create_guarded_task
from gridstat.core.model import TypeSpec
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError, ValidationError
from gridstat.gateways.pdc.configs import DEFAULT_TIME_BASE, ServedConfig, channel_of_variable
from gridstat.gateways.pdc.session import CommandCounters
from gridstat.gateways.pdc.stream import ServedStream
from gridstat.gateways.pdc.transport import TcpListener, TransportStats, UdpSender

#: The ticker's longest sleep: how late an expired frame may go out when no deadline is known.
TICK_MAX_S = 0.05
UNSUBSCRIBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class PdcServerOptions:
    """What ``PdcServer`` serves and how (``gridstat pdc-server``'s options)."""

    name: str
    edge: str
    #: (``publisher/variable``, type) in the order the channels are served.
    variables: Sequence[tuple[str, TypeSpec]]
    frames_per_s: int
    latency_ms: int = 50
    redundancy: int = 1
    listen: tuple[str, int] = ("127.0.0.1", 4712)
    #: Spontaneous UDP data to this destination (None: TCP only).
    udp_to: tuple[str, int] | None = None
    #: The UDP socket's own address (commands in UDP mode come to it).
    udp_bind: tuple[str, int] = ("127.0.0.1", 0)
    idcode: int = 1
    wait_ms: int = 100
    time_base: int = DEFAULT_TIME_BASE
    max_open_frames: int = 64
    max_clients: int = 64
    #: FREQ/DFREQ as floats, or 16-bit (``ServedConfig.data_format``).
    freq_float: bool = True
    tls: TlsFiles | None = None
    also_edges: Sequence[str] = ()
    subscriber_host: str = "127.0.0.1"
    subscriber_port: int = 0

    @property
    def interval_ms(self) -> int:
        """The subscription interval of the served rate: whole device frames (docs/frame-rates.md)."""
        return round(1000 / self.frames_per_s)


def check_rate(sub: Subscription, frames_per_s: int) -> None:
    """The served rate must take whole frames of the variable's: its frame rate a multiple of the
    served one (or, without a frame rate, its interval 1000 / frames_per_s ms)."""
    var = sub.variable
    if var.frames_per_s:
        if var.frames_per_s % frames_per_s:
            raise ValidationError(f"{var.full_name} is published at {var.frames_per_s} frames/s: the served "
                                  f"{frames_per_s} frames/s is not a divisor of it", field="frames_per_s")
    elif sub.interval_ms * frames_per_s != 1000:
        raise ValidationError(f"{var.full_name} is delivered every {sub.interval_ms} ms, not at "
                              f"{frames_per_s} frames/s", field="frames_per_s")


class PdcServer:
    """One ``gridstat pdc-server``: subscribe, serve, stop."""

    def __init__(self, options: PdcServerOptions) -> None:
        if not options.variables:
            raise ValidationError("a PDC server needs at least one variable", field="variables")
        self.options = options
        self.commands = CommandCounters()
        self.transport_stats = TransportStats()
        self.subscriber: Subscriber | None = None
        self.subscriptions: list[Subscription] = []
        self.stream: ServedStream | None = None
        self.listener: TcpListener | None = None
        self.udp: UdpSender | None = None
        #: Events not taken before the stream existed or of no served variable.
        self.drops: Counter[str] = Counter()
        self._slots: dict[int, int] = {}
        self._ticker: asyncio.Task[None] | None = None

    # -- lifecycle ----------------------------------------------------------------------------------
    async def start(self) -> None:
        """Register, subscribe to every variable, build the stream, listen. On failure everything
        started is stopped again and the error raised (``SubscriptionRejected``, ``UnknownVariable``,
        ``ValidationError``, ``OSError`` of a bind)."""
        o = self.options
        try:
            self.subscriber = await Subscriber.connect(o.name, o.edge, tls=o.tls, first_time=True,
                                                       host=o.subscriber_host, port=o.subscriber_port,
                                                       also_edges=list(o.also_edges))
            for slot, (variable, type_) in enumerate(o.variables):
                sub = await self.subscriber.subscribe_remote(
                    variable, type_, interval_ms=o.interval_ms, latency_ms=o.latency_ms, redundancy=o.redundancy,
                    on_event=self._on_event)
                self.subscriptions.append(sub)
                self._slots[sub.variable.variable_id] = slot
                check_rate(sub, o.frames_per_s)
            config = ServedConfig([channel_of_variable(s.variable) for s in self.subscriptions], idcode=o.idcode,
                                  frames_per_s=o.frames_per_s, time_base=o.time_base, name=o.name,
                                  freq_float=o.freq_float)
            stream = ServedStream(config, wait_ms=o.wait_ms, max_open_frames=o.max_open_frames)
            self.listener = TcpListener(stream, self.commands, self.transport_stats, host=o.listen[0],
                                        port=o.listen[1], max_clients=o.max_clients)
            await self.listener.start()
            if o.udp_to is not None:
                self.udp = UdpSender(stream, self.commands, self.transport_stats, destination=o.udp_to,
                                     host=o.udp_bind[0], port=o.udp_bind[1])
                await self.udp.start()
            self.stream = stream
            self._ticker = create_guarded_task(self._tick(), name=f"pdc-server-{o.name}-ticker")
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Send what is open, close every client, remove the subscriptions at the broker."""
        await cancelled(self._ticker)
        self._ticker = None
        if self.stream is not None:
            self._send(self.stream.flush())
            self.stream = None
        if self.listener is not None:
            await self.listener.stop()
            self.listener = None
        if self.udp is not None:
            await self.udp.stop()
            self.udp = None
        subscriber, self.subscriber = self.subscriber, None
        if subscriber is not None:
            for sub in self.subscriptions:
                with contextlib.suppress(GridStatError, asyncio.TimeoutError, OSError):
                    await asyncio.wait_for(subscriber.unsubscribe_remote(sub), UNSUBSCRIBE_TIMEOUT_S)
            await subscriber.stop()
        self.subscriptions = []
        self._slots = {}

    @property
    def port(self) -> int:
        """The TCP port PDCs connect to."""
        if self.listener is None:
            raise ValidationError("the PDC server is not started", field="state")
        return self.listener.port

    @property
    def udp_port(self) -> int | None:
        if self.udp is None or self.udp.transport is None:
            return None
        return int(self.udp.transport.get_extra_info("sockname")[1])

    # -- events -------------------------------------------------------------------------------------
    def _on_event(self, sub: Subscription, holder: Holder) -> None:
        stream = self.stream
        if stream is None:
            self.drops["before_start"] += 1
            return
        slot = self._slots.get(sub.variable.variable_id)
        if slot is None:
            self.drops["unknown_variable"] += 1
            return
        frames = stream.on_sample(slot, holder.value, holder.timestamp_ms, holder.options, clock.now_ms())
        if frames:
            self._send(frames)

    def _send(self, frames: list[bytes]) -> None:
        listener, udp = self.listener, self.udp
        for f in frames:
            if listener is not None:
                listener.send_data(f)
            if udp is not None:
                udp.send_data(f)

    async def _tick(self) -> None:
        while True:
            stream = self.stream
            if stream is None:
                return
            deadline = stream.aligner.next_deadline_ms()
            delay = TICK_MAX_S if deadline is None else (deadline + 1 - clock.now_ms()) / 1000
            await asyncio.sleep(min(TICK_MAX_S, max(0.001, delay)))
            frames = stream.poll(clock.now_ms())
            if frames:
                self._send(frames)

    # -- reporting ----------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counts since the start (docs/pdc-server.md, "Counters")."""
        stream = self.stream
        aligner = stream.aligner.stats.as_dict() if stream is not None else {}
        drops: dict[str, int] = dict(self.commands.by_reason())
        for source in (self.drops, stream.drops if stream is not None else Counter[str]()):
            for k, n in source.items():
                drops[k] = drops.get(k, 0) + n
        if self.subscriber is not None:
            for k, n in self.subscriber.stats.drops.items():
                drops[f"subscriber_{k}"] = n
        t = self.transport_stats
        return {
            "clients": t.clients, "clients_total": t.clients_total, "clients_refused": t.clients_refused,
            "frames_sent": aligner.get("frames_sent", 0), "frames_complete": aligner.get("frames_complete", 0),
            "frames_incomplete": aligner.get("frames_incomplete", 0), "events": aligner.get("events", 0),
            "events_late": aligner.get("events_late", 0), "aligner": aligner,
            "data_frames_tcp": t.data_frames_tcp, "data_frames_udp": t.data_frames_udp,
            "slow_client": t.slow_client, "commands": dict(self.commands.commands), "drops": drops,
        }
