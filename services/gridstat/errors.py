"""One error base class for the whole distribution.

Every error carries a machine-readable ``reason`` (an upper-camel word such as
``UnknownVariable``) so that callers, the CLI and later the gRPC layer can map
it to a status without parsing messages, plus ``retriable`` in the aiokafka
manner: a caller may retry a retriable error unchanged and expect success.
"""

from __future__ import annotations


class GridStatError(Exception):
    """Base of every error this package raises on purpose."""

    reason: str = "Internal"
    retriable: bool = False

    def __init__(self, message: str, *, reason: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason
        self.field = field

    def __str__(self) -> str:
        base = super().__str__()
        return f"{self.reason}: {base}"


class ValidationError(GridStatError):
    """A value given by a user or a peer is not acceptable; ``field`` names it."""

    reason = "InvalidArgument"


class UnknownVariable(GridStatError):
    reason = "UnknownVariable"


class TypeMismatch(GridStatError):
    reason = "TypeMismatch"


class DuplicateName(GridStatError):
    reason = "AlreadyExists"


class NotFound(GridStatError):
    reason = "NotFound"


class ChannelUnavailable(GridStatError):
    """An event channel or a control connection is down; retry later."""

    reason = "Unavailable"
    retriable = True


class Unauthorized(GridStatError):
    """The caller may not do this here (e.g. a client not registered at the relaying edge router)."""

    reason = "Unauthorized"


class ModeChangeInProgress(GridStatError):
    """Another mode change is running on this broker; retry when it is done."""

    reason = "ModeChangeInProgress"
    retriable = True


class CapacityExhausted(GridStatError):
    """The resources an operation needs are not there now (e.g. a mode whose paths lost capacity)."""

    reason = "CapacityExhausted"
