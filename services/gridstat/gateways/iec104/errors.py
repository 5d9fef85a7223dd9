"""Why an IEC 60870-5-104 frame or ASDU was not used, counted by reason (docs/iec104.md, "Counters").

The stream API (``apci.ApduSplitter``, ``session.Iec104Session``) never raises on peer input: every
loss is one count in a ``DropCounter`` under a ``DropReason`` (and, for ``bad_field``, the name of the
field as IEC 60870-5-101/104 spell it). The direct parse functions raise ``Iec104Error``, which carries
the same reason and the field.
"""

from __future__ import annotations

import enum

from gridstat.errors import GridStatError


class DropReason(enum.Enum):
    """Why bytes, a frame or an ASDU were dropped; every drop is counted under one of these."""

    #: Not an APDU start: the first byte is not 0x68 (IEC 60870-5-104 5.1). One count per run of
    #: bytes skipped to resynchronise.
    BAD_START = "bad_start"
    #: The APDU length is below 4 (the control field) or above 253, or a U or S frame has an ASDU.
    BAD_LENGTH = "bad_length"
    #: A control field the standard does not define (a U frame with no or several functions).
    BAD_CONTROL = "bad_control"
    #: The stream ended inside an APDU, or a field of an ASDU runs past its end.
    TRUNCATED = "truncated"
    #: An ASDU field whose value the standard does not allow (the field is named in the count).
    BAD_FIELD = "bad_field"
    #: A CP56Time2a that is not a date (minute 60, month 13, ...).
    BAD_TIME = "bad_time"
    #: A type identification the gateway does not read (counters, bit strings, commands, ...).
    UNSUPPORTED_TYPE = "unsupported_type"
    #: A cause of transmission the standard does not allow for the type in the monitor direction: a
    #: C_IC_NA_1 or C_CS_NA_1 that is no confirmation, termination or refusal, an M_EI_NA_1 whose cause
    #: is not "initialized" (IEC 60870-5-101 7.2.3, IEC 60870-5-104 Table 2).
    BAD_CAUSE = "bad_cause"
    #: An I frame whose N(S) is not the V(R) expected: the connection is closed (5.1).
    BAD_SEQUENCE = "bad_sequence"
    #: An N(R) that acknowledges I frames never sent: the connection is closed.
    BAD_ACK = "bad_ack"
    #: A value whose IOA arrives as another kind than the variable holds (a float, then a single point).
    KIND_MISMATCH = "kind_mismatch"
    #: A value of an IOA not in the map file, with ``only_mapped``.
    UNMAPPED = "unmapped"
    #: A value of an information object whose default name another object's map entry took.
    NAME_TAKEN = "name_taken"


class Iec104Error(GridStatError):
    """An APDU or ASDU could not be parsed; ``drop_reason`` says why, ``field`` says where."""

    reason = "MalformedFrame"

    def __init__(self, drop_reason: DropReason, message: str, *, field: str | None = None) -> None:
        super().__init__(f"{drop_reason.value}: {message}", field=field)
        self.drop_reason = drop_reason


def bad_field(field: str, value: object, why: str) -> Iec104Error:
    return Iec104Error(DropReason.BAD_FIELD, f"{field}={value!r}: {why}", field=field)


class DropCounter:
    """Counts of drops by reason, of ``bad_field`` drops by field, and of discarded bytes."""

    __slots__ = ("by_field", "by_reason", "discarded_bytes", "last_error")

    def __init__(self) -> None:
        self.by_reason: dict[DropReason, int] = dict.fromkeys(DropReason, 0)
        self.by_field: dict[str, int] = {}
        #: Bytes of the stream that were not part of an APDU (garbage, a partial APDU at the end).
        self.discarded_bytes = 0
        self.last_error: Iec104Error | None = None

    def count(self, reason: DropReason, *, field: str | None = None, n: int = 1) -> None:
        self.by_reason[reason] += n
        if reason is DropReason.BAD_FIELD:
            key = field or "?"
            self.by_field[key] = self.by_field.get(key, 0) + n

    def count_error(self, error: Iec104Error) -> None:
        self.count(error.drop_reason, field=error.field)
        self.last_error = error

    @property
    def total(self) -> int:
        return sum(self.by_reason.values())

    def as_dict(self) -> dict[str, int]:
        """Non-zero counts keyed by the reason's name (``bad_start``), for stats lines and tests."""
        return {reason.value: n for reason, n in self.by_reason.items() if n}
