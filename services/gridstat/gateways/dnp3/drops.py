"""Losses by reason: every frame, segment or fragment the master cannot use is counted here, never raised
(docs/dnp3.md, "Counters").

One ``DropCounter`` per gateway, shared by the link decoder, the reassembler, the fragment parser and the
session. Plain integers, bumped without locks (one event loop).
"""

from __future__ import annotations

import enum


class DropReason(enum.StrEnum):
    #: Bytes before a 0x05 0x64 start octet pair (a run of them is one drop).
    BAD_SYNC = "bad_sync"
    #: A link header whose CRC is wrong (one octet is skipped and the search goes on).
    BAD_HEADER_CRC = "bad_header_crc"
    #: A link header whose LENGTH is below 5.
    BAD_LENGTH = "bad_length"
    #: A data block whose CRC is wrong: the whole frame is dropped.
    BAD_BLOCK_CRC = "bad_block_crc"
    #: A frame with the DIR bit of a master's frame, or another source or destination address.
    WRONG_DIRECTION = "wrong_direction"
    WRONG_ADDRESS = "wrong_address"
    #: A link function the master does not act on.
    LINK_FUNCTION = "link_function"
    #: Transport: a segment that is not FIR with nothing under way, or out of sequence.
    TRANSPORT_NO_FIR = "transport_no_fir"
    TRANSPORT_SEQUENCE = "transport_sequence"
    #: A reassembled fragment above the configured maximum.
    FRAGMENT_TOO_LARGE = "fragment_too_large"
    #: Application layer: shorter than a response header, a function that is not a response.
    SHORT_FRAGMENT = "short_fragment"
    UNEXPECTED_FUNCTION = "unexpected_function"
    #: A solicited response whose sequence is not the one expected, or none was asked for.
    UNEXPECTED_SEQUENCE = "unexpected_sequence"
    #: An unsolicited response repeated (same sequence): confirmed again, not used again.
    DUPLICATE_UNSOLICITED = "duplicate_unsolicited"
    #: An object header the parser cannot size: the rest of the fragment is dropped.
    UNKNOWN_OBJECT = "unknown_object"
    UNSUPPORTED_QUALIFIER = "unsupported_qualifier"
    #: Objects that run past the end of the fragment, or a range whose stop is below its start.
    TRUNCATED_OBJECT = "truncated_object"
    BAD_RANGE = "bad_range"
    #: A relative-time event (g2v3) without a common time of occurrence (g51) before it: kept, without time.
    NO_CTO = "no_cto"


class DropCounter:
    """Drops by reason, and octets discarded on the way."""

    __slots__ = ("by_reason", "discarded_bytes")

    def __init__(self) -> None:
        self.by_reason: dict[str, int] = {}
        self.discarded_bytes = 0

    def add(self, reason: DropReason, discarded: int = 0) -> None:
        key = reason.value
        self.by_reason[key] = self.by_reason.get(key, 0) + 1
        self.discarded_bytes += discarded

    def __getitem__(self, reason: DropReason | str) -> int:
        return self.by_reason.get(str(reason), 0)

    def total(self) -> int:
        return sum(self.by_reason.values())

    def as_dict(self) -> dict[str, int]:
        return dict(self.by_reason)
