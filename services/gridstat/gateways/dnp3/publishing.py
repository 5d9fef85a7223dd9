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

import asyncio
import logging
from collections.abc import Mapping

from gridstat.client import AlertTooEarly, EdgeSession, PublicationHandle, Publisher
from gridstat.core import wire
from gridstat.core.model import PRIORITY_HIGH
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError, ValidationError
from gridstat.gateways.dnp3.mapping import PointSpec
from gridstat.gateways.dnp3.points import Alert
from gridstat.gateways.dnp3.stats import Dnp3Stats

log = logging.getLogger(__name__)

#: Refusals that retrying cannot fix: the variable is left out (as gateways/pmu/publishing.py).
PERMANENT_REASONS = frozenset({"InvalidArgument", "TypeMismatch", "Unauthorized", "PermissionDenied",
                               "Unauthenticated", "AlreadyExists", "ValidationError"})


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
        self.publishers: dict[str, Publisher] = {}
        self._handles: dict[str, PublicationHandle] = {}
        self._wanted: dict[str, PointSpec] = {}
        self._refused: set[str] = set()
        self._session: EdgeSession | None = None
        self._wake = asyncio.Event()
        self._last_error = ""

    def handle(self, full_name: str) -> PublicationHandle | None:
        return self._handles.get(full_name)

    def want(self, spec: PointSpec) -> None:
        self._wanted[spec.full_name] = spec
        self._wake.set()

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
        delay_s = 0.5
        while True:
            await self._wake.wait()
            self._wake.clear()
            while todo := [s for n, s in self._wanted.items() if n not in self._handles and n not in self._refused]:
                spec = todo[0]
                try:
                    for spec in todo:
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
        attributes = {**dict(spec.attributes), **self.attributes}
        if spec.alert:
            handle = await pub.register(spec.variable, spec.type, spec.min_interval_ms, alert=True,
                                        min_interval_ms=spec.min_interval_ms, attributes=attributes,
                                        priority=self.alert_priority)
        else:
            handle = await pub.register(spec.variable, spec.type, spec.interval_ms, attributes=attributes,
                                        priority=self.priority)
        self._handles[spec.full_name] = handle
        self.stats.registrations += 1

    async def close(self) -> None:
        for pub in self.publishers.values():
            await pub.stop()
        self.publishers.clear()
        self._handles.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None
