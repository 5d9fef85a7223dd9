"""The DNP3 transport function, sans I/O (IEEE 1815-2012 clause 8): application fragments cut into
segments of one link frame each, and segments put back together.

A segment is one header octet -- FIN (0x80), FIR (0x40), a 6-bit sequence number -- and up to 249 octets
of the fragment. ``Reassembler.add`` returns the fragment when its FIN segment arrives; a segment that is
not FIR with nothing under way, one out of sequence, or a fragment above ``max_fragment_size`` is a
counted drop (the partial fragment is discarded).
"""

from __future__ import annotations

from gridstat.gateways.dnp3.drops import DropCounter, DropReason
from gridstat.gateways.dnp3.link import MAX_USER_DATA

FIN = 0x80
FIR = 0x40
#: Fragment octets per segment: a frame's user data less the transport header.
MAX_SEGMENT_PAYLOAD = MAX_USER_DATA - 1
#: The largest fragment the master accepts by default (2048 octets is the usual outstation maximum).
DEFAULT_MAX_FRAGMENT = 2048


class Segmenter:
    """Segments of the master's fragments, numbered on from one fragment to the next."""

    __slots__ = ("sequence",)

    def __init__(self) -> None:
        self.sequence = 0

    def segment(self, fragment: bytes) -> list[bytes]:
        out = []
        chunks = [fragment[i:i + MAX_SEGMENT_PAYLOAD] for i in range(0, len(fragment), MAX_SEGMENT_PAYLOAD)] or [b""]
        last = len(chunks) - 1
        for i, chunk in enumerate(chunks):
            head = (FIR if i == 0 else 0) | (FIN if i == last else 0) | self.sequence
            self.sequence = (self.sequence + 1) & 0x3F
            out.append(bytes((head,)) + chunk)
        return out


class Reassembler:
    """Fragments out of segments (one link's direction)."""

    __slots__ = ("_parts", "_sequence", "_size", "drops", "max_fragment_size")

    def __init__(self, drops: DropCounter | None = None, *, max_fragment_size: int = DEFAULT_MAX_FRAGMENT) -> None:
        self.drops = drops if drops is not None else DropCounter()
        self.max_fragment_size = max_fragment_size
        self._parts: list[bytes] | None = None
        self._sequence = 0
        self._size = 0

    def reset(self) -> None:
        self._parts = None

    def add(self, segment: bytes) -> bytes | None:
        """The whole fragment when ``segment`` ends one, else None."""
        if not segment:
            self.drops.add(DropReason.TRANSPORT_NO_FIR)
            return None
        head = segment[0]
        payload = segment[1:]
        seq = head & 0x3F
        if head & FIR:
            if self._parts is not None:
                self.drops.add(DropReason.TRANSPORT_SEQUENCE, self._size)  # a new fragment cut the old one off
            self._parts = [payload]
            self._size = len(payload)
        elif self._parts is None:
            self.drops.add(DropReason.TRANSPORT_NO_FIR, len(payload))
            return None
        elif seq != (self._sequence + 1) & 0x3F:
            self.drops.add(DropReason.TRANSPORT_SEQUENCE, self._size + len(payload))
            self._parts = None
            return None
        else:
            self._parts.append(payload)
            self._size += len(payload)
        self._sequence = seq
        if self._size > self.max_fragment_size:
            self.drops.add(DropReason.FRAGMENT_TOO_LARGE, self._size)
            self._parts = None
            return None
        if head & FIN:
            parts = self._parts
            self._parts = None
            return parts[0] if len(parts) == 1 else b"".join(parts)
        return None
