"""Redundancy comes back by itself: the leaf broker re-plans what a failed router broke
(docs/redundancy.md, "Healing"; dissertation 2.1.5 on redundant paths, 3.7 on failures).

When the supervisor declares a router down (it stopped answering), every subscription with a path
through it is re-planned at once: ``CloudState.repair`` replaces the broken paths, in place, with
new ones that avoid every router and channel that is down, share no interior router with the paths
kept, meet the latency bound and fit the reservations; the kept paths and their routes are not
touched, so what they deliver meanwhile is not disturbed. All repaired subscriptions are written to
the routers in one two-phase transaction (``installer.apply_transaction``), then to the store. A
subscription without a replacement keeps its paths and is retried whenever a router comes back.

Paths are not moved back when the failed router returns: it is rebuilt (the supervisor reconciles
it with what the state derives, which no longer routes the repaired subscriptions through it) and
new admissions use it again. Moving working paths would trade a brief disturbance for no gain in
redundancy, so it is left to a new subscription or a change of one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gridstat.broker import installer
from gridstat.broker.installer import RouterChange
from gridstat.errors import GridStatError

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
        #: The last pass (None before the first failure).
        self.last: Repair | None = None

    async def router_down(self, name: str) -> None:
        """The supervisor's hook: ``name`` stopped answering."""
        await self.run(f"router {name} down")

    async def router_up(self, name: str) -> None:
        """The supervisor's hook: ``name`` answers again; what could not be repaired is tried again."""
        if self.unrepaired:
            await self.run(f"router {name} up")

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
                try:
                    await installer.apply_transaction(cloud.links, self._changes(before, after))
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
                with cloud.store.transaction():
                    for record in after.values():
                        cloud.store.put_subscription(record)
                outcome.repaired = len(after)
                self.repaired += len(after)
        if after or outcome.unrepaired:
            log.warning("broker %s: %s: %d subscription(s) re-planned in %.3f s, %d without a replacement path",
                        cloud.name, cause, outcome.repaired, outcome.took_s, outcome.unrepaired)
        self.last = outcome
        return outcome

    def _changes(self, before: dict[str, SubscriptionRecord],
                 after: dict[str, SubscriptionRecord]) -> dict[str, RouterChange]:
        """One change per router for every repaired subscription: the routes the new paths add or change,
        and the broken paths' routes no new one replaces; the kept paths' routes are not written again.
        A router that is down is left out: the supervisor reconciles it when it answers again."""
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
                if (router, installer.route_key(route)) not in new_keys:
                    remove.setdefault(router, []).append(installer.route_key(route))
        return {router: RouterChange(tuple(install.get(router, ())), tuple(remove.get(router, ())))
                for router in {*install, *remove} if router not in st.down}


__all__ = ["PathRepair", "Repair"]
