"""The subscriber handler: each frame taken once although lo delivers it twice, stNum and sqNum
(new states, retransmissions, stale and restarted publishers, roll-over), points with t and quality
in DEVICE_TIME, unmapped control blocks, and timeAllowedtoLive on a fake clock."""

from __future__ import annotations

import goose_samples as s

from gridstat.core import wire
from gridstat.gateways.goose import SubscriberSession, parse_map
from gridstat.gateways.goose.subscribing import TIME_BASE_US, newer
from gridstat.gateways.goose.values import BitString, UtcTime


def _session() -> SubscriberSession:
    return SubscriberSession(s.GOOSE_MAP)


def test_first_state_publishes_every_member_with_t_and_quality() -> None:
    session = _session()
    points = session.receive(s.frame(t_ms=1_800_000_000_250, all_data=s.data(q=0x0800 >> 3)), 0.0)
    by_name = {p.spec.full_name: p for p in points}
    assert {n: p.value for n, p in by_name.items()} == {
        "bay1/breaker_closed": True, "bay1/current": 12.5, "bay1/position": 2, "bay1/trip_time": 1_700_000_000_123,
        "bay1/count": -7}
    assert {p.ts_ms for p in points} == {1_800_000_000_250}
    stat, fracsec, base = wire.read_device_time([by_name["bay1/breaker_closed"].device_time]) or (0, 0, 0)
    assert (stat, base) == (0x0100, TIME_BASE_US)  # the q member's 13 bits
    assert fracsec >> 24 == 0x0A and (fracsec & 0xFFFFFF) // 1000 == 250  # TimeQuality, microseconds
    assert wire.read_device_time([by_name["bay1/current"].device_time])[0] == 0  # type: ignore[index]
    assert session.stats.states == 1 and session.stats.drops.total == 0


def test_each_frame_once_although_lo_delivers_it_twice() -> None:
    session = _session()
    taken = []
    for st_num, sq_num in [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]:
        raw = s.frame(st_num, sq_num, t_ms=1_800_000_000_000 + st_num)
        taken.append(session.receive(raw, 0.0))
        assert session.receive(raw, 0.0) == []  # the second copy
    assert [bool(x) for x in taken] == [True, False, False, True, False]
    st_ = session.stats
    assert (st_.frames, st_.states, st_.state_changes, st_.retransmissions) == (10, 2, 1, 3)
    assert st_.drops.as_dict() == {"duplicate": 5}


def test_stale_gaps_and_a_restarted_publisher() -> None:
    session = _session()
    session.receive(s.frame(5, 0, t_ms=1000), 0.0)
    session.receive(s.frame(5, 3, t_ms=1000), 0.0)  # sqNum 1 and 2 missed
    assert session.receive(s.frame(5, 2, t_ms=1000), 0.0) == []  # older retransmission
    assert session.receive(s.frame(4, 9, t_ms=900), 0.0) == []  # older state
    assert session.receive(s.frame(8, 0, t_ms=2000), 0.0)  # stNum 6 and 7 missed
    st_ = session.stats
    assert (st_.sq_num_gaps, st_.st_num_gaps, st_.drops.as_dict()) == (1, 2, {"stale": 2})
    assert session.receive(s.frame(1, 0, t_ms=3000), 0.0)  # restarted: stNum 1, sqNum 0, a later t
    assert st_.state_changes == 2


def test_roll_over_of_st_num_and_sq_num() -> None:
    assert newer(1, 2**32 - 1) and not newer(2**32 - 1, 1) and newer(3, 2)
    session = _session()
    session.receive(s.frame(2**32 - 1, 0, t_ms=1000), 0.0)
    assert session.receive(s.frame(1, 0, t_ms=900), 0.0)  # stNum rolls over to 1
    assert session.stats.st_num_gaps == 0


def test_time_allowed_to_live_on_a_fake_clock() -> None:
    session = _session()
    session.receive(s.frame(1, 0, ttl_ms=100), 10.0)
    assert session.tick(10.09) == 0
    session.receive(s.frame(1, 1, ttl_ms=100), 10.09)  # a retransmission renews it
    assert session.tick(10.15) == 0
    assert session.tick(10.2) == 1 and session.tick(11.0) == 0
    assert session.stats.ttl_expired == 1
    assert session.receive(s.frame(1, 1, ttl_ms=100), 12.0)  # after expiry the stream starts over


def test_unmapped_blocks_and_members_of_another_kind_are_counted() -> None:
    session = _session()
    assert session.receive(s.frame(gocb="OTHER/LLN0$GO$x"), 0.0) == []
    points = session.receive(s.frame(all_data=("not a bool", BitString(0, 13), 1.0, (BitString(0, 2),),
                                               UtcTime(0, 0), 3)), 0.0)
    assert [p.spec.full_name for p in points] == ["bay1/current", "bay1/position", "bay1/trip_time", "bay1/count"]
    assert session.stats.drops.as_dict() == {"unmapped": 1, "bad_member": 1}


def test_app_id_only_blocks() -> None:
    m = parse_map({"subscribe": [{"appID": 0x3001, "members": [{"index": 0, "variable": "a/b", "kind": "boolean"}]}]})
    session = SubscriberSession(m)
    assert [p.value for p in session.receive(s.frame(app_id=0x3001, gocb="X/LLN0$GO$g"), 0.0)] == [True]
    assert session.receive(s.frame(app_id=0x3002), 0.0) == []


def test_garbage_is_a_counted_drop() -> None:
    session = _session()
    for junk in (b"", b"\x00" * 13, s.frame()[:30], s.frame()[:-3]):
        assert session.receive(junk, 0.0) == []
    assert session.stats.drops.total == 4 and session.stats.frames == 4
