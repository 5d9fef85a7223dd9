"""Why a GOOSE frame was not accepted (docs/goose.md, "Counters").

The subscriber handler never raises on peer input: every frame it cannot use is one count under a
``DropReason``. The codec's parse functions raise ``FrameError`` carrying the reason.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from gridstat.errors import GridStatError


class DropReason(enum.Enum):
    #: Shorter than an Ethernet header, or not EtherType 0x88B8 (after an optional 802.1Q tag).
    NOT_GOOSE = "not_goose"
    #: The GOOSE header's Length disagrees with the bytes received, or is below 8.
    BAD_LENGTH = "bad_length"
    #: A BER tag or length that is malformed, runs past its container, or is not the goosePdu's.
    BAD_BER = "bad_ber"
    #: A goosePdu field missing, out of order, of the wrong size or out of range.
    BAD_FIELD = "bad_field"
    #: numDatSetEntries differs from the members of allData.
    ENTRIES_MISMATCH = "entries_mismatch"
    #: A control block (gocbRef, APPID) the map file does not name.
    UNMAPPED = "unmapped"
    #: A copy of a frame already taken: the same (gocbRef, APPID, stNum, sqNum).
    DUPLICATE = "duplicate"
    #: An older frame than the newest taken (stNum lower, or sqNum lower in the same state).
    STALE = "stale"
    #: A mapped member missing from the data set, or of another kind than the map says.
    BAD_MEMBER = "bad_member"


class FrameError(GridStatError):
    """A frame the codec cannot read; ``drop`` says why."""

    reason = "InvalidArgument"

    def __init__(self, drop: DropReason, message: str) -> None:
        super().__init__(message)
        self.drop = drop


@dataclass
class DropCounter:
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, reason: DropReason, n: int = 1) -> None:
        key = reason.value
        self.counts[key] = self.counts.get(key, 0) + n

    def as_dict(self) -> dict[str, int]:
        return dict(self.counts)

    @property
    def total(self) -> int:
        return sum(self.counts.values())
