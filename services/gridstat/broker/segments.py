"""The leaf broker's side of inter-cloud paths (dissertation 3.1: askSubStart / askSubMid /
askSubEnd, commitSub, removeSub): ``SegmentCoordinator``, a part of ``LeafBroker``.

A parent reserves a segment of an inter-cloud path in each cloud; the leaf admits it
like a subscription from ``from_router`` to ``to_router`` (its last hop leaving on an
inter-cloud channel, or reaching the subscriber for an END segment) but touches no
router before the parent commits. A reservation not committed within its TTL is
released by the supervisor's pass.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import TYPE_CHECKING

from gridstat.broker import installer
from gridstat.broker.state import ForeignChannel, SubscriptionRecord
from gridstat.core.model import StatusVariable
from gridstat.errors import DuplicateName, GridStatError, NotFound, Unauthorized, ValidationError

if TYPE_CHECKING:
    from gridstat.broker.admitting import SubscriptionCoordinator
    from gridstat.broker.cloud import Cloud
    from gridstat.broker.state import ModeQoS

log = logging.getLogger(__name__)


class SegmentKind:
    START = "start"
    MID = "mid"
    END = "end"


def segment_id(subscription_id: str, mode: int, redundant_index: int, path: int = 0) -> str:
    """A segment's subscription id in this cloud; ``path``: which of the subscription's disjoint paths
    (``SegmentKey.path``; docs/redundancy.md, "Across clouds"), omitted for the first."""
    return f"{subscription_id}.m{mode}.r{redundant_index}" + (f".p{path}" if path else "")


class SegmentCoordinator:
    """The leaf's side of inter-cloud paths: it owns the inter-cloud channels at the cloud's border
    routers (``CloudState.foreign``) and the segments reserved and not yet committed; a committed
    segment is installed and removed like a subscription (``admitting.SubscriptionCoordinator``)."""

    def __init__(self, cloud: Cloud, subscriptions: SubscriptionCoordinator) -> None:
        self.cloud = cloud
        self.subscriptions = subscriptions
        #: Reserved, not yet committed segments and their deadlines (``time.monotonic``).
        self.pending: dict[str, float] = {}

    def load(self) -> None:
        """Restore the inter-cloud channels of a restarted broker (its segments are subscriptions)."""
        for d in self.cloud.store.all("foreign_channels"):
            f = ForeignChannel(**d)
            self.cloud.state.foreign[(f.border_router, f.foreign_router)] = f

    # -- inter-cloud channels --------------------------------------------------------------------
    async def add_foreign_channel(self, f: ForeignChannel) -> None:
        """An inter-cloud channel at one of this cloud's border routers (its capacity is the parent's)."""
        cloud, st = self.cloud, self.cloud.state
        async with cloud.lock:
            if not st.topology.router(f.border_router).role.joins_clouds:
                raise ValidationError(f"{f.border_router!r} is not a border router", field="channel.router_a")
            if (f.border_router, f.foreign_router) in st.foreign:
                raise DuplicateName(f"{f.border_router!r} already has a channel to {f.foreign_router!r}",
                                    field="channel.router_b")
            st.foreign[(f.border_router, f.foreign_router)] = f
            with cloud.store.transaction():
                cloud.store.put("foreign_channels", f"{f.border_router}>{f.foreign_router}", asdict(f))
        await cloud.supervisor.reconcile_now(f.border_router)

    async def remove_foreign_channel(self, border_router: str, foreign_router: str) -> None:
        cloud, st = self.cloud, self.cloud.state
        async with cloud.lock:
            if any(r.exit_channel == foreign_router and r.edge_router == border_router
                   for r in st.subscriptions.values()):
                raise ValidationError(f"inter-cloud channel {border_router}->{foreign_router} carries segments",
                                      field="channel")
            if st.foreign.pop((border_router, foreign_router), None) is None:
                raise NotFound(f"no inter-cloud channel {border_router}->{foreign_router}", field="channel")
            with cloud.store.transaction():
                cloud.store.delete("foreign_channels", f"{border_router}>{foreign_router}")
        await cloud.supervisor.reconcile_now(border_router)

    # -- segments (dissertation 3.1: askSubStart / askSubMid / askSubEnd, commitSub, removeSub) ------
    def resolve_variable(self, full_name: str) -> tuple[StatusVariable, str]:
        """``getVariableId``: a variable published in this cloud and its publisher's edge router."""
        st = self.cloud.state
        var = st.registry.lookup(full_name)
        return var, st.client("publisher", var.publisher).edge_router

    async def reserve(self, sid: str, kind: str, *, from_router: str, to_router: str, next_channel: str,
                      variable: str, variable_id: int, pub_interval_ms: int, qos: ModeQoS,
                      ttl_ms: int = 10_000, frames_per_s: int = 0, avoid: frozenset[str] = frozenset(),
                      siblings: bool = False, later: tuple[tuple[str, str], ...] = ()) -> SubscriptionRecord:
        """Reserve one cloud's piece of an inter-cloud path; nothing reaches the routers before commit.
        ``avoid``: routers of the subscription's other disjoint paths here; ``siblings``: the
        subscription has several paths (their END segments all reach the subscriber's edge router);
        ``later``: the (from, to) routers of the siblings reserved here after this one."""
        async with self.cloud.lock:
            st = self.cloud.state
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
                                   from_router, to_router, exit_channel=exit_channel, segment=True,
                                   frames_per_s=frames_per_s, avoid=avoid - {from_router, to_router},
                                   shared_sink=siblings and kind == SegmentKind.END, later=later)
            self.pending[sid] = time.monotonic() + max(ttl_ms, 1) / 1000
            return record

    async def commit(self, sid: str) -> None:
        cloud, st = self.cloud, self.cloud.state
        async with cloud.lock:
            if sid not in self.pending:
                if sid in st.subscriptions:
                    return  # committed already: commit is idempotent
                raise NotFound(f"no reserved segment {sid!r} (aborted or expired)", field="key")
            record = st.subscriptions[sid]
            try:
                await installer.apply_transaction(cloud.links, self.subscriptions.changes_of(record, install=True))
            except GridStatError:
                del self.pending[sid]
                st.remove(sid)
                raise
            del self.pending[sid]
            with cloud.store.transaction():
                cloud.store.put_subscription(record)

    async def abort(self, sid: str) -> bool:
        async with self.cloud.lock:
            if self.pending.pop(sid, None) is not None:
                self.cloud.state.remove(sid)
                return True
            if sid in self.cloud.state.subscriptions:
                await self.subscriptions.unsubscribe_locked(sid)
                return True
            return False

    async def expire(self) -> None:
        """Release the reservations not committed within their TTL (before each supervisor pass)."""
        if not self.pending:
            return
        async with self.cloud.lock:
            now = time.monotonic()
            for sid in [s for s, deadline in self.pending.items() if deadline <= now]:
                del self.pending[sid]
                self.cloud.state.remove(sid)
                log.warning("segment %s expired before commit; its reservation is released", sid)
