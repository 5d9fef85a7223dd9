"""Standing query subscriptions at the leaf broker (docs/queries.md).

A query subscription is a subscriber, a where-expression (``gridstat.core.expressions``) and the
QoS of each mode. It stands for one ordinary subscription per registered variable the expression
matches, now and later, each admitted individually by ``admitting.SubscriptionCoordinator`` with
the query's QoS, so one variable's rejection (no path, no capacity, a policy) leaves the others
admitted; the outcome of each variable is kept as a :class:`Member` (its subscription id, or the
rejection's reason and message).

What to do is decided by the pure :func:`plan` (which matching variables have no member yet;
which members' variables are gone) and carried out by :class:`QueryCoordinator`:

* a query added is planned against every registered variable;
* a variable registered is planned against every query it matches (in a background task, since
  admitting takes the broker lock the registration holds);
* a variable unregistered loses its subscriptions with the publication (``admitting``); the
  coordinator forgets its members (``publication_gone``);
* a subscriber that restarts or unregisters loses its queries with its subscriptions
  (dissertation 3.7: what a crashed client held goes with it);
* a query removed removes its members' subscriptions.

Planning runs one query at a time (``_planning``), so two registrations never admit one variable
twice. A rejected variable is not retried until it is registered again. Queries and their members
are written through to the store (table ``queries``) and read back by a restarted broker, whose
subscriptions come back from the store as every other subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gridstat.broker.state import ModeQoS
from gridstat.core import expressions
from gridstat.core.aio import create_guarded_task
from gridstat.core.model import StatusVariable, check_name
from gridstat.errors import DuplicateName, GridStatError, NotFound, Unauthorized, ValidationError

if TYPE_CHECKING:
    from gridstat.broker.admitting import SubscriptionCoordinator
    from gridstat.broker.cloud import Cloud

log = logging.getLogger(__name__)

#: Query subscriptions one broker holds (each stands for many subscriptions).
MAX_QUERIES = 1024
#: A query id a client chooses (the operator's ``k8s:<namespace>:<name>:query``).
_QUERY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:#-]{0,255}")


@dataclass(frozen=True)
class Member:
    """One matching variable's outcome: admitted (``subscription_id``) or rejected (``reason``, ``message``)."""

    variable: str
    subscription_id: str = ""
    reason: str = ""
    message: str = ""
    field: str = ""

    @property
    def admitted(self) -> bool:
        return bool(self.subscription_id)


@dataclass(frozen=True)
class Query:
    """A standing query subscription and the outcome of every variable it matched."""

    query_id: str
    subscriber: str
    where: str
    qos: tuple[ModeQoS, ...]
    edge_router: str
    members: dict[str, Member] = field(default_factory=dict, compare=False)
    expression: expressions.Expression = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "expression", expressions.parse(self.where, field="query.where"))

    def matches(self, var: StatusVariable) -> bool:
        return expressions.matches(self.expression, var)


@dataclass(frozen=True)
class Plan:
    """What one planning pass does to a query: variables to admit, members to forget."""

    admit: tuple[StatusVariable, ...] = ()
    forget: tuple[str, ...] = ()


def plan(query: Query, variables: Iterable[StatusVariable]) -> Plan:
    """Pure: the matching variables without a member (in registration order), and the members whose
    variable is no longer registered or no longer matches."""
    registered = {v.full_name: v for v in variables}
    admit = tuple(v for v in registered.values() if v.full_name not in query.members and query.matches(v))
    forget = tuple(name for name in query.members
                   if name not in registered or not query.matches(registered[name]))
    return Plan(admit, forget)


def query_to_json(q: Query) -> dict[str, Any]:
    return {"query_id": q.query_id, "subscriber": q.subscriber, "where": q.where, "edge_router": q.edge_router,
            "qos": [{"mode": m.mode, "interval_ms": m.interval_ms, "latency_ms": m.latency_ms,
                     "redundancy": m.redundancy, "priority": m.priority, "price": m.price,
                     "best_effort": m.best_effort} for m in q.qos],
            "members": [{"variable": m.variable, "subscription_id": m.subscription_id, "reason": m.reason,
                         "message": m.message, "field": m.field} for m in q.members.values()]}


def query_from_json(d: dict[str, Any]) -> Query:
    return Query(d["query_id"], d["subscriber"], d["where"], tuple(ModeQoS(**m) for m in d["qos"]),
                 d["edge_router"], {m["variable"]: Member(**m) for m in d.get("members", ())})


#: ``authorize(subscriber, variable)``: raises Unauthorized when the policy refuses (``broker.authz``).
Authorize = Callable[[str, str], None]


class QueryCoordinator:
    """The leaf broker's query subscriptions (module docstring)."""

    def __init__(self, cloud: Cloud, subscriptions: SubscriptionCoordinator, *,
                 authorize: Authorize | None = None) -> None:
        self.cloud = cloud
        self.subscriptions = subscriptions
        self.authorize = authorize
        self.queries: dict[str, Query] = {}
        self._planning = asyncio.Lock()
        self._next = 1
        #: Plans running in the background (``publication_added``, ``replan_all``), cancelled by ``close``.
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def load(self) -> None:
        """Read the queries back from the store (a restarted broker)."""
        for d in self.cloud.store.all("queries"):
            q = query_from_json(d)
            self.queries[q.query_id] = q
        self._next = int(self.cloud.store.get_meta("next_query") or self._next)

    # -- commands ----------------------------------------------------------------------------------
    async def add(self, subscriber: str, where: str, qos: Iterable[ModeQoS], *, edge_router: str,
                  query_id: str = "") -> Query:
        """Add a query subscription and admit every variable it matches now; ValidationError for a bad
        expression (with its column), an undefined mode or no QoS."""
        check_name(subscriber, what="query.subscriber")
        qos = tuple(qos)
        if not qos:
            raise ValidationError("a query subscription needs QoS for at least one mode", field="query.qos")
        self.subscriptions.modes.check_defined(m.mode for m in qos)
        st = self.cloud.state
        async with self.cloud.lock:
            client = st.client("subscriber", subscriber)
            if edge_router not in client.edge_routers:
                raise Unauthorized(f"subscriber {subscriber!r} is registered at {', '.join(client.edge_routers)}, "
                                   f"not {edge_router!r}", field="query.edge_router")
            if query_id:
                if not _QUERY_ID.fullmatch(query_id):
                    raise ValidationError(f"query id {query_id!r:.80} must be 1-256 letters, digits, '_', '.', ':', "
                                          "'#' or '-'", field="query.query_id")
                if query_id in self.queries:
                    raise DuplicateName(f"query subscription {query_id!r} exists", field="query.query_id")
            elif len(self.queries) >= MAX_QUERIES:
                raise ValidationError(f"this broker holds {MAX_QUERIES} query subscriptions, its most",
                                      field="query")
            query = Query(query_id or self._new_id(), subscriber, where, qos, edge_router)
            self.queries[query.query_id] = query
            self._save(query)
        await self.replan(query.query_id)
        return self.queries[query.query_id]

    async def remove(self, query_id: str) -> int:
        """Remove a query subscription and its members' subscriptions; returns how many went."""
        query = self.queries.get(query_id)
        if query is None:
            raise NotFound(f"no query subscription {query_id!r}", field="query_id")
        async with self._planning:
            removed = 0
            for member in query.members.values():
                if member.admitted and member.subscription_id in self.cloud.state.subscriptions:
                    try:
                        await self.subscriptions.unsubscribe(member.subscription_id)
                        removed += 1
                    except NotFound:  # removed by hand meanwhile
                        pass
            async with self.cloud.lock:
                self.queries.pop(query_id, None)
                with self.cloud.store.transaction():
                    self.cloud.store.delete("queries", query_id)
        return removed

    async def replan(self, query_id: str) -> None:
        """Plan one query against the registered variables and carry the plan out."""
        async with self._planning:
            query = self.queries.get(query_id)
            if query is None:  # removed meanwhile
                return
            todo = plan(query, self.cloud.state.registry)
            members = {n: m for n, m in query.members.items() if n not in todo.forget}
            for var in todo.admit:
                members[var.full_name] = await self._admit(query, var)
            async with self.cloud.lock:
                if query_id in self.queries:
                    # a variable unregistered while it was being admitted is forgotten here
                    registered = {v.full_name for v in self.cloud.state.registry}
                    members = {n: m for n, m in members.items() if n in registered}
                    query = replace(query, members=members)
                    self.queries[query_id] = query
                    self._save(query)

    async def _admit(self, query: Query, var: StatusVariable) -> Member:
        try:
            if self.authorize is not None:
                self.authorize(query.subscriber, var.full_name)
            record = await self.subscriptions.subscribe(query.subscriber, var.full_name, None, query.qos,
                                                        edge_router=query.edge_router)
        except GridStatError as exc:
            return Member(var.full_name, reason=exc.reason, message=exc.message, field=exc.field or "")
        self.subscriptions.notes.pop(record.subscription_id, None)
        return Member(var.full_name, subscription_id=record.subscription_id)

    # -- what happens to variables and subscribers -------------------------------------------------
    def publication_added(self, var: StatusVariable) -> None:
        """A variable was registered: every query it matches admits it (in the background)."""
        for query in list(self.queries.values()):
            if query.matches(var):
                self._in_background(query.query_id)

    def publication_gone(self, full_name: str) -> None:
        """A variable was unregistered (its subscriptions are gone already; under the broker lock)."""
        for query in list(self.queries.values()):
            if full_name in query.members:
                members = {n: m for n, m in query.members.items() if n != full_name}
                query = replace(query, members=members)
                self.queries[query.query_id] = query
                self._save(query)

    def subscriber_gone(self, subscriber: str) -> None:
        """A subscriber restarted or unregistered: its queries go (under the broker lock)."""
        gone = [q.query_id for q in self.queries.values() if q.subscriber == subscriber]
        if not gone:
            return
        with self.cloud.store.transaction():
            for qid in gone:
                del self.queries[qid]
                self.cloud.store.delete("queries", qid)

    def replan_all(self) -> None:
        """Plan every query again in the background (a restarted broker)."""
        for qid in list(self.queries):
            self._in_background(qid)

    def _in_background(self, query_id: str) -> None:
        if self._closed:
            return
        task = create_guarded_task(self.replan(query_id), name=f"broker-{self.cloud.name}-query")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Cancel the plans running in the background (before the broker closes its store); idempotent."""
        self._closed = True
        tasks, self._tasks = self._tasks, set()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- views -------------------------------------------------------------------------------------
    def listed(self, subscriber: str = "", scope: Collection[str] | None = None) -> list[Query]:
        return [q for q in self.queries.values()
                if (not subscriber or q.subscriber == subscriber) and (scope is None or q.subscriber in scope)]

    def _new_id(self) -> str:
        while f"{self.cloud.name}-q{self._next}" in self.queries:
            self._next += 1
        qid = f"{self.cloud.name}-q{self._next}"
        self._next += 1
        return qid

    def _save(self, query: Query) -> None:
        with self.cloud.store.transaction():
            self.cloud.store.put("queries", query.query_id, query_to_json(query))
            self.cloud.store.set_meta("next_query", self._next)


__all__ = ["MAX_QUERIES", "Member", "Plan", "Query", "QueryCoordinator", "plan", "query_from_json",
           "query_to_json"]
