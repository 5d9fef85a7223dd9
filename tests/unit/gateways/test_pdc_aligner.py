"""The PDC server's frame aligner (docs/pdc-server.md, "Alignment"): complete frames at once and in
order, the wait window, missing samples as STAT bits and NaN, late samples sorted by arrival, time from
the device exactly, bounded memory. Time is passed in; nothing sleeps."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gridstat.core import wire
from gridstat.core.model import FLOAT
from gridstat.gateways.c37118 import ConfigFrame, DataFrame, FrameType, StreamDecoder
from gridstat.gateways.pdc.aligner import (
    STAT_SORTED_BY_ARRIVAL,
    AlignedFrame,
    DeviceTime,
    FrameAligner,
    mark_absent,
    merge_stat,
    merge_time_quality,
)
from gridstat.gateways.pdc.configs import ServedConfig, channel_of
from gridstat.gateways.pdc.stream import ServedStream

SOC = 1_700_000_000
BASE = 1_000_000
#: Two stations: slots 0 and 1 are station 0, slot 2 station 1.
STATIONS = (0, 0, 1)


def device(k: int, rate: int = 60, *, stat: int = 0, quality: int = 0) -> tuple[int, DeviceTime]:
    """(ts_ms, device time) of frame ``k`` of the second ``SOC`` of a device at ``rate`` frames/s."""
    count = k * BASE // rate
    return wire.device_timestamp_ms(SOC, count, BASE), DeviceTime(stat, quality << 24 | count, BASE)


def aligner(**kw: int) -> FrameAligner:
    args = {"frames_per_s": 60, "time_base": BASE, "wait_ms": 40, "max_open_frames": 8}
    args.update(kw)
    return FrameAligner(slot_stations=STATIONS, **args)


def feed(a: FrameAligner, k: int, slots: tuple[int, ...], now_ms: int, **kw: int) -> list[AlignedFrame]:
    ts, dt = device(k, **kw)
    out: list[AlignedFrame] = []
    for s in slots:
        out += a.add(s, float(10 * k + s), ts, dt, now_ms)
    return out


def test_a_complete_frame_goes_out_at_once_with_the_device_time_as_sent() -> None:
    a = aligner()
    ts, _ = device(7)
    assert feed(a, 7, (0, 1), ts + 2) == []
    [f] = feed(a, 7, (2,), ts + 3, quality=0x5)
    assert (f.soc, f.fracsec, f.time_quality, f.complete) == (SOC, 7 * BASE // 60, 0x5, True)
    assert f.values == (70.0, 71.0, 72.0) and f.stats == (0, 0)
    assert a.stats.frames_complete == 1 and a.open_frames == 0


def test_an_incomplete_frame_waits_for_its_window_then_marks_what_is_missing() -> None:
    a = aligner()
    ts, _ = device(3)
    assert feed(a, 3, (0, 2), ts + 1, stat=0x0040) == []
    deadline = a.next_deadline_ms()
    assert deadline is not None and deadline == -(-(SOC * 60 + 3) * 1000 // 60) + 40
    assert a.poll(deadline) == []
    [f] = a.poll(deadline + 1)
    assert not f.complete and f.values == (30.0, None, 32.0)
    # Station 0 lost slot 1: data error 10 (bits 15-14), its device STAT kept; station 1 is whole.
    assert f.stats == (0x8040, 0x0040)
    assert a.stats.frames_incomplete == 1 and a.stats.samples_missing == 1


def test_a_station_with_no_sample_at_all_is_data_invalid() -> None:
    a = aligner()
    ts, _ = device(1)
    feed(a, 1, (2,), ts)
    [f] = a.poll(ts + 100)
    assert f.stats == (0x8000, 0) and f.values == (None, None, 12.0)


def test_frames_go_out_in_instant_order_a_complete_one_waits_for_an_older_one() -> None:
    a = aligner()
    ts4, _ = device(4)
    feed(a, 4, (0, 1), ts4)
    assert feed(a, 5, (0, 1, 2), ts4 + 17) == []  # instant 5 is complete, instant 4 is not
    first, second = a.poll(ts4 + 100)
    assert (first.fracsec, first.complete, second.fracsec, second.complete) == (
        4 * BASE // 60, False, 5 * BASE // 60, True)
    ts6, _ = device(6)
    feed(a, 6, (0, 1), ts6)
    [done6, done7] = feed(a, 7, (0, 1, 2), ts6 + 17) + feed(a, 6, (2,), ts6 + 18)
    assert (done6.fracsec, done7.fracsec) == (6 * BASE // 60, 7 * BASE // 60)


def test_a_late_sample_goes_into_the_next_frame_sorted_by_arrival() -> None:
    a = aligner()
    ts, _ = device(10)
    feed(a, 10, (0, 2), ts)
    [f10] = a.poll(ts + 42)  # instant 10 is at ts + 2/3 ms: its window ends at ts + 41
    assert f10.values[1] is None
    feed(a, 11, (0, 2), ts + 43)
    assert feed(a, 10, (1,), ts + 44) == []  # after its window: late
    [f11] = a.poll(ts + 200)
    assert f11.values == (110.0, 101.0, 112.0)
    assert f11.stats[0] & STAT_SORTED_BY_ARRIVAL and not f11.stats[1] & STAT_SORTED_BY_ARRIVAL
    assert f11.stats[0] >> 14 == 0  # the late sample filled the slot: nothing is missing
    assert (a.stats.events_late, a.stats.late_sent, a.stats.late_dropped) == (1, 1, 0)


def test_a_late_sample_is_dropped_when_the_next_frame_has_its_own() -> None:
    a = aligner()
    ts, _ = device(20)
    feed(a, 20, (0, 2), ts)
    a.poll(ts + 42)
    feed(a, 21, (0, 2), ts + 43)
    feed(a, 20, (1,), ts + 44)
    [f21] = feed(a, 21, (1,), ts + 45)
    assert f21.values == (210.0, 211.0, 212.0) and f21.complete and f21.stats == (0, 0)
    assert (a.stats.events_late, a.stats.late_sent, a.stats.late_dropped) == (1, 0, 1)


def test_a_duplicate_copy_is_counted_and_ignored() -> None:
    a = aligner()
    feed(a, 2, (0,), device(2)[0])
    feed(a, 2, (0,), device(2)[0])
    assert a.stats.duplicates == 1 and a.open_frames == 1


def test_open_frames_are_bounded_the_oldest_goes_out_first() -> None:
    a = aligner(max_open_frames=4)
    ts, _ = device(0)
    sent = []
    for k in range(30):
        sent += feed(a, k, (0,), ts)
        assert a.open_frames <= 4
    assert [f.fracsec for f in sent] == [k * BASE // 60 for k in range(26)]
    assert a.stats.flushed == 26


def test_samples_off_the_grid_or_far_ahead_are_counted_not_kept() -> None:
    a = aligner(frames_per_s=20)
    ts, dt = device(1)  # frame 1 of 60/s lies a third of a 20/s frame off its grid
    assert a.add(0, 1.0, ts, dt, ts) == [] and a.stats.off_grid == 1
    ts3, dt3 = device(3)
    a.add(0, 1.0, ts3, dt3, ts3)
    assert a.open_frames == 1 and a.next_deadline_ms() == SOC * 1000 + 50 + 40
    assert a.add(0, 1.0, ts3 + 10_000, None, ts3) == [] and a.stats.too_early == 1


def test_served_every_third_frame_of_a_60_per_s_device_at_20_per_s() -> None:
    a = aligner(frames_per_s=20)
    out = []
    for k in range(0, 60, 3):
        out += feed(a, k, (0, 1, 2), device(k)[0])
    assert [f.fracsec for f in out] == [k * BASE // 60 for k in range(0, 60, 3)]
    assert all(f.complete for f in out)


def test_without_device_time_the_frame_time_is_the_served_grid_on_the_server_time_base() -> None:
    a = aligner(time_base=1_000_000)
    ts = SOC * 1000 + 16  # frame 1 at 60/s, floored to the millisecond
    out = [f for s in (0, 1, 2) for f in a.add(s, 1.0, ts, None, ts)]
    assert [(f.soc, f.fracsec, f.time_quality, f.stats) for f in out] == [(SOC, 16_667, 0, (0, 0))]


def test_a_device_of_another_time_base_is_converted_to_the_server_one() -> None:
    a = aligner(time_base=1_000_000)
    count = 2 * 600 // 60  # frame 2 at TIME_BASE 600
    ts = wire.device_timestamp_ms(SOC, count, 600)
    out = [f for s in (0, 1, 2) for f in a.add(s, 1.0, ts, DeviceTime(0, count, 600), ts)]
    assert out[0].fracsec == 33_333 and a.stats.time_base_converted == 3


def test_stat_words_merge_to_the_worse_and_absent_data_is_marked() -> None:
    assert merge_stat(0x0000, 0x2000) == 0x2000  # sync error of either
    assert merge_stat(0x4000, 0xC000) == 0xC000  # the worse data error
    assert merge_stat(0x0040, 0x0140) == 0x0140  # the worse time quality (bits 8-6)
    assert merge_stat(0x0003, 0x0805) == 0x0805  # the reason of the trigger
    assert mark_absent(0x0000) == 0x8000 and mark_absent(0xC000) == 0xC000 and mark_absent(0x4123) == 0x8123
    assert merge_time_quality(0x05, 0x1A) == 0x1A and merge_time_quality(0x25, 0x03) == 0x25


events = st.lists(st.tuples(st.integers(0, 2), st.integers(-5, 200), st.booleans(), st.integers(0, 400)),
                  max_size=200)


@settings(max_examples=150, deadline=None)
@given(events)
def test_any_arrival_order_never_raises_stays_bounded_and_sends_each_instant_at_most_once(
        evs: list[tuple[int, int, bool, int]]) -> None:
    a = aligner(max_open_frames=5)
    ts0, _ = device(0)
    now = ts0
    sent: list[AlignedFrame] = []
    for slot, k, with_device, dt_ms in evs:
        now += dt_ms // 40
        ts, dt = device(k % 60) if 0 <= k < 60 else (ts0 + k * 17, None)
        sent += a.add(slot, 1.0, ts, dt if with_device else None, now)
        assert a.open_frames <= 5 and len(a._carry) <= 3
        sent += a.poll(now + dt_ms)
    sent += a.flush()
    keys = [(f.soc, f.fracsec) for f in sent]
    assert keys == sorted(keys) and len(keys) == len(set(keys))
    s = a.stats
    assert s.frames_sent == len(sent) == s.frames_complete + s.frames_incomplete
    assert s.events_late == s.late_sent + s.late_dropped


def test_the_served_stream_packs_frames_a_decoder_reads_with_the_published_values() -> None:
    config = ServedConfig([channel_of("a/x", FLOAT, {}), channel_of("a/f", FLOAT, {"kind": "freq"}),
                           channel_of("b/y", FLOAT, {})], idcode=4, frames_per_s=60)
    stream = ServedStream(config, wait_ms=40)
    decoder = StreamDecoder()
    [cfg] = decoder.feed(stream.config_frames(FrameType.CFG2, SOC * 1000)[0])
    assert isinstance(cfg, ConfigFrame)
    ts, dt = device(9, stat=0x0000, quality=0x3)
    options = (wire.device_time(dt.stat, dt.fracsec_word, dt.time_base),)
    frames = stream.on_sample(0, 1.25, ts, options, ts + 1) + stream.on_sample(1, 59.96875, ts, options, ts + 1)
    assert frames == [] and stream.on_sample(2, "not a float", ts, (), ts + 1) == []
    [raw] = stream.poll(ts + 100)
    [frame] = decoder.feed(raw)
    assert isinstance(frame, DataFrame)
    assert (frame.soc, frame.fracsec, frame.time_quality.to_byte()) == (SOC, 9 * BASE // 60, 0x3)
    a, b = frame.pmus
    assert a.analogs == (1.25,) and a.freq == 59.96875 and math.isnan(a.dfreq) and a.stat.to_word() == 0
    assert math.isnan(b.analogs[0]) and b.stat.to_word() == 0x8000
    assert stream.drops["bad_value"] == 1
