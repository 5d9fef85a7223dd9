"""The GridStat side of the gateway: one SDK ``Publisher`` per publisher name, an alert variable per point.

``run`` connects the publishers through the edge router and registers every point of the map as an
alert variable (``alert=True`` with the point's ``min_interval_ms``: GOOSE is sent on change, so every
new state is an alert, docs/goose.md "Variables"), retrying with a capped back-off while the edge
router or its broker is away. ``publish(points)`` is the hot path: the points of one state, grouped by
publisher and by their DEVICE_TIME option (the quality), one ``publish_many`` each; a point whose
variable is not registered yet is counted (``points_unpublished``), never queued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from gridstat.client import EdgeSession, PublicationHandle, Publisher
from gridstat.core import wire
from gridstat.core.model import PRIORITY_ALERT
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError, ValidationError
from gridstat.gateways.goose.mapping import PointSpec
from gridstat.gateways.goose.stats import GooseStats
from gridstat.gateways.goose.subscribing import Point

log = logging.getLogger(__name__)

#: Refusals that retrying cannot fix: the variable is left out (as the pmu gateway does).
PERMANENT_REASONS = frozenset({"InvalidArgument", "TypeMismatch", "Unauthorized", "PermissionDenied",
                               "Unauthenticated", "AlreadyExists", "ValidationError"})


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
        self.publishers: dict[str, Publisher] = {}
        self.handles: dict[str, PublicationHandle] = {}
        self._refused: set[str] = set()
        self._session: EdgeSession | None = None
        self._last_error = ""

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
        delay_s = 0.5
        while todo := [p for p in self.points if p.full_name not in self.handles and p.full_name not in self._refused]:
            spec = todo[0]
            try:
                await self._register(spec)
            except GridStatError as exc:
                self.stats.registration_errors += 1
                if isinstance(exc, ValidationError) or exc.reason in PERMANENT_REASONS:
                    self._refused.add(spec.full_name)
                    log.error("%s refused: %s", spec.full_name, exc)
                    continue
                self._note(f"registering with edge router {self.edge} failed: {exc}")
                await asyncio.sleep(delay_s)
                delay_s = min(self.retry_max_s, delay_s * 2)
            else:
                delay_s = 0.5
                self._note("")

    def _note(self, error: str) -> None:
        if error != self._last_error:
            if error:
                log.warning("%s", error)
            elif self._last_error:
                log.warning("registering with edge router %s works again", self.edge)
            self._last_error = error

    async def _register(self, spec: PointSpec) -> None:
        pub = self.publishers.get(spec.publisher)
        if pub is None:
            if self._session is None:
                self._session = EdgeSession(self.edge, tls=self.tls, timeout_s=self.timeout_s, attempts=1)
            pub = await Publisher.connect(spec.publisher, self.edge, tls=self.tls, session=self._session)
            self.publishers[spec.publisher] = pub
            self.stats.publishers = len(self.publishers)
        attributes = {"kind": spec.kind, "protocol": "goose", **dict(spec.attributes), **self.attributes}
        self.handles[spec.full_name] = await pub.register(
            spec.variable, spec.type, 0, alert=True, min_interval_ms=spec.min_interval_ms, priority=self.priority,
            attributes=attributes)
        self.stats.registrations += 1

    async def close(self) -> None:
        for pub in self.publishers.values():
            await pub.stop()
        self.publishers.clear()
        self.handles.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None
