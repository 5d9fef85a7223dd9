"""Publisher encoding: types, alerts, timestamps, packing; and the subscriber's datagram intake."""

from __future__ import annotations

import pytest

from gridstat.client import AlertTooEarly, Publisher, Subscriber
from gridstat.core import clock, wire
from gridstat.core.model import FLOAT, INT, StatusVariable
from gridstat.errors import GridStatError, TypeMismatch, ValidationError

VAR = StatusVariable("pmu1", "freq", FLOAT, 10, variable_id=7)
COUNT = StatusVariable("pmu1", "count", INT, 20, variable_id=9)
ALERT = StatusVariable("pmu1", "trip", INT, 0, priority=0, alert=True, min_interval_ms=100, variable_id=8)


def test_type_mismatch_at_publish() -> None:
    h = Publisher("pmu1", 11, ("127.0.0.1", 9)).variable(COUNT)
    with pytest.raises(TypeMismatch):
        h.encode(1.5, 1000)
    with pytest.raises(TypeMismatch):
        h.encode(True, 1000)
    with pytest.raises(TypeMismatch):
        h.publish("x", 1000)  # checked before the socket is looked at


def test_encoded_event_carries_timestamp_id_and_options() -> None:
    h = Publisher("pmu1", 11, ("127.0.0.1", 9)).variable(VAR)
    data = h.encode(50.0, 1230, [wire.DerivedValue(1, 8, 49.9)])
    d = wire.decode_datagram(wire.encode_datagram(11, 1, [data]))
    (e,) = d.events
    assert (e.timestamp_ms, e.variable_id, e.flags) == (1230, 7, 0)
    assert wire.decode_value(FLOAT, e.value) == 50.0
    assert e.options == (wire.DerivedValue(1, 8, 49.9),)


def test_default_timestamp_is_aligned_to_the_interval() -> None:
    h = Publisher("pmu1", 11, ("127.0.0.1", 9)).variable(COUNT)
    before = clock.now_ms()
    ts = h.default_ts()
    assert ts % 20 == 0 and abs(ts - before) <= 20


def test_alerts_are_flagged_and_rate_limited() -> None:
    pub = Publisher("pmu1", 11, ("127.0.0.1", 9))
    h = pub.variable(ALERT)
    (e,) = wire.decode_datagram(wire.encode_datagram(11, 1, [h.encode(1, 1000)])).events
    assert e.is_alert
    with pytest.raises(AlertTooEarly) as info:
        h.encode(2, 1099)
    assert isinstance(info.value, GridStatError) and info.value.retriable
    assert info.value.reason == "AlertRateLimited"
    assert pub.stats.alerts_rejected == 1
    h.encode(3, 1100)


def test_variable_of_another_publisher_and_publish_before_start_are_rejected() -> None:
    pub = Publisher("pmu2", 12, ("127.0.0.1", 9))
    with pytest.raises(ValidationError):
        pub.variable(VAR)
    with pytest.raises(ValidationError):
        Publisher("pmu1", 11, ("127.0.0.1", 9)).variable(VAR).publish(1.0, 1000)


async def test_publish_many_packs_one_timestamp_in_one_datagram() -> None:
    import socket

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(2)
    try:
        async with Publisher("pmu1", 11, rx.getsockname()) as pub:
            f, c = pub.variable(VAR), pub.variable(COUNT)
            with pytest.raises(TypeMismatch):
                pub.publish_many([(f, 1.0), (c, 2.5)], 1000)
            assert pub.stats.datagrams == 0  # nothing sent when one value is wrong
            assert pub.publish_many([(f, 50.0), (c, 3)], 1000) == 1000
            f.publish(51.0, 1010)
            d1 = wire.decode_datagram(rx.recv(65536))
            d2 = wire.decode_datagram(rx.recv(65536))
        assert (d1.sender_id, d1.sequence, len(d1.events)) == (11, 1, 2)
        assert {e.timestamp_ms for e in d1.events} == {1000}
        assert (d2.sequence, d2.events[0].timestamp_ms) == (2, 1010)
        assert pub.stats.published == 3 and pub.stats.dropped == 0
        await pub.stop()  # idempotent
    finally:
        rx.close()


def test_subscriber_counts_bad_datagrams_and_unknown_variables() -> None:
    sub = Subscriber("s1", 21)
    s = sub.subscribe(VAR, interval_ms=10, latency_ms=1000)
    ok = wire.Event(1000, 7, wire.encode_value(FLOAT, 1.0))
    unknown = wire.Event(1000, 99, wire.encode_value(FLOAT, 1.0))
    sub.process(wire.encode_datagram(5, 1, [wire.encode_event(ok), wire.encode_event(unknown)]), 1001)
    sub.process(b"\x00" * 4, 1001)
    sub.process(b"XX" + b"\x00" * 30, 1001)
    sub.process(wire.encode_ping(wire.KIND_PING, 5, 1, 0), 1001)
    assert sub.stats.drops == {"unknown_variable": 1, "truncated": 1, "bad_magic": 1, "control": 1}
    assert s.value == 1.0
    with pytest.raises(GridStatError):
        sub.subscribe(VAR, interval_ms=10, latency_ms=5)
    s.unsubscribe()
    assert sub.subscriptions() == []


def test_subscriber_monitor_tick_bounds() -> None:
    sub = Subscriber("s1", 21)
    assert sub.tick_ms() == 50
    sub.subscribe(VAR, interval_ms=10, latency_ms=5)
    assert sub.tick_ms() == 2


async def test_run_periodic_publishes_distinct_aligned_instants_and_stops() -> None:
    import asyncio
    import socket

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(2)
    try:
        async with Publisher("pmu1", 11, rx.getsockname()) as pub:
            h = pub.variable(VAR)
            assert await asyncio.wait_for(pub.run_periodic(h, float, count=5), 2) == 5
            stamps = [wire.decode_datagram(rx.recv(65536)).events[0].timestamp_ms for _ in range(5)]
            assert all(t % 10 == 0 for t in stamps)
            assert stamps == sorted(set(stamps))
            task = asyncio.ensure_future(pub.run_periodic(h, float))
            await asyncio.sleep(0.03)
            await pub.stop()
            n = await asyncio.wait_for(task, 1)
            assert 1 <= n <= 10
    finally:
        rx.close()


async def test_a_multi_homed_publisher_sends_each_datagram_to_every_edge_signed_with_its_key() -> None:
    import socket

    from gridstat.client.publisher import EdgeLeg

    sinks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
    for s in sinks:
        s.bind(("127.0.0.1", 0))
        s.settimeout(2)
    ka, kb = b"a" * 32, b"b" * 32
    pub = Publisher("pmu1", 11, sinks[0].getsockname(), key=ka)
    await pub.start()
    pub.legs.append(EdgeLeg(session=None, address=sinks[1].getsockname(), key=kb))  # type: ignore[arg-type]
    try:
        pub.variable(VAR).publish(60.0, 1000)
        first, second = (s.recv(65536) for s in sinks)
        assert wire.verify_datagram(ka, first) and not wire.verify_datagram(kb, first)
        assert wire.verify_datagram(kb, second) and not wire.verify_datagram(ka, second)
        # the same datagram otherwise: sender id, sequence number and events
        assert first[:-wire.AUTH_TAG_LEN] == second[:-wire.AUTH_TAG_LEN]
        assert (pub.stats.published, pub.stats.datagrams, pub.stats.dropped) == (1, 1, 0)
    finally:
        pub.legs.clear()
        await pub.stop()
        for s in sinks:
            s.close()


def test_a_multi_homed_subscriber_checks_each_edge_routers_datagrams_with_that_routers_key() -> None:
    ka, kb = b"a" * 32, b"b" * 32
    sub = Subscriber("ems", 21, key=ka)
    sub._keys = {1: ka, 2: kb}
    got: list[int] = []
    sub.subscribe(VAR, interval_ms=10, latency_ms=1000, on_event=lambda s, holder: got.append(holder.timestamp_ms))

    def datagram(sender: int, seq: int, key: bytes, ts: int) -> bytes:
        body = wire.encode_datagram(sender, seq, [wire.encode_event(wire.Event(ts, 7, wire.encode_value(FLOAT, 1.0)))])
        return wire.sign_datagram(key, body)

    now = clock.now_ms()
    sub.process(datagram(1, 1, ka, now), now)  # edge router 1, its key
    sub.process(datagram(2, 1, kb, now), now)  # the same event from edge router 2: a duplicate
    sub.process(datagram(2, 2, kb, now + 10), now)  # a new one from edge router 2
    sub.process(datagram(2, 3, ka, now + 20), now)  # edge router 2 with router 1's key: forged
    sub.process(datagram(3, 1, ka, now + 30), now)  # a sender that is none of its edge routers
    sub.process(b"\x01\x02", now)  # too short to name a sender
    assert got == [now, now + 10]
    assert sub.stats.drops["auth_failed"] == 3
    assert sub.subscriptions()[0].stats.duplicates == 1


class _FakeSession:
    """An edge session that answers ``address`` (after ``delay_s``) or never (``None``)."""

    def __init__(self, control: str, address: tuple[str, int] | None, delay_s: float = 0.0) -> None:
        self.edge_control, self.address, self.delay_s = control, address, delay_s
        self.channel_keys: dict[tuple[str, str], bytes] = {}
        self.asked = 0

    async def register_publisher(self, name: str, first_time: bool = True, *, also: bool = False
                                 ) -> tuple[int, tuple[str, int]]:
        import asyncio

        self.asked += 1
        if self.address is None:
            await asyncio.Event().wait()  # a pod gone from its old address: no answer at all
        await asyncio.sleep(self.delay_s)
        assert self.address is not None
        return 11, self.address

    async def close(self) -> None:
        return None


async def test_refreshing_a_multi_homed_publisher_asks_every_edge_router_at_once_and_a_silent_one_delays_none() -> None:
    import time

    from gridstat.client.publisher import EdgeLeg

    pub = Publisher("pmu1", 11, ("10.0.0.1", 1))
    pub.session = _FakeSession("e1:7800", ("10.0.0.1", 1), delay_s=0.1)  # type: ignore[assignment]
    silent = _FakeSession("e1b:7800", None)
    moved = _FakeSession("e1c:7800", ("10.0.0.9", 3), delay_s=0.1)
    pub.legs = [EdgeLeg(silent, ("10.0.0.2", 2), None), EdgeLeg(moved, ("10.0.0.3", 3), None)]  # type: ignore[arg-type]
    started = time.monotonic()
    assert await pub.refresh_edge(timeout_s=0.3) is True
    assert time.monotonic() - started < 0.6  # one timeout, not one per edge router, nor gRPC's 20 s
    assert [leg.address for leg in pub.legs] == [("10.0.0.2", 2), ("10.0.0.9", 3)]  # the silent one kept its last
    assert list(pub.refresh_errors) == ["e1b:7800"] and "did not answer within 0.3 s" in pub.refresh_errors["e1b:7800"]
    # the first edge router silent: its failure is raised, the others are still followed
    pub.session = _FakeSession("e1:7800", None)  # type: ignore[assignment]
    moved.address = ("10.0.0.10", 3)
    with pytest.raises(GridStatError) as err:
        await pub.refresh_edge(timeout_s=0.2)
    assert err.value.reason == "Unavailable" and pub.legs[1].address == ("10.0.0.10", 3)
