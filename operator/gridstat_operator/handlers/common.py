"""What the handlers share: the per-object lock, the retry delay, events on decisions, a Ready that is
not (and the retry after it), indexes."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, NoReturn, TypeVar, cast

import kopf

from gridstat_operator import brokers as brokering
from gridstat_operator import conditions, plan, resources
from gridstat_operator import config as configs

#: Longest wait between two attempts at a resource whose broker does not answer.
MAX_RETRY_DELAY_S = 60.0


def backoff_s(retry: int) -> float:
    """1, 2, 4 ... 60 s: the delay before attempt ``retry + 1`` (kopf counts retries from 0)."""
    return min(MAX_RETRY_DELAY_S, float(2 ** min(retry, 6)))


def brokers(memo: Any) -> brokering.Brokers:
    """The operator's broker client, made at start-up (``operating.operator_startup``)."""
    if getattr(memo, "brokers", None) is None:  # a handler ran before start-up finished (tests)
        memo.brokers = brokering.Brokers(configs.OperatorConfig.from_env())
    return memo.brokers  # type: ignore[no-any-return]


def lock(memo: Any, body: Mapping[str, Any]) -> asyncio.Lock:
    """One lock per object: a timer and a change handler of one resource never run at once."""
    locks: dict[str, asyncio.Lock] = memo.setdefault("locks", {})
    uid = str(body.get("metadata", {}).get("uid", ""))
    return locks.setdefault(uid, asyncio.Lock())


def forget(memo: Any, body: Mapping[str, Any]) -> None:
    uid = str(body.get("metadata", {}).get("uid", ""))
    memo.setdefault("locks", {}).pop(uid, None)
    memo.setdefault("checked", {}).pop(uid, None)


def paused(body: Mapping[str, Any]) -> bool:
    """Strimzi's pause annotation: ``gridstat.io/pause-reconciliation: "true"``."""
    annotations = body.get("metadata", {}).get("annotations") or {}
    return str(annotations.get(resources.PAUSE_ANNOTATION, "")).lower() == "true"


#: What kopf logs at INFO after every run of a timer (``Timer 'NAME' succeeded.``).
_PERIODIC_SUCCESS = re.compile(r"^Timer '[^']+' succeeded\.$")


class PeriodicChecksAtDebug(logging.Filter):
    """kopf's ``Timer 'NAME' succeeded.`` at DEBUG: every timer of this operator is a periodic check
    (every 5-15 s per resource), and its success says nothing new. What a check changes is logged at
    INFO by :func:`report_change` (docs/kubernetes.md, "Operating the operator"). On kopf's ``kopf.objects`` logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not _PERIODIC_SUCCESS.match(str(record.msg)):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def quiet_periodic_checks(logger: logging.Logger | None = None) -> None:
    """Put :class:`PeriodicChecksAtDebug` on kopf's per-object logger (once)."""
    target = logger if logger is not None else logging.getLogger("kopf.objects")
    if not any(isinstance(f, PeriodicChecksAtDebug) for f in target.filters):
        target.addFilter(PeriodicChecksAtDebug())


def report_change(logger: Any, check: str, body: Mapping[str, Any], patch: Mapping[str, Any]) -> list[str]:
    """After a periodic check: the status fields its patch changes, logged at INFO (at DEBUG when none did,
    the usual case); returns them."""
    old: Mapping[str, Any] = body.get("status") or {}
    new: Mapping[str, Any] = patch.get("status") or {}
    changed = sorted(k for k, v in new.items() if conditions.status_changed({k: old.get(k)}, {k: v}))
    if changed:
        logger.info("%s: status changed: %s", check, ", ".join(changed))
    else:
        logger.debug("%s: nothing changed", check)
    return changed


Check = TypeVar("Check", bound=Callable[..., Awaitable[None]])


def periodic_check(fn: Check) -> Check:
    """A kopf timer whose run ends with :func:`report_change` (put it under ``@kopf.timer``; kopf's
    handler id stays the function's name)."""
    @functools.wraps(fn)
    async def check(**kwargs: Any) -> None:
        await fn(**kwargs)
        report_change(kwargs["logger"], fn.__name__, kwargs["body"], kwargs["patch"])

    return cast(Check, check)


def decided(
        body: Any,
        ready: conditions.Condition,
        *,
        reason: str,
        message: str,
        warning: bool = False,
        always: bool = False,
) -> None:
    """Post an event for a decision, once: when the Ready condition's reason or status moves
    (or ``always``), so a periodic check that finds nothing new posts nothing."""
    old = conditions.condition(body, conditions.READY)
    if not always and old is not None and old.get("reason") == ready.reason \
            and old.get("status") == ready.status_text and old.get("message") == ready.message:
        return
    (kopf.warn if warning else kopf.info)(body, reason=reason, message=message[:1024])


def writes(patch: kopf.Patch, body: Any, **fields: Any) -> Callable[[conditions.Condition], None]:
    """The status write of a handler with nothing but ``Ready`` among its conditions (and ``fields``)."""
    def write(ready: conditions.Condition) -> None:
        conditions.write_status(patch, body, [ready], **fields)

    return write


def not_ready(body: Any, reason: str, message: str, write: Callable[[conditions.Condition], None]) -> None:
    """``Ready`` False for ``reason``: a warning event when that is news (:func:`decided`), and ``write``
    puts it in the status."""
    ready = conditions.Condition(conditions.READY, False, reason, message)
    decided(body, ready, reason=reason, message=message, warning=True)
    write(ready)


def retry_later(body: Any, exc: brokering.BrokerError, retry: int,
                write: Callable[[conditions.Condition], None]) -> NoReturn:
    """A broker that did not answer (a retriable error): ``Ready`` False with the error's reason
    (:func:`not_ready`), and kopf tries the handler again after :func:`backoff_s`."""
    not_ready(body, exc.reason, f"{exc} (retrying)", write)
    raise kopf.TemporaryError(f"{exc.reason}: {exc}", delay=backoff_s(retry)) from None


def modes_of(namespace: str, index: Any) -> dict[str, plan.ModeRef]:
    """The Modes of ``namespace`` from kopf's index (plus ``normal``)."""
    refs: Iterable[plan.ModeRef] = index.get(namespace, []) if index is not None else []
    return plan.known_modes(refs)


def mode_names(modes: Mapping[str, plan.ModeRef]) -> dict[int, str]:
    return {m.id: m.name for m in modes.values()}
