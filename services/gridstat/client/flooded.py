"""A flood-all subscription at the subscriber (dissertation 5.1): every flooded variable, unsubscribed.

``Subscriber.subscribe_flooded`` asks the leaf broker (through the edge router) to set the
``flood_all`` flag of the subscriber's channel; from then on the edge router delivers every
variable flooded in the cloud. The broker's reply lists those variables with their ids and
types, which is how the events are decoded. Events of a variable the subscriber also subscribes
to normally go to that subscription (rate-checked as usual); the rest come here.

A variable flooded after the call shows up as an unknown id: the feed then asks the broker for
the list again (at most once per ``REFRESH_INTERVAL_MS``) and counts the events it could not
decode meanwhile. Each variable keeps the newest event in :attr:`FloodedFeed.holders` (the pull
model) and, with ``on_event``, calls back per event (push); only the first copy of a timestamp is
delivered (the routers flood the first copy only; a periodic reset at a router may let a second
one through).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from gridstat.core import wire
from gridstat.core.aio import create_guarded_task
from gridstat.core.model import StatusVariable
from gridstat.errors import GridStatError, TypeMismatch

from .holders import DedupWindow, Holder
from .subscription import call_guarded

log = logging.getLogger(__name__)

#: Shortest gap between two refreshes of the flooded variables caused by unknown ids.
REFRESH_INTERVAL_MS = 1_000

FloodedCallback = Callable[[StatusVariable, Holder], None]
#: Asks the broker for the variables flooded now (``EdgeSession.set_flood_all``).
Refresh = Callable[[], Awaitable[list[StatusVariable]]]


@dataclass
class FloodedStats:
    events: int = 0
    duplicates: int = 0
    #: Events of a variable whose type was not known yet (flooded after the last refresh).
    unknown: int = 0
    undecodable: int = 0
    callback_errors: int = 0
    refreshes: int = 0


class FloodedFeed:
    """The flooded events of one subscriber that no subscription of its claims."""

    def __init__(self, owner: str, variables: Iterable[StatusVariable], *, on_event: FloodedCallback | None = None,
                 refresh: Refresh | None = None) -> None:
        self.owner = owner
        self.on_event = on_event
        self.variables: dict[int, StatusVariable] = {}
        #: The newest event of each flooded variable (the pull model).
        self.holders: dict[int, Holder] = {}
        self.stats = FloodedStats()
        self._dedup: dict[int, DedupWindow] = {}
        self._refresh = refresh
        self._next_refresh_ms = 0
        self._task: asyncio.Task[None] | None = None
        self.update(variables)

    def update(self, variables: Iterable[StatusVariable]) -> None:
        """Replace the known flooded variables (a variable no longer flooded keeps its holder)."""
        self.variables = {v.variable_id: v for v in variables}

    def handle(self, event: wire.Event, now_ms: int) -> bool:
        """Deliver one event; False if its variable is not known as flooded (the caller counts it)."""
        var = self.variables.get(event.variable_id)
        if var is None:
            self.stats.unknown += 1
            self._maybe_refresh(now_ms)
            return False
        ts = event.timestamp_ms
        dedup = self._dedup.get(event.variable_id)
        if dedup is None:
            dedup = self._dedup[event.variable_id] = DedupWindow()
        if dedup.classify(ts):
            self.stats.duplicates += 1
            return True
        try:
            value = wire.decode_value(var.type, event.value)
        except TypeMismatch:
            self.stats.undecodable += 1
            return True
        holder = Holder(value, ts, now_ms, now_ms - ts, event.options, alert=event.is_alert)
        self.holders[event.variable_id] = holder
        self.stats.events += 1
        if self.on_event is not None and not call_guarded(self.on_event, (var, holder), self.owner,
                                                          self.stats.callback_errors):
            self.stats.callback_errors += 1
        return True

    def _maybe_refresh(self, now_ms: int) -> None:
        if self._refresh is None or now_ms < self._next_refresh_ms:
            return
        self._next_refresh_ms = now_ms + REFRESH_INTERVAL_MS
        with contextlib.suppress(RuntimeError):  # no running loop (a test driving it by hand)
            self._task = create_guarded_task(self._run_refresh(), name=f"{self.owner}-flooded-refresh")

    def close(self) -> None:
        """Cancel a refresh in flight (the subscriber is stopping)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run_refresh(self) -> None:
        assert self._refresh is not None
        try:
            self.update(await self._refresh())
            self.stats.refreshes += 1
        except GridStatError as exc:
            log.warning("%s: refreshing the flooded variables failed: %s", self.owner, exc)


__all__ = ["REFRESH_INTERVAL_MS", "FloodedCallback", "FloodedFeed", "FloodedStats"]
