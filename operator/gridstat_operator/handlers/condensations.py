"""CondensationFunction resources -> CreateCondensation / RemoveCondensation at the leaf broker.

The function id is ``<namespace>.<name>`` and the creator is the operator, so only the operator
removes what it created. A changed spec removes the function and creates it again (the broker
has no in-place change); ``status.specFingerprint`` tells a changed spec from a replay.
"""

from __future__ import annotations

from typing import Any

import kopf
from google.protobuf import json_format

from gridstat.v1 import broker_pb2 as bpb
from gridstat_operator import brokers as brokering
from gridstat_operator import conditions, plan, resources
from gridstat_operator.conditions import Condition
from gridstat_operator.handlers import common

G, P = resources.GROUP, resources.CONDENSATIONS
CREATOR = "gridstat-operator"


@kopf.on.resume(G, P)
@kopf.on.create(G, P)
@kopf.on.update(G, P)
async def condensation_reconcile(
        *,
        body: kopf.Body,
        patch: kopf.Patch,
        retry: int,
        memo: kopf.Memo,
        mode_index: kopf.Index[str, plan.ModeRef] | None = None,
        **_: Any,
) -> None:
    """When a CondensationFunction is created or changed, or found at start-up: place it."""
    meta, spec = body.metadata, body.get("spec") or {}
    namespace, name = meta.namespace or "", meta.name or ""
    b = common.brokers(memo)
    try:
        mode = plan.resolve_mode(common.modes_of(namespace, mode_index), spec.get("mode") or resources.NORMAL,
                                 field="spec.mode")
        address = b.leaf(spec.get("cloud", ""))
    except (plan.SpecError, brokering.BrokerRefused) as exc:
        common.not_ready(body, exc.reason, str(exc), common.writes(patch, body))
        return
    data = plan.condensation_request(namespace, name, spec, mode_id=mode.id, creator=CREATOR)
    fingerprint = plan.condensation_fingerprint(data)
    fid = data["function_id"]
    try:
        async with common.lock(memo, body):
            listed = await b.call(address, "ListCondensations", bpb.ListCondensationsRequest())
            existing = next((f for f in listed.functions if f.function_id == fid), None)
            status = body.get("status") or {}
            if existing is not None and status.get("specFingerprint") == fingerprint:
                info = existing
            else:
                if existing is not None:
                    await b.call(address, "RemoveCondensation",
                                 bpb.RemoveCondensationRequest(function_id=fid, creator=CREATOR))
                request = json_format.ParseDict(data, bpb.CreateCondensationRequest())
                info = await b.call(address, "CreateCondensation", request)
                kopf.info(body, reason="Placed", message=f"{fid} runs on {info.router} ({info.placement})")
    except brokering.BrokerError as exc:
        if exc.retriable:
            common.retry_later(body, exc, retry, common.writes(patch, body))
        common.not_ready(body, exc.reason, f"{exc}" + (f" (field {exc.field})" if exc.field else ""),
                         common.writes(patch, body))
        return
    output = f"{info.output.publisher}/{info.output.variable}"
    message = f"{output} computed by {info.spec.calculator or spec['calculator']} on router {info.router}"
    ready = Condition(conditions.READY, True, "Placed", message)
    conditions.write_status(patch, body, [ready], functionId=fid, output=output, router=info.router,
                            placement=info.placement, inputSubscriptions=list(info.input_subscriptions),
                            specFingerprint=fingerprint)


@kopf.on.delete(G, P)
async def condensation_delete(
        *,
        body: kopf.Body,
        retry: int,
        memo: kopf.Memo,
        **_: Any,
) -> None:
    """When a CondensationFunction is deleted: remove it and its input subscriptions."""
    meta, spec = body.metadata, body.get("spec") or {}
    b = common.brokers(memo)
    try:
        address = b.leaf(spec.get("cloud", ""))
    except brokering.BrokerRefused:
        return
    fid = plan.function_id(meta.namespace or "", meta.name or "")
    try:
        await b.call(address, "RemoveCondensation", bpb.RemoveCondensationRequest(function_id=fid, creator=CREATOR))
    except brokering.BrokerRefused as exc:
        if exc.reason != "NotFound":
            kopf.warn(body, reason=exc.reason, message=str(exc))
            raise kopf.TemporaryError(f"{exc.reason}: {exc}", delay=common.backoff_s(retry)) from None
    except brokering.BrokerError as exc:
        kopf.warn(body, reason=exc.reason, message=f"cannot remove yet, will retry: {exc}")
        raise kopf.TemporaryError(f"{exc.reason}: {exc}", delay=common.backoff_s(retry)) from None
    common.forget(memo, body)
    kopf.info(body, reason="Removed", message=f"condensation function {fid} removed")

