"""Carry out a subscription plan at a leaf broker, all of it or none of it.

``plan.plan_subscription`` says which calls turn what the broker holds into what the resource
asks for. Here they are made in order, and each successful step records how to undo it. The first
rejection (``SubscribeReply.admitted = false``, or a refusal such as ``AlreadyExists``) stops the
run and undoes every earlier step in reverse, so a resource with n variables is admitted whole or
not at all, and an update that does not fit leaves the previous subscription in place
(``ChangeSubscription`` keeps the old QoS by itself; a replaced subscription is put back).

If the broker stops answering half-way, the undo cannot run either; the handler reports
``BrokerUnavailable`` and retries, and the retry plans from what the broker then holds, so it
finishes the change (or rolls it back on a rejection). Nothing is left half-installed once the
broker answers again.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gridstat.v1 import broker_pb2 as bpb
from gridstat_operator import brokers as brokering
from gridstat_operator import conditions, plan, selectors

log = logging.getLogger(__name__)

VALUE_KINDS = {"int": bpb.VALUE_KIND_INT, "float": bpb.VALUE_KIND_FLOAT, "bool": bpb.VALUE_KIND_BOOL}


@dataclass(frozen=True)
class Rejection:
    """Why a broker refused (part of) a Subscription, and what it offered instead."""

    reason: str
    message: str
    variable: str = ""
    field: str = ""
    offer: dict[str, float | int] = dataclasses.field(default_factory=dict)

    def as_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"reason": self.reason, "message": self.message, "variable": self.variable,
                               "field": self.field}
        if self.offer:
            out["offer"] = dict(self.offer)
        return out

    @property
    def summary(self) -> str:
        text = f"{self.reason}: {self.message}" + (f" (variable {self.variable})" if self.variable else "")
        if self.offer:
            text += "; the broker offers " + ", ".join(f"{k}={v}" for k, v in sorted(self.offer.items()))
        return text


@dataclass
class Outcome:
    """What a run did: the broker's holdings afterwards, and the rejection that stopped it, if any."""

    actual: list[plan.ActualSubscription]
    rejection: Rejection | None = None
    steps: int = 0                 # calls that changed something and were kept
    rolled_back: int = 0           # steps undone after a rejection
    undo_failures: list[str] = dataclasses.field(default_factory=list)
    #: Ids the broker says it holds but does not list (inter-cloud subscriptions held by a parent).
    held_elsewhere: list[str] = dataclasses.field(default_factory=list)

    @property
    def admitted(self) -> bool:
        return self.rejection is None


def actual_from_reply(reply: Any) -> plan.ActualSubscription:
    s = reply.subscription
    qos = {q.mode: plan.qos_key(q.mode, q.interval_ms, q.latency_ms, q.redundancy, q.priority) for q in s.qos}
    paths = tuple((a.mode, p.redundant_index, tuple(p.routers), float(p.latency_ms))
                  for a in reply.allocations for p in a.paths)
    return plan.ActualSubscription(s.subscription_id, s.subscriber, s.variable, s.edge_router, qos, paths)


def _mode_qos_pb(key: tuple[int, int, int, int, int]) -> Any:
    mode, interval, latency, redundancy, priority = key
    return bpb.ModeQoS(mode=mode, interval_ms=interval, latency_ms=latency, redundancy=redundancy, priority=priority)


def subscription_pb(d: plan.DesiredSubscription) -> Any:
    vtype = bpb.ValueType(kind=VALUE_KINDS[d.value_type]) if d.value_type in VALUE_KINDS else bpb.ValueType()
    return bpb.Subscription(subscription_id=d.subscription_id, subscriber=d.subscriber, variable=d.variable,
                            type=vtype, edge_router=d.edge_router, qos=[_mode_qos_pb(q.key) for q in d.qos])


def _restore_pb(a: plan.ActualSubscription) -> Any:
    return bpb.Subscription(subscription_id=a.subscription_id, subscriber=a.subscriber, variable=a.variable,
                            edge_router=a.edge_router, qos=[_mode_qos_pb(k) for _, k in sorted(a.qos.items())])


def _rejection(reply: Any, variable: str) -> Rejection:
    r = reply.rejection
    offer: dict[str, float | int] = {}
    if r.offer.HasField("best_latency_ms"):
        offer["bestLatencyMs"] = round(r.offer.best_latency_ms, 3)
    if r.offer.HasField("max_redundancy"):
        offer["maxRedundancy"] = r.offer.max_redundancy
    if r.offer.HasField("min_interval_ms"):
        offer["minIntervalMs"] = r.offer.min_interval_ms
    reason = r.reason or "AdmissionRejected"
    return Rejection(reason, conditions.without_reason(reason, r.message) or "the broker rejected the subscription",
                     variable, r.field, offer)


class Installer:
    """Runs plans against one leaf broker (``address``)."""

    def __init__(self, brokers: brokering.Brokers, address: str) -> None:
        self.brokers = brokers
        self.address = address

    async def _call(self, method: str, request: Any, *, attempts: int | None = None) -> Any:
        return await self.brokers.call(self.address, method, request, attempts=attempts)

    async def actual(self, subscriber: str, prefix: str, *,
                     attempts: int | None = None) -> list[plan.ActualSubscription]:
        """What the broker holds under this resource's ids (``attempts``: see ``Brokers.call``)."""
        reply = await self._call("ListSubscriptions", bpb.ListSubscriptionsRequest(subscriber=subscriber),
                                 attempts=attempts)
        return [actual_from_reply(r) for r in reply.subscriptions
                if r.subscription.subscription_id.startswith(prefix)]

    async def _subscribe(self, sub: Any) -> Any:
        """Subscribe; a refusal becomes a reply with a rejection. Our own id already present
        (a retried call that went through the first time) counts as admitted."""
        try:
            return await self._call("Subscribe", bpb.SubscribeRequest(subscription=sub))
        except brokering.BrokerRefused as exc:
            return bpb.SubscribeReply(admitted=False, rejection=bpb.Rejection(
                reason=exc.reason, message=exc.message, field=exc.field))

    async def _unsubscribe(self, sid: str) -> None:
        try:
            await self._call("Unsubscribe", bpb.UnsubscribeRequest(subscription_id=sid))
        except brokering.BrokerRefused as exc:
            if exc.reason != "NotFound":
                raise

    async def _change(self, sid: str, key: tuple[int, int, int, int, int]) -> Any:
        try:
            return await self._call("ChangeSubscription",
                                    bpb.ChangeSubscriptionRequest(subscription_id=sid, qos=_mode_qos_pb(key)))
        except brokering.BrokerRefused as exc:
            return bpb.SubscribeReply(admitted=False, rejection=bpb.Rejection(
                reason=exc.reason, message=exc.message, field=exc.field))

    async def apply(self, steps: plan.SubscriptionPlan, *, subscriber: str, prefix: str) -> Outcome:
        """Make every call of ``steps``; on the first rejection undo the earlier ones."""
        undo: list[tuple[str, Callable[[], Awaitable[None]]]] = []
        rejection: Rejection | None = None
        held_elsewhere: list[str] = []
        done = 0
        for action in steps.actions:
            if isinstance(action, plan.Subscribe):
                d = action.desired
                reply = await self._subscribe(subscription_pb(d))
                if not reply.admitted:
                    if reply.rejection.reason == "AlreadyExists" and (
                            reply.rejection.field.endswith("subscription_id")
                            or await self._holds(d, subscriber, prefix)):
                        # Our own id: a retried call that went through, or an inter-cloud
                        # subscription the leaf delegated upwards (held by a parent, not listed here).
                        held_elsewhere.append(d.subscription_id)
                        continue
                    rejection = _rejection(reply, d.variable)
                    break
                undo.append((f"unsubscribe {d.subscription_id}", _bind(self._unsubscribe, d.subscription_id)))
            elif isinstance(action, plan.Change):
                d, q = action.desired, action.qos
                reply = await self._change(d.subscription_id, q.key)
                if not reply.admitted:
                    rejection = _rejection(reply, d.variable)
                    break
                if action.old is not None:
                    undo.append((f"restore mode {q.mode_id} of {d.subscription_id}",
                                 _bind(self._change_back, d.subscription_id, action.old)))
                else:
                    undo.append((f"remove mode {q.mode_id} of {d.subscription_id}",
                                 _bind(self._replace_back, d.subscription_id, action.before)))
            elif isinstance(action, plan.Replace):
                d, old = action.desired, action.old
                await self._unsubscribe(old.subscription_id)
                reply = await self._subscribe(subscription_pb(d))
                if not reply.admitted:
                    rejection = _rejection(reply, d.variable)
                    undo.append((f"restore {old.subscription_id}", _bind(self._resubscribe, old)))
                    break
                undo.append((f"restore {old.subscription_id}", _bind(self._replace_back, d.subscription_id, old)))
            elif isinstance(action, plan.Unsubscribe):
                await self._unsubscribe(action.actual.subscription_id)
            done += 1
        outcome = Outcome(actual=[], rejection=rejection, steps=done, held_elsewhere=held_elsewhere)
        if rejection is not None:
            for what, step in reversed(undo):
                try:
                    await step()
                    outcome.rolled_back += 1
                except brokering.BrokerError as exc:
                    log.warning("undo (%s) failed: %s", what, exc)
                    outcome.undo_failures.append(f"{what}: {exc}")
            outcome.steps = 0
        outcome.actual = await self.actual(subscriber, prefix)
        return outcome

    async def remove_all(self, *, subscriber: str, prefix: str, known: list[str]) -> int:
        """Unsubscribe every id of this resource (listed at the broker, or remembered in status)."""
        ids = {a.subscription_id for a in await self.actual(subscriber, prefix)} | set(known)
        for sid in sorted(ids):
            await self._unsubscribe(sid)
        return len(ids)

    # -- query subscriptions (spec.selector; gridstat_operator.selectors) ---------------------------
    async def actual_query(self, query_id: str, subscriber: str, *,
                           attempts: int | None = None) -> selectors.ActualQuery | None:
        """The query the broker holds under ``query_id``, if any."""
        reply = await self._call("ListQueries", bpb.ListQueriesRequest(subscriber=subscriber), attempts=attempts)
        return next((selectors.actual_query_from_reply(q) for q in reply.queries if q.query.query_id == query_id),
                    None)

    async def apply_query(self, steps: tuple[selectors.QueryAction, ...],
                          actual: selectors.ActualQuery | None) -> selectors.ActualQuery | None:
        """Carry out ``plan_query``'s calls in order; what the broker holds afterwards. A query is not
        all-or-nothing: the broker admits each matching variable on its own and says which it rejected."""
        for step in steps:
            if isinstance(step, selectors.UnsubscribeQuery):
                await self.remove_query(step.actual.query_id)
                actual = None
            else:
                d = step.desired
                reply = await self._call("SubscribeQuery", bpb.SubscribeQueryRequest(query=bpb.QuerySubscription(
                    query_id=d.query_id, subscriber=d.subscriber, where=d.where, edge_router=d.edge_router,
                    qos=[_mode_qos_pb(q.key) for q in d.qos])))
                actual = selectors.actual_query_from_reply(reply)
        return actual

    async def remove_query(self, query_id: str) -> int:
        """Remove a query and its variables' subscriptions (none held: 0)."""
        try:
            reply = await self._call("UnsubscribeQuery", bpb.UnsubscribeQueryRequest(query_id=query_id))
        except brokering.BrokerRefused as exc:
            if exc.reason == "NotFound":
                return 0
            raise
        return int(reply.subscriptions_removed)

    async def _holds(self, d: plan.DesiredSubscription, subscriber: str, prefix: str) -> bool:
        return any(a.subscription_id == d.subscription_id and dict(a.qos) == d.qos_keys
                   for a in await self.actual(subscriber, prefix))

    async def _change_back(self, sid: str, key: tuple[int, int, int, int, int]) -> None:
        reply = await self._change(sid, key)
        if not reply.admitted:
            raise brokering.BrokerRefused(conditions.without_reason(reply.rejection.reason, reply.rejection.message),
                                          reason=reply.rejection.reason)

    async def _resubscribe(self, old: plan.ActualSubscription) -> None:
        reply = await self._subscribe(_restore_pb(old))
        if not reply.admitted:
            raise brokering.BrokerRefused(conditions.without_reason(reply.rejection.reason, reply.rejection.message),
                                          reason=reply.rejection.reason)

    async def _replace_back(self, sid: str, old: plan.ActualSubscription) -> None:
        """Put the subscription back as it was before the plan (``old``)."""
        await self._unsubscribe(sid)
        await self._resubscribe(old)


def _bind(fn: Callable[..., Awaitable[None]], *args: Any) -> Callable[[], Awaitable[None]]:
    async def step() -> None:
        await fn(*args)
    return step
