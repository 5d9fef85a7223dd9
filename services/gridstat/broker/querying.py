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

With a parent broker (``--parent``), a query also matches the variables of every other cloud of the
hierarchy (docs/queries.md, "Across clouds"): the coordinator asks the parent for them
(``Segments.ListVariables``, answered by the root) when a query is added and every ``refresh_s``, and
admits each new match as an inter-cloud subscription (``delegation.UpLink``). A variable of another
cloud that is no longer listed, or no longer matches, loses its subscription; but only when every
broker answered, so an unreachable cloud never costs a subscription.

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

import grpc

from gridstat.broker.delegation import UpLink, qos_pb
from gridstat.broker.state import ModeQoS
from gridstat.core import expressions
from gridstat.core.aio import create_guarded_task
from gridstat.core.model import StatusVariable, check_name
from gridstat.core.protoconv import publication_from_pb, type_from_pb, type_to_pb
from gridstat.errors import DuplicateName, GridStatError, NotFound, Unauthorized, ValidationError
from gridstat.v1 import broker_pb2 as pb

if TYPE_CHECKING:
    from gridstat.broker.admitting import SubscriptionCoordinator
    from gridstat.broker.cloud import Cloud

log = logging.getLogger(__name__)

#: Query subscriptions one broker holds (each stands for many subscriptions).
MAX_QUERIES = 1024
#: How often the other clouds' variables are listed again for the queries (docs/queries.md).
REFRESH_S = 10.0
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
    #: An inter-cloud member's admission as the parent answered it (a serialized ``SubscribeReply``):
    #: this cloud holds no record of it to answer from.
    reply: bytes = b""

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


def plan(query: Query, variables: Iterable[StatusVariable], *, keep_missing: bool = False) -> Plan:
    """Pure: the matching variables without a member (in registration order), and the members whose
    variable no longer matches or, unless ``keep_missing`` (a list known to be incomplete: a cloud did
    not answer), is no longer listed."""
    registered = {v.full_name: v for v in variables}
    admit = tuple(v for v in registered.values() if v.full_name not in query.members and query.matches(v))
    forget = tuple(name for name in query.members
                   if (name not in registered and not keep_missing)
                   or (name in registered and not query.matches(registered[name])))
    return Plan(admit, forget)


def query_to_json(q: Query) -> dict[str, Any]:
    return {"query_id": q.query_id, "subscriber": q.subscriber, "where": q.where, "edge_router": q.edge_router,
            "qos": [{"mode": m.mode, "interval_ms": m.interval_ms, "latency_ms": m.latency_ms,
                     "redundancy": m.redundancy, "priority": m.priority, "price": m.price,
                     "best_effort": m.best_effort} for m in q.qos],
            "members": [{"variable": m.variable, "subscription_id": m.subscription_id, "reason": m.reason,
                         "message": m.message, "field": m.field, **({"reply": m.reply.hex()} if m.reply else {})}
                        for m in q.members.values()]}


def query_from_json(d: dict[str, Any]) -> Query:
    return Query(d["query_id"], d["subscriber"], d["where"], tuple(ModeQoS(**m) for m in d["qos"]),
                 d["edge_router"], {m["variable"]: Member(**{**m, "reply": bytes.fromhex(m.get("reply", ""))})
                                    for m in d.get("members", ())})


#: ``authorize(subscriber, variable)``: raises Unauthorized when the policy refuses (``broker.authz``).
Authorize = Callable[[str, str], None]


class QueryCoordinator:
    """The leaf broker's query subscriptions (module docstring)."""

    def __init__(self, cloud: Cloud, subscriptions: SubscriptionCoordinator, *,
                 authorize: Authorize | None = None, refresh_s: float = REFRESH_S) -> None:
        self.cloud = cloud
        self.subscriptions = subscriptions
        self.authorize = authorize
        self.refresh_s = refresh_s
        self.queries: dict[str, Query] = {}
        self._planning = asyncio.Lock()
        self._next = 1
        #: Plans running in the background (``publication_added``, ``replan_all``), cancelled by ``close``.
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        #: The parent broker, for the other clouds' variables (set by the leaf broker with ``--parent``).
        self.uplink: UpLink | None = None
        #: The other clouds' variables as last listed, and whether every broker answered then.
        self.remote: dict[str, StatusVariable] = {}
        self.remote_complete = False
        self._remote_error = ""
        self._refresher: asyncio.Task[None] | None = None

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
        if self.uplink is not None:
            await self.refresh_remote()
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
                removed += await self._drop(member)
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
            local = {v.full_name for v in self.cloud.state.registry}
            # This cloud's variables, then the other clouds' (a name registered here is this cloud's).
            variables = [*self.cloud.state.registry, *(v for n, v in self.remote.items() if n not in local)]
            todo = plan(query, variables, keep_missing=self.uplink is not None and not self.remote_complete)
            members = {n: m for n, m in query.members.items() if n not in todo.forget}
            for name in todo.forget:
                await self._drop(query.members[name])
            for var in todo.admit:
                member = await self._admit(query, var, remote=var.full_name not in local)
                if member is not None:
                    members[var.full_name] = member
            async with self.cloud.lock:
                if query_id in self.queries:
                    # a variable of this cloud unregistered while it was being admitted is forgotten here
                    registered = {v.full_name for v in self.cloud.state.registry}
                    members = {n: m for n, m in members.items() if n in registered or n not in local}
                    query = replace(query, members=members)
                    self.queries[query_id] = query
                    self._save(query)

    async def _admit(self, query: Query, var: StatusVariable, *, remote: bool = False) -> Member | None:
        """Admit one matching variable; its member, or None when the parent did not answer (tried again
        at the next refresh)."""
        try:
            if self.authorize is not None:
                self.authorize(query.subscriber, var.full_name)
            if remote and self.uplink is not None:
                return await self._admit_remote(query, var, self.uplink)
            record = await self.subscriptions.subscribe(query.subscriber, var.full_name, None, query.qos,
                                                        edge_router=query.edge_router)
        except GridStatError as exc:
            return Member(var.full_name, reason=exc.reason, message=exc.message, field=exc.field or "")
        self.subscriptions.notes.pop(record.subscription_id, None)
        return Member(var.full_name, subscription_id=record.subscription_id)

    async def _admit_remote(self, query: Query, var: StatusVariable, uplink: UpLink) -> Member | None:
        """A variable of another cloud: an inter-cloud subscription, delegated up as a client's is."""
        s = pb.Subscription(subscriber=query.subscriber, variable=var.full_name, type=type_to_pb(var.type),
                            edge_router=query.edge_router, qos=[qos_pb(q) for q in query.qos])
        try:
            reply = await uplink.subscribe(self.cloud, s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                log.warning("broker %s: query subscription %s: parent broker %s did not answer for %s: %s",
                            self.cloud.name, query.query_id, uplink.address, var.full_name, exc.details())
                return None
            reason = dict(exc.trailing_metadata() or ()).get("gridstat-reason", exc.code().name)
            return Member(var.full_name, reason=str(reason), message=exc.details() or "")
        if reply.admitted:
            return Member(var.full_name, subscription_id=reply.subscription.subscription_id,
                          reply=reply.SerializeToString())
        r = reply.rejection
        return Member(var.full_name, reason=r.reason, message=r.message, field=r.field)

    async def _drop(self, member: Member) -> int:
        """Remove a member's subscription if it still stands (this cloud's, or one delegated up); 1 if it went."""
        sid = member.subscription_id
        if not sid:
            return 0
        try:
            if sid in self.cloud.state.subscriptions:
                await self.subscriptions.unsubscribe(sid)
                return 1
            if self.uplink is not None and self.uplink.delegated(self.cloud, sid):
                await self.uplink.unsubscribe(self.cloud, sid)
                return 1
        except NotFound:  # removed by hand meanwhile
            pass
        except grpc.aio.AioRpcError as exc:
            log.warning("broker %s: removing inter-cloud subscription %s: %s", self.cloud.name, sid, exc.details())
        return 0

    # -- the other clouds' variables ----------------------------------------------------------------
    async def refresh_remote(self) -> bool:
        """List the other clouds' variables again (``remote``); False if the parent did not answer."""
        uplink = self.uplink
        if uplink is None:
            return False
        try:
            reply = await uplink.list_variables()
        except grpc.aio.AioRpcError as exc:
            error = f"{exc.code().name}: {exc.details()}"
            if error != self._remote_error:
                log.warning("broker %s: the parent broker %s did not list the other clouds' variables for the "
                            "query subscriptions: %s", self.cloud.name, uplink.address, error)
            self._remote_error = error
            self.remote_complete = False
            return False
        if self._remote_error:
            log.warning("broker %s: the parent broker %s lists variables again", self.cloud.name, uplink.address)
            self._remote_error = ""
        remote: dict[str, StatusVariable] = {}
        for p in reply.publications:
            if p.cloud == self.cloud.name:
                continue
            try:
                t = type_from_pb(p.type, field="publication.type")
            except ValidationError:
                continue
            if t is not None:
                var = publication_from_pb(p, t)
                remote[var.full_name] = var
        self.remote = remote
        self.remote_complete = not reply.unreachable
        return True

    def start(self) -> None:
        """With a parent broker: list the other clouds' variables every ``refresh_s`` and re-plan the queries."""
        if self.uplink is not None and self._refresher is None and self.refresh_s > 0:
            self._refresher = create_guarded_task(self._refresh_forever(), name=f"broker-{self.cloud.name}-queries")

    async def _refresh_forever(self) -> None:
        while True:
            if self.queries and await self.refresh_remote():
                for qid in list(self.queries):
                    await self.replan(qid)
            await asyncio.sleep(self.refresh_s)

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
        # Its subscriptions in this cloud go with it (``admitting``); those delegated up are removed here.
        delegated = [m for qid in gone for m in self.queries[qid].members.values()
                     if m.admitted and m.subscription_id not in self.cloud.state.subscriptions]
        with self.cloud.store.transaction():
            for qid in gone:
                del self.queries[qid]
                self.cloud.store.delete("queries", qid)
        if delegated and self.uplink is not None and not self._closed:
            task = create_guarded_task(self._drop_all(delegated), name=f"broker-{self.cloud.name}-query-drop")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _drop_all(self, members: list[Member]) -> None:
        for member in members:
            await self._drop(member)

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
        if self._refresher is not None:
            self._tasks.add(self._refresher)
            self._refresher = None
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


__all__ = ["MAX_QUERIES", "REFRESH_S", "Member", "Plan", "Query", "QueryCoordinator", "plan", "query_from_json",
           "query_to_json"]
