"""gRPC error mapping shared by every servicer: one ``GridStatError`` -> one status code.

The status code says how a caller should react (retry on UNAVAILABLE, fix the
request on INVALID_ARGUMENT ...); the machine-readable reason and the offending
field travel in the trailing metadata keys ``gridstat-reason`` and
``gridstat-field``, which clients map back to typed errors.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc

from gridstat.errors import CapacityExhausted, DuplicateName, GridStatError, NotFound, Unauthorized, UnknownVariable

T = TypeVar("T")
REASON_KEY = "gridstat-reason"
FIELD_KEY = "gridstat-field"


def status_code(exc: GridStatError) -> grpc.StatusCode:
    if isinstance(exc, NotFound | UnknownVariable):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(exc, DuplicateName):
        return grpc.StatusCode.ALREADY_EXISTS
    if isinstance(exc, Unauthorized):
        return grpc.StatusCode.PERMISSION_DENIED
    if isinstance(exc, CapacityExhausted):
        return grpc.StatusCode.FAILED_PRECONDITION
    if exc.retriable:
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INVALID_ARGUMENT


async def abort(context: Any, exc: GridStatError) -> NoReturn:
    """End the call with the error's status, reason and field; never returns."""
    context.set_trailing_metadata(((REASON_KEY, exc.reason), (FIELD_KEY, exc.field or "")))
    await context.abort(status_code(exc), str(exc))
    raise AssertionError("unreachable: abort raises") from exc


async def guarded(context: Any, call: Callable[[], Awaitable[T]]) -> T:
    """Run a servicer's work, turning a GridStatError into the call's error status.

    A failed call to another role (a child broker, a router) that escapes the work is passed on
    with its own status: UNAVAILABLE (retriable) for a peer that cannot be reached.
    """
    try:
        return await call()
    except GridStatError as exc:
        await abort(context, exc)
    except grpc.aio.AioRpcError as exc:
        code = exc.code()
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            err = GridStatError(f"a peer did not answer: {exc.details()}", reason="PeerUnavailable")
            err.retriable = True
            await abort(context, err)
        context.set_trailing_metadata(tuple(exc.trailing_metadata() or ()))
        await context.abort(code, exc.details() or "")
        raise AssertionError("unreachable: abort raises") from exc


def retry_service_config(attempts: int, initial_backoff_s: float, *, max_backoff_s: float = 2.0,
                         codes: tuple[str, ...] = ("UNAVAILABLE",)) -> str | None:
    """A gRPC service config whose retry policy (gRFC A6) retries every method up to ``attempts`` times
    in all (gRPC's limit is 5) on ``codes``, with exponential backoff from ``initial_backoff_s`` and
    gRPC's own jitter, all within the call's one deadline; None for a single attempt. A server stops
    the retries of one answer with :data:`NO_RETRY` in its trailing metadata."""
    if attempts < 2:
        return None
    return json.dumps({
        "methodConfig": [{
            "name": [{}],
            "retryPolicy": {
                "maxAttempts": min(attempts, 5),
                "initialBackoff": f"{initial_backoff_s:g}s",
                "maxBackoff": f"{max(max_backoff_s, initial_backoff_s):g}s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": list(codes),
            },
        }],
    })


def retry_options(attempts: int, initial_backoff_s: float, *, max_backoff_s: float = 2.0,
                  codes: tuple[str, ...] = ("UNAVAILABLE",)) -> list[tuple[str, Any]]:
    """Channel options that make gRPC retry as :func:`retry_service_config` says (or not at all)."""
    config = retry_service_config(attempts, initial_backoff_s, max_backoff_s=max_backoff_s, codes=codes)
    return [("grpc.enable_retries", 1), ("grpc.service_config", config)] if config else [("grpc.enable_retries", 0)]


#: Trailing metadata with which a server tells a client's retry policy not to retry this answer
#: (gRFC A6's server pushback: a negative delay).
NO_RETRY = ("grpc-retry-pushback-ms", "-1")

#: Client-side retries for calls between roles: UNAVAILABLE (no connection, the peer restarting) is
#: retried with exponential backoff by gRPC itself; the channel reconnects with backoff too.
RETRY_SERVICE_CONFIG = retry_service_config(4, 0.1)


def channel_options() -> list[tuple[str, Any]]:
    """Options of every channel one role opens to another."""
    return [("grpc.enable_retries", 1), ("grpc.service_config", RETRY_SERVICE_CONFIG),
            ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 5000),
            # A peer named by DNS (a pod) may come back at a new address: look it up again within a
            # second of a failure, not gRPC's default 30 s (docs/kubernetes.md#upgrades).
            ("grpc.dns_min_time_between_resolutions_ms", 1000)]
