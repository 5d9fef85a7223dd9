"""The leaf broker's watch over its routers (dissertation 3.7: the LQB rebuilds a restarted router).

Every router's ``Health`` is asked every ``interval_s``. A router seen for the first
time, or with a new boot id (it restarted empty), or marked dirty by a command whose
router-side effect may have been lost, is reconciled with what the broker's state
derives for it (``installer.reconcile``). One that does not answer is marked down so
that new paths avoid it; the routes it holds stay (routers keep hard state), and it is
retried with jittered exponential backoff.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable

from gridstat.broker import installer
from gridstat.broker.installer import RouterLink
from gridstat.broker.state import CloudState
from gridstat.errors import GridStatError

log = logging.getLogger(__name__)


class RouterSupervisor:
    def __init__(self, state: CloudState, links: dict[str, RouterLink], lock: asyncio.Lock, *,
                 interval_s: float, before_pass: Callable[[], Awaitable[None]] | None = None,
                 mode: Callable[[], int] | None = None,
                 prepare: Callable[[str, RouterLink], Awaitable[None]] | None = None) -> None:
        self.state = state
        self.links = links
        self.lock = lock
        self.interval_s = interval_s
        self.before_pass = before_pass
        #: The cloud's current mode: a rebuilt router is switched to it (dissertation 3.7).
        self.mode = mode
        #: Called (under the lock) before a router is reconciled: puts back what routes depend on
        #: but reconcile does not manage (the condensation slots their routes lead to).
        self.prepare = prepare
        #: Called (under the lock) after a router is reconciled: puts back more of its desired state
        #: (the flooding settings, ``broker.flooding``); each returns the number of changes it made.
        self.on_reconciled: list[Callable[[RouterLink], Awaitable[int]]] = []
        #: Called (not under the lock) when a router reports an event address other than the one held
        #: (``--advertise-host``: a restarted pod's new IP), before it is rebuilt: the leaf broker moves
        #: it there and points its neighbours at it, so it is Ready only with its paths whole again.
        self.on_moved: Callable[[str, str, int], Awaitable[None]] | None = None
        #: Called (not under the lock) when a router that answered stops answering, and when one
        #: that did not answers again: the leaf broker re-plans the paths through it (``broker.healing``).
        self.on_down: list[Callable[[str], Awaitable[None]]] = []
        self.on_up: list[Callable[[str], Awaitable[None]]] = []
        #: Routers rebuilt after a restart since this broker started.
        self.rebuilds = 0
        self._next_check: dict[str, float] = {}
        self._dirty: set[str] = set()

    def _mode(self) -> int | None:
        return None if self.mode is None else self.mode()

    def mark_dirty(self, router: str) -> None:
        """Reconcile this router at the next pass."""
        self._dirty.add(router)
        self._next_check[router] = 0.0

    def postpone(self, routers: Iterable[str]) -> None:
        """These routers just took a transaction: they are alive, their next check can wait.

        A restarted router fails the next prepare, so it is still checked on schedule.
        """
        later = time.monotonic() + self.interval_s
        for name in routers:
            self._next_check[name] = max(self._next_check.get(name, 0.0), later)

    async def reconcile_now(self, router: str) -> None:
        link = self.links.get(router)
        if link is None or router in self.state.down:
            self.mark_dirty(router)
            return
        async with self.lock:
            try:
                if self.prepare is not None:
                    await self.prepare(router, link)
                await installer.reconcile(link, self.state.desired_channels(router),
                                          self.state.desired_routes(router), mode=self._mode())
                for hook in self.on_reconciled:
                    await hook(link)
            except GridStatError as exc:
                log.warning("reconciling %s: %s", router, exc)
            except Exception as exc:  # grpc errors: the next pass retries
                log.warning("reconciling %s failed: %s", router, exc)
                self.mark_dirty(router)

    async def check(self, name: str) -> None:
        link = self.links.get(name)
        if link is None:
            return
        health = await link.health()
        if health is not None and health.event_host and self.on_moved is not None:
            held = self.state.endpoints.get(name)
            if held is not None and (held.event_host, held.event_port) != (health.event_host, health.event_port):
                await self.on_moved(name, health.event_host, health.event_port)
        if health is None:
            link.failures += 1
            failed = name not in self.state.down and link.up
            if failed:
                log.warning("broker %s: router %s does not answer; new paths avoid it", self.state.name, name)
            link.up = False
            self.state.down.add(name)
            backoff = min(5.0, self.interval_s * 2 ** min(link.failures, 4))
            self._next_check[name] = time.monotonic() + backoff * (0.8 + 0.4 * random.random())
            if failed:
                for on_down in self.on_down:
                    await on_down(name)
            return
        async with self.lock:
            # Decided under the lock: a concurrent check of the same router (the pass and
            # add_router) must not rebuild twice or take a first contact for a restart.
            restarted = health.boot_id != link.boot_id
            if restarted or not link.up or name in self._dirty:
                self._dirty.discard(name)
                try:
                    if self.prepare is not None:
                        await self.prepare(name, link)
                    n = await installer.reconcile(link, self.state.desired_channels(name),
                                                  self.state.desired_routes(name), mode=self._mode())
                    for hook in self.on_reconciled:
                        n += await hook(link)
                except Exception as exc:
                    log.warning("rebuilding router %s failed: %s; retrying", name, exc)
                    self._next_check[name] = time.monotonic() + self.interval_s
                    return
                if restarted and link.boot_id is not None:
                    self.rebuilds += 1
                    log.warning("broker %s: router %s restarted; rebuilt with %d changes", self.state.name,
                                name, n)
                link.boot_id = health.boot_id
        back = name in self.state.down
        link.up = True
        link.failures = 0
        self.state.down.discard(name)
        self._next_check[name] = time.monotonic() + self.interval_s
        if back:
            for on_up in self.on_up:
                await on_up(name)

    async def run(self) -> None:
        while True:
            if self.before_pass is not None:
                await self.before_pass()
            now = time.monotonic()
            due = [n for n in list(self.links) if self._next_check.get(n, 0.0) <= now]
            if due:
                await asyncio.gather(*(self.check(n) for n in due), return_exceptions=True)
            await asyncio.sleep(min(0.1, self.interval_s))
