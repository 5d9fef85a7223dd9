"""Group commit of router changes: a front object, a bounded batch, one background writer.

Every subscription the leaf broker admits must reach the routers of its paths in a
two-phase transaction (``installer.apply_transaction``). Done one by one, a burst
of N subscriptions costs 2N RPCs per router; grouped, it costs two per router
touched. ``GroupCommit.apply`` queues a change and waits for it; one writer task
sends everything queued as one transaction, lingering while changes keep arriving
under contention (like Kafka's ``linger.ms``; an isolated change goes out at once).
If a grouped transaction fails, its changes are retried one by one, so only the
change that cannot be installed fails. The writer never dies silently: whatever it
raises reaches every waiter of the batch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

from gridstat.broker import installer
from gridstat.broker.installer import RouterChange, RouterLink
from gridstat.broker.state import DesiredRoute, SubscriptionRecord
from gridstat.errors import GridStatError

#: Most changes in one transaction, the longest linger, and the quiet gap that ends a linger.
GROUP_COMMIT_MAX = 2048
GROUP_COMMIT_LINGER_S = 1.0
GROUP_COMMIT_QUIET_S = 0.02

Persist = Callable[[list[SubscriptionRecord | None]], None]
Taken = Callable[[list[str]], None]
_Item = tuple[dict[str, RouterChange], "asyncio.Future[None]", SubscriptionRecord | None]


class GroupCommit:
    def __init__(self, links: Mapping[str, RouterLink], *, persist: Persist, taken: Taken) -> None:
        self.links = links
        #: Writes the records of a committed group to durable storage, in one transaction.
        self.persist = persist
        #: Told which routers just took a transaction (they are alive).
        self.taken = taken
        self._queued: list[_Item] = []
        self._writer: asyncio.Task[None] | None = None

    async def apply(self, changes: dict[str, RouterChange], *, record: SubscriptionRecord | None = None) -> None:
        """Write ``changes`` to the routers (and ``record`` to storage once they took it)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queued.append((changes, future, record))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write())
        await future

    async def _linger(self) -> None:
        deadline = time.monotonic() + GROUP_COMMIT_LINGER_S
        seen = -1
        while seen != len(self._queued) < GROUP_COMMIT_MAX and time.monotonic() < deadline:
            seen = len(self._queued)
            await asyncio.sleep(GROUP_COMMIT_QUIET_S)

    async def _write(self) -> None:
        contended = False
        while self._queued:
            if contended:
                await self._linger()
            batch, self._queued = self._queued[:GROUP_COMMIT_MAX], self._queued[GROUP_COMMIT_MAX:]
            contended = bool(self._queued) or len(batch) > 1
            try:
                await self._commit(batch)
            except BaseException as exc:  # never strand a waiter
                for _, future, _ in batch:
                    if not future.done():
                        future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise

    async def _commit(self, batch: list[_Item]) -> None:
        installs: dict[str, list[DesiredRoute]] = {}
        removals: dict[str, list[tuple[str, int, int]]] = {}
        for changes, _, _ in batch:
            for name, c in changes.items():
                installs.setdefault(name, []).extend(c.install)
                removals.setdefault(name, []).extend(c.remove)
        merged = {n: RouterChange(tuple(installs[n]), tuple(removals[n])) for n in installs}
        try:
            await installer.apply_transaction(self.links, merged)
        except GridStatError as exc:
            if len(batch) == 1:
                batch[0][1].set_exception(exc)
                return
            for changes, future, record in batch:
                try:
                    await installer.apply_transaction(self.links, changes)
                except GridStatError as one:
                    future.set_exception(one)
                else:
                    self.persist([record])
                    future.set_result(None)
            return
        self.persist([record for _, _, record in batch])
        self.taken(list(merged))
        for _, future, _ in batch:
            future.set_result(None)
