"""The cloud as its leaf broker holds it: the one state object every part of the broker receives.

The leaf broker (``leaf.LeafBroker``) is a front object over parts, each a capability of
dissertation 3.3.1 with a piece of state of its own: ``admitting.SubscriptionCoordinator``
(admission, the group commit, the admission controller's link), ``modes.ModeCoordinator``
(the mode registry and the current mode), ``flooding.FloodingCoordinator`` (the flooded
variables), ``condensing.CondensationCoordinator`` (the placed functions) and
``segments.SegmentCoordinator`` (the inter-cloud channels and the segments reserved over them).

What they share is a :class:`Cloud`: what the broker knows of its cloud (``CloudState``, pure:
topology, clients, publications, subscriptions, reservations per mode), where that is kept
(the write-through ``BrokerStore``), how the routers are reached (one ``RouterLink`` each and
the ``RouterSupervisor`` that rebuilds them) and the lock that orders the commands deciding on
the state. A part reads any of it; it writes only its own piece and the records its command
adds or removes in the ``CloudState``, under the lock.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gridstat.broker.installer import RouterLink
    from gridstat.broker.state import CloudState
    from gridstat.broker.store import BrokerStore
    from gridstat.broker.supervisor import RouterSupervisor


@dataclass(eq=False)
class Cloud:
    """One leaf broker's cloud: its state, its store, its routers' links and the lock over them."""

    #: What the broker knows of the cloud and decides on (pure, ``broker.state``).
    state: CloudState
    #: The durable copy, written through before a command answers (``broker.store``).
    store: BrokerStore
    #: The control link of each registered router, by name.
    links: dict[str, RouterLink]
    #: Orders the commands that decide on ``state``; router writes happen outside it where they can.
    lock: asyncio.Lock
    #: Watches the routers and rebuilds restarted ones from ``state`` (dissertation 3.7).
    supervisor: RouterSupervisor
    #: Advertised maximum rates (events/s) by variable name, where a publisher declared one.
    max_rates: dict[str, float] = field(default_factory=dict)
    #: Bumped when publications change: the admission controller's link declares them again.
    adverts_version: int = 0
    #: Bumped when routers or channels change: the admission controller's link declares them again.
    resources_version: int = 0

    @property
    def name(self) -> str:
        """The cloud's name, which is its leaf broker's."""
        return self.state.name

    def save_counters(self) -> None:
        """Write the next client id and subscription number (inside the caller's store transaction)."""
        self.store.set_meta("next_client_id", self.state.next_client_id)
        self.store.set_meta("next_subscription", self.state.next_subscription)


__all__ = ["Cloud"]
