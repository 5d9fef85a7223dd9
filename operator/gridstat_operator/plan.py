"""Pure decisions: what a resource asks of the brokers, and what to change to get there.

Nothing here does I/O, so every rule is tested without a cluster or a broker
(``tests/unit/operator``). The handlers collect inputs (the resource, the Mode index, what the
broker holds) and hand them here; ``gridstat_operator.installing`` carries out the plan.

A Subscription resource names n variables; at the broker it becomes n subscriptions, one per
variable, each with QoS in every mode the resource belongs to. Their ids are derived from the
resource (``k8s:<namespace>:<name>:<publisher>#<variable>``), so a replay, a restart or a second
operator replica finds them again instead of subscribing twice.

Mode membership (GridStat chapter 6): a subscription belongs to the modes listed in
``spec.modes`` (each with QoS overriding ``spec.qos`` field by field; none listed = ``normal``)
and to every Mode whose ``subscriptionSelector`` or ``subscriptions`` list picks it (with
``spec.qos``). A mode must exist as a Mode resource whose id the brokers know (``normal``, 0,
always does).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gridstat import errors
from gridstat.client import extrapolation as extrapolations
from gridstat_operator import conditions, resources

SUBSCRIPTION_ID_PREFIX = "k8s:"
DEFAULT_REDUNDANCY = 1
DEFAULT_PRIORITY = 1


class SpecError(Exception):
    """The resource cannot be acted on as written: a ``reason`` word, a message, the field."""

    def __init__(self, message: str, *, reason: str, field: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.field = field


# -- modes ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModeRef:
    """What the operator knows of one Mode resource (from kopf's index of Modes)."""

    name: str
    id: int
    defined: bool = True  # DefineMode succeeded for the current spec (its Ready condition)
    selector: Mapping[str, Any] | None = None
    names: frozenset[str] = frozenset()


NORMAL_MODE = ModeRef(resources.NORMAL, 0)


def mode_ref(body: Mapping[str, Any]) -> ModeRef:
    """A ModeRef from a Mode resource's body."""
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    ready = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), None)
    defined = bool(ready and ready.get("status") == "True"
                   and status.get("observedGeneration") == body.get("metadata", {}).get("generation"))
    return ModeRef(name=body["metadata"]["name"], id=int(spec.get("id", -1)), defined=defined,
                   selector=spec.get("subscriptionSelector"), names=frozenset(spec.get("subscriptions") or ()))


def known_modes(refs: Iterable[ModeRef]) -> dict[str, ModeRef]:
    """Modes by name, with ``normal`` present even when no Mode resource names it."""
    out = {NORMAL_MODE.name: NORMAL_MODE}
    out.update({m.name: m for m in refs})
    return out


def selects(mode: ModeRef, name: str, labels: Mapping[str, str]) -> bool:
    """Whether ``mode`` picks the Subscription ``name`` with ``labels`` (by list or selector)."""
    if name in mode.names:
        return True
    return mode.selector is not None and label_selector_matches(mode.selector, labels)


def label_selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Kubernetes label-selector semantics; an empty selector matches nothing here (opt-in only)."""
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    for e in expressions:
        key, op, values = e.get("key", ""), e.get("operator", ""), set(e.get("values") or ())
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def selected_by(modes: Mapping[str, ModeRef], name: str, labels: Mapping[str, str]) -> list[str]:
    """Names of the Modes that pick this Subscription, sorted."""
    return sorted(m.name for m in modes.values() if selects(m, name, labels))


def resolve_mode(modes: Mapping[str, ModeRef], name: str, *, field: str) -> ModeRef:
    """The Mode named ``name``, defined at the brokers; SpecError UnknownMode / ModeNotDefined."""
    ref = modes.get(name)
    if ref is None:
        known = ", ".join(sorted(modes))
        raise SpecError(f"mode {name!r} does not exist: create a Mode named {name!r} (modes here: {known})",
                        reason="UnknownMode", field=field)
    if not ref.defined:
        raise SpecError(f"mode {name!r} is not defined at the brokers yet (see kubectl get gmode {name})",
                        reason="ModeNotDefined", field=field)
    return ref


# -- subscriptions -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModeQoS:
    """The effective QoS of a subscription in one mode."""

    mode: str
    mode_id: int
    interval_ms: int
    latency_ms: int
    redundancy: int = DEFAULT_REDUNDANCY
    priority: int = DEFAULT_PRIORITY
    extrapolation: Mapping[str, Any] | None = None

    @property
    def key(self) -> tuple[int, int, int, int, int]:
        """What the broker holds of it (extrapolation is the subscriber's business).

        The broker reads a zero redundancy as 1, so the key does too; otherwise such a subscription
        would be "changed" forever. Priority 0 (alert) is kept: the field has presence.
        """
        return qos_key(self.mode_id, self.interval_ms, self.latency_ms, self.redundancy, self.priority)

    def as_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "modeId": self.mode_id, "intervalMs": self.interval_ms,
                               "latencyMs": self.latency_ms, "redundancy": self.redundancy,
                               "priority": self.priority}
        if self.extrapolation:
            out["extrapolation"] = dict(self.extrapolation)
        return out


QoSKey = tuple[int, int, int, int, int]


def qos_key(mode_id: int, interval_ms: int, latency_ms: int, redundancy: int, priority: int) -> QoSKey:
    """A mode's QoS as the broker stores it (see ModeQoS.key)."""
    return (mode_id, interval_ms, latency_ms, redundancy or 1, priority)


@dataclass(frozen=True)
class DesiredSubscription:
    """One broker subscription a Subscription resource asks for (one per variable)."""

    subscription_id: str
    subscriber: str
    variable: str
    edge_router: str
    value_type: str
    qos: tuple[ModeQoS, ...]

    @property
    def qos_keys(self) -> dict[int, tuple[int, int, int, int, int]]:
        return {q.mode_id: q.key for q in self.qos}


@dataclass(frozen=True)
class ActualSubscription:
    """What a broker holds under one subscription id (from ListSubscriptions / SubscribeReply)."""

    subscription_id: str
    subscriber: str
    variable: str
    edge_router: str
    qos: Mapping[int, tuple[int, int, int, int, int]]
    paths: Sequence[tuple[int, int, tuple[str, ...], float]] = ()  # (mode id, index, routers, latency)


def subscription_id(namespace: str, name: str, variable: str) -> str:
    """The broker id of one variable of a Subscription resource.

    Broker ids may not contain '/', so ``publisher/variable`` is written ``publisher#variable``
    ('#' is in no valid publisher or variable name, so the id stays unique).
    """
    return f"{id_prefix(namespace, name)}{variable.replace('/', '#')}"


def id_prefix(namespace: str, name: str) -> str:
    """Prefix of every broker id of one Subscription resource (Kubernetes names hold no ':')."""
    return f"{SUBSCRIPTION_ID_PREFIX}{namespace}:{name}:"


def check_extrapolation(spec: Mapping[str, Any] | None, *, field: str) -> None:
    """Refuse what the subscriber's SDK would refuse, in its words (gridstat.client.extrapolation).

    A method that is not built in may be one the subscriber registers itself, so only the numbers
    are checked for it (against the built-in ``average``).
    """
    if not spec:
        return
    method = str(spec.get("method", ""))
    try:
        extrapolations.Extrapolation(
            method=method if method in extrapolations.BUILTIN_METHODS else extrapolations.AVERAGE,
            order=int(spec.get("order", 1)), orders=tuple(spec.get("orders") or (1, 2)),
            window=int(spec.get("window", 4)), max_consecutive=int(spec.get("maxConsecutive", 3)))
    except (ValueError, TypeError, errors.GridStatError) as exc:
        raise SpecError(f"{field}: {exc}", reason="InvalidExtrapolation", field=field) from None


def mode_overrides(
        spec: Mapping[str, Any],
        *,
        name: str,
        labels: Mapping[str, str],
        modes: Mapping[str, ModeRef],
) -> dict[str, Mapping[str, Any]]:
    """Every mode the Subscription belongs to, by name, with the ``spec.modes`` entry that overrides
    ``spec.qos`` there (empty for a mode that picks it by selector or list). Unknown modes included."""
    listed = {entry["mode"]: entry for entry in spec.get("modes") or () if entry.get("mode")}
    wanted: dict[str, Mapping[str, Any]] = dict(listed) if listed else {resources.NORMAL: {}}
    for mode_name in selected_by(modes, name, labels):
        wanted.setdefault(mode_name, {})
    return wanted


def merged_qos(spec: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``spec.qos`` with one mode's overrides applied field by field."""
    return {**(spec.get("qos") or {}), **{k: v for k, v in override.items() if k != "mode"}}


def effective_qos(
        spec: Mapping[str, Any],
        *,
        name: str,
        labels: Mapping[str, str],
        modes: Mapping[str, ModeRef],
) -> tuple[ModeQoS, ...]:
    """Every mode the Subscription belongs to with its QoS, ordered by mode id."""
    listed = {entry["mode"]: entry for entry in spec.get("modes") or () if entry.get("mode")}
    wanted = mode_overrides(spec, name=name, labels=labels, modes=modes)
    out: list[ModeQoS] = []
    for mode_name, override in sorted(wanted.items()):
        # Where a problem is: the spec.modes entry that names the mode, else spec.qos / spec.modes.
        entry = f"spec.modes[{list(listed).index(mode_name)}]" if mode_name in listed else ""
        ref = resolve_mode(modes, mode_name, field=f"{entry}.mode" if entry else "spec.modes")
        merged = merged_qos(spec, override)
        if "intervalMs" not in merged or "latencyMs" not in merged:
            raise SpecError(f"mode {mode_name!r} has no intervalMs or latencyMs (set spec.qos)",
                            reason="InvalidQoS", field="spec.qos")
        check_extrapolation(merged.get("extrapolation"),
                            field=f"{entry}.extrapolation" if entry else "spec.qos.extrapolation")
        out.append(ModeQoS(mode=mode_name, mode_id=ref.id, interval_ms=int(merged["intervalMs"]),
                           latency_ms=int(merged["latencyMs"]),
                           redundancy=int(merged.get("redundancy", DEFAULT_REDUNDANCY)),
                           priority=int(merged.get("priority", DEFAULT_PRIORITY)),
                           extrapolation=merged.get("extrapolation")))
    ids = [q.mode_id for q in out]
    if len(set(ids)) != len(ids):
        dup = sorted({q.mode for q in out if ids.count(q.mode_id) > 1})
        raise SpecError(f"modes {', '.join(dup)} have the same mode id", reason="InvalidMode", field="spec.modes")
    return tuple(sorted(out, key=lambda q: q.mode_id))


def desired_subscriptions(
        *,
        namespace: str,
        name: str,
        labels: Mapping[str, str],
        spec: Mapping[str, Any],
        modes: Mapping[str, ModeRef],
) -> list[DesiredSubscription]:
    """What the broker should hold for this Subscription resource; SpecError if it cannot."""
    variables = list(spec.get("variables") or ())
    if not variables:
        raise SpecError("spec.variables is empty", reason="InvalidArgument", field="spec.variables")
    for i, v in enumerate(variables):
        publisher, sep, var = str(v).partition("/")
        if not sep or not publisher or not var or "/" in var:
            raise SpecError(f"variable {v!r} is not PUBLISHER/VARIABLE", reason="InvalidArgument",
                            field=f"spec.variables[{i}]")
    qos = effective_qos(spec, name=name, labels=labels, modes=modes)
    return [DesiredSubscription(subscription_id(namespace, name, v), spec["subscriber"], v, spec["edgeRouter"],
                                spec.get("type") or "", qos) for v in variables]


def pending_conditions(address: str, cloud: str) -> list[conditions.Condition]:
    """The status of a Subscription before its broker first answered (docs/kubernetes.md,
    "Subscriptions"): written at once, so a broker that takes a whole deadline to fail (a Service
    without endpoints) does not leave a new resource without status meanwhile."""
    message = f"waiting for the leaf broker of cloud {cloud} at {address} to answer"
    return [conditions.Condition(conditions.ADMITTED, None, "Pending", message),
            conditions.Condition(conditions.READY, False, "Pending", message),
            conditions.Condition(conditions.DEGRADED, False, "Pending", "nothing installed yet")]


def fingerprint(desired: Iterable[DesiredSubscription]) -> str:
    """A short stable digest of what is wanted; the timer re-reconciles when it moves."""
    data = [(d.subscription_id, d.subscriber, d.edge_router, d.value_type, [q.key for q in d.qos])
            for d in desired]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Subscribe:
    desired: DesiredSubscription


@dataclass(frozen=True)
class Change:
    """Change (or add) one mode's QoS in place: ChangeSubscription keeps the old QoS on rejection."""

    desired: DesiredSubscription
    qos: ModeQoS
    old: tuple[int, int, int, int, int] | None  # None: the mode is new to the subscription
    before: ActualSubscription  # the subscription before this plan, to put back on a rejection


@dataclass(frozen=True)
class Replace:
    """Unsubscribe and subscribe again (a mode removed, or the edge router moved)."""

    desired: DesiredSubscription
    old: ActualSubscription


@dataclass(frozen=True)
class Unsubscribe:
    actual: ActualSubscription


Action = Subscribe | Change | Replace | Unsubscribe


@dataclass(frozen=True)
class SubscriptionPlan:
    actions: tuple[Action, ...] = field(default=())

    @property
    def empty(self) -> bool:
        return not self.actions


def plan_subscription(desired: Sequence[DesiredSubscription], actual: Iterable[ActualSubscription]) -> SubscriptionPlan:
    """The broker calls that turn ``actual`` (this resource's ids only) into ``desired``.

    Order matters for all-or-nothing: additions and changes first (they can be rejected and
    rolled back), removals of variables no longer wanted last (they cannot be rejected).
    """
    have = {a.subscription_id: a for a in actual}
    adds: list[Action] = []
    for d in desired:
        a = have.pop(d.subscription_id, None)
        if a is None:
            adds.append(Subscribe(d))
            continue
        if (a.subscriber, a.edge_router, a.variable) != (d.subscriber, d.edge_router, d.variable) \
                or set(a.qos) - set(d.qos_keys):
            adds.append(Replace(d, a))
            continue
        adds.extend(Change(d, q, a.qos.get(q.mode_id), a) for q in d.qos if a.qos.get(q.mode_id) != q.key)
    removes = [Unsubscribe(a) for a in sorted(have.values(), key=lambda a: a.subscription_id)]
    return SubscriptionPlan((*adds, *removes))


def paths_status(
        actual: Iterable[ActualSubscription],
        mode_names: Mapping[int, str],
) -> list[dict[str, Any]]:
    """``status.paths``: every allocated path, per variable and mode."""
    out: list[dict[str, Any]] = []
    for a in sorted(actual, key=lambda a: a.variable):
        for mode_id, index, routers, latency in sorted(a.paths):
            out.append({"variable": a.variable, "subscriptionId": a.subscription_id,
                        "mode": mode_names.get(mode_id, str(mode_id)), "modeId": mode_id, "index": index,
                        "routers": list(routers), "latencyMs": round(latency, 3)})
    return out


# -- active mode ----------------------------------------------------------------------------------
#: Longest list of names in ``status.plan`` and in messages; the counts are always complete.
PLAN_NAMES_MAX = 20
#: QoS fields that count as a change of QoS when a mode switch moves a subscription between modes.
SWITCH_QOS_FIELDS = ("intervalMs", "latencyMs", "redundancy", "priority", "extrapolation")
_QOS_DEFAULTS = {"redundancy": DEFAULT_REDUNDANCY, "priority": DEFAULT_PRIORITY}


@dataclass(frozen=True)
class SubscriptionRef:
    """What the operator knows of one Subscription resource (from kopf's index of Subscriptions):
    enough to tell which modes it belongs to and with what QoS."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    spec: Mapping[str, Any] = field(default_factory=dict)


def subscription_ref(body: Mapping[str, Any]) -> SubscriptionRef:
    """A SubscriptionRef from a Subscription resource's body (a copy of what planning reads)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    return SubscriptionRef(name=str(meta.get("name", "")), labels=dict(meta.get("labels") or {}),
                           spec=json.loads(json.dumps({"qos": spec.get("qos") or {},
                                                       "modes": list(spec.get("modes") or ())})))


@dataclass(frozen=True)
class SwitchPlan:
    """What switching the utility from ``from_mode`` to ``to_mode`` does to the namespace's
    Subscriptions (docs/kubernetes.md, "Operating modes"): a subscription not in the target mode
    stops being delivered; one in both modes with other QoS there changes; one only in the target
    starts. Each tuple holds Subscription names, sorted."""

    from_mode: str
    to_mode: str
    stopping: tuple[str, ...] = ()
    changing: tuple[str, ...] = ()
    starting: tuple[str, ...] = ()

    def as_status(self, limit: int = PLAN_NAMES_MAX) -> dict[str, Any]:
        """``status.plan``: counts, and the first ``limit`` names of each group."""
        def group(names: tuple[str, ...]) -> dict[str, Any]:
            return {"count": len(names), "names": list(names[:limit])}
        return {"from": self.from_mode, "to": self.to_mode, "stopping": group(self.stopping),
                "changing": group(self.changing), "starting": group(self.starting)}

    @property
    def summary(self) -> str:
        def listed(names: tuple[str, ...]) -> str:
            if not names:
                return ""
            more = f", ... ({len(names) - PLAN_NAMES_MAX} more)" if len(names) > PLAN_NAMES_MAX else ""
            return f" ({', '.join(names[:PLAN_NAMES_MAX])}{more})"
        return (f"mode {self.from_mode} -> {self.to_mode}: stops {len(self.stopping)} subscription(s)"
                f"{listed(self.stopping)}, changes the QoS of {len(self.changing)}{listed(self.changing)}, "
                f"starts {len(self.starting)}{listed(self.starting)}")


def _switch_qos(spec: Mapping[str, Any], override: Mapping[str, Any]) -> tuple[Any, ...]:
    merged = merged_qos(spec, override)
    return tuple(json.dumps(merged.get(k, _QOS_DEFAULTS.get(k)), sort_keys=True) for k in SWITCH_QOS_FIELDS)


def plan_mode_switch(
        current: str | None,
        target: str,
        subscriptions: Iterable[SubscriptionRef],
        modes: Mapping[str, ModeRef],
) -> SwitchPlan:
    """What a switch from ``current`` to ``target`` stops, changes and starts (pure; from the
    Subscriptions' ``spec.modes`` and ``spec.qos`` and the Modes' selectors and lists).

    ``current`` None means the current mode is not known: every subscription not in ``target``
    then counts as stopping. Switching to the current mode does nothing.
    """
    if current == target:
        return SwitchPlan(target, target)
    stopping: list[str] = []
    changing: list[str] = []
    starting: list[str] = []
    for s in subscriptions:
        member = mode_overrides(s.spec, name=s.name, labels=s.labels, modes=modes)
        in_current = current is None or current in member
        if target not in member:
            if in_current:
                stopping.append(s.name)
        elif current is None or current not in member:
            if current is not None:
                starting.append(s.name)
        elif _switch_qos(s.spec, member[current]) != _switch_qos(s.spec, member[target]):
            changing.append(s.name)
    return SwitchPlan(current or "unknown", target, tuple(sorted(stopping)), tuple(sorted(changing)),
                      tuple(sorted(starting)))


def dry_run(spec: Mapping[str, Any]) -> bool:
    """``spec.dryRun: true``: plan the switch and report it, but do not switch."""
    return spec.get("dryRun") is True


def plan_mode_change(spec: Mapping[str, Any], modes: Mapping[str, ModeRef]) -> ModeRef:
    """The Mode an ActiveMode asks for; SpecError UnknownMode / ModeNotDefined."""
    return resolve_mode(modes, str(spec.get("mode", "")), field="spec.mode")


def mode_clash(ref: ModeRef, others: Iterable[ModeRef]) -> str | None:
    """The name of another Mode with the same id, if any (ids are global to the hierarchy)."""
    for o in others:
        if o.name != ref.name and o.id == ref.id:
            return o.name
    return None


# -- condensation functions -----------------------------------------------------------------------
TRIGGER_KINDS = {"time": 1, "events": 2, "alerts": 3}


def function_id(namespace: str, name: str) -> str:
    """The broker id of a CondensationFunction (also its output's default publisher name)."""
    return f"{namespace}.{name}"


def condensation_request(namespace: str, name: str, spec: Mapping[str, Any], *, mode_id: int,
                         creator: str) -> dict[str, Any]:
    """The fields of ``CreateCondensationRequest`` as plain data (the handler builds the message)."""
    output = spec.get("output") or {}
    trigger = spec.get("trigger") or {}

    def value_filter(f: Mapping[str, Any] | None) -> dict[str, Any]:
        if not f:
            return {"enabled": False}
        out: dict[str, Any] = {"enabled": True, "pass_outside": bool(f.get("passOutside", False))}
        for bound in ("low", "high"):
            if bound in f:
                out[bound] = float(f[bound])
        return out

    return {
        "creator": creator,
        "function_id": function_id(namespace, name),
        "output": {"publisher": output.get("publisher", ""), "variable": output["variable"],
                   "interval_ms": int(output.get("intervalMs", 0)), "priority": int(output.get("priority", 1)),
                   "alert": bool(output.get("alert", False)), "min_interval_ms": int(output.get("minIntervalMs", 0))},
        "inputs": [{"variable": i["variable"], "interval_ms": int(i.get("intervalMs", 0)),
                    "latency_ms": int(i["latencyMs"])} for i in spec.get("inputs") or ()],
        "spec": {"calculator": spec["calculator"],
                 "parameters": {k: float(v) for k, v in (spec.get("parameters") or {}).items()},
                 "trigger": {"kind": TRIGGER_KINDS.get(trigger.get("kind", "time"), 1),
                             "interval_ms": int(trigger.get("intervalMs", 0)), "count": int(trigger.get("count", 0))},
                 "input_filter": value_filter(spec.get("inputFilter")),
                 "output_filter": value_filter(spec.get("outputFilter")),
                 "output_type": spec.get("outputType", "")},
        "placement_router": spec.get("placementRouter", ""),
        "mode": mode_id,
    }


def condensation_fingerprint(request: Mapping[str, Any]) -> str:
    """Digest of a CreateCondensationRequest's data: a changed spec means remove and create again."""
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:16]
