"""The GridStat side of the gateway: one SDK ``Publisher`` per publisher name, an alert variable per point.

``run`` connects the publishers through the edge router and registers every point of the map as an
alert variable (``alert=True`` with the point's ``min_interval_ms``: GOOSE is sent on change, so every
new state is an alert, docs/goose.md "Variables"), retrying with a capped back-off while the edge
router or its broker is away. ``publish(points)`` is the hot path: the points of one state, grouped by
publisher and by their DEVICE_TIME option (the quality), one ``publish_many`` each; a point whose
variable is not registered yet is counted (``points_unpublished``), never queued.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from gridstat.client import PublicationHandle, Publisher
from gridstat.core import wire
from gridstat.core.model import PRIORITY_ALERT
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError
from gridstat.gateways.goose.mapping import PointSpec
from gridstat.gateways.goose.stats import GooseStats
from gridstat.gateways.goose.subscribing import Point
from gridstat.gateways.registering import PERMANENT_REASONS as PERMANENT_REASONS  # what it always exported
from gridstat.gateways.registering import VariableRegistrar

log = logging.getLogger(__name__)


class PointPublishers:
    """Publishers by name and handles by ``publisher/variable``."""

    def __init__(self, edge: str, points: Sequence[PointSpec], *, stats: GooseStats, tls: TlsFiles | None = None,
                 priority: int = PRIORITY_ALERT, timeout_s: float = 10.0, retry_max_s: float = 10.0,
                 attributes: Mapping[str, str] | None = None) -> None:
        self.edge = edge
        self.points = list(points)
        self.stats = stats
        self.tls = tls
        self.priority = priority
        self.timeout_s = timeout_s
        self.retry_max_s = retry_max_s
        self.attributes = dict(attributes or {})
        self.registrar = VariableRegistrar[PointSpec](edge, self._register, stats=stats, tls=tls,
                                                      timeout_s=timeout_s, retry_max_s=retry_max_s, log=log)
        #: Publishers by name and handles by ``publisher/variable`` (the registrar's).
        self.publishers = self.registrar.publishers
        self.handles = self.registrar.handles
        for spec in self.points:
            self.registrar.want(spec)

    def publish(self, points: Sequence[Point]) -> None:
        """The points of one new state (hot path: no logging, no blocking)."""
        stats = self.stats
        handles = self.handles
        groups: dict[tuple[int, wire.DerivedValue, int], list[tuple[PublicationHandle, object]]] = {}
        for p in points:
            handle = handles.get(p.spec.full_name)
            if handle is None:
                stats.points_unpublished += 1
                continue
            groups.setdefault((id(handle.publisher), p.device_time, p.ts_ms), []).append((handle, p.value))
        for (_, device_time, ts_ms), items in groups.items():
            try:
                items[0][0].publisher.publish_many(items, ts_ms, options=(device_time,))
            except GridStatError:  # AlertTooEarly (min_interval_ms), a stopped publisher, a refused value
                stats.points_failed += len(items)
            else:
                stats.points_published += len(items)

    async def run(self) -> None:
        """Register every point, retrying until each is registered or refused for good (cancel to stop)."""
        await self.registrar.settle()

    async def _register(self, pub: Publisher, spec: PointSpec) -> PublicationHandle:
        attributes = {"kind": spec.kind, "protocol": "goose", **dict(spec.attributes), **self.attributes}
        return await pub.register(spec.variable, spec.type, 0, alert=True, min_interval_ms=spec.min_interval_ms,
                                  priority=self.priority, attributes=attributes)

    async def close(self) -> None:
        await self.registrar.close()
