"""The publisher handler on a fake clock: stNum + 1 and sqNum 0 on a change, then sqNum + 1 at
min_time, doubling up to max_time (the heartbeat); deadlines that do not drift; roll-over; frames
that decode with the state's values and t."""

from __future__ import annotations

import pytest

from gridstat.gateways.goose import Retransmitter, decode_frame, parse_map
from gridstat.gateways.goose.retransmission import next_number
from gridstat.gateways.goose.values import BitString, UtcTime

MAP = parse_map({"publish": [{"gocbRef": "GSTAT/LLN0$GO$gcb1", "datSet": "GSTAT/LLN0$ds1", "appID": 0x3001,
                              "min_time_ms": 4, "max_time_ms": 64, "members": [
                                  {"variable": "bay1/trip", "kind": "boolean"},
                                  {"variable": "bay1/pos", "kind": "bitstring", "bits": 2},
                                  {"variable": "bay1/amps", "kind": "float"}]}]})


def _times(r: Retransmitter, until_s: float, step_s: float = 0.0005) -> list[tuple[float, int, int]]:
    out = []
    now = 0.0
    while now <= until_s:
        for f in r.due(now):
            d = decode_frame(f)
            out.append((round(now, 4), d.st_num, d.sq_num))
        now += step_s
    return out


def test_the_curve_doubles_from_min_time_to_max_time() -> None:
    r = Retransmitter(MAP.publish[0])
    first = decode_frame(r.change({0: True, 1: BitString(2, 2)}, 1_800_000_000_123, 0.0))
    assert (first.st_num, first.sq_num, first.t) == (1, 0, UtcTime.from_ms(1_800_000_000_123))
    assert first.all_data == (True, BitString(2, 2), 0.0) and first.time_allowed_to_live_ms == 128
    sent = _times(r, 0.3)
    # 4, 8, 16, 32 ms after one another, then the 64 ms heartbeat
    assert [t for t, _, _ in sent] == [0.004, 0.012, 0.028, 0.06, 0.124, 0.188, 0.252]
    assert [sq for _, _, sq in sent] == [1, 2, 3, 4, 5, 6, 7]
    assert {st for _, st, _ in sent} == {1}


def test_a_change_starts_the_curve_over_with_the_next_st_num() -> None:
    r = Retransmitter(MAP.publish[0])
    r.change({}, 1000, 0.0)
    r.due(1.0)
    f = decode_frame(r.change({2: 7.5}, 2000, 1.0))
    assert (f.st_num, f.sq_num, f.all_data[2]) == (2, 0, 7.5)
    assert r.next_due_s == pytest.approx(1.004)


def test_a_late_tick_does_not_stretch_the_curve() -> None:
    r = Retransmitter(MAP.publish[0])
    r.change({}, 1000, 0.0)
    frames = r.due(0.0125)  # woke late: the 4 ms and 12 ms retransmissions are both due
    assert [decode_frame(f).sq_num for f in frames] == [1, 2]
    assert r.next_due_s == pytest.approx(0.028)


def test_numbers_roll_over_to_one() -> None:
    assert next_number(2**32 - 1) == 1 and next_number(5) == 6
    r = Retransmitter(MAP.publish[0])
    r.st_num = 2**32 - 1
    assert decode_frame(r.change({}, 1000, 0.0)).st_num == 1


def test_no_frames_before_the_first_state() -> None:
    assert Retransmitter(MAP.publish[0]).due(100.0) == []
