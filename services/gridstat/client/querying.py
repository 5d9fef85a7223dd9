"""A standing query subscription on the subscriber's side (docs/queries.md).

The leaf broker admits every variable the query's where-expression matches, now and later, each
as a subscription of its own to this subscriber's socket. :class:`QuerySubscription` keeps the
local side in step: every admitted variable gets a local :class:`~gridstat.client.Subscription`
(the variable's id, type, publication interval and attributes from the broker's reply, the
interval the broker granted in the current mode), a variable that is gone has its local
subscription forgotten, and the rejected ones are kept with their reason.

The broker admits later variables on its own; the subscriber learns of them by
:meth:`QuerySubscription.refresh` (ListQueries through the edge router), which ``follow_s`` runs
periodically in a guarded task. Between two refreshes, events of a newly admitted variable arrive
before its local subscription exists and are counted as ``unknown_variable`` drops.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gridstat.client.session import EdgeSession, result_from_pb, type_from_pb
from gridstat.core.aio import create_guarded_task
from gridstat.core.model import StatusVariable, split_variable_name
from gridstat.errors import ChannelUnavailable, GridStatError
from gridstat.v1 import broker_pb2 as bpb

if TYPE_CHECKING:
    from gridstat.client.subscriber import Subscriber
    from gridstat.client.subscription import Subscription


@dataclass(frozen=True)
class Changes:
    """What one refresh changed: variables subscribed locally, forgotten, and rejected (by reason)."""

    added: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    rejected: dict[str, str] = field(default_factory=dict)


class QuerySubscription:
    """The local side of a query subscription (module docstring); made by ``Subscriber.subscribe_query``."""

    def __init__(self, subscriber: Subscriber, session: EdgeSession, query_id: str, where: str, *,
                 latency_ms: int, mode: int, on_event: Callable[..., Any] | None,
                 on_violation: Callable[..., Any] | None) -> None:
        self.subscriber = subscriber
        self.session = session
        self.query_id = query_id
        self.where = where
        self.latency_ms = latency_ms
        self.mode = mode
        self._on_event = on_event
        self._on_violation = on_violation
        #: Local subscriptions of the admitted variables, by ``publisher/variable``.
        self.members: dict[str, Subscription] = {}
        #: Matching variables the broker rejected: ``publisher/variable`` -> (reason, message).
        self.rejected: dict[str, tuple[str, str]] = {}
        self._follow: asyncio.Task[None] | None = None
        self._closed = False

    def apply(self, reply: bpb.QueryReply | None) -> Changes:
        """Bring the local subscriptions in step with the broker's view of the query (None: it is gone)."""
        admitted: dict[str, bpb.QueryMember] = {}
        rejected: dict[str, tuple[str, str]] = {}
        for m in reply.members if reply is not None else ():
            if m.admitted:
                admitted[m.variable] = m
            else:
                rejected[m.variable] = (m.rejection.reason, m.rejection.message)
        dropped = []
        for name in [n for n in self.members if n not in admitted]:
            sub = self.members.pop(name)
            self.subscriber._remote_ids.pop(sub.variable.variable_id, None)
            self.subscriber._forget(sub)
            dropped.append(name)
        added = []
        for name, m in admitted.items():
            if name in self.members:
                continue
            try:
                self.members[name] = self._subscribe_locally(m.subscription)
            except GridStatError as exc:  # e.g. a variable this subscriber already subscribes to by itself
                rejected[name] = (exc.reason, str(exc))
                continue
            self.subscriber._remote_ids[self.members[name].variable.variable_id] = m.subscription_id
            added.append(name)
        newly = {n: r for n, (r, _) in rejected.items() if n not in self.rejected}
        self.rejected = rejected
        return Changes(tuple(added), tuple(dropped), newly)

    def _subscribe_locally(self, reply: bpb.SubscribeReply) -> Subscription:
        result = result_from_pb(reply)
        publisher, name = split_variable_name(result.variable)
        vtype = type_from_pb(reply.subscription.type)
        var = StatusVariable(publisher, name, vtype, result.pub_interval_ms, variable_id=result.variable_id,
                             frames_per_s=result.frames_per_s, attributes=result.attributes)
        asked = {q.mode: q.interval_ms for q in result.qos}
        interval = result.granted_interval_ms.get(self.mode) or asked.get(self.mode) or next(iter(asked.values()))
        return self.subscriber.subscribe(var, interval_ms=interval, latency_ms=self.latency_ms,
                                         on_event=self._on_event, on_violation=self._on_violation)

    async def refresh(self) -> Changes:
        """Ask the broker (through the edge router) which variables the query holds now, and follow."""
        queries = await self.session.list_queries(self.subscriber.name)
        return self.apply(next((q for q in queries if q.query.query_id == self.query_id), None))

    def follow(self, every_s: float) -> None:
        """Refresh every ``every_s`` seconds in a guarded task until :meth:`close` (an unreachable edge
        router is tried again at the next turn)."""
        if self._follow is not None or self._closed:
            return

        async def loop() -> None:
            while True:
                await asyncio.sleep(every_s)
                with contextlib.suppress(ChannelUnavailable):
                    await self.refresh()

        self._follow = create_guarded_task(loop(), name=f"query-{self.query_id}")

    async def close(self, *, unsubscribe: bool = True) -> int:
        """Stop following; with ``unsubscribe``, remove the query at the broker (and its subscriptions).
        The local subscriptions are forgotten either way. Returns how many subscriptions the broker removed."""
        if self._closed:
            return 0
        self._closed = True
        if self._follow is not None:
            self._follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follow
        removed = await self.session.unsubscribe_query(self.query_id) if unsubscribe else 0
        self.apply(None)
        return removed


__all__ = ["Changes", "QuerySubscription"]
