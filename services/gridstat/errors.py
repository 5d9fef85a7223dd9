"""One error base class for the whole distribution.

Every error carries a machine-readable ``reason`` (an upper-camel word such as
``UnknownVariable``) so that callers, the CLI and later the gRPC layer can map
it to a status without parsing messages, plus ``retriable`` in the aiokafka
manner: a caller may retry a retriable error unchanged and expect success.
"""

from __future__ import annotations


def strip_reason(text: str, reason: str) -> str:
    """``text`` without leading ``"<reason>: "`` (however often repeated): the text of an error relayed
    by its ``str()``, to put beside its reason so that the reason is said once."""
    prefix = f"{reason}: "
    while reason and text.startswith(prefix):
        text = text[len(prefix):]
    return text


class GridStatError(Exception):
    """Base of every error this package raises on purpose."""

    reason: str = "Internal"
    retriable: bool = False

    def __init__(self, message: str, *, reason: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason
        self.field = field

    @property
    def message(self) -> str:
        """The message without the reason: what to put beside ``reason`` in a reply, a record or a status.

        ``str(exc)`` is ``"Reason: message"``; code that relays an error by its text (``Cls(str(other))``,
        a peer's reply carrying ``str(exc)``) would otherwise print the reason twice, so a leading
        ``"Reason: "`` of the error's own reason is dropped here, however often it was repeated.
        """
        return strip_reason(super().__str__(), self.reason)

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


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
