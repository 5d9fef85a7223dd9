"""The one writer of every GridStat resource's status (Strimzi's StatusUtils, positive polarity).

Every status carries ``observedGeneration`` (the ``metadata.generation`` the operator acted on)
and ``conditions``: ``Ready`` always, plus kind-specific ones (``Admitted`` and ``Degraded`` for
a Subscription). Each condition has ``type``, ``status`` ("True", "False" or "Unknown"),
``lastTransitionTime`` (UTC, seconds), a CamelCase ``reason`` and a human ``message``.

Two rules keep the status quiet and trustworthy:

* ``lastTransitionTime`` moves only when a condition's ``status`` flips, so a reconcile that
  changes nothing writes nothing (``status_changed`` ignores the timestamps, as Strimzi's
  StatusDiff does);
* readiness has one definition, :func:`is_ready`, which agrees with
  ``kubectl wait --for=condition=Ready``: the generation was observed and ``Ready`` is "True".
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

READY = "Ready"
ADMITTED = "Admitted"
DEGRADED = "Degraded"
PAUSED = "ReconciliationPaused"
#: An ActiveMode's switch plan was computed (``status.plan``; docs/kubernetes.md, "Operating modes").
PLANNED = "Planned"

#: Longest condition message written; a broker's message can quote a whole path list.
MESSAGE_MAX = 1024


@dataclass(frozen=True)
class Condition:
    """One condition to write: ``status`` True, False or None (Unknown)."""

    type: str
    status: bool | None
    reason: str
    message: str = ""

    @property
    def status_text(self) -> str:
        return "Unknown" if self.status is None else ("True" if self.status else "False")


def without_reason(reason: str, message: str) -> str:
    """``message`` without a leading ``"<reason>: "``.

    The brokers' errors render as ``"<reason>: <text>"`` (``GridStatError.__str__``) and a
    rejection carries that text as its message, while the reason travels in its own field; status
    messages name the reason once (docs/kubernetes.md, "Subscriptions").
    """
    prefix = f"{reason}: "
    while reason and message.startswith(prefix):
        message = message[len(prefix):]
    return message


def now_text(now: datetime.datetime | None = None) -> str:
    """``yyyy-MM-ddTHH:mm:ssZ`` in UTC, the format of ``lastTransitionTime``."""
    t = now or datetime.datetime.now(datetime.UTC)
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def render(
        body: Mapping[str, Any],
        conditions: Iterable[Condition],
        *,
        now: datetime.datetime | None = None,
) -> list[dict[str, Any]]:
    """The new ``status.conditions`` list: ``conditions`` in order, each keeping its old
    ``lastTransitionTime`` when its status did not change. Conditions not named are dropped."""
    generation = int(body.get("metadata", {}).get("generation") or 0)
    old = {c.get("type"): c for c in (body.get("status") or {}).get("conditions") or ()}
    out: list[dict[str, Any]] = []
    for c in conditions:
        previous = old.get(c.type)
        moved = previous is None or previous.get("status") != c.status_text
        out.append({
            "type": c.type,
            "status": c.status_text,
            "lastTransitionTime": now_text(now) if moved or not previous else previous.get("lastTransitionTime"),
            "reason": c.reason,
            "message": c.message[:MESSAGE_MAX],
            "observedGeneration": generation,
        })
    return out


def write_status(
        patch: MutableMapping[str, Any],
        body: Mapping[str, Any],
        conditions: Iterable[Condition],
        *,
        now: datetime.datetime | None = None,
        **fields: Any,
) -> bool:
    """Put conditions, ``observedGeneration`` and ``fields`` into ``patch["status"]``.

    A field given as None is removed from the status. Nothing is written when the result equals
    the current status but for timestamps; returns whether something was written.
    """
    status = dict(body.get("status") or {})
    new: dict[str, Any] = {
        "observedGeneration": int(body.get("metadata", {}).get("generation") or 0),
        "conditions": render(body, conditions, now=now),
        **fields,
    }
    if not status_changed(status, new):
        return False
    target = patch.setdefault("status", {})
    target.update(new)
    return True


def status_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether writing ``new`` over ``old`` changes anything but a condition's timestamp."""
    for key, value in new.items():
        if key == "conditions":
            if _strip_times(old.get(key)) != _strip_times(value):
                return True
        elif value is None:
            if old.get(key) is not None:
                return True
        elif old.get(key) != value:
            return True
    return False


def _strip_times(conditions: Any) -> list[dict[str, Any]]:
    return [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in conditions or ()]


def condition(body: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    """The condition ``type_`` of ``body``'s status, if any."""
    for c in (body.get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return c  # type: ignore[no-any-return]
    return None


def carried(body: Mapping[str, Any], type_: str) -> Condition | None:
    """The condition ``type_`` of ``body``'s status as a Condition to write again, if any."""
    c = condition(body, type_)
    if c is None:
        return None
    status = {"True": True, "False": False}.get(str(c.get("status")))
    return Condition(type_, status, str(c.get("reason") or ""), str(c.get("message") or ""))


def is_ready(body: Mapping[str, Any]) -> bool:
    """The generation was observed and ``Ready`` is "True" (``kubectl wait --for=condition=Ready``)."""
    status = body.get("status") or {}
    generation = body.get("metadata", {}).get("generation")
    ready = condition(body, READY)
    return ready is not None and ready.get("status") == "True" and status.get("observedGeneration") == generation
