"""The leaf broker's side of inter-cloud paths (dissertation 3.1: askSubStart / askSubMid /
askSubEnd, commitSub, removeSub), as a mixin of ``LeafBroker``.

A parent reserves a segment of an inter-cloud path in each cloud; the leaf admits it
like a subscription from ``from_router`` to ``to_router`` (its last hop leaving on an
inter-cloud channel, or reaching the subscriber for an END segment) but touches no
router before the parent commits. A reservation not committed within its TTL is
released by the supervisor's pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import asdict
from typing import TYPE_CHECKING

from gridstat.broker import installer
from gridstat.broker.state import CloudState, ForeignChannel, SubscriptionRecord
from gridstat.broker.topology import RouterRole
from gridstat.core.model import StatusVariable
from gridstat.errors import DuplicateName, GridStatError, NotFound, Unauthorized, ValidationError

if TYPE_CHECKING:
    from gridstat.broker.installer import RouterChange, RouterLink
    from gridstat.broker.state import ModeQoS
    from gridstat.broker.store import BrokerStore
    from gridstat.broker.supervisor import RouterSupervisor

log = logging.getLogger(__name__)
class SegmentKind:
    START = "start"
    MID = "mid"
    END = "end"


def segment_id(subscription_id: str, mode: int, redundant_index: int) -> str:
    return f"{subscription_id}.m{mode}.r{redundant_index}"


class SegmentsMixin:
    """Inter-cloud segments and channels; LeafBroker provides the attributes declared here."""

    state: CloudState
    links: dict[str, RouterLink]
    lock: asyncio.Lock
    store: BrokerStore
    supervisor: RouterSupervisor
    _pending: dict[str, float]

    def _changes(self, record: SubscriptionRecord, *, install: bool) -> dict[str, RouterChange]:
        raise NotImplementedError

    async def _apply(self, changes: dict[str, RouterChange], *, persist: SubscriptionRecord | None = None) -> None:
        raise NotImplementedError

    async def _unsubscribe_locked(self, subscription_id: str) -> int:
        raise NotImplementedError

    # -- inter-cloud (dissertation 3.1: askSubStart / askSubMid / askSubEnd, commitSub, removeSub) ---
    async def add_foreign_channel(self, f: ForeignChannel) -> None:
        """An inter-cloud channel at one of this cloud's border routers (its capacity is the parent's)."""
        async with self.lock:
            if self.state.topology.router(f.border_router).role is not RouterRole.BORDER:
                raise ValidationError(f"{f.border_router!r} is not a border router", field="channel.router_a")
            if (f.border_router, f.foreign_router) in self.state.foreign:
                raise DuplicateName(f"{f.border_router!r} already has a channel to {f.foreign_router!r}",
                                    field="channel.router_b")
            self.state.foreign[(f.border_router, f.foreign_router)] = f
            with self.store.transaction():
                self.store.put("foreign_channels", f"{f.border_router}>{f.foreign_router}", asdict(f))
        await self.supervisor.reconcile_now(f.border_router)

    async def remove_foreign_channel(self, border_router: str, foreign_router: str) -> None:
        async with self.lock:
            if any(r.exit_channel == foreign_router and r.edge_router == border_router
                   for r in self.state.subscriptions.values()):
                raise ValidationError(f"inter-cloud channel {border_router}->{foreign_router} carries segments",
                                      field="channel")
            if self.state.foreign.pop((border_router, foreign_router), None) is None:
                raise NotFound(f"no inter-cloud channel {border_router}->{foreign_router}", field="channel")
            with self.store.transaction():
                self.store.delete("foreign_channels", f"{border_router}>{foreign_router}")
        await self.supervisor.reconcile_now(border_router)

    def resolve_variable(self, full_name: str) -> tuple[StatusVariable, str]:
        """``getVariableId``: a variable published in this cloud and its publisher's edge router."""
        var = self.state.registry.lookup(full_name)
        return var, self.state.client("publisher", var.publisher).edge_router

    async def reserve_segment(self, sid: str, kind: str, *, from_router: str, to_router: str, next_channel: str,
                              variable: str, variable_id: int, pub_interval_ms: int, qos: ModeQoS,
                              ttl_ms: int = 10_000) -> SubscriptionRecord:
        """Reserve one cloud's piece of an inter-cloud path; nothing reaches the routers before commit."""
        async with self.lock:
            st = self.state
            if kind == SegmentKind.START:
                var, edge = self.resolve_variable(variable)
                if var.variable_id != variable_id or edge != from_router:
                    raise ValidationError(f"{variable!r} is published at {edge!r} with id {var.variable_id}",
                                          field="from_router")
            if kind == SegmentKind.END:
                if not next_channel.startswith("sub:"):
                    raise ValidationError("an end segment's next_channel is 'sub:<subscriber>'", field="next_channel")
                subscriber = next_channel[4:]
                client = st.client("subscriber", subscriber)
                if client.edge_router != to_router:
                    raise Unauthorized(f"subscriber {subscriber!r} is at {client.edge_router!r}", field="to_router")
                exit_channel = ""
            else:
                subscriber, exit_channel = f"segment.{sid}", next_channel
            record = st.admit_path(sid, subscriber, variable, variable_id, pub_interval_ms, False, (qos,),
                                   from_router, to_router, exit_channel=exit_channel, segment=True)
            self._pending[sid] = time.monotonic() + max(ttl_ms, 1) / 1000
            return record

    async def commit_segment(self, sid: str) -> None:
        async with self.lock:
            if sid not in self._pending:
                if sid in self.state.subscriptions:
                    return  # committed already: commit is idempotent
                raise NotFound(f"no reserved segment {sid!r} (aborted or expired)", field="key")
            record = self.state.subscriptions[sid]
            try:
                await installer.apply_transaction(self.links, self._changes(record, install=True))
            except GridStatError:
                del self._pending[sid]
                self.state.remove(sid)
                raise
            del self._pending[sid]
            with self.store.transaction():
                self.store.put_subscription(record)

    async def abort_segment(self, sid: str) -> bool:
        async with self.lock:
            if self._pending.pop(sid, None) is not None:
                self.state.remove(sid)
                return True
            if sid in self.state.subscriptions:
                await self._unsubscribe_locked(sid)
                return True
            return False

    def _expire_pending(self) -> None:
        now = time.monotonic()
        for sid in [s for s, deadline in self._pending.items() if deadline <= now]:
            del self._pending[sid]
            self.state.remove(sid)
            log.warning("segment %s expired before commit; its reservation is released", sid)

