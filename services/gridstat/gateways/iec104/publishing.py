"""The GridStat side of the gateway: one SDK ``Publisher`` per publisher name, a handle per variable.

``publish(values, now_ms)`` is the hot path. Each value finds its variable (``mapping.PointMap``; the
first value of an information object makes it wanted, registered in the background by ``run``).
Measured values of one publisher, one timestamp and one IEC104 option (``quality.option``: an ASDU's
cyclic values of good quality) go out together with ``Publisher.publish_many``, one datagram; a point
is an alert, sent on its own (``AlertTooEarly`` when closer than its ``min_interval_ms``:
``alerts_too_early``); a point's state sent again with the same time, value and quality (a general
interrogation's answer after a reconnect) is not an alert again (``alerts_repeated``). A value whose
variable is not registered yet is counted (``events_unpublished``), never queued.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gridstat.client import AlertTooEarly, PublicationHandle, Publisher
from gridstat.core import wire
from gridstat.core.model import PRIORITY_ALERT, PRIORITY_HIGH
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError
from gridstat.gateways.iec104.asdu import PointValue
from gridstat.gateways.iec104.errors import DropReason
from gridstat.gateways.iec104.mapping import PointMap, PointSpec
from gridstat.gateways.iec104.quality import option
from gridstat.gateways.iec104.stats import GatewayStats
from gridstat.gateways.registering import PERMANENT_REASONS as PERMANENT_REASONS  # what it always exported
from gridstat.gateways.registering import VariableRegistrar

log = logging.getLogger(__name__)


class PointPublishers:
    """Publishers by name, the variable of each information object, and handles by ``publisher/variable``."""

    def __init__(self, edge: str, *, stats: GatewayStats, points: PointMap | None = None,
                 tls: TlsFiles | None = None, priority: int = PRIORITY_HIGH, timeout_s: float = 10.0,
                 retry_max_s: float = 10.0, attributes: Mapping[str, str] | None = None) -> None:
        self.edge = edge
        self.points = points or PointMap()
        #: Attributes added to every variable's own (over them), e.g. a station's region from a topology file.
        self.attributes = dict(attributes or {})
        self.stats = stats
        self.tls = tls
        self.priority = priority
        self.timeout_s = timeout_s
        self.retry_max_s = retry_max_s
        self.registrar = VariableRegistrar[PointSpec](edge, self._register, stats=stats, tls=tls,
                                                      timeout_s=timeout_s, retry_max_s=retry_max_s, log=log)
        #: Publishers by name (the registrar's).
        self.publishers = self.registrar.publishers
        #: The variable of each information object seen, by (common address, IOA); None: unmapped.
        self.specs: dict[tuple[int, int], PointSpec | None] = {}
        self._handles = self.registrar.handles
        self._wanted = self.registrar.wanted
        #: The last alert sent per variable: (time, value, quality), to leave out exact repeats.
        self._last_alert: dict[str, tuple[int, object, int]] = {}
        for spec in self.points.declared():
            self.specs[(spec.common_address, spec.ioa)] = spec
            self._want(spec)

    def handle(self, full_name: str) -> PublicationHandle | None:
        return self._handles.get(full_name)

    @property
    def wanted(self) -> dict[str, PointSpec]:
        return dict(self._wanted)

    def _want(self, spec: PointSpec) -> None:
        self.registrar.want(spec)

    def spec_of(self, value: PointValue) -> PointSpec | None:
        """The variable of ``value`` (counted and None when unmapped or of another kind than its variable)."""
        key = (value.common_address, value.ioa)
        specs = self.specs
        if key in specs:
            spec = specs[key]
        else:
            spec = specs[key] = self.points.spec_of(value)
            if spec is not None:
                if spec.full_name in self._wanted:  # two addresses mapped to one name: the first keeps it
                    specs[key] = None
                    self.stats.drops.count(DropReason.NAME_TAKEN)
                    return None
                self._want(spec)
        if spec is None:
            self.stats.drops.count(DropReason.UNMAPPED if self.points.only_mapped else DropReason.NAME_TAKEN)
            return None
        if spec.kind is not value.kind:
            self.stats.drops.count(DropReason.KIND_MISMATCH)
            return None
        return spec

    def publish(self, values: list[PointValue], now_ms: int) -> None:
        """Every value with its time and IEC104 option (hot path: no logging, no blocking)."""
        stats = self.stats
        handles = self._handles
        groups: dict[tuple[int, int, wire.DerivedValue], list[tuple[PublicationHandle, object]]] = {}
        for value in values:
            spec = self.spec_of(value)
            if spec is None:
                continue
            handle = handles.get(spec.full_name)
            if handle is None:
                stats.events_unpublished += 1
                continue
            ts = value.time_ms if value.time_ms is not None else now_ms
            opt = option(value)
            if spec.alert:
                last = self._last_alert.get(spec.full_name)
                if last is not None and last == (ts, value.value, value.quality):
                    stats.alerts_repeated += 1  # an interrogation's answer of a state already sent
                    continue
                self._last_alert[spec.full_name] = (ts, value.value, value.quality)
                try:
                    handle.publish(value.value, ts, options=(opt,))
                except AlertTooEarly:
                    stats.alerts_too_early += 1
                except GridStatError:
                    stats.events_failed += 1
                else:
                    stats.events_published += 1
                    stats.alerts_published += 1
            else:
                groups.setdefault((id(handle.publisher), ts, opt), []).append((handle, value.value))
        for (_pub, ts, opt), items in groups.items():
            try:
                items[0][0].publisher.publish_many(items, ts, options=(opt,))
            except GridStatError:  # a publisher stopped meanwhile, or a value its type refuses
                stats.events_failed += len(items)
            else:
                stats.events_published += len(items)

    async def run(self) -> None:
        """Register what is wanted, for ever (cancel to stop)."""
        await self.registrar.run()

    async def _register(self, pub: Publisher, spec: PointSpec) -> PublicationHandle:
        attributes = {**spec.attributes_dict, **self.attributes}
        if spec.alert:
            return await pub.register(spec.variable, spec.type, 0, priority=PRIORITY_ALERT,
                                      alert=True, min_interval_ms=spec.min_interval_ms, attributes=attributes)
        return await pub.register(spec.variable, spec.type, spec.interval_ms, priority=self.priority,
                                  attributes=attributes)

    async def close(self) -> None:
        await self.registrar.close()
