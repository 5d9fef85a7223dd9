"""Link overload on a shaped channel: token bucket, value-ordered queue, modified RED (HAPS IV-B)."""

from __future__ import annotations

from collections import Counter

import pytest

from gridstat.core import wire
from gridstat.errors import ValidationError
from gridstat.router.channels import ChannelKind, EventChannel
from gridstat.router.forwarding import Forwarder
from gridstat.router.shaping import (
    GUARANTEED,
    DropPolicy,
    Shaper,
    ShapingConfig,
    ValuedTarget,
    red_probability,
)
from gridstat.router.tables import Route, RoutingTable, Target, Variant

T0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Sent:
    def __init__(self) -> None:
        self.datagrams: list[bytes] = []

    def __call__(self, data: bytes, address: tuple[str, int]) -> None:
        self.datagrams.append(data)

    def events(self) -> list[wire.Event]:
        return [e for d in self.datagrams for e in wire.decode_datagram(d).events]


def ev(vid: int, ts: int = T0) -> bytes:
    return wire.encode_event(wire.Event(ts, vid, (vid).to_bytes(8, "big")))


def channel(bps: float, policy: DropPolicy = DropPolicy.RED, *, start: float = 500, all_: float = 1000,
            clock: Clock | None = None, rng: float = 0.0) -> tuple[EventChannel, Shaper]:
    ch = EventChannel(name="out", peer_id=9, kind=ChannelKind.ROUTER, address=("127.0.0.1", 9), sender_id=1)
    ch.shape(ShapingConfig(bps, policy, start, all_))
    assert ch.shaper is not None
    sh = ch.shaper
    if clock is not None:
        sh.clock = clock
        sh.refilled = clock()
    sh.rng = lambda: rng
    return ch, sh


def test_red_curve() -> None:
    assert red_probability(0.4, 0.5, 1.0) == 0
    assert red_probability(0.75, 0.5, 1.0) == pytest.approx(0.5)
    assert red_probability(1.0, 0.5, 1.0) == 1
    assert red_probability(3.0, 0.5, 0.5) == 1


def test_config_is_validated() -> None:
    for bad in (dict(bandwidth_bps=0), dict(bandwidth_bps=float("nan")), dict(bandwidth_bps=1e3, drop_start_ms=9,
                                                                                drop_all_ms=5)):
        with pytest.raises(ValidationError):
            ShapingConfig(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        DropPolicy.parse("fifo")


def test_token_bucket_paces_the_channel() -> None:
    clock = Clock()
    ch, sh = channel(8_000, DropPolicy.NONE, clock=clock)  # 1000 bytes/s, datagrams up to 1000 bytes
    sent = Sent()
    for i in range(100):
        sh.enqueue(ev(i + 1), 1.0, 1.0, 1)
    assert ch.flush(sent)
    first = len(sent.events())
    assert 0 < first < 100  # the full bucket passed one burst, the rest waits
    assert sh.wake_s is not None and sh.wake_s > 0
    clock.t += 0.5  # half the tokens a full datagram needs: nothing goes
    ch.flush(sent)
    assert len(sent.events()) == first
    clock.t += 0.6  # 1100 bytes of tokens in all: one more full datagram
    ch.flush(sent)
    second = len(sent.events()) - first
    wire_bytes = sum(len(d) + 28 for d in sent.datagrams)
    assert 30 <= second <= 45
    assert wire_bytes <= sh.burst + 1100 + 1  # never more than the bucket allowed
    clock.t += 100
    ch.flush(sent)
    assert len(sent.events()) == 100 and sh.wake_s is None and sh.live == 0


def test_lowest_value_is_dropped_first_oldest_among_equals() -> None:
    ch, sh = channel(1_000, DropPolicy.VALUE, start=0, all_=2000)  # 125 bytes/s: ~4 events fill 2 s
    values = [5.0, 1.0, 9.0, 1.0, 7.0, 3.0, 8.0, 2.0]
    for i, v in enumerate(values):
        sh.enqueue(ev(i + 1), v, v, 1)
    kept = sorted(it[4] for q in sh.fifo for it in q if it[2] is not None)
    assert kept == sorted(values)[-len(kept):]  # the survivors are the most valuable
    assert sh.delay_s() <= 2.0
    assert ch.stats.drops["link_overload"] == len(values) - len(kept)
    # Of the two 1.0 events the older (vid 2) went first.
    assert sh.dropped_vars[2] == 1


def test_guaranteed_events_are_never_shed_before_best_effort() -> None:
    _ch, sh = channel(1_000, DropPolicy.VALUE, start=0, all_=1000)
    for i in range(3):
        sh.enqueue(ev(100 + i), GUARANTEED + 0.01, 0.01, 1)  # cheap but guaranteed
    for i in range(20):
        sh.enqueue(ev(i + 1), 1000.0, 1000.0, 1)  # valuable but best effort
    live = [it for q in sh.fifo for it in q if it[2] is not None]
    assert sum(1 for it in live if it[0] >= GUARANTEED) == 3


def test_red_keeps_the_expected_delay_at_most_drop_all() -> None:
    for rng in (0.0, 0.99):
        ch, sh = channel(8_000, DropPolicy.RED, start=200, all_=500, rng=rng)
        for i in range(2000):
            sh.enqueue(ev(i % 50 + 1), float(i % 7), float(i % 7), 1)
            assert sh.delay_s() <= 0.5 + 0.05
        assert ch.stats.drops["link_overload"] > 1000


def test_tail_drop_sheds_the_arrival_whatever_its_value() -> None:
    _ch, sh = channel(1_000, DropPolicy.TAIL, start=0, all_=1000)
    for i in range(10):
        sh.enqueue(ev(i + 1), 1.0, 1.0, 1)
    sh.enqueue(ev(99), 1e6, 1e6, 1)
    assert sh.dropped_vars[99] == 1  # the most valuable arrival went: FIFO tail drop is blind


def test_no_shedding_lets_the_queue_grow() -> None:
    ch, sh = channel(1_000, DropPolicy.NONE)
    for _i in range(500):
        sh.enqueue(ev(1), 1.0, 1.0, 1)
    assert sh.live == 500 and sh.delay_s() > 60 and not ch.stats.drops


def test_gain_and_charging_of_sent_events() -> None:
    clock = Clock()
    ch, sh = channel(1_000, DropPolicy.VALUE, start=0, all_=1000, clock=clock)
    sh.total_price = 10.0
    ch.capacity = 100  # Q_size
    sh.enqueue(ev(1), 6.0, 6.0, 1)
    for _i in range(10):
        sh.enqueue(ev(2), 1.0, 1.0, 1)  # these get shed: each drop is a G_l2 update for vid 1
    drops = sh.drops_total
    assert drops > 0
    clock.t += 1000
    ch.flush(Sent())
    g = 1 - (1 - 6.0 / 10.0 / 100) ** drops
    assert sh.revenue >= 6.0 * g - 1e-12
    assert sh.delivered_value >= 6.0


def test_unshaped_channel_keeps_plain_queues_and_shaping_moves_them() -> None:
    ch = EventChannel(name="out", peer_id=9, kind=ChannelKind.ROUTER, address=("127.0.0.1", 9), sender_id=1)
    q = ch.queue(1)
    assert q.valued(5.0, True) is q  # unshaped: the compiled entry pushes to the plain list
    q.push(ev(1))
    ch.shape(ShapingConfig(1e6))
    assert ch.shaper is not None and ch.shaper.live == 1 and not q.events
    target = q.valued(5.0, False)
    assert isinstance(target, ValuedTarget) and target.key == 5.0
    target.push(ev(2))
    target.filtered += 1
    assert q.filtered == 1 and ch.pending() == 2
    assert ch.unshape() and ch.shaper is None and len(q.events) == 2


def _forwarder(prices: dict[str, list[tuple[float, bool]]]) -> tuple[Forwarder, dict[str, EventChannel]]:
    chans = {n: EventChannel(name=n, peer_id=10 + i, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", 9),
                             sender_id=1) for i, n in enumerate(prices)}

    def resolve(name: str, priority: int) -> Target:
        return chans[name].queue(priority)

    table = RoutingTable(Variant.CLOSE, resolve)
    for name, routes in prices.items():
        for j, (price, be) in enumerate(routes):
            table.install(Route(f"{name}-{j}", 7, 0, name, 20 * (j + 1), 1, price=price, best_effort=be),
                          pub_interval_ms=20)
    fw = Forwarder(table, future_tolerance_ms=10**12)
    fw.by_sender[5] = EventChannel(name="pub", peer_id=5, kind=ChannelKind.PUBLISHER, address=None, sender_id=1)
    return fw, chans


def test_compiled_value_is_the_price_sum_of_the_entrys_routes_on_the_channel() -> None:
    fw, chans = _forwarder({"a": [(2.0, False), (3.0, True)], "b": [(0.5, True)]})
    for ch in chans.values():
        ch.shape(ShapingConfig(1e9))
    fw.table.recompile_all()
    entry = fw.table.entry(7)
    assert entry is not None
    keys = {t.channel.name: (t.value, t.key) for t in entry.sparse_targets}  # type: ignore[attr-defined]
    assert keys == {"a": (5.0, GUARANTEED + 5.0), "b": (0.5, 0.5)}
    fw.process(wire.encode_datagram(5, 1, [ev(7, T0)]), T0)
    queued = {n: [it[4] for q in ch.shaper.fifo for it in q] for n, ch in chans.items()}  # type: ignore[union-attr]
    assert queued == {"a": [5.0], "b": [0.5]}


def test_counters_of_a_shaped_channel() -> None:
    ch, sh = channel(1_000, DropPolicy.VALUE, start=0, all_=500)
    for _ in range(50):
        sh.enqueue(ev(3), 1.0, 1.0, 1)
    assert sh.take_dropped() == [(3, ch.stats.drops["link_overload"])]
    assert sh.take_dropped() == []
    live = sh.live
    assert ch.drop_pending(wire.DropReason.LINK_DOWN) == live and ch.stats.drops["link_down"] == live
    assert isinstance(ch.stats.drops, Counter) and ch.pending() == 0
