"""gRPC error mapping shared by every servicer: one ``GridStatError`` -> one status code.

The status code says how a caller should react (retry on UNAVAILABLE, fix the
request on INVALID_ARGUMENT ...); the machine-readable reason and the offending
field travel in the trailing metadata keys ``gridstat-reason`` and
``gridstat-field``, which clients map back to typed errors.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc

from gridstat.errors import DuplicateName, GridStatError, NotFound, Unauthorized, UnknownVariable

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
    if exc.retriable:
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INVALID_ARGUMENT


async def abort(context: Any, exc: GridStatError) -> NoReturn:
    """End the call with the error's status, reason and field; never returns."""
    context.set_trailing_metadata(((REASON_KEY, exc.reason), (FIELD_KEY, exc.field or "")))
    await context.abort(status_code(exc), str(exc))
    raise AssertionError("unreachable: abort raises") from exc


async def guarded(context: Any, call: Callable[[], Awaitable[T]]) -> T:
    """Run a servicer's work, turning a GridStatError into the call's error status."""
    try:
        return await call()
    except GridStatError as exc:
        await abort(context, exc)
