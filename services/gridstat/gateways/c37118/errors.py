"""Why a C37.118 frame was not accepted, and the error the direct parse functions raise.

The stream API (``decoding.StreamDecoder``, ``splitting.FrameSplitter``) never raises on peer input:
every failure is one count in a ``DropCounter`` under a ``DropReason`` (and, for ``bad_field``, the
name of the field as the standard spells it). The direct parse functions raise ``FrameError``, which
carries the same reason, the field and the offending value (docs/c37118.md, "Drop reasons").
"""

from __future__ import annotations

import enum

from gridstat.errors import GridStatError


class DropReason(enum.Enum):
    """Why bytes or a frame were dropped; every drop is counted under one of these."""

    #: Not a frame start: the first byte is not 0xAA, or the frame type or version bits are not valid
    #: (C37.118.2-2011 6.2, Table 2). In a stream, one count per run of bytes skipped to resynchronise.
    BAD_SYNC = "bad_sync"
    #: FRAMESIZE below the smallest frame of its type or above the receiver's cap, a datagram whose
    #: length is not FRAMESIZE, or a frame with bytes left over after its last field.
    BAD_SIZE = "bad_size"
    #: A field runs past the end of the frame, or a stream ended inside a frame.
    TRUNCATED = "truncated"
    #: CHK is not the CRC-CCITT of the frame (6.2).
    BAD_CRC = "bad_crc"
    #: A data frame before any configuration (CFG-2 or CFG-3) was received.
    NO_CONFIG = "no_config"
    #: A data frame whose length is not that of the NUM_PMU blocks its configuration describes.
    NUM_PMU_MISMATCH = "num_pmu_mismatch"
    #: A data frame from a stream IDCODE with no configuration, while other streams have one.
    UNKNOWN_IDCODE = "unknown_idcode"
    #: A field whose value the standard does not allow (the field is named in the count).
    BAD_FIELD = "bad_field"


class FrameError(GridStatError):
    """A frame could not be parsed; ``drop_reason`` says why, ``field`` and ``value`` say where."""

    reason = "MalformedFrame"

    def __init__(self, drop_reason: DropReason, message: str, *, field: str | None = None,
                 value: object = None) -> None:
        super().__init__(f"{drop_reason.value}: {message}", field=field)
        self.drop_reason = drop_reason
        self.value = value


def bad_field(field: str, value: object, why: str) -> FrameError:
    """A ``bad_field`` error naming the field (as the standard spells it) and its value."""
    return FrameError(DropReason.BAD_FIELD, f"{field}={value!r}: {why}", field=field, value=value)


def truncated(field: str, need_bytes: int, have_bytes: int) -> FrameError:
    """A ``truncated`` error: ``field`` needs more bytes than the frame has left."""
    return FrameError(DropReason.TRUNCATED, f"{field} needs {need_bytes} bytes, {have_bytes} left",
                      field=field, value=have_bytes)


class DropCounter:
    """Counts of dropped frames by reason, of ``bad_field`` drops by field, and of discarded bytes.

    One counter is shared by the parts of a ``StreamDecoder`` (splitter, reassembler, decoder), so a
    receiver reads every loss in one place. ``last_error`` keeps the latest error for diagnostics.
    """

    __slots__ = ("by_field", "by_reason", "discarded_bytes", "last_error")

    def __init__(self) -> None:
        self.by_reason: dict[DropReason, int] = dict.fromkeys(DropReason, 0)
        self.by_field: dict[str, int] = {}
        #: Bytes of a stream that were not part of a frame with a valid CHK (garbage, frames that failed
        #: their CHK, a partial frame at the end); a valid frame dropped later is counted by reason only.
        self.discarded_bytes = 0
        self.last_error: FrameError | None = None

    def count(self, reason: DropReason, *, field: str | None = None) -> None:
        self.by_reason[reason] += 1
        if reason is DropReason.BAD_FIELD:
            key = field or "?"
            self.by_field[key] = self.by_field.get(key, 0) + 1

    def count_error(self, error: FrameError) -> None:
        self.count(error.drop_reason, field=error.field)
        self.last_error = error

    @property
    def total(self) -> int:
        return sum(self.by_reason.values())

    def as_dict(self) -> dict[str, int]:
        """Non-zero counts keyed by the reason's wire name (``bad_crc``), for metrics and tests."""
        return {reason.value: n for reason, n in self.by_reason.items() if n}
