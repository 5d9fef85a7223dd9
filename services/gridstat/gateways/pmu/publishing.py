"""The GridStat side of the gateway: one SDK ``Publisher`` per station, a handle per variable.

``want(plan)`` records the variables of a stream; a background task (``run``) connects the publishers
(``Publisher.connect`` through the edge router's control port) and registers every variable not yet
registered, or registered with another type, interval or attributes, retrying with a capped back-off
while the edge router or its broker is unavailable. ``publish(sample)`` is the hot path: once every
variable of a PMU block is registered, the block is one ``EventBlock`` per publisher -- one encoding
and one non-blocking UDP datagram per block of a frame (client/blocks.py); before that, a dictionary
lookup per value, and a value whose variable is not registered yet is counted
(``events_unpublished``), never queued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from gridstat.client import EdgeSession, EventBlock, PublicationHandle, Publisher
from gridstat.core.model import PRIORITY_HIGH
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError, ValidationError
from gridstat.gateways.pmu.mapping import ChannelSpec, StreamPlan
from gridstat.gateways.pmu.session import Sample
from gridstat.gateways.pmu.stats import GatewayStats

log = logging.getLogger(__name__)

#: Refusals that retrying cannot fix (the request is wrong or not allowed): the variable is left out.
PERMANENT_REASONS = frozenset({"InvalidArgument", "TypeMismatch", "Unauthorized", "PermissionDenied",
                               "Unauthenticated", "AlreadyExists", "ValidationError"})


#: PMU blocks of one stream at most (NUM_PMU is a u16): what the event-block cache is sized by.
MAX_BLOCKS = 0xFFFF


class StationPublishers:
    """Publishers by name and handles by ``publisher/variable``."""

    def __init__(self, edge: str, *, stats: GatewayStats, tls: TlsFiles | None = None,
                 priority: int = PRIORITY_HIGH, timeout_s: float = 10.0, retry_max_s: float = 10.0,
                 only: frozenset[str] | None = None, attributes: Mapping[str, str] | None = None) -> None:
        self.edge = edge
        #: Attributes added to every variable's own (over them): what the device's configuration does not
        #: say, e.g. the station's region and voltage level from a topology file (docs/topology.md, "Stations").
        self.attributes = dict(attributes or {})
        #: Publish only these ``publisher/variable`` names (None: every channel); the others are
        #: neither registered nor sent, as if the device did not have them.
        self.only = only
        self.stats = stats
        self.tls = tls
        self.priority = priority
        self.timeout_s = timeout_s
        self.retry_max_s = retry_max_s
        self.publishers: dict[str, Publisher] = {}
        self._handles: dict[str, PublicationHandle] = {}
        self._registered: dict[str, ChannelSpec] = {}
        self._wanted: dict[str, ChannelSpec] = {}
        #: Variables the broker refused for good (TypeMismatch, ...): not asked again until they change.
        self._refused: dict[str, ChannelSpec] = {}
        self._session: EdgeSession | None = None
        #: Per PMU block (by identity): (its BlockPlan, the handles' version it was made at, its event
        #: blocks with the indexes of their values, or None while a variable is not registered).
        self._blocks: dict[int, tuple[object, int, list[tuple[EventBlock, list[int]]] | None]] = {}
        #: Bumped whenever a handle comes or goes: the event blocks are made again.
        self._version = 0
        self._wake = asyncio.Event()
        self._last_error = ""

    @property
    def registered(self) -> dict[str, ChannelSpec]:
        return dict(self._registered)

    def restrict(self, only: frozenset[str] | None) -> None:
        """From now on publish (and register) only ``only`` (None: every channel)."""
        self.only = only
        self._version += 1

    def handle(self, full_name: str) -> PublicationHandle | None:
        """The registered variable ``publisher/variable``, or None."""
        return self._handles.get(full_name)

    def want(self, plan: StreamPlan) -> None:
        """Register the variables of ``plan`` (in the background). A variable whose type or rate changed
        is registered again and not published until the broker takes it (it refuses a registered name
        of another type: ``registration_errors``); one whose attributes alone changed keeps its
        registration."""
        for spec in plan.channels:
            name = spec.full_name
            if self.only is not None and name not in self.only:
                continue
            self._wanted[name] = spec
            old = self._registered.get(name)
            if old is None or old == spec:
                continue
            if (old.type, old.interval_ms, old.frames_per_s) == (spec.type, spec.interval_ms, spec.frames_per_s):
                self._registered[name] = spec  # attributes alone: the broker keeps the first ones
            else:
                self._handles.pop(name, None)
                self._version += 1
        self._wake.set()

    def publish(self, sample: Sample) -> None:
        """Every value of ``sample`` with its device time (hot path: no logging, no blocking)."""
        stats = self.stats
        block = sample.block
        cached = self._blocks.get(id(block))
        if cached is None or cached[0] is not block or cached[1] != self._version:
            cached = (block, self._version, self._event_blocks(block.full_names))
            self._blocks[id(block)] = cached
        groups = cached[2]
        if groups is not None:
            options = (sample.device_time,)
            values = sample.values
            for event_block, indexes in groups:
                try:
                    n = event_block.publish([values[i] for i in indexes], sample.ts_ms, options)
                except GridStatError:  # a publisher stopped meanwhile, or a value its type refuses
                    stats.events_failed += len(indexes)
                else:
                    stats.events_published += n
            return
        handles = self._handles
        # One station's block of one instant, packed into as few datagrams as fit: per publisher, since
        # a map (--map) may publish a station's channels under other publishers' names.
        by_publisher: dict[int, list[tuple[PublicationHandle, object]]] = {}
        for name, value in zip(sample.block.full_names, sample.values, strict=True):
            handle = handles.get(name)
            if handle is None:
                if self.only is None or name in self.only:
                    stats.events_unpublished += 1
            else:
                by_publisher.setdefault(id(handle.publisher), []).append((handle, value))
        options = (sample.device_time,)
        for items in by_publisher.values():
            try:
                items[0][0].publisher.publish_many(items, sample.ts_ms, options=options)
            except GridStatError:  # a publisher stopped meanwhile, or a value its type refuses
                stats.events_failed += len(items)
            else:
                stats.events_published += len(items)

    async def run(self) -> None:
        """Register what is wanted, for ever (cancel to stop)."""
        delay_s = 0.5
        while True:
            await self._wake.wait()
            self._wake.clear()
            while todo := [s for n, s in self._wanted.items()
                           if self._registered.get(n) != s and self._refused.get(n) != s]:
                try:
                    for spec in todo:
                        await self._register(spec)
                except GridStatError as exc:
                    self.stats.registration_errors += 1
                    if isinstance(exc, ValidationError) or exc.reason in PERMANENT_REASONS:
                        self._refused[spec.full_name] = spec
                        log.error("%s refused: %s", spec.full_name, exc)
                        continue
                    self._note(f"registering with edge router {self.edge} failed: {exc}")
                    await asyncio.sleep(delay_s)
                    delay_s = min(self.retry_max_s, delay_s * 2)
                else:
                    delay_s = 0.5
                    self._note("")

    def _event_blocks(self, names: tuple[str, ...]) -> list[tuple[EventBlock, list[int]]] | None:
        """The event blocks of a PMU block's variables, one per publisher (a map may publish a
        station's channels under several publishers' names); None while one is not registered."""
        by_publisher: dict[int, list[int]] = {}
        only = self.only
        for i, name in enumerate(names):
            if only is not None and name not in only:
                continue
            handle = self._handles.get(name)
            if handle is None:
                return None
            by_publisher.setdefault(id(handle.publisher), []).append(i)
        if len(self._blocks) > 4 * MAX_BLOCKS:  # plans replaced by configuration changes: forget them
            self._blocks.clear()
        return [(EventBlock([self._handles[names[i]] for i in idx]), idx) for idx in by_publisher.values()]

    def _note(self, error: str) -> None:
        """Log a failure when it differs from the last one, and the recovery (state changes only)."""
        if error != self._last_error:
            if error:
                log.warning("%s", error)
            elif self._last_error:
                log.warning("registering with edge router %s works again", self.edge)
            self._last_error = error

    async def _register(self, spec: ChannelSpec) -> None:
        pub = self.publishers.get(spec.publisher)
        if pub is None:
            if self._session is None:
                self._session = EdgeSession(self.edge, tls=self.tls, timeout_s=self.timeout_s, attempts=1)
            pub = await Publisher.connect(spec.publisher, self.edge, tls=self.tls, session=self._session)
            self.publishers[spec.publisher] = pub
            self.stats.publishers = len(self.publishers)
        handle = await pub.register(spec.variable, spec.type, spec.interval_ms, frames_per_s=spec.frames_per_s,
                                    attributes={**spec.attributes_dict, **self.attributes}, priority=self.priority)
        self._handles[spec.full_name] = handle
        self._version += 1
        self._registered[spec.full_name] = spec
        self._refused.pop(spec.full_name, None)
        self.stats.registrations += 1

    async def close(self) -> None:
        for pub in self.publishers.values():
            await pub.stop()
        self.publishers.clear()
        self._handles.clear()
        self._version += 1
        if self._session is not None:
            await self._session.close()
            self._session = None
