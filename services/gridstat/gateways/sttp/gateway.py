"""``SttpGateway``: an STTP publisher's measurements republished as GridStat status variables
(``gridstat sttp-gateway``, docs/sttp.md).

The front object owns its parts by name: ``source`` (``library.SourceSubscriber``: the sttpapi
subscriber, on the library's threads), ``publishers`` (the SDK's, one per device, over one edge
session) and ``stats``. The library's callbacks are handed to the event loop
(``call_soon_threadsafe``): metadata becomes a plan of variables (``mapping.plan_republish``),
registered in the background with a capped back-off; each measurement is published once its
variable is registered, with its own time (``ts_ms`` rounded down to the millisecond, and the exact
tick and the state flags STAT can hold in the DEVICE_TIME option: ``mapping.device_time_of_ticks``),
and counted (``unregistered``, ``unknown_signal``) otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gridstat.client import EdgeSession, PublicationHandle, Publisher
from gridstat.core import wire
from gridstat.core.model import FLOAT, PRIORITY_HIGH
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError, ValidationError
from gridstat.gateways.sttp import library, mapping

log = logging.getLogger(__name__)

#: Refusals that retrying cannot fix: the variable is left out (as the pmu-gateway does).
PERMANENT_REASONS = frozenset({"InvalidArgument", "TypeMismatch", "Unauthorized", "PermissionDenied",
                               "Unauthenticated", "AlreadyExists", "ValidationError"})


@dataclass
class _Batch:
    """Values of one publisher at one instant with one STAT: one ``publish_many``."""

    publisher: Publisher
    ts_ms: int
    option: wire.DerivedValue
    items: list[tuple[PublicationHandle, object]] = field(default_factory=list)


@dataclass(frozen=True)
class SttpGatewayOptions:
    """``gridstat sttp-gateway``'s options."""

    source: str
    edge: str
    filter_expression: str = "FILTER ActiveMeasurements WHERE SignalID IS NOT NULL"
    #: The variables' frame rate (0: each device's FramesPerSecond from the metadata).
    frames_per_s: int = 0
    #: All variables under this publisher (None: one publisher per device).
    publisher: str | None = None
    priority: int = PRIORITY_HIGH
    tls: TlsFiles | None = None
    edge_timeout_s: float = 10.0
    retry_max_s: float = 10.0


class SttpGateway:
    """An STTP publisher's measurements as GridStat float variables."""

    def __init__(self, options: SttpGatewayOptions) -> None:
        self.options = options
        self.source: library.SourceSubscriber | None = None
        self.publishers: dict[str, Publisher] = {}
        self.plan: dict[uuid.UUID, mapping.RepublishedVariable] = {}
        self.refused: dict[uuid.UUID, str] = {}
        self.handles: dict[uuid.UUID, PublicationHandle] = {}
        self.stats: Counter[str] = Counter()
        self.drops: Counter[str] = Counter()
        self.connected = False
        self._session: EdgeSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._registering: asyncio.Task[None] | None = None
        self._last_error = ""

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        o = self.options
        self.source = library.SourceSubscriber(
            o.source, o.filter_expression, on_metadata=self._threadsafe(self._on_metadata),
            on_measurements=self._threadsafe(self._on_measurements),
            on_connection=self._threadsafe(self._on_connection))
        self._registering = asyncio.ensure_future(self._register_loop())
        self.source.start()

    async def stop(self) -> None:
        source, self.source = self.source, None
        if source is not None:
            await asyncio.to_thread(source.stop)
        if self._registering is not None:
            self._registering.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._registering
            self._registering = None
        for pub in self.publishers.values():
            with contextlib.suppress(GridStatError, OSError):
                await pub.stop()
        self.publishers.clear()
        self.handles.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _threadsafe(self, fn: Any) -> Any:
        loop = self._loop
        assert loop is not None

        def call(arg: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed while the library still ran
                loop.call_soon_threadsafe(fn, arg)
        return call

    # -- the library's callbacks, on the loop -----------------------------------------------------
    def _on_connection(self, up: bool) -> None:
        self.connected = up
        self.stats["connects" if up else "disconnects"] += 1

    def _on_metadata(self, records: list[mapping.SourceMeasurement]) -> None:
        self.stats["metadata"] += 1
        variables, refused = mapping.plan_republish(records, frames_per_s=self.options.frames_per_s,
                                                    publisher=self.options.publisher)
        self.refused = refused
        for v in variables:
            old = self.plan.get(v.signal_id)
            if old is not None and old != v:
                self.handles.pop(v.signal_id, None)  # registered again with what changed
            self.plan[v.signal_id] = v
        self._wake.set()

    def _on_measurements(self, points: list[library.Point]) -> None:
        """One callback's measurements, published per publisher and instant (one datagram where they
        fit, client/publisher.py ``publish_many``), each with its DEVICE_TIME option."""
        batches: dict[tuple[int, int, int], _Batch] = {}
        for sid, ticks, value, flags in points:
            self.stats["measurements"] += 1
            handle = self.handles.get(sid)
            if handle is None:
                self.drops["unknown_signal" if sid not in self.plan else "unregistered"] += 1
                continue
            ts_ms, exact = mapping.ms_of_ticks(ticks)
            if ts_ms < 0:
                self.drops["bad_timestamp"] += 1
                continue
            if not exact:
                self.stats["sub_ms_timestamp"] += 1
            stat, fracsec, time_base = mapping.device_time_of_ticks(ticks, flags)
            if stat:
                self.stats["flagged"] += 1
            key = (id(handle.publisher), ticks, stat)
            batch = batches.get(key)
            if batch is None:
                batch = batches[key] = _Batch(handle.publisher, ts_ms, wire.device_time(stat, fracsec, time_base))
            batch.items.append((handle, value))
        for batch in batches.values():
            try:
                batch.publisher.publish_many(batch.items, batch.ts_ms, options=(batch.option,))
            except GridStatError:
                self.drops["publish_failed"] += len(batch.items)
            else:
                self.stats["events_published"] += len(batch.items)

    # -- registering ------------------------------------------------------------------------------
    async def _register_loop(self) -> None:
        delay_s = 0.5
        while True:
            await self._wake.wait()
            self._wake.clear()
            while todo := [v for sid, v in self.plan.items() if sid not in self.handles and sid not in self.refused]:
                try:
                    for v in todo:
                        await self._register(v)
                except GridStatError as exc:
                    self.stats["registration_errors"] += 1
                    if isinstance(exc, ValidationError) or exc.reason in PERMANENT_REASONS:
                        self.refused[v.signal_id] = "registration_refused"
                        log.error("%s refused: %s", v.full_name, exc)
                        continue
                    self._note(f"registering with edge router {self.options.edge} failed: {exc}")
                    await asyncio.sleep(delay_s)
                    delay_s = min(self.options.retry_max_s, delay_s * 2)
                else:
                    delay_s = 0.5
                    self._note("")

    async def _register(self, v: mapping.RepublishedVariable) -> None:
        o = self.options
        pub = self.publishers.get(v.publisher)
        if pub is None:
            if self._session is None:
                self._session = EdgeSession(o.edge, tls=o.tls, timeout_s=o.edge_timeout_s, attempts=1)
            pub = await Publisher.connect(v.publisher, o.edge, tls=o.tls, session=self._session)
            self.publishers[v.publisher] = pub
        handle = await pub.register(v.variable, FLOAT, v.interval_ms, frames_per_s=v.frames_per_s,
                                    attributes=dict(v.attributes), priority=o.priority)
        self.handles[v.signal_id] = handle
        self.stats["registrations"] += 1

    def _note(self, error: str) -> None:
        if error != self._last_error:
            if error:
                log.warning("%s", error)
            elif self._last_error:
                log.warning("registering with edge router %s works again", self.options.edge)
            self._last_error = error

    # -- reporting --------------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        """Counts since the start (docs/sttp.md, "Counters")."""
        refused = Counter(self.refused.values())
        changes = self.source.configuration_changes if self.source is not None else 0
        return {"connected": self.connected, "variables": len(self.plan), "registered": len(self.handles),
                "publishers": len(self.publishers), "configuration_changes": changes, **dict(self.stats),
                "refused": dict(refused),
                "drops": dict(self.drops)}
