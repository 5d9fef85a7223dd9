"""The GridStat side of the gateway: one SDK ``Publisher`` per publisher name, a handle per variable
(docs/dnp3.md, "Variables").

``want(spec)`` records a variable; a background task (``run``) connects the publishers through the edge
router and registers what is wanted -- periodic variables at their interval, alerts with ``alert=True``
and their ``min_interval_ms`` -- retrying with a capped back-off while the edge router or its broker is
away. ``publish_periodic`` and ``publish_alert`` are the hot path: a value whose variable is not
registered yet is counted (``events_unpublished``), never queued; periodic values of one publisher with
the same quality go out in one ``publish_many`` (as few datagrams as fit).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gridstat.client import AlertTooEarly, PublicationHandle, Publisher
from gridstat.core import wire
from gridstat.core.model import PRIORITY_HIGH
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError
from gridstat.gateways.dnp3.mapping import PointSpec
from gridstat.gateways.dnp3.points import Alert
from gridstat.gateways.dnp3.stats import Dnp3Stats
from gridstat.gateways.registering import PERMANENT_REASONS as PERMANENT_REASONS  # what it always exported
from gridstat.gateways.registering import VariableRegistrar

log = logging.getLogger(__name__)


class PointPublishers:
    """Publishers by name and handles by ``publisher/variable``."""

    def __init__(self, edge: str, *, stats: Dnp3Stats, tls: TlsFiles | None = None, priority: int = PRIORITY_HIGH,
                 alert_priority: int = 0, timeout_s: float = 10.0, retry_max_s: float = 10.0,
                 attributes: Mapping[str, str] | None = None) -> None:
        self.edge = edge
        self.stats = stats
        self.tls = tls
        self.priority = priority
        self.alert_priority = alert_priority
        self.timeout_s = timeout_s
        self.retry_max_s = retry_max_s
        self.attributes = dict(attributes or {})
        self.registrar = VariableRegistrar[PointSpec](edge, self._register, stats=stats, tls=tls,
                                                      timeout_s=timeout_s, retry_max_s=retry_max_s, log=log)
        #: Publishers by name (the registrar's).
        self.publishers = self.registrar.publishers
        self._handles = self.registrar.handles

    def handle(self, full_name: str) -> PublicationHandle | None:
        return self._handles.get(full_name)

    def want(self, spec: PointSpec) -> None:
        self.registrar.want(spec)

    def publish_periodic(self, ts_ms: int, items: list[tuple[PointSpec, float | bool, wire.DerivedValue]]) -> None:
        stats = self.stats
        handles = self._handles
        groups: dict[tuple[int, wire.DerivedValue], list[tuple[PublicationHandle, object]]] = {}
        for spec, value, option in items:
            handle = handles.get(spec.full_name)
            if handle is None:
                stats.events_unpublished += 1
                continue
            groups.setdefault((id(handle.publisher), option), []).append((handle, value))
        for (_, option), batch in groups.items():
            try:
                batch[0][0].publisher.publish_many(batch, ts_ms, options=(option,))
            except GridStatError:  # a publisher stopped meanwhile
                stats.events_failed += len(batch)
            else:
                stats.events_published += len(batch)

    def publish_alert(self, alert: Alert) -> None:
        stats = self.stats
        handle = self._handles.get(alert.spec.full_name)
        if handle is None:
            stats.events_unpublished += 1
            return
        try:
            handle.publish(alert.value, alert.ts_ms, options=(alert.option,))
        except AlertTooEarly:
            stats.alerts_too_early += 1
        except GridStatError:
            stats.events_failed += 1
        else:
            stats.events_published += 1
            stats.alerts_published += 1

    async def run(self) -> None:
        """Register what is wanted, for ever (cancel to stop)."""
        await self.registrar.run()

    async def _register(self, pub: Publisher, spec: PointSpec) -> PublicationHandle:
        attributes = {**dict(spec.attributes), **self.attributes}
        if spec.alert:
            return await pub.register(spec.variable, spec.type, spec.min_interval_ms, alert=True,
                                      min_interval_ms=spec.min_interval_ms, attributes=attributes,
                                      priority=self.alert_priority)
        return await pub.register(spec.variable, spec.type, spec.interval_ms, attributes=attributes,
                                  priority=self.priority)

    async def close(self) -> None:
        await self.registrar.close()
