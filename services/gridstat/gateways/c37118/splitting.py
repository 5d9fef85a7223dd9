"""Cutting a TCP byte stream into C37.118 frames, sans I/O: feed bytes, get complete frames.

Frames follow each other with no delimiter (C37.118.2-2011 6.2.1), so the splitter reads FRAMESIZE
and waits for that many bytes. It accepts a frame only when its CHK is the CRC-CCITT of its bytes.

In sync (at the start of a stream and after every accepted frame) the next byte must start a frame:
anything else -- a first byte other than 0xAA, a SYNC with a frame type or version that does not exist,
a FRAMESIZE below its type's minimum or above ``max_frame_size``, a CHK that does not match -- is one
counted drop (``bad_sync``, ``bad_size``, ``bad_crc``), and the splitter resynchronises.

Resynchronising, it looks at every later 0xAA whose SYNC and FRAMESIZE are plausible (a candidate)
and accepts the first candidate that completes with a valid CHK; the bytes before it are discarded
(counted in ``discarded_bytes``, part of the drop already counted). Candidates wait side by side, in
a heap by their end, so a false candidate that claims 60 kB cannot stall a stream whose next real
frame is 60 bytes long: the real frame completes first.

Memory is bounded: after ``feed`` returns, at most ``max_frame_size`` bytes are pending (an
incomplete frame, or the candidates of a resync), whatever the peer sends.
"""

from __future__ import annotations

import heapq
from collections import deque

from gridstat.gateways.c37118.errors import DropCounter, DropReason
from gridstat.gateways.c37118.framing import (
    MAX_FRAME_SIZE,
    MIN_FRAME_SIZE,
    MIN_SIZE_OF_SYNC,
    SYNC_BYTE,
    check_range,
    crc_ccitt,
)


class FrameSplitter:
    """Complete, CHK-checked frames from a byte stream; every loss counted in ``drops``."""

    __slots__ = ("_base", "_buf", "_candidates", "_done_starts", "_in_sync", "_pos", "_scan", "_starts", "bytes_in",
                 "drops", "frames_out", "max_frame_size")

    def __init__(self, *, max_frame_size: int = MAX_FRAME_SIZE, drops: DropCounter | None = None) -> None:
        check_range("max_frame_size", max_frame_size, MIN_FRAME_SIZE, MAX_FRAME_SIZE)
        self.max_frame_size = max_frame_size
        self.drops = drops if drops is not None else DropCounter()
        self.bytes_in = 0
        self.frames_out = 0
        self._buf = bytearray()
        # Offsets are counted from the start of the stream: _buf[0] is byte _base, _pos is the first
        # byte neither emitted nor discarded, _scan the next byte to look at for a candidate.
        self._base = 0
        self._pos = 0
        self._scan = 0
        self._in_sync = True
        self._candidates: list[tuple[int, int]] = []  # (end, start) of candidates not yet complete
        # The same candidates' starts in stream order, and those already judged: the earliest start
        # still waiting (the first bytes that must be kept) in amortised O(1), however many wait.
        self._starts: deque[int] = deque()
        self._done_starts: set[int] = set()

    @property
    def pending_bytes(self) -> int:
        return self._base + len(self._buf) - self._pos

    @property
    def in_sync(self) -> bool:
        return self._in_sync

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Take the next bytes of the stream; the frames they complete, in order."""
        self.bytes_in += len(data)
        self._buf += data
        out: list[bytes] = []
        while self._step_in_sync(out) if self._in_sync else self._step_resync(out):
            pass
        self._trim()
        return out

    def close(self) -> None:
        """The stream ended: what is pending is discarded (``truncated`` when it was the start of a
        frame). The next ``feed`` starts a new stream. Idempotent."""
        pending = self.pending_bytes
        if pending:
            if self._in_sync:
                self.drops.count(DropReason.TRUNCATED)
            self.drops.discarded_bytes += pending
        self._base = self._pos = self._scan = self._base + len(self._buf)
        self._buf.clear()
        self._forget_candidates()
        self._in_sync = True

    # -- in sync: the next byte starts a frame -----------------------------------------------------

    def _step_in_sync(self, out: list[bytes]) -> bool:
        buf = self._buf
        p = self._pos - self._base
        have = len(buf) - p
        if have < 1:
            return False
        if buf[p] != SYNC_BYTE:
            return self._lose_sync(DropReason.BAD_SYNC)
        if have < 2:
            return False
        minimum = MIN_SIZE_OF_SYNC[buf[p + 1]]
        if not minimum:
            return self._lose_sync(DropReason.BAD_SYNC)
        if have < 4:
            return False
        size = buf[p + 2] << 8 | buf[p + 3]
        if not minimum <= size <= self.max_frame_size:
            return self._lose_sync(DropReason.BAD_SIZE)
        if have < size:
            return False
        frame = self._valid_frame(p, size)
        if frame is None:
            return self._lose_sync(DropReason.BAD_CRC)
        out.append(frame)
        self._pos += size
        self.frames_out += 1
        return True

    def _lose_sync(self, reason: DropReason) -> bool:
        self.drops.count(reason)
        self._in_sync = False
        self._scan = self._pos + 1
        self._forget_candidates()
        return True

    # -- resynchronising: the first candidate to complete with a valid CHK wins ------------------

    def _step_resync(self, out: list[bytes]) -> bool:
        buf, base = self._buf, self._base
        stream_end = base + len(buf)
        candidates = self._candidates
        while candidates and candidates[0][0] <= stream_end:
            end, start = heapq.heappop(candidates)
            self._done_starts.add(start)
            frame = self._valid_frame(start - base, end - start)
            if frame is not None:
                return self._accept(start, frame, out)
        limit = stream_end - 3  # a candidate's SYNC and FRAMESIZE must be there to judge it
        while self._scan < limit:
            i = buf.find(SYNC_BYTE, self._scan - base, limit - base)
            if i < 0:
                self._scan = limit
                break
            start = base + i
            self._scan = start + 1
            minimum = MIN_SIZE_OF_SYNC[buf[i + 1]]
            if not minimum:
                continue
            size = buf[i + 2] << 8 | buf[i + 3]
            if not minimum <= size <= self.max_frame_size:
                continue
            if start + size > stream_end:
                heapq.heappush(candidates, (start + size, start))
                self._starts.append(start)
                continue
            frame = self._valid_frame(i, size)
            if frame is not None:
                return self._accept(start, frame, out)
        return False

    def _accept(self, start: int, frame: bytes, out: list[bytes]) -> bool:
        self.drops.discarded_bytes += start - self._pos
        out.append(frame)
        self._pos = start + len(frame)
        self.frames_out += 1
        self._in_sync = True
        self._forget_candidates()
        return True

    def _forget_candidates(self) -> None:
        self._candidates.clear()
        self._starts.clear()
        self._done_starts.clear()

    def _valid_frame(self, index: int, size: int) -> bytes | None:
        frame = bytes(self._buf[index:index + size])
        return frame if crc_ccitt(memoryview(frame)[:-2]) == (frame[-2] << 8 | frame[-1]) else None

    def _trim(self) -> None:
        if not self._in_sync:
            starts, done = self._starts, self._done_starts
            while starts and starts[0] in done:
                done.discard(starts.popleft())
            keep = min(self._scan, starts[0]) if starts else self._scan
            if keep > self._pos:
                self.drops.discarded_bytes += keep - self._pos
                self._pos = keep
        del self._buf[:self._pos - self._base]
        self._base = self._pos
