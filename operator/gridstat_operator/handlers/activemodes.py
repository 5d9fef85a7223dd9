"""ActiveMode resources -> ChangeMode at the root broker, with every phase's timing in status.

``spec.mode`` names the Mode to make current. A change runs in two kopf steps so the API shows
it: ``activemode_begin`` marks it ``Switching`` (persisted at once), ``activemode_switch`` asks the
root broker for GridStat's five-phase change and records each cloud's phases (warn, prepare,
switch-internal, switch-edge, commit) with their durations. Before it, ``activemode_begin`` also
computes which Subscriptions of the namespace the switch stops, changes and starts
(``plan.plan_mode_switch``), writes that to ``status.plan`` with a ``Planned`` condition and posts
an event; with ``spec.dryRun: true`` that is all it does (phase ``Planned``, no switch; the timer
keeps the plan current). Asking for the current mode is a no-op at the brokers, so a restart or a
replay changes nothing. A timer reports a mode changed
outside Kubernetes (``gridstat mode change``) without fighting it: the last command wins, as in
GridStat.
"""

from __future__ import annotations

import datetime
from typing import Any

import kopf

from gridstat.v1 import broker_pb2 as bpb
from gridstat_operator import brokers as brokering
from gridstat_operator import conditions, plan, resources
from gridstat_operator.conditions import Condition
from gridstat_operator.handlers import common

G, P = resources.GROUP, resources.ACTIVE_MODES


@kopf.index(G, P)
def activemode_index(*, namespace: str | None, body: kopf.Body, **_: Any) -> dict[str, str]:
    """The mode each ActiveMode asks for, by namespace (a Mode asked for is not deleted)."""
    return {namespace or "": str((body.get("spec") or {}).get("mode", ""))}


def _target(body: kopf.Body, mode_index: Any) -> plan.ModeRef:
    namespace = body.metadata.namespace or ""
    return plan.plan_mode_change(body.get("spec") or {}, common.modes_of(namespace, mode_index))


def _switch_plan(body: kopf.Body, target: plan.ModeRef, mode_index: Any, subscription_index: Any) -> plan.SwitchPlan:
    """What switching to ``target`` does to the namespace's Subscriptions, from kopf's indexes."""
    namespace = body.metadata.namespace or ""
    subs = subscription_index.get(namespace, []) if subscription_index is not None else []
    current = (body.get("status") or {}).get("currentMode") or resources.NORMAL
    return plan.plan_mode_switch(str(current), target.name, subs, common.modes_of(namespace, mode_index))


def _write(patch: kopf.Patch, body: kopf.Body, ready: Condition, planned: Condition | None = None,
           **fields: Any) -> None:
    """The status write of every ActiveMode handler: ``Ready``, and ``Planned`` as given or as it was."""
    planned = planned or conditions.carried(body, conditions.PLANNED)
    conditions.write_status(patch, body, [ready, *([planned] if planned else [])], **fields)


def _dry_run(body: kopf.Body, patch: kopf.Patch, target: plan.ModeRef, switch: plan.SwitchPlan) -> None:
    """``spec.dryRun``: report the plan, switch nothing."""
    status = body.get("status") or {}
    if status.get("currentMode") == target.name and status.get("phase") in ("Active", "Planned"):
        ready = Condition(conditions.READY, True, "ModeActive",
                          f"mode {target.name} is current (spec.dryRun: nothing to switch)")
    else:
        ready = Condition(conditions.READY, False, "DryRun", f"spec.dryRun: not switching to mode {target.name!r}")
    planned = Condition(conditions.PLANNED, True, "DryRun", switch.summary)
    old = conditions.condition(body, conditions.PLANNED) or {}
    if old.get("message") != planned.message:
        (kopf.warn if switch.stopping else kopf.info)(body, reason="SwitchPlanned",
                                                      message=f"dry run: {switch.summary}"[:1024])
    _write(patch, body, ready, planned, phase="Planned", plan=switch.as_status())


@kopf.on.resume(G, P)
@kopf.on.create(G, P)
@kopf.on.update(G, P)
async def activemode_begin(
        *,
        body: kopf.Body,
        patch: kopf.Patch,
        mode_index: kopf.Index[str, plan.ModeRef] | None = None,
        subscription_index: kopf.Index[str, plan.SubscriptionRef] | None = None,
        **_: Any,
) -> None:
    """When an ActiveMode is set or changed: check the target, plan the switch, report the plan
    (status and an event, before phase 1) and mark the switch as started, unless a dry run."""
    try:
        target = _target(body, mode_index)
    except plan.SpecError as exc:
        _failed(body, patch, exc.reason, str(exc))
        return
    switch = _switch_plan(body, target, mode_index, subscription_index)
    if plan.dry_run(body.get("spec") or {}):
        _dry_run(body, patch, target, switch)
        return
    if ((body.get("status") or {}).get("currentMode") == target.name and conditions.is_ready(body)
            and (body.get("status") or {}).get("phase") == "Active"):
        return  # a replay or a resume of what is already done
    ready = Condition(conditions.READY, False, "Switching",
                      f"switching to mode {target.name!r} ({target.id}): stops {len(switch.stopping)} subscription(s)")
    planned = Condition(conditions.PLANNED, True, "Computed", switch.summary)
    (kopf.warn if switch.stopping else kopf.info)(body, reason="SwitchPlanned", message=switch.summary[:1024])
    _write(patch, body, ready, planned, phase="Switching", startedAt=conditions.now_text(), finishedAt=None,
           plan=switch.as_status())


@kopf.on.resume(G, P)
@kopf.on.create(G, P)
@kopf.on.update(G, P)
async def activemode_switch(
        *,
        body: kopf.Body,
        patch: kopf.Patch,
        retry: int,
        memo: kopf.Memo,
        mode_index: kopf.Index[str, plan.ModeRef] | None = None,
        **_: Any,
) -> None:
    """When an ActiveMode is set or changed: run the mode change at the root broker."""
    if plan.dry_run(body.get("spec") or {}):
        return  # activemode_begin reported the plan
    try:
        target = _target(body, mode_index)
    except plan.SpecError:
        return  # activemode_begin reported it
    b = common.brokers(memo)
    started = datetime.datetime.now(datetime.UTC)
    try:
        async with common.lock(memo, body):
            reply = await b.call(b.config.root_broker, "ChangeMode", bpb.ChangeModeRequest(mode=target.id),
                                 timeout_s=max(30.0, b.config.timeout_s))
    except brokering.BrokerError as exc:
        if exc.retriable:
            common.retry_later(body, exc, retry, lambda ready: _write(patch, body, ready, phase="Pending"))
        _failed(body, patch, exc.reason, str(exc))
        return
    names = common.mode_names(common.modes_of(body.metadata.namespace or "", mode_index))
    previous = names.get(reply.previous_mode, str(reply.previous_mode))
    phases = [{"cloud": p.cloud, "phase": p.phase, "name": p.name, "routers": p.routers,
               "durationMs": round(p.duration_ms, 3)} for p in reply.phases]
    if reply.changed:
        message = (f"mode {previous} -> {target.name} in {reply.duration_ms:.1f} ms "
                   f"({', '.join(reply.clouds) or 'no cloud'}; {len(phases)} phase(s))")
    else:
        message = f"mode {target.name} was already current"
    ready = Condition(conditions.READY, True, "ModeActive", message)
    kopf.info(body, reason="ModeChanged" if reply.changed else "ModeActive", message=message)
    fields: dict[str, Any] = {"phase": "Active", "currentMode": target.name, "currentModeId": target.id,
                              "changed": bool(reply.changed), "finishedAt": conditions.now_text()}
    if reply.changed:  # a replay (no-op at the brokers) keeps the last real change's record
        fields.update(previousMode=previous, phases=phases, clouds=list(reply.clouds),
                      durationMs=round(reply.duration_ms, 3),
                      startedAt=(body.get("status") or {}).get("startedAt") or conditions.now_text(started))
    _write(patch, body, ready, **fields)


@kopf.timer(G, P, interval=15.0, initial_delay=10.0, idle=5.0)
@common.periodic_check
async def activemode_watch(
        *,
        body: kopf.Body,
        patch: kopf.Patch,
        memo: kopf.Memo,
        mode_index: kopf.Index[str, plan.ModeRef] | None = None,
        subscription_index: kopf.Index[str, plan.SubscriptionRef] | None = None,
        **_: Any,
) -> None:
    """Every few seconds: keep a dry run's plan current; report when the brokers' current mode is
    not the one asked for."""
    status = body.get("status") or {}
    if status.get("phase") == "Planned" and plan.dry_run(body.get("spec") or {}):
        try:
            target = _target(body, mode_index)
        except plan.SpecError:
            return
        _dry_run(body, patch, target, _switch_plan(body, target, mode_index, subscription_index))
        return
    if status.get("phase") != "Active":
        return
    b = common.brokers(memo)
    try:
        reply = await b.call(b.config.root_broker, "ListModes", bpb.ListModesRequest())
    except brokering.BrokerError:
        return  # the next change or check will say so; a down broker keeps its mode
    if reply.current_mode != status.get("currentModeId") and not reply.changing:
        common.not_ready(body, "ModeChangedOutside",
                         f"the brokers are in mode {reply.current_mode}, not {status.get('currentMode')!r}: "
                         "changed outside Kubernetes; set spec.mode to re-apply",
                         lambda ready: _write(patch, body, ready, phase="Active"))


def _failed(body: kopf.Body, patch: kopf.Patch, reason: str, message: str) -> None:
    common.not_ready(body, reason, message,
                     lambda ready: _write(patch, body, ready, phase="Failed", finishedAt=conditions.now_text()))
