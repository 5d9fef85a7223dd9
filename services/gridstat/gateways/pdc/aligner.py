"""Events into data frames on the time grid of the served rate, sans I/O (docs/pdc-server.md, "Alignment").

A data frame carries one instant of every PMU block (C37.118.2-2011 6.3). Events arrive one variable at a
time, each stamped with its device's instant, so the aligner groups them by *frame instant*: the point
``SOC + j / frames_per_s`` of the served grid nearest the event's time (its device time when the event
carries DEVICE_TIME, else its ``ts_ms``). An instant's frame is sent

* as soon as every slot (served variable) of it has arrived, or
* when its wait window expires: ``now_ms`` past the instant plus ``wait_ms``, as a PDC's wait time.

Frames go out in instant order: a complete frame waits for an older one still open. What did not arrive
is absent: NaN in a float field (6.3.1), and its station's STAT says data invalid (bits 15-14 = 10,
"absent data inserted by a PDC"). A sample that comes after its instant's window -- its frame sent or
its window over -- is *late*: it goes into the next frame sent, by arrival, in the slot its own sample
left empty, and its station's STAT sets bit 12 ("data sorted by arrival"); if that frame has its own
sample, the late one is dropped. STAT words of a station's samples (from DEVICE_TIME) are merged.

Memory is bounded: at most ``max_open_frames`` instants are open (opening one more sends the oldest as
it is), one late sample per slot waits, and an instant more than ``max_lead_ms`` ahead of ``now_ms`` is
refused. The caller passes ``now_ms`` to every call; nothing here reads a clock or logs.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from gridstat.errors import ValidationError
from gridstat.gateways.pdc.configs import Value

#: STAT bits (6.3, Table 6): data error (15-14), sorted by arrival (12).
STAT_DATA_ERROR_SHIFT = 14
STAT_SORTED_BY_ARRIVAL = 0x1000
#: Data error 10: "PMU in test mode or absent data tags have been inserted (do not use values)".
DATA_ABSENT = 2
_FLAG_BITS = 0x3E00  # bits 13-9: sync error, sorting, trigger, configuration change, data modified
_COUNT_MASK = 0xFF_FFFF


def merge_stat(a: int, b: int) -> int:
    """One STAT word for a block made of samples with words ``a`` and ``b`` (6.3, Table 6): the worse
    data error, time quality and unlocked time, every flag of either, the trigger reason of a trigger."""
    error = max(a >> 14, b >> 14)
    quality = max((a >> 6) & 7, (b >> 6) & 7)
    unlocked = max((a >> 4) & 3, (b >> 4) & 3)
    reason = b & 0xF if b & 0x0800 and not a & 0x0800 else a & 0xF
    return error << 14 | (a | b) & _FLAG_BITS | quality << 6 | unlocked << 4 | reason


def merge_time_quality(a: int, b: int) -> int:
    """FRACSEC's time quality byte of two samples (6.2.2, Table 3): the worse message time quality
    (Table 4, higher is worse), the leap-second bits of either."""
    return max(a & 0x0F, b & 0x0F) | (a | b) & 0x70


def mark_absent(stat: int) -> int:
    """``stat`` with data error at least 10 (6.3, Table 6): values of the block are not to be used."""
    return (stat & 0x3FFF) | max(stat >> STAT_DATA_ERROR_SHIFT, DATA_ABSENT) << STAT_DATA_ERROR_SHIFT


@dataclass(frozen=True, slots=True)
class DeviceTime:
    """The device's own time of a sample (the DEVICE_TIME option; docs/wire-format.md 3.5)."""

    #: The device's STAT word.
    stat: int
    #: The 32-bit FRACSEC field: time quality byte and 24-bit count.
    fracsec_word: int
    #: The device's TIME_BASE.
    time_base: int


@dataclass(frozen=True, slots=True)
class AlignedFrame:
    """One instant, ready to pack: its time, one value per slot (None: absent), one STAT per station."""

    soc: int
    #: The 24-bit FRACSEC count on the aligner's TIME_BASE.
    fracsec: int
    #: FRACSEC's high byte (6.2.2, Table 3).
    time_quality: int
    values: tuple[Value | None, ...]
    stats: tuple[int, ...]
    #: Every slot had its own sample.
    complete: bool


@dataclass
class AlignerStats:
    """Counts since the start (docs/pdc-server.md, "Counters")."""

    events: int = 0
    frames_sent: int = 0
    frames_complete: int = 0
    frames_incomplete: int = 0
    #: Slots sent absent (NaN), over all frames.
    samples_missing: int = 0
    #: Samples that came after their instant's window.
    events_late: int = 0
    #: Late samples sent in a later frame, sorted by arrival; the others were dropped.
    late_sent: int = 0
    late_dropped: int = 0
    #: Samples of an instant and slot that already had one (a redundant copy).
    duplicates: int = 0
    #: Samples whose time is not on the served grid (more than a quarter frame off), or too far ahead.
    off_grid: int = 0
    too_early: int = 0
    #: Frames sent before their window because ``max_open_frames`` instants were open.
    flushed: int = 0
    #: Device FRACSEC counts converted to the server's TIME_BASE (a device of another TIME_BASE).
    time_base_converted: int = 0
    drops: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in vars(self).items() if isinstance(v, int)}


class _Open:
    """One open instant: its samples by slot and the merged STAT of each station's samples."""

    __slots__ = ("deadline_ms", "device", "filled", "fracsec", "quality", "soc", "stats", "values")

    def __init__(self, soc: int, fracsec: int, quality: int, slots: int, stations: int, deadline_ms: int) -> None:
        self.soc = soc
        self.fracsec = fracsec
        self.quality = quality
        self.device = False
        self.values: list[Value | None] = [None] * slots
        self.stats: list[int | None] = [None] * stations
        self.filled = 0
        self.deadline_ms = deadline_ms


class FrameAligner:
    """Samples by slot in, ``AlignedFrame`` out, in instant order (module docstring)."""

    def __init__(self, *, slot_stations: Sequence[int], frames_per_s: int, time_base: int, wait_ms: int,
                 max_open_frames: int = 64, max_lead_ms: int = 2_000) -> None:
        if not slot_stations:
            raise ValidationError("an aligner needs at least one slot", field="slot_stations")
        if frames_per_s < 1:
            raise ValidationError(f"frames_per_s must be positive, not {frames_per_s}", field="frames_per_s")
        if not 1 <= time_base <= _COUNT_MASK:
            raise ValidationError(f"time_base {time_base} is not in 1..16777215", field="time_base")
        if wait_ms < 0:
            raise ValidationError(f"wait_ms must not be negative, not {wait_ms}", field="wait_ms")
        if max_open_frames < 1:
            raise ValidationError(f"max_open_frames must be positive, not {max_open_frames}", field="max_open_frames")
        self.slot_stations = tuple(slot_stations)
        self.station_count = max(self.slot_stations) + 1
        self.frames_per_s = frames_per_s
        self.time_base = time_base
        self.wait_ms = wait_ms
        self.max_open_frames = max_open_frames
        self.max_lead_ms = max_lead_ms
        self.stats = AlignerStats()
        self._open: dict[int, _Open] = {}
        self._order: list[int] = []  # open instants' keys, ascending
        #: Late samples waiting for the next frame: slot -> (instant key, value, STAT).
        self._carry: dict[int, tuple[int, Value, int]] = {}
        self._last_key: int | None = None

    # -- time ---------------------------------------------------------------------------------------
    def _deadline_ms(self, key: int) -> int:
        """The end of the wait window of instant ``key`` (``SOC * R + j``), in ms, rounded up."""
        return -((-key * 1000) // self.frames_per_s) + self.wait_ms

    def _instant(self, ts_ms: int, device: DeviceTime | None) -> tuple[int, int, int, int] | None:
        """(key, SOC, FRACSEC count, time quality byte) of a sample; None when it is off the grid."""
        rate = self.frames_per_s
        soc = ts_ms // 1000
        if device is not None:
            count = device.fracsec_word & _COUNT_MASK
            base = device.time_base
            j = (2 * count * rate + base) // (2 * base)
            if 4 * abs(count * rate - j * base) > base:
                return None
            if base != self.time_base:
                count = min((count * self.time_base + base // 2) // base, _COUNT_MASK)
                self.stats.time_base_converted += 1
            return soc * rate + j, soc, count, (device.fracsec_word >> 24) & 0x7F
        ms = ts_ms - soc * 1000
        j = (2 * ms * rate + 1000) // 2000
        if 4 * abs(ms * rate - j * 1000) > 1000:
            return None
        key = soc * rate + j
        ksoc, kj = divmod(key, rate)
        return key, ksoc, (2 * kj * self.time_base + rate) // (2 * rate), 0

    # -- input --------------------------------------------------------------------------------------
    def add(self, slot: int, value: Value, ts_ms: int, device: DeviceTime | None, now_ms: int) -> list[AlignedFrame]:
        """One sample of ``slot``; the frames it (or the time, ``now_ms``) completes, in order."""
        stats = self.stats
        stats.events += 1
        out = self._drain(now_ms)
        if not 0 <= slot < len(self.slot_stations):
            stats.drops["bad_slot"] = stats.drops.get("bad_slot", 0) + 1
            return out
        inst = self._instant(ts_ms, device)
        if inst is None:
            stats.off_grid += 1
            return out
        key, soc, count, quality = inst
        stat = device.stat & 0xFFFF if device is not None else 0
        if key * 1000 // self.frames_per_s > now_ms + self.max_lead_ms:
            stats.too_early += 1
            return out
        fr = self._open.get(key)
        if fr is None:
            if (self._last_key is not None and key <= self._last_key) or now_ms > self._deadline_ms(key):
                self._late(slot, key, value, stat)
                return out
            if len(self._order) >= self.max_open_frames:
                if key < self._order[0]:
                    self._late(slot, key, value, stat)
                    return out
                stats.flushed += 1
                out.append(self._emit(self._order[0]))
            fr = _Open(soc, count, quality, len(self.slot_stations), self.station_count, self._deadline_ms(key))
            self._open[key] = fr
            bisect.insort(self._order, key)
        if fr.values[slot] is not None:
            stats.duplicates += 1
            return out
        fr.values[slot] = value
        fr.filled += 1
        station = self.slot_stations[slot]
        old = fr.stats[station]
        fr.stats[station] = stat if old is None else merge_stat(old, stat)
        if device is not None:
            if not fr.device:  # the frame's time is the device's, as it sent it
                fr.soc, fr.fracsec, fr.quality, fr.device = soc, count, quality, True
            else:
                fr.quality = merge_time_quality(fr.quality, quality)
        if fr.filled == len(fr.values):
            out.extend(self._drain(now_ms))
        return out

    def poll(self, now_ms: int) -> list[AlignedFrame]:
        """The frames whose wait window has passed by ``now_ms`` (and complete ones behind them)."""
        return self._drain(now_ms)

    def flush(self) -> list[AlignedFrame]:
        """Every open frame, as it is (at shutdown); late samples with no frame left are dropped."""
        out = [self._emit(self._order[0]) for _ in range(len(self._order))]
        self.stats.late_dropped += len(self._carry)
        self._carry.clear()
        return out

    def next_deadline_ms(self) -> int | None:
        """When the oldest open frame's window ends (None: no frame open)."""
        return self._open[self._order[0]].deadline_ms if self._order else None

    @property
    def open_frames(self) -> int:
        return len(self._order)

    # -- output -------------------------------------------------------------------------------------
    def _late(self, slot: int, key: int, value: Value, stat: int) -> None:
        self.stats.events_late += 1
        held = self._carry.get(slot)
        if held is not None:
            if held[0] >= key:  # a newer late sample of this slot already waits
                self.stats.late_dropped += 1
                return
            self.stats.late_dropped += 1
        self._carry[slot] = (key, value, stat)

    def _drain(self, now_ms: int) -> list[AlignedFrame]:
        out: list[AlignedFrame] = []
        order = self._order
        while order:
            head = self._open[order[0]]
            if head.filled < len(head.values) and now_ms <= head.deadline_ms:
                break
            out.append(self._emit(order[0]))
        return out

    def _emit(self, key: int) -> AlignedFrame:
        fr = self._open.pop(key)
        del self._order[0]
        self._last_key = key
        stats = self.stats
        values = fr.values
        complete = fr.filled == len(values)
        station_stats = fr.stats
        if self._carry:
            for slot, (held_key, value, stat) in self._carry.items():
                if values[slot] is None and key - held_key <= self.max_open_frames:
                    values[slot] = value
                    station = self.slot_stations[slot]
                    old = station_stats[station]
                    station_stats[station] = (stat if old is None else merge_stat(old, stat)) | STAT_SORTED_BY_ARRIVAL
                    stats.late_sent += 1
                else:
                    stats.late_dropped += 1
            self._carry.clear()
        words = [0 if s is None else s for s in station_stats]
        if not complete:
            for slot, v in enumerate(values):
                if v is None:
                    station = self.slot_stations[slot]
                    words[station] = mark_absent(words[station])
                    stats.samples_missing += 1
            stats.frames_incomplete += 1
        else:
            stats.frames_complete += 1
        stats.frames_sent += 1
        return AlignedFrame(fr.soc, fr.fracsec, fr.quality, tuple(values), tuple(words), complete)
