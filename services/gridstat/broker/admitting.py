"""What happens when a subscription arrives at the leaf broker, top to bottom (dissertation 3.1, 3.3.1).

The request comes from the subscriber's edge router (its ``EdgeProxy`` relays it) to the
``Subscribe`` handler of ``service.QoSBrokerServicer``, which bounds concurrent admissions
(``gate``), binds the subscriber's name to the caller's certificate and checks the policy
(``authz``), then calls :meth:`SubscriptionCoordinator.subscribe`:

1. the request is checked before anything is locked: a well-formed variable name, and only
   modes the broker has defined (``ModeCoordinator.check_defined``);
2. under the broker lock, the decision on ``CloudState`` (pure, no I/O): the variable and its
   type, the subscriber registered at the edge router that relayed it, then ``CloudState.admit``
   plans every mode's paths (k disjoint ones for a redundant subscription, the loop-free tree
   rule, the latency bound on each path) and reserves the rate after filtering in every mode,
   all or nothing;
3. with an admission controller (``--admission``, ``consulting.AdmissionLink``), the reservation
   is tentative until it agrees: refused, it is undone and the refusal carries the controller's
   reasons; partly guaranteed, the routes become best effort;
4. outside the lock, so that installs overlap, the routes are written to every router of every
   path in two phases through the group commit (``groupcommit``); the record is written through
   to the store with the committed group. A router that cannot take them undoes the reservation
   (and tells the controller), so nothing is ever half-installed;
5. the handler turns the record into the reply (paths and granted interval per mode, the
   controller's note), or an admission error into a rejection with its reason and offer.

A variable this cloud does not publish (``UnknownVariable``) goes, with a parent broker
configured, up to the lowest common ancestor (``delegation.UpLink``), which reserves segments
in each cloud through ``segments.SegmentCoordinator``.

Changing a subscription re-admits it with the new QoS of one mode and keeps the old one if that
is rejected; removing it releases its reservations and removes its routes (a router that misses
the removal is reconciled later). The condensation functions (``condensing``) and the
inter-cloud segments (``segments``) admit their paths through ``CloudState`` too and install and
remove them through this part.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from gridstat.broker import installer
from gridstat.broker.groupcommit import GroupCommit
from gridstat.broker.installer import RouterChange
from gridstat.broker.state import DesiredRoute, ModeQoS, SubscriptionRecord
from gridstat.core.aio import create_guarded_task
from gridstat.core.model import TypeSpec, split_variable_name
from gridstat.errors import GridStatError, NotFound, TypeMismatch, Unauthorized

if TYPE_CHECKING:
    from gridstat.broker.cloud import Cloud
    from gridstat.broker.consulting import AdmissionLink
    from gridstat.broker.modes import ModeCoordinator
    from gridstat.v1.broker_pb2 import AdmissionNote

log = logging.getLogger(__name__)

#: The controller's notes kept for replies not yet sent (the oldest go first).
MAX_NOTES = 1024


class SubscriptionCoordinator:
    """The leaf broker's subscriptions: admission, change, removal and their router writes.

    It owns the group commit that writes routes to the routers, the link to the admission
    controller (``admission``, None without ``--admission``) and the controller's notes for
    replies not yet sent; the modes it checks against are the ``ModeCoordinator``'s.
    """

    def __init__(self, cloud: Cloud, modes: ModeCoordinator) -> None:
        self.cloud = cloud
        self.modes = modes
        #: Writes routes to the routers, grouping concurrent installs (``broker.groupcommit``).
        self.writer = GroupCommit(cloud.links, persist=self._persist, taken=cloud.supervisor.postpone)
        #: The admission controller consulted before a reservation is kept (``--admission``), if any.
        self.admission: AdmissionLink | None = None
        #: The controller's note for each subscription admitted lately, until the reply takes it.
        self.notes: OrderedDict[str, AdmissionNote] = OrderedDict()
        #: Called with a variable's name once it is unregistered, under the lock (``querying``).
        self.on_unregistered: list[Callable[[str], None]] = []

    # -- a subscription arrives ---------------------------------------------------------------
    async def subscribe(self, subscriber: str, variable: str, type_spec: TypeSpec | None, qos: Iterable[ModeQoS],
                        *, edge_router: str, subscription_id: str = "") -> SubscriptionRecord:
        """Admit a subscription whole, in every mode of ``qos``, and install it (module docstring)."""
        # 1. Checked before the lock.
        split_variable_name(variable)
        qos = tuple(qos)
        self.modes.check_defined(q.mode for q in qos)
        # 2. Decided and reserved under the lock, on the pure state.
        st = self.cloud.state
        async with self.cloud.lock:
            var = st.registry.lookup(variable)
            if type_spec is not None and var.type != type_spec:
                raise TypeMismatch(f"subscription to {variable!r} expects type {type_spec.name!r} but it is "
                                   f"published as {var.type.name!r}", field="type")
            client = st.client("subscriber", subscriber)
            if edge_router not in client.edge_routers:
                raise Unauthorized(f"subscriber {subscriber!r} is registered at {', '.join(client.edge_routers)}, "
                                   f"not {edge_router!r}", field="edge_router")
            sid = subscription_id or st.new_subscription_id()
            record = st.admit(sid, subscriber, var, qos, edge_router)
        # 3. With an admission controller the reservation is tentative until it agrees (``consulting``):
        # refused, it is undone here and the refusal carries the controller's reasons.
        if self.admission is not None:
            try:
                consulted = await self.admission.consult(self.cloud, record)
            except GridStatError:
                async with self.cloud.lock:
                    st.remove(sid)
                raise
            if consulted.partial:  # only part of the rate is guaranteed: best-effort routes
                async with self.cloud.lock:
                    record = dataclasses.replace(record, best_effort=True)
                    st.subscriptions[sid] = record
            self.notes[sid] = consulted.note
            while len(self.notes) > MAX_NOTES:
                self.notes.popitem(last=False)
        # 4. The routers are written outside the lock, so that many installs can be in flight at
        # once (a failure undoes the reservation, and the supervisor's reconciliation never adds
        # what the state lacks); the record is stored with its committed group.
        try:
            await self.install(self.changes_of(record, install=True), persist=record)
        except GridStatError:
            async with self.cloud.lock:
                st.remove(sid)
            self.notes.pop(sid, None)
            if self.admission is not None:
                await self.admission.release(self.cloud.name, sid)
            raise
        return record

    # -- a subscription changes -----------------------------------------------------------------
    async def change(self, subscription_id: str, qos: ModeQoS) -> SubscriptionRecord:
        """Change one mode's QoS in place: re-admitted, and the old QoS stays if it is rejected."""
        self.modes.check_defined((qos.mode,))
        st, store = self.cloud.state, self.cloud.store
        async with self.cloud.lock:
            old = st.subscriptions.get(subscription_id)
            if old is None:
                raise NotFound(f"no subscription {subscription_id!r}", field="subscription_id")
            var = st.registry.by_id(old.variable_id)
            new_qos = (*(q for q in old.qos if q.mode != qos.mode), qos)
            st.remove(subscription_id)
            try:
                record = st.admit(subscription_id, old.subscriber, var, new_qos, old.edge_router)
            except GridStatError:
                st.restore(old)
                raise
            changes: dict[str, RouterChange] = {}
            before = self.changes_of(old, install=False)
            after = self.changes_of(record, install=True)
            new_keys = {installer.route_key(r) for c in after.values() for r in c.install}
            for name in {*before, *after}:
                gone = tuple(k for k in before.get(name, RouterChange()).remove if k not in new_keys)
                changes[name] = RouterChange(after.get(name, RouterChange()).install, gone)
            try:
                await installer.apply_transaction(self.cloud.links, changes)
            except GridStatError:
                st.remove(subscription_id)
                st.restore(old)
                raise
            with store.transaction():
                store.put_subscription(record)
            return record

    # -- a subscription goes -------------------------------------------------------------------
    async def unsubscribe(self, subscription_id: str) -> int:
        async with self.cloud.lock:
            return await self.unsubscribe_locked(subscription_id)

    async def unsubscribe_locked(self, subscription_id: str) -> int:
        """Remove a subscription (the caller holds the lock); returns the routes removed."""
        st = self.cloud.state
        record = st.remove(subscription_id)
        if self.admission is not None and not record.segment:
            await self.admission.release(self.cloud.name, subscription_id)
        changes = self.changes_of(record, install=False)
        up = {n: c for n, c in changes.items() if n not in st.down}
        try:
            await self.install(up)
        except GridStatError as exc:
            # The subscription is gone from the state either way; a router that missed the
            # removal is put right by reconciliation when it answers again.
            log.warning("removing %s: %s; the routers will be reconciled", subscription_id, exc)
            for name in up:
                self.cloud.supervisor.mark_dirty(name)
        with self.cloud.store.transaction():
            self.cloud.store.delete("subscriptions", subscription_id)
        return sum(len(c.remove) for c in changes.values())

    async def unregister_publication_locked(self, full_name: str) -> int:
        """A publication goes (its publisher unregisters it or restarted, or its condensation function
        is removed): its subscriptions go first. Returns how many there were."""
        cloud, st = self.cloud, self.cloud.state
        var = st.registry.lookup(full_name)
        sids = [r.subscription_id for r in st.subscriptions.values() if r.variable_id == var.variable_id]
        for sid in sids:
            await self.unsubscribe_locked(sid)
        st.registry.unregister(full_name)
        cloud.max_rates.pop(full_name, None)
        with cloud.store.transaction():
            cloud.store.delete("publications", full_name)
        cloud.adverts_version += 1
        for hook in self.on_unregistered:
            hook(full_name)
        self.sync_admission()
        return len(sids)

    # -- the routers and the store ----------------------------------------------------------------
    def changes_of(self, record: SubscriptionRecord, *, install: bool) -> dict[str, RouterChange]:
        """The routes of ``record`` per router, to install or to remove."""
        per: dict[str, list[DesiredRoute]] = {}
        for router, route in self.cloud.state.routes_of(record):
            per.setdefault(router, []).append(route)
        if install:
            return {n: RouterChange(install=tuple(rs)) for n, rs in per.items()}
        return {n: RouterChange(remove=tuple(installer.route_key(r) for r in rs)) for n, rs in per.items()}

    async def install(self, changes: dict[str, RouterChange], *, persist: SubscriptionRecord | None = None) -> None:
        """Write a change to the routers through the group commit (and ``persist`` once they took it)."""
        await self.writer.apply(changes, record=persist)

    def _persist(self, records: list[SubscriptionRecord | None]) -> None:
        store = self.cloud.store
        with store.transaction():
            for record in records:
                if record is not None:
                    store.put_subscription(record)
            self.cloud.save_counters()

    # -- the admission controller ------------------------------------------------------------------
    def sync_admission(self) -> None:
        """Tell the admission controller of a publication change now (it is also told before each request)."""
        link = self.admission
        if link is None:
            return

        async def sync() -> None:
            try:
                await link.sync(self.cloud)
            except Exception as exc:  # told again before the next request
                log.info("admission controller %s not updated now: %s", link.address, exc)

        create_guarded_task(sync(), name=f"broker-{self.cloud.name}-advertise")


__all__ = ["MAX_NOTES", "SubscriptionCoordinator"]
