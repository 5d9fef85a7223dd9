"""Pure decisions for a Subscription with ``spec.selector``: a standing query subscription
(docs/queries.md, docs/kubernetes.md "Subscriptions").

``spec.selector`` is a where-expression over the variables' fields and attributes
(``kind = 'freq' and region = 'west'``). Instead of one broker subscription per listed variable,
the resource becomes one query subscription at its leaf broker, whose id is derived from the
resource (``k8s:<namespace>:<name>:query``) so that a replay, a restart or a second replica finds
it again. The broker admits every matching variable individually, now and later, with the QoS of
every mode the resource belongs to (``plan.effective_qos``: ``spec.qos``, ``spec.modes`` and the
Modes that select it), and drops those unregistered; so unlike a variable list it is not
all-or-nothing, and the status says which variables were admitted and which were rejected, why.

A query's QoS or selector cannot be changed in place at the broker: a changed one is removed and
subscribed again (``plan_query``), which re-admits its variables.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gridstat.core import expressions
from gridstat.errors import ValidationError
from gridstat_operator import conditions, plan

#: Longest list of rejected variables kept in ``status.query.rejected``; the counts are always complete.
REJECTED_MAX = 20


def query_id(namespace: str, name: str) -> str:
    """The broker id of a Subscription's query (no variable's id ends so: theirs hold a '#')."""
    return f"{plan.id_prefix(namespace, name)}query"


@dataclass(frozen=True)
class DesiredQuery:
    """The query subscription a Subscription resource with ``spec.selector`` asks for."""

    query_id: str
    subscriber: str
    where: str
    edge_router: str
    qos: tuple[plan.ModeQoS, ...]

    @property
    def qos_keys(self) -> dict[int, plan.QoSKey]:
        return {q.mode_id: q.key for q in self.qos}


@dataclass(frozen=True)
class Member:
    """One matching variable as the broker reports it: admitted (subscription id, paths) or rejected."""

    variable: str
    admitted: bool
    subscription_id: str = ""
    reason: str = ""
    message: str = ""
    paths: Sequence[tuple[int, int, tuple[str, ...], float]] = ()  # (mode id, index, routers, latency)


@dataclass(frozen=True)
class ActualQuery:
    """What a broker holds under a query id (from ListQueries / SubscribeQuery's reply)."""

    query_id: str
    subscriber: str
    where: str
    edge_router: str
    qos: Mapping[int, plan.QoSKey]
    members: tuple[Member, ...] = ()


def desired_query(
        *,
        namespace: str,
        name: str,
        labels: Mapping[str, str],
        spec: Mapping[str, Any],
        modes: Mapping[str, plan.ModeRef],
) -> DesiredQuery:
    """What the broker should hold for a Subscription with ``spec.selector``; SpecError if it cannot
    (InvalidSelector with the column of the fault, InvalidArgument with ``spec.variables`` as well)."""
    selector = spec.get("selector")
    if spec.get("variables"):
        raise plan.SpecError("give either spec.variables or spec.selector, not both", reason="InvalidArgument",
                             field="spec.selector")
    if spec.get("type"):
        raise plan.SpecError("spec.type applies to listed variables; a selector matches variables of any type "
                             "(select by type with \"type = 'float'\")", reason="InvalidArgument", field="spec.type")
    try:
        where = expressions.render(expressions.parse(str(selector or ""), field="spec.selector"))
    except ValidationError as exc:
        raise plan.SpecError(str(exc).removeprefix(f"{exc.reason}: "), reason="InvalidSelector",
                             field="spec.selector") from None
    qos = plan.effective_qos(spec, name=name, labels=labels, modes=modes)
    return DesiredQuery(query_id(namespace, name), spec["subscriber"], where, spec["edgeRouter"], qos)


@dataclass(frozen=True)
class SubscribeQuery:
    desired: DesiredQuery


@dataclass(frozen=True)
class UnsubscribeQuery:
    actual: ActualQuery


QueryAction = SubscribeQuery | UnsubscribeQuery


def plan_query(desired: DesiredQuery | None, actual: ActualQuery | None) -> tuple[QueryAction, ...]:
    """The broker calls that turn ``actual`` (the query under this resource's id, if any) into
    ``desired`` (None: no query wanted): nothing when they agree, else remove what differs and
    subscribe again."""
    if actual is not None and desired is not None and \
            (actual.subscriber, actual.where, actual.edge_router, dict(actual.qos)) == \
            (desired.subscriber, desired.where, desired.edge_router, desired.qos_keys):
        return ()
    out: list[QueryAction] = []
    if actual is not None:
        out.append(UnsubscribeQuery(actual))
    if desired is not None:
        out.append(SubscribeQuery(desired))
    return tuple(out)


def query_fingerprint(desired: DesiredQuery) -> str:
    """A short stable digest of what is wanted; the timer re-reconciles when it moves."""
    data = [desired.query_id, desired.subscriber, desired.where, desired.edge_router, [q.key for q in desired.qos]]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def query_status(actual: ActualQuery, mode_names: Mapping[int, str]) -> dict[str, Any]:
    """``status.query``, ``status.subscriptionIds``, ``status.paths`` and ``status.pathCount`` of a query."""
    admitted = [m for m in actual.members if m.admitted]
    rejected = sorted((m for m in actual.members if not m.admitted), key=lambda m: m.variable)
    paths = plan.paths_status([plan.ActualSubscription(m.subscription_id, actual.subscriber, m.variable,
                                                       actual.edge_router, {}, m.paths) for m in admitted],
                              mode_names)
    return {
        "query": {"id": actual.query_id, "where": actual.where, "matched": len(actual.members),
                  "admitted": len(admitted), "rejectedCount": len(rejected),
                  "rejected": [{"variable": m.variable, "reason": m.reason, "message": m.message[:256]}
                               for m in rejected[:REJECTED_MAX]]},
        "subscriptionIds": sorted(m.subscription_id for m in admitted),
        "paths": paths,
        "pathCount": len(paths),
    }


def query_conditions(actual: ActualQuery, down: frozenset[str] = frozenset()) -> list[conditions.Condition]:
    """``Admitted``, ``Ready`` and ``Degraded`` of a query the broker holds: Ready once it stands
    (whatever matches now); Admitted unless some matching variable was rejected; Degraded when some
    was, or a router on an admitted path is down."""
    n, admitted = len(actual.members), sum(1 for m in actual.members if m.admitted)
    rejected = sorted(m.variable for m in actual.members if not m.admitted)
    summary = f"selector {actual.where!r}: {admitted} of {n} matching variable(s) admitted"
    if not n:
        summary = f"selector {actual.where!r}: no variable matches yet; later ones are admitted as they register"
    first = next((m for m in sorted(actual.members, key=lambda m: m.variable) if not m.admitted), None)
    if first is None:
        admitted_c = conditions.Condition(conditions.ADMITTED, True, "Admitted", summary)
    else:
        admitted_c = conditions.Condition(conditions.ADMITTED, admitted > 0, "PartlyAdmitted" if admitted else
                                          first.reason or "Rejected",
                                          f"{summary}; {first.variable}: {first.reason}: {first.message}")
    ready = conditions.Condition(conditions.READY, True, "Installed", summary)
    on_down = sorted({r for m in actual.members if m.admitted for _, _, routers, _ in m.paths for r in routers}
                     & down)
    if rejected:
        degraded = conditions.Condition(conditions.DEGRADED, True, "VariablesRejected",
                                        f"{len(rejected)} matching variable(s) rejected: "
                                        f"{', '.join(rejected[:REJECTED_MAX])}")
    elif on_down:
        degraded = conditions.Condition(conditions.DEGRADED, True, "RouterDown",
                                        f"router(s) {', '.join(on_down)} on an allocated path are down")
    else:
        degraded = conditions.Condition(conditions.DEGRADED, False, "AllPathsUp")
    return [admitted_c, ready, degraded]


def actual_query_from_reply(reply: Any) -> ActualQuery:
    """An ActualQuery from a ``QueryReply`` (``gridstat.v1.broker_pb2``)."""
    q = reply.query
    qos = {m.mode: plan.qos_key(m.mode, m.interval_ms, m.latency_ms, m.redundancy, m.priority) for m in q.qos}
    members = tuple(
        Member(m.variable, m.admitted, m.subscription_id, m.rejection.reason, m.rejection.message,
               tuple((a.mode, p.redundant_index, tuple(p.routers), float(p.latency_ms))
                     for a in m.subscription.allocations for p in a.paths))
        for m in reply.members)
    return ActualQuery(q.query_id, q.subscriber, q.where, q.edge_router, qos, members)


__all__ = ["REJECTED_MAX", "ActualQuery", "DesiredQuery", "Member", "QueryAction", "SubscribeQuery",
           "UnsubscribeQuery", "actual_query_from_reply", "desired_query", "plan_query", "query_conditions",
           "query_fingerprint", "query_id", "query_status"]
