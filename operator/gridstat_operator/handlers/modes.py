"""Mode resources -> DefineMode at the root broker, and the mode's standing in status.

A Mode names an operating mode id (0..15, global to the utility's broker hierarchy). Created or
changed, it is defined at the root broker (a parent defines it in every cloud below); its status
reports whether it is current, how many subscriptions hold QoS in it at the leaf brokers, and which
Subscriptions its selector or list picks (they join it through their own reconcile). A timer keeps
the figures fresh. Deleting a Mode that an ActiveMode asks for is refused until another is asked for.
"""

from __future__ import annotations

from typing import Any

import kopf

from gridstat.v1 import broker_pb2 as bpb
from gridstat_operator import brokers as brokering
from gridstat_operator import conditions, plan, resources
from gridstat_operator.conditions import Condition
from gridstat_operator.handlers import common

G, P = resources.GROUP, resources.MODES


@kopf.on.resume(G, P)
@kopf.on.create(G, P)
@kopf.on.update(G, P)
async def mode_reconcile(
        *,
        body: kopf.Body,
        patch: kopf.Patch,
        retry: int,
        memo: kopf.Memo,
        mode_index: kopf.Index[str, plan.ModeRef] | None = None,
        subscription_index: kopf.Index[str, plan.SubscriptionRef] | None = None,
        **_: Any,
) -> None:
    """When a Mode is created or changed, or found at start-up: define it at the brokers."""
    async with common.lock(memo, body):
        retry_message = await reconcile(body, patch, memo, mode_index, subscription_index, define=True)
    if retry_message:
        raise kopf.TemporaryError(retry_message, delay=common.backoff_s(retry))


@kopf.timer(G, P, interval=10.0, initial_delay=5.0, idle=3.0)
@common.periodic_check
async def mode_refresh(
        *,
        body: kopf.Body,
        patch: kopf.Patch,
        memo: kopf.Memo,
        mode_index: kopf.Index[str, plan.ModeRef] | None = None,
        subscription_index: kopf.Index[str, plan.SubscriptionRef] | None = None,
        **_: Any,
) -> None:
    """Every few seconds: refresh current / subscriptions / selected (define again if not Ready)."""
    if not body.get("status"):
        return
    async with common.lock(memo, body):
        await reconcile(body, patch, memo, mode_index, subscription_index,
                        define=not conditions.is_ready(body))


@kopf.on.delete(G, P)
async def mode_delete(
        *,
        body: kopf.Body,
        retry: int,
        memo: kopf.Memo,
        activemode_index: kopf.Index[str, str] | None = None,
        **_: Any,
) -> None:
    """When a Mode is deleted: refused (retried) while an ActiveMode asks for it. The brokers
    keep the mode id defined (they have no call to forget one) and stay in their current mode."""
    name, namespace = body.metadata.name or "", body.metadata.namespace or ""
    wanted = list(activemode_index.get(namespace, [])) if activemode_index is not None else []
    if name in wanted:
        message = f"mode {name!r} is the one an ActiveMode asks for: make another mode active first"
        kopf.warn(body, reason="ModeIsActive", message=message)
        raise kopf.TemporaryError(message, delay=common.backoff_s(retry))
    common.forget(memo, body)
    kopf.info(body, reason="Removed", message="no longer managed; the brokers keep the mode id defined")


async def reconcile(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, mode_index: Any,
                    subscription_index: Any, *, define: bool) -> str | None:
    meta, spec = body.metadata, body.get("spec") or {}
    name, namespace = meta.name or "", meta.namespace or ""
    ref = plan.mode_ref(body)
    b = common.brokers(memo)
    subs = subscription_index.get(namespace, []) if subscription_index is not None else []
    selected = sorted(s.name for s in subs if plan.selects(ref, s.name, s.labels))
    clash = plan.mode_clash(ref, mode_index.get(namespace, []) if mode_index is not None else [])
    if clash is not None:
        common.not_ready(body, "ModeIdClash", f"mode id {ref.id} is already Mode {clash!r}: mode ids are unique per "
                         "utility", common.writes(patch, body, selected=selected))
        return None
    try:
        if define:
            await b.call(b.config.root_broker, "DefineMode", bpb.DefineModeRequest(mode=int(spec["id"]), name=name))
        current, count = await _standing(b, int(spec["id"]))
    except brokering.BrokerError as exc:
        ready = Condition(conditions.READY, False, exc.reason if exc.retriable else "Refused", str(exc))
        common.decided(body, ready, reason=exc.reason, message=str(exc), warning=True)
        conditions.write_status(patch, body, [ready], selected=selected)
        return f"{exc.reason}: {exc}" if exc.retriable else None
    message = f"mode {ref.id} defined at the brokers" + (" and current" if current else "")
    ready = Condition(conditions.READY, True, "Defined", message)
    common.decided(body, ready, reason="Defined", message=message)
    conditions.write_status(patch, body, [ready], current=current, subscriptions=count, selected=selected)
    return None


async def _standing(b: brokering.Brokers, mode_id: int) -> tuple[bool, int]:
    """(current at the root broker, subscriptions with QoS in it over the leaf brokers)."""
    root = await b.call(b.config.root_broker, "ListModes", bpb.ListModesRequest())
    count = 0
    for address in sorted(set(b.config.brokers.values())):
        reply = root if address == b.config.root_broker else await b.call(address, "ListModes", bpb.ListModesRequest())
        count += sum(m.subscriptions for m in reply.modes if m.mode == mode_id)
    return root.current_mode == mode_id, count
