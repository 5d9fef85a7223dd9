"""Subscription resources -> leaf-broker subscriptions (Subscribe, ChangeSubscription, Unsubscribe).

Created (or found at start-up without a status), a Subscription first gets a ``Pending`` status
naming its broker, before any broker call (``subscription_pending``). Created, changed or found at
start-up, it is reconciled: the planner computes what
the broker should hold (one broker subscription per variable, with QoS in each of its modes), the
installer makes the difference all-or-nothing, and one status write reports ``Admitted``,
``Ready`` and ``Degraded`` with the paths. A timer re-reconciles when the Modes that pick the
Subscription change (its fingerprint moves) and every ``GRIDSTAT_DRIFT_CHECK_S`` to repair what
a broker lost. Deleting it unsubscribes everything (finalizer); an unanswered broker keeps the
finalizer until it answers, so nothing is orphaned.

With ``spec.selector`` instead of ``spec.variables`` the resource is one standing query
subscription at the broker (``gridstat_operator.selectors``, docs/queries.md): reconciled the same
way, its status names the matching variables admitted and rejected.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import kopf

from gridstat.v1 import broker_pb2 as bpb
from gridstat_operator import brokers as brokering
from gridstat_operator import conditions, installing, plan, resources, selectors
from gridstat_operator.conditions import Condition
from gridstat_operator.handlers import common

G, P = resources.GROUP, resources.SUBSCRIPTIONS


@kopf.index(G, resources.MODES)
def mode_index(*, namespace: str | None, body: kopf.Body, **_: Any) -> dict[str, plan.ModeRef]:
    """Every Mode by namespace, for membership and mode ids."""
    return {namespace or "": plan.mode_ref(body)}


@kopf.index(G, P)
def subscription_index(*, namespace: str | None, body: kopf.Body, **_: Any) -> dict[str, plan.SubscriptionRef]:
    """Every Subscription's name, labels and mode QoS by namespace, for the Modes that select them
    and for an ActiveMode's switch plan."""
    return {namespace or "": plan.subscription_ref(body)}


@kopf.on.resume(G, P)
@kopf.on.create(G, P)
async def subscription_pending(
        *,
        body: kopf.Body,
        patch: kopf.Patch,
        memo: kopf.Memo,
        **_: Any,
) -> None:
    """When a Subscription without status is created or found: write ``Pending`` at once (kopf
    persists it before ``subscription_reconcile`` runs), naming the broker it waits for."""
    spec = body.get("spec") or {}
    if (body.get("status") or {}).get("conditions") or common.paused(body):
        return
    b = common.brokers(memo)
    try:
        address = b.leaf(spec.get("cloud", ""))
    except brokering.BrokerRefused:
        return  # subscription_reconcile reports the unknown cloud
    cloud = spec.get("cloud") or b.config.default_cloud
    conditions.write_status(patch, body, plan.pending_conditions(address, cloud), cloud=cloud, broker=address)


@kopf.on.resume(G, P)
@kopf.on.create(G, P)
@kopf.on.update(G, P)
async def subscription_reconcile(
        *,
        body: kopf.Body,
        patch: kopf.Patch,
        retry: int,
        memo: kopf.Memo,
        mode_index: kopf.Index[str, plan.ModeRef] | None = None,
        **_: Any,
) -> None:
    """When a Subscription is created or changed, or found at start-up: admit it at its broker."""
    async with common.lock(memo, body):
        retry_message = await reconcile(body, patch, memo, mode_index)
    if retry_message is not None:
        raise kopf.TemporaryError(retry_message, delay=common.backoff_s(retry))


@kopf.timer(G, P, interval=5.0, initial_delay=5.0, idle=3.0)
@common.periodic_check
async def subscription_check(
        *,
        body: kopf.Body,
        patch: kopf.Patch,
        memo: kopf.Memo,
        mode_index: kopf.Index[str, plan.ModeRef] | None = None,
        **_: Any,
) -> None:
    """Every few seconds: reconcile again if the Modes picking it changed, a retry is due, or
    the drift check interval has passed."""
    if not body.get("status") or common.paused(body):
        return
    if (conditions.condition(body, conditions.READY) or {}).get("reason") == "Pending":
        return  # not reconciled yet: subscription_reconcile is on it
    uid = str(body.metadata.uid)
    checked: dict[str, float] = memo.setdefault("checked", {})
    due = time.monotonic() - checked.get(uid, 0.0) >= common.brokers(memo).config.drift_check_s
    if not due and wanted_fingerprint(body, mode_index) == body["status"].get("desiredFingerprint"):
        ready = conditions.condition(body, conditions.READY) or {}
        if ready.get("reason") not in ("BrokerUnavailable", "Rejected"):
            return
        if time.monotonic() - checked.get(uid, 0.0) < common.MAX_RETRY_DELAY_S / 2:
            return
    async with common.lock(memo, body):
        await reconcile(body, patch, memo, mode_index)


@kopf.on.delete(G, P)
async def subscription_delete(
        *,
        body: kopf.Body,
        retry: int,
        memo: kopf.Memo,
        **_: Any,
) -> None:
    """When a Subscription is deleted: unsubscribe every variable, then let it go."""
    spec, meta = body.get("spec") or {}, body.metadata
    prefix = plan.id_prefix(meta.namespace or "", meta.name or "")
    known = list((body.get("status") or {}).get("subscriptionIds") or ())
    b = common.brokers(memo)
    try:
        address = b.leaf(spec.get("cloud", ""))
    except brokering.BrokerRefused:
        common.forget(memo, body)
        return  # an unknown cloud never got anything installed
    try:
        async with common.lock(memo, body):
            installer = installing.Installer(b, address)
            removed = 0
            if spec.get("selector") or (body.get("status") or {}).get("query"):
                removed += await installer.remove_query(selectors.query_id(meta.namespace or "", meta.name or ""))
                known = [sid for sid in known if sid.startswith(prefix)]  # the query's own went with it
            removed += await installer.remove_all(subscriber=spec.get("subscriber", ""), prefix=prefix, known=known)
    except brokering.BrokerError as exc:
        kopf.warn(body, reason=exc.reason, message=f"cannot unsubscribe yet, will retry: {exc}")
        raise kopf.TemporaryError(f"{exc.reason}: {exc}", delay=common.backoff_s(retry)) from None
    common.forget(memo, body)
    kopf.info(body, reason="Unsubscribed", message=f"removed {removed} broker subscription(s) and their routes")


def wanted_fingerprint(body: Mapping[str, Any], mode_index: Any) -> str:
    """What the resource asks for now, as a digest; a spec error is its own fingerprint."""
    meta = body["metadata"]
    try:
        if (body.get("spec") or {}).get("selector") is not None:
            return selectors.query_fingerprint(selectors.desired_query(
                namespace=meta["namespace"], name=meta["name"], labels=meta.get("labels") or {},
                spec=body.get("spec") or {}, modes=common.modes_of(meta["namespace"], mode_index)))
        desired = plan.desired_subscriptions(namespace=meta["namespace"], name=meta["name"],
                                             labels=meta.get("labels") or {}, spec=body.get("spec") or {},
                                             modes=common.modes_of(meta["namespace"], mode_index))
    except plan.SpecError as exc:
        return f"error:{exc.reason}:{exc}"[:128]
    return plan.fingerprint(desired)


async def reconcile(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, mode_index: Any) -> str | None:
    """Bring the broker in line with the resource and write the status; returns a message when a
    retry is due (the broker did not answer), None when done (admitted, rejected or invalid)."""
    meta, spec = body.metadata, body.get("spec") or {}
    namespace, name = meta.namespace or "", meta.name or ""
    memo.setdefault("checked", {})[str(meta.uid)] = time.monotonic()
    if common.paused(body):
        paused = Condition(conditions.READY, None, "ReconciliationPaused",
                           f"annotation {resources.PAUSE_ANNOTATION}=true: the broker is left as it is")
        common.decided(body, paused, reason="ReconciliationPaused", message=paused.message)
        conditions.write_status(patch, body, [paused, Condition(conditions.PAUSED, True, "Annotated")])
        return None
    modes = common.modes_of(namespace, mode_index)
    b = common.brokers(memo)
    if spec.get("selector") is not None:
        return await reconcile_query(body, patch, b, modes)
    try:
        desired = plan.desired_subscriptions(namespace=namespace, name=name, labels=dict(meta.labels),
                                             spec=spec, modes=modes)
        address = b.leaf(spec.get("cloud", ""))
    except (plan.SpecError, brokering.BrokerRefused) as exc:
        reason = exc.reason
        invalid = Condition(conditions.READY, False, "Invalid", f"{reason}: {exc}")
        common.decided(body, invalid, reason=reason, message=str(exc), warning=True)
        conditions.write_status(patch, body, [
            Condition(conditions.ADMITTED, False, reason, str(exc)), invalid,
            Condition(conditions.DEGRADED, False, "Invalid")],
            desiredFingerprint=f"error:{reason}:{exc}"[:128])
        return None

    cloud = spec.get("cloud") or b.config.default_cloud
    prefix = plan.id_prefix(namespace, name)
    installer = installing.Installer(b, address)
    fields: dict[str, Any] = {"cloud": cloud, "broker": address, "desiredFingerprint": plan.fingerprint(desired),
                              "modes": [q.as_status() for q in desired[0].qos]}
    try:
        # One attempt: a broker that does not answer shows in status after one deadline, not after
        # several; kopf retries with backoff (docs/kubernetes.md, "Subscriptions").
        actual = await installer.actual(spec["subscriber"], prefix, attempts=1)
        steps = plan.plan_subscription(desired, actual)
        outcome = (installing.Outcome(actual=actual) if steps.empty else
                   await installer.apply(steps, subscriber=spec["subscriber"], prefix=prefix))
        down = await _routers_down(b, address) if outcome.actual else set()
    except brokering.BrokerError as exc:
        retriable = exc.retriable
        ready = Condition(conditions.READY, False, exc.reason if retriable else "Refused", f"{exc}")
        common.decided(body, ready, reason=exc.reason,
                       message=f"{exc} (retrying)" if retriable else str(exc), warning=True)
        old_admitted = conditions.condition(body, conditions.ADMITTED) or {}
        admitted = (Condition(conditions.ADMITTED, None, "BrokerUnavailable", str(exc)) if retriable and
                    old_admitted.get("status") != "True" else
                    Condition(conditions.ADMITTED, old_admitted.get("status") == "True",
                              str(old_admitted.get("reason") or exc.reason), str(old_admitted.get("message") or exc)))
        conditions.write_status(patch, body, [admitted, ready, Condition(
            conditions.DEGRADED, bool(retriable and old_admitted.get("status") == "True"), exc.reason,
            "the broker does not answer; installed routes keep forwarding" if retriable else str(exc))],
            **fields)
        return f"{exc.reason}: {exc}" if retriable else None

    if (body.get("status") or {}).get("query"):  # it had a selector before: the query goes
        await installer.remove_query(selectors.query_id(namespace, name))
        fields["query"] = None
    installed = outcome.actual
    fields.update(subscriptionIds=sorted({a.subscription_id for a in installed} | set(outcome.held_elsewhere)),
                  paths=plan.paths_status(installed, common.mode_names(modes)),
                  pathCount=sum(len(a.paths) for a in installed))
    if outcome.rejection is not None:
        r = outcome.rejection
        ready = Condition(conditions.READY, False, "Rejected", r.summary)
        degraded = (Condition(conditions.DEGRADED, True, "PreviousSpecInstalled",
                              "the change was rejected; the previous subscription stays installed")
                    if installed else Condition(conditions.DEGRADED, False, "Rejected"))
        if outcome.undo_failures:
            degraded = Condition(conditions.DEGRADED, True, "RollbackIncomplete", "; ".join(outcome.undo_failures))
        common.decided(body, ready, reason="Rejected", message=r.summary, warning=True)
        conditions.write_status(patch, body, [Condition(conditions.ADMITTED, False, r.reason, r.summary), ready,
                                              degraded], rejection=r.as_status(), **fields)
        return None

    n_paths = fields["pathCount"]
    mode_list = ", ".join(q.mode for q in desired[0].qos)
    message = f"{len(desired)} variable(s) in mode(s) {mode_list}: {n_paths} path(s) installed"
    ready = Condition(conditions.READY, True, "Installed", message)
    on_down = sorted({r for a in installed for _, _, routers, _ in a.paths for r in routers} & down)
    degraded = (Condition(conditions.DEGRADED, True, "RouterDown",
                          f"router(s) {', '.join(on_down)} on an allocated path are down") if on_down
                else Condition(conditions.DEGRADED, False, "AllPathsUp"))
    if outcome.steps:
        kopf.info(body, reason="Admitted", message=message)
    else:
        common.decided(body, ready, reason="Admitted", message=message)
    conditions.write_status(patch, body, [Condition(conditions.ADMITTED, True, "Admitted", message), ready, degraded],
                            rejection=None, **fields)
    return None


async def reconcile_query(body: kopf.Body, patch: kopf.Patch, b: brokering.Brokers,
                          modes: dict[str, plan.ModeRef]) -> str | None:
    """``reconcile`` of a Subscription with ``spec.selector``: its query subscription at the broker
    (``selectors.plan_query``), the status naming the variables admitted and rejected."""
    meta, spec = body.metadata, body.get("spec") or {}
    namespace, name = meta.namespace or "", meta.name or ""
    try:
        desired = selectors.desired_query(namespace=namespace, name=name, labels=dict(meta.labels), spec=spec,
                                          modes=modes)
        address = b.leaf(spec.get("cloud", ""))
    except (plan.SpecError, brokering.BrokerRefused) as exc:
        reason = exc.reason
        invalid = Condition(conditions.READY, False, "Invalid", f"{reason}: {exc}")
        common.decided(body, invalid, reason=reason, message=str(exc), warning=True)
        conditions.write_status(patch, body, [
            Condition(conditions.ADMITTED, False, reason, str(exc)), invalid,
            Condition(conditions.DEGRADED, False, "Invalid")],
            desiredFingerprint=f"error:{reason}:{exc}"[:128])
        return None
    installer = installing.Installer(b, address)
    fields: dict[str, Any] = {"cloud": spec.get("cloud") or b.config.default_cloud, "broker": address,
                              "desiredFingerprint": selectors.query_fingerprint(desired),
                              "modes": [q.as_status() for q in desired.qos], "rejection": None}
    try:
        actual = await installer.actual_query(desired.query_id, desired.subscriber, attempts=1)
        steps = selectors.plan_query(desired, actual)
        actual = await installer.apply_query(steps, actual)
        # listed variables before: their broker subscriptions go (the query's own have broker ids)
        await installer.remove_all(subscriber=desired.subscriber, prefix=plan.id_prefix(namespace, name), known=[])
        down = await _routers_down(b, address) if actual is not None and actual.members else set()
    except brokering.BrokerError as exc:
        retriable = exc.retriable
        ready = Condition(conditions.READY, False, exc.reason if retriable else "Refused", f"{exc}")
        common.decided(body, ready, reason=exc.reason,
                       message=f"{exc} (retrying)" if retriable else str(exc), warning=True)
        conditions.write_status(patch, body, [Condition(conditions.ADMITTED, None, exc.reason, str(exc)), ready,
                                              Condition(conditions.DEGRADED, False, exc.reason, str(exc))], **fields)
        return f"{exc.reason}: {exc}" if retriable else None
    if actual is None:  # the broker answered the subscription but does not list it: try again
        return "the broker does not list the query subscription it answered"
    fields.update(selectors.query_status(actual, common.mode_names(modes)))
    status = selectors.query_conditions(actual, frozenset(down))
    if steps:
        kopf.info(body, reason="Subscribed", message=status[1].message)
    else:
        common.decided(body, status[1], reason="Subscribed", message=status[1].message)
    conditions.write_status(patch, body, status, **fields)
    return None


async def _routers_down(b: brokering.Brokers, address: str) -> set[str]:
    view = await b.call(address, "GetTopology", bpb.GetTopologyRequest())
    return {r.name for r in view.routers if not r.up}
