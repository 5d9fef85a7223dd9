"""Redundancy comes back by itself: the leaf broker re-plans what a failed router broke
(docs/redundancy.md, "Healing"; dissertation 2.1.5 on redundant paths, 3.7 on failures).

When the supervisor declares a router down (it stopped answering), or a router reports a channel to
a neighbour down (:class:`LinkWatch`), every subscription with a path through it is re-planned at
once: ``CloudState.repair`` replaces the broken paths, in place, with new ones that avoid every
router and channel that is down, share no interior router with the paths kept, meet the latency
bound and fit the reservations; the kept paths and their routes are not touched, so what they
deliver meanwhile is not disturbed. All repaired subscriptions are written to the routers in one
two-phase transaction (``installer.apply_transaction``), then to the store. A subscription without a
replacement keeps its paths and is retried whenever a router comes back.

Paths are not moved back when the failed router returns: it is rebuilt (the supervisor reconciles
it with what the state derives, which no longer routes the repaired subscriptions through it) and
new admissions use it again. Moving working paths would trade a brief disturbance for no gain in
redundancy, so it is left to a new subscription or a change of one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from gridstat.broker import installer
from gridstat.broker.installer import RouterChange
from gridstat.core.aio import create_guarded_task
from gridstat.errors import GridStatError
from gridstat.v1 import router_pb2 as rpb

if TYPE_CHECKING:
    from gridstat.broker.admitting import SubscriptionCoordinator
    from gridstat.broker.cloud import Cloud
    from gridstat.broker.state import DesiredRoute, SubscriptionRecord

log = logging.getLogger(__name__)


@dataclass
class Repair:
    """The outcome of one re-planning pass."""

    cause: str
    #: Subscriptions whose broken paths were replaced, and those left on them (no replacement).
    repaired: int = 0
    unrepaired: int = 0
    #: Planning under the lock, then the routers' two-phase transaction (s).
    plan_s: float = 0.0
    install_s: float = 0.0

    @property
    def took_s(self) -> float:
        return self.plan_s + self.install_s


class PathRepair:
    """The leaf broker's part that restores redundancy after a failure (module docstring)."""

    def __init__(self, cloud: Cloud, subscriptions: SubscriptionCoordinator) -> None:
        self.cloud = cloud
        self.subscriptions = subscriptions
        #: Subscriptions re-planned since the broker started, and those still on a broken path.
        self.repaired = 0
        self.unrepaired: set[str] = set()
        #: The last pass that re-planned something or found nothing to re-plan onto (None before).
        self.last: Repair | None = None
        #: Tells the parent broker the inter-cloud subscriptions whose segments here had no replacement
        #: and the routers that are down (``delegation.UpLink.report_broken``); None without a parent.
        self.report: Callable[[list[str], list[str]], Coroutine[Any, Any, None]] | None = None
        self._told_down = False

    async def router_down(self, name: str) -> None:
        """The supervisor's hook: ``name`` stopped answering."""
        await self.run(f"router {name} down")

    async def router_up(self, name: str) -> None:
        """The supervisor's hook: ``name`` answers again; what could not be repaired is tried again, and
        the parent learns that it may plan inter-cloud paths over it again."""
        if self.unrepaired:
            await self.run(f"router {name} up")
        self._tell_parent([])

    def router_back(self) -> None:
        """Tell the parent the routers down now, if it was told of some (a channel came back up)."""
        self._tell_parent([])

    async def run(self, cause: str) -> Repair:
        """Re-plan every subscription with a broken path and install the new paths."""
        cloud, st = self.cloud, self.cloud.state
        outcome = Repair(cause)
        async with cloud.lock:
            started = time.monotonic()
            before: dict[str, SubscriptionRecord] = {}
            after: dict[str, SubscriptionRecord] = {}
            for sid in st.broken():
                old = st.subscriptions[sid]
                new = st.repair(sid)
                if new is None:
                    self.unrepaired.add(sid)
                    continue
                before[sid], after[sid] = old, new
            self.unrepaired = {sid for sid in self.unrepaired if sid in st.subscriptions and sid not in after
                               and st.broken_paths(st.subscriptions[sid])}
            outcome.unrepaired = len(self.unrepaired)
            outcome.plan_s = time.monotonic() - started
            if after:
                started = time.monotonic()
                installs, removals = self._changes(before, after)
                try:
                    await installer.apply_transaction(cloud.links, installs)
                except GridStatError as exc:
                    for sid, old in before.items():  # nothing is half-installed: the old paths stay
                        st.remove(sid)
                        st.restore(old)
                    self.unrepaired |= set(before)
                    outcome.unrepaired = len(self.unrepaired)
                    log.warning("broker %s: re-planning after %s failed, the paths stay as they were: %s",
                                cloud.name, cause, exc)
                    self.last = outcome
                    return outcome
                outcome.install_s = time.monotonic() - started
                self._remove_stale(removals)
                with cloud.store.transaction():
                    for record in after.values():
                        cloud.store.put_subscription(record)
                outcome.repaired = len(after)
                self.repaired += len(after)
        self._tell_parent(sorted({sid.rsplit(".m", 1)[0] for sid in self.unrepaired
                                  if sid in st.subscriptions and st.subscriptions[sid].segment}))
        if after or outcome.unrepaired:
            self.last = outcome
            log.warning("broker %s: %s: %d subscription(s) re-planned in %.3f s, %d without a replacement path",
                        cloud.name, cause, outcome.repaired, outcome.took_s, outcome.unrepaired)
        return outcome

    def _tell_parent(self, inter_cloud: list[str]) -> None:
        """Report to the parent in the background (it calls back here to reserve new segments)."""
        report = self.report
        if report is None or (not inter_cloud and not self.cloud.state.down and not self.cloud.state.down_channels
                              and not self._told_down):
            return
        st = self.cloud.state
        # A border router cut off by a failed channel is as useless to inter-cloud paths as a dead one.
        cut_off = {r for pair in st.down_channels for r in pair
                   if r in st.topology.routers and st.topology.router(r).role.joins_clouds}
        down = sorted(st.down | cut_off)
        self._told_down = bool(down)
        create_guarded_task(report(inter_cloud, down), name=f"broker-{self.cloud.name}-report-broken")

    def _changes(self, before: dict[str, SubscriptionRecord], after: dict[str, SubscriptionRecord]
                 ) -> tuple[dict[str, RouterChange], dict[str, list[tuple[str, int, int]]]]:
        """Per router, the routes the new paths add or change (one transaction), and the broken paths'
        routes no new one replaces (removed after it, as far as they are still there: a failed channel
        may have taken them already); the kept paths' routes are not written again. A router that is
        down is left out: the supervisor reconciles it when it answers again."""
        st = self.cloud.state
        install: dict[str, list[DesiredRoute]] = {}
        remove: dict[str, list[tuple[str, int, int]]] = {}
        for sid, new in after.items():
            old_routes = set(st.routes_of(before[sid]))
            new_routes = set(st.routes_of(new))
            for router, route in new_routes - old_routes:
                install.setdefault(router, []).append(route)
            new_keys = {(router, installer.route_key(route)) for router, route in new_routes}
            for router, route in old_routes:
                if (router, installer.route_key(route)) not in new_keys and router not in st.down:
                    remove.setdefault(router, []).append(installer.route_key(route))
        return ({router: RouterChange(install=tuple(routes)) for router, routes in install.items()
                 if router not in st.down}, remove)

    def _remove_stale(self, removals: dict[str, list[tuple[str, int, int]]]) -> None:
        """The broken paths' leftover routes go at the supervisor's next pass: it reconciles each such
        router with the state, which removes whatever of them is still there (a failed channel may
        have taken some already, so they are not removed by key)."""
        for router in removals:
            self.cloud.supervisor.mark_dirty(router)


class LinkWatch:
    """Follows every router's ``WatchLinks`` stream (docs/redundancy.md, "Healing"): a channel to a
    neighbouring router that a router reports down (the neighbour's liveness pings stopped within its
    ``--failure-timeout-ms``) is declared down in both directions and the paths over it are re-planned
    at once, often before the health checks notice a dead router; reported up again, it is usable
    again and what had no replacement is tried again. Channels to clients and to other clouds are not
    watched here."""

    def __init__(self, cloud: Cloud, repair: PathRepair) -> None:
        self.cloud = cloud
        self.repair = repair
        self._tasks: dict[str, asyncio.Task[None]] = {}
        #: Channel changes seen (down and up), for Health and tests.
        self.downs = 0
        self.ups = 0

    def follow(self, router: str) -> None:
        """Watch ``router``'s links (again, if its stream ended) for as long as it is registered."""
        task = self._tasks.get(router)
        if task is None or task.done():
            self._tasks[router] = create_guarded_task(self._follow(router), name=f"watch-links-{router}")

    async def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        if self._tasks:
            await asyncio.sleep(0.05)  # gRPC finishes the cancelled streams on this loop before it may close
        self._tasks.clear()

    async def _follow(self, router: str) -> None:
        backoff_s = WATCH_BACKOFF_S
        while True:
            link = self.cloud.links.get(router)
            if link is None:
                return  # removed from the topology
            call = link.stub.WatchLinks(rpb.WatchLinksRequest())
            try:
                async for event in call:
                    backoff_s = WATCH_BACKOFF_S
                    await self._seen(router, event.channel, event.up)
            except grpc.aio.AioRpcError:
                pass  # the router is gone or restarting: the health checks say which
            finally:
                call.cancel()  # ended here, not later by gRPC's poller on a loop that may be gone
            await asyncio.sleep(backoff_s)
            backoff_s = min(MAX_WATCH_BACKOFF_S, backoff_s * 2)

    async def _seen(self, router: str, neighbour: str, up: bool) -> None:
        st = self.cloud.state
        if neighbour not in st.endpoints:
            return
        pair = {(router, neighbour), (neighbour, router)}
        if not up and not pair <= st.down_channels:
            st.down_channels |= pair
            self.downs += 1
            await self.repair.run(f"channel {neighbour}-{router} down")
        elif up and pair & st.down_channels:
            st.down_channels -= pair
            self.ups += 1
            if self.repair.unrepaired:
                await self.repair.run(f"channel {neighbour}-{router} up")
            # A border router it cut off is usable again: the parent, told of it, learns it as for a
            # router back up (docs/redundancy.md, "Across clouds").
            self.repair.router_back()


#: Back-off between attempts to watch a router's links that did not answer.
WATCH_BACKOFF_S = 0.2
MAX_WATCH_BACKOFF_S = 5.0


__all__ = ["LinkWatch", "PathRepair", "Repair"]
