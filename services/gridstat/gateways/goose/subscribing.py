"""The subscriber handler (sans-I/O): frames and a clock reading in, points to publish out.

Per stream -- a control block, keyed by (gocbRef, APPID) -- it keeps the newest (stNum, sqNum) taken
(IEC 61850-8-1 clause 18: stNum counts state changes, sqNum the retransmissions of one state):

* the same (stNum, sqNum) again is a ``duplicate`` (every frame appears twice on ``lo``, and twice
  on redundant PRP LANs): counted, dropped;
* a lower one is ``stale``, except after the stream's timeAllowedtoLive ran out or when a frame with
  sqNum 0 and a later ``t`` says the publisher restarted (stNum starts over);
* the same stNum with a higher sqNum is a retransmission: it refreshes the supervision only;
* a new stNum (or the stream's first frame) is a new state: every mapped member becomes a ``Point``
  with ``t`` as its timestamp and the member's quality in the DEVICE_TIME option.

``tick(now_s)`` counts streams whose timeAllowedtoLive passed without a frame (``ttl_expired``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gridstat.core import wire
from gridstat.gateways.goose.errors import DropReason, FrameError
from gridstat.gateways.goose.frames import GooseFrame, decode_frame
from gridstat.gateways.goose.mapping import GooseMap, PointSpec, SubscribedBlock
from gridstat.gateways.goose.stats import GooseStats
from gridstat.gateways.goose.values import BitString, UtcTime, Value

#: The DEVICE_TIME option's time base for GOOSE: microseconds (docs/goose.md, "Time and quality").
TIME_BASE_US = 1_000_000
#: stNum and sqNum are INT32U and roll over to 1 (IEC 61850-7-2, GSE control block).
ROLLOVER = 1 << 32


@dataclass(frozen=True, slots=True)
class Point:
    spec: PointSpec
    value: object
    ts_ms: int
    device_time: wire.DerivedValue


@dataclass
class _Stream:
    st_num: int
    sq_num: int
    t: UtcTime
    deadline_s: float
    expired: bool = False


def member(data: tuple[Value, ...], path: tuple[int, ...]) -> Value | None:
    """The member at ``path`` (allData index, then structure elements), or None."""
    node: Value | tuple[Value, ...] = data
    for i in path:
        if not isinstance(node, tuple | list) or i >= len(node):
            return None
        node = node[i]
    return node


def point_value(kind: str, value: Value | None) -> object:
    """The GridStat value of a member of ``kind``; None when the member is not of that kind."""
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if kind in ("integer", "unsigned"):
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if kind == "float":
        if isinstance(value, float):
            return value
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else None
    if kind == "bitstring":
        return value.value if isinstance(value, BitString) else None
    if kind == "utc_time":
        return value.ms if isinstance(value, UtcTime) else None
    return None


def distance(a: int, b: int) -> int:
    """Steps from stNum or sqNum ``b`` to ``a``, with the roll-over to 1 (0 is skipped)."""
    d = (a - b) % ROLLOVER
    return d - 1 if a < b else d


def newer(a: int, b: int) -> bool:
    """stNum or sqNum ``a`` comes after ``b`` (serial-number arithmetic, as RFC 1982)."""
    return 0 < distance(a, b) < ROLLOVER // 2


class SubscriberSession:
    """What to publish of each GOOSE frame of the mapped control blocks."""

    def __init__(self, goose_map: GooseMap, *, stats: GooseStats | None = None) -> None:
        self.map = goose_map
        self.stats = stats or GooseStats()
        self._by_ref: dict[tuple[str, int | None], SubscribedBlock] = {}
        self._by_app_id: dict[int, SubscribedBlock] = {}
        for block in goose_map.subscribe:
            if block.gocb_ref is not None:
                self._by_ref[(block.gocb_ref, block.app_id)] = block
            elif block.app_id is not None:
                self._by_app_id[block.app_id] = block
        self._streams: dict[tuple[str, int], _Stream] = {}

    def block_of(self, frame: GooseFrame) -> SubscribedBlock | None:
        return (self._by_ref.get((frame.gocb_ref, frame.app_id)) or self._by_ref.get((frame.gocb_ref, None))
                or self._by_app_id.get(frame.app_id))

    def receive(self, data: bytes | memoryview, now_s: float) -> list[Point]:
        """The points of a new state; ``[]`` for a retransmission or a counted drop. Never raises."""
        stats = self.stats
        stats.frames += 1
        try:
            frame = decode_frame(data)
        except FrameError as exc:
            stats.drops.add(exc.drop)
            return []
        except (ValueError, IndexError, OverflowError):  # a defect of the codec: still a counted drop
            stats.drops.add(DropReason.BAD_BER)
            return []
        return self.take(frame, now_s)

    def take(self, frame: GooseFrame, now_s: float) -> list[Point]:
        stats = self.stats
        block = self.block_of(frame)
        if block is None:
            stats.drops.add(DropReason.UNMAPPED)
            return []
        key = (frame.gocb_ref, frame.app_id)
        stream = self._streams.get(key)
        deadline_s = now_s + frame.time_allowed_to_live_ms / 1000
        if stream is not None and not stream.expired:
            if frame.st_num == stream.st_num:
                if frame.sq_num == stream.sq_num:
                    stats.drops.add(DropReason.DUPLICATE)
                    return []
                if not newer(frame.sq_num, stream.sq_num):
                    stats.drops.add(DropReason.STALE)
                    return []
                if distance(frame.sq_num, stream.sq_num) != 1:
                    stats.sq_num_gaps += 1
                stream.sq_num, stream.deadline_s = frame.sq_num, deadline_s
                stats.retransmissions += 1
                return []
            if not newer(frame.st_num, stream.st_num):
                if not (frame.sq_num == 0 and frame.t.ms > stream.t.ms):  # else: the publisher restarted
                    stats.drops.add(DropReason.STALE)
                    return []
            elif distance(frame.st_num, stream.st_num) != 1:
                stats.st_num_gaps += distance(frame.st_num, stream.st_num) - 1
            stats.state_changes += 1
        self._streams[key] = _Stream(frame.st_num, frame.sq_num, frame.t, deadline_s)
        stats.states += 1
        return self.points(block, frame)

    def points(self, block: SubscribedBlock, frame: GooseFrame) -> list[Point]:
        t = frame.t
        ts_ms = t.ms
        fracsec = (t.quality << 24) | t.microseconds
        data = frame.all_data
        out: list[Point] = []
        for spec in block.points:
            value = point_value(spec.kind, member(data, spec.path))
            if value is None:
                self.stats.drops.add(DropReason.BAD_MEMBER)
                continue
            quality = 0
            if spec.quality_path is not None:
                q = member(data, spec.quality_path)
                if isinstance(q, BitString):
                    quality = q.value & 0xFFFF
            out.append(Point(spec, value, ts_ms, wire.device_time(quality, fracsec, TIME_BASE_US)))
        return out

    def tick(self, now_s: float) -> int:
        """Count the streams whose timeAllowedtoLive ran out; how many expired now."""
        n = 0
        for stream in self._streams.values():
            if not stream.expired and now_s > stream.deadline_s:
                stream.expired = True
                n += 1
        self.stats.ttl_expired += n
        return n
