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

import logging
from collections.abc import Mapping

from gridstat.client import EventBlock, PublicationHandle, Publisher
from gridstat.core.model import PRIORITY_HIGH
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError
from gridstat.gateways.pmu.mapping import ChannelSpec, StreamPlan
from gridstat.gateways.pmu.session import Sample
from gridstat.gateways.pmu.stats import GatewayStats
from gridstat.gateways.registering import PERMANENT_REASONS as PERMANENT_REASONS  # what it always exported
from gridstat.gateways.registering import VariableRegistrar

log = logging.getLogger(__name__)


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
        self.registrar = VariableRegistrar[ChannelSpec](edge, self._register, stats=stats, tls=tls,
                                                        timeout_s=timeout_s, retry_max_s=retry_max_s, log=log)
        #: Publishers by name (the registrar's).
        self.publishers = self.registrar.publishers
        self._handles = self.registrar.handles
        #: Per PMU block (by identity): (its BlockPlan, the registrar's version it was made at -- bumped
        #: whenever a handle comes or goes --, its event blocks with the indexes of their values, or None
        #: while a variable is not registered).
        self._blocks: dict[int, tuple[object, int, list[tuple[EventBlock, list[int]]] | None]] = {}

    @property
    def registered(self) -> dict[str, ChannelSpec]:
        return dict(self.registrar.registered)

    def restrict(self, only: frozenset[str] | None) -> None:
        """From now on publish (and register) only ``only`` (None: every channel)."""
        self.only = only
        self.registrar.version += 1  # the event blocks are made again

    def handle(self, full_name: str) -> PublicationHandle | None:
        """The registered variable ``publisher/variable``, or None."""
        return self._handles.get(full_name)

    def want(self, plan: StreamPlan) -> None:
        """Register the variables of ``plan`` (in the background). A variable whose type or rate changed
        is registered again and not published until the broker takes it (it refuses a registered name
        of another type: ``registration_errors``); one whose attributes alone changed keeps its
        registration."""
        registrar = self.registrar
        registered = registrar.registered
        for spec in plan.channels:
            name = spec.full_name
            if self.only is not None and name not in self.only:
                continue
            registrar.wanted[name] = spec
            old = registered.get(name)
            if old is None or old == spec:
                continue
            if (old.type, old.interval_ms, old.frames_per_s) == (spec.type, spec.interval_ms, spec.frames_per_s):
                registered[name] = spec  # attributes alone: the broker keeps the first ones
            else:
                registrar.forget(name)
        registrar.wake()

    def publish(self, sample: Sample) -> None:
        """Every value of ``sample`` with its device time (hot path: no logging, no blocking)."""
        stats = self.stats
        block = sample.block
        version = self.registrar.version
        cached = self._blocks.get(id(block))
        if cached is None or cached[0] is not block or cached[1] != version:
            cached = (block, version, self._event_blocks(block.full_names))
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
        await self.registrar.run()

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

    async def _register(self, pub: Publisher, spec: ChannelSpec) -> PublicationHandle:
        return await pub.register(spec.variable, spec.type, spec.interval_ms, frames_per_s=spec.frames_per_s,
                                  attributes={**spec.attributes_dict, **self.attributes}, priority=self.priority)

    async def close(self) -> None:
        await self.registrar.close()
