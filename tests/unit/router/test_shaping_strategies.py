"""Message shedding on a shaped channel: the victim of each strategy and the publication-or-subscription
choice (HAPS IV-B and Fig. 7; docs/overload.md)."""

from __future__ import annotations

import random

import pytest

from gridstat.core import wire
from gridstat.errors import ValidationError
from gridstat.router.channels import ChannelKind, EventChannel
from gridstat.router.forwarding import Forwarder
from gridstat.router.main import parse_shape
from gridstat.router.shaping import (
    GUARANTEED,
    DropPolicy,
    MessageKind,
    MessageStrategy,
    Shaper,
    ShapingConfig,
    choose_kind,
    event_gain,
    subscription_value,
    victim_key,
)
from gridstat.router.tables import Route, RoutingTable, Target, Variant

T0 = 1_700_000_000_000


def ev(vid: int) -> bytes:
    return wire.encode_event(wire.Event(T0, vid, vid.to_bytes(8, "big")))


def shaper(strategy: MessageStrategy, *, rng: random.Random | None = None) -> tuple[EventChannel, Shaper]:
    """A fast channel (nothing is shed on arrival) whose victims the tests ask for with ``shed_one``."""
    ch = EventChannel(name="out", peer_id=9, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", 9), sender_id=1)
    sh = ch.shape(ShapingConfig(1e9, DropPolicy.VALUE, strategy=strategy))
    if rng is not None:
        sh.rng = rng.random
    return ch, sh


def push(sh: Shaper, vid: int, *, value: float, count: int = 1, guaranteed: bool = False) -> None:
    key = victim_key(sh.config.strategy, value=value, count=count, guaranteed=guaranteed)
    sh.enqueue(ev(vid), key, value, 1)


def victims(sh: Shaper, n: int) -> list[int]:
    before = dict(sh.dropped_vars)
    out = []
    for _ in range(n):
        sh.shed_one()
        now = dict(sh.dropped_vars)
        out += [v for v in now if now[v] != before.get(v, 0)]
        before = now
    return out


def test_cheapest_sheds_the_lowest_price_sum_and_count_the_fewest_routes() -> None:
    # (variable, price sum, routes): 1 is valuable through one route, 2 cheap through five, 3 in between.
    events = [(1, 9.0, 1), (2, 1.0, 5), (3, 3.0, 3)]
    _, cheapest = shaper(MessageStrategy.CHEAPEST)
    _, count = shaper(MessageStrategy.COUNT)
    for sh in (cheapest, count):
        for vid, value, routes in events:
            push(sh, vid, value=value, count=routes)
    assert victims(cheapest, 3) == [2, 3, 1]
    assert victims(count, 3) == [1, 3, 2]


def test_equal_values_go_oldest_first() -> None:
    _, sh = shaper(MessageStrategy.CHEAPEST)
    for vid in (5, 6, 7):
        push(sh, vid, value=1.0)
    assert victims(sh, 2) == [5, 6]


def test_lowest_sheds_the_event_of_lowest_gain_not_of_lowest_value() -> None:
    ch, sh = shaper(MessageStrategy.LOWEST)
    ch.capacity = 100  # Q_size
    sh.total_price = 10.0
    push(sh, 1, value=1.0)  # cheap, but it will have survived 50 drops
    sh.drops_total = 48
    push(sh, 2, value=8.0)  # valuable, 2 drops
    push(sh, 3, value=8.0)  # the same value, 2 drops, newer
    sh.drops_total = 50
    g1 = event_gain(1.0, 50, link_gain=0.0, total_price=10.0, queue_size=100)
    g2 = event_gain(8.0, 2, link_gain=0.0, total_price=10.0, queue_size=100)
    assert g2 < g1  # 1 - 0.992**2 < 1 - 0.999**50
    # Between 2 and 3 the gains tie: the newer goes first (it has waited least).
    assert victims(sh, 3) == [3, 2, 1]
    # CHEAPEST on the same queue sheds the cheap one first.
    _, sh2 = shaper(MessageStrategy.CHEAPEST)
    push(sh2, 1, value=1.0)
    push(sh2, 2, value=8.0)
    assert victims(sh2, 1) == [1]


def test_lowest_counts_the_link_shedding_gain_and_the_drops_since_queued() -> None:
    assert event_gain(5.0, 0, link_gain=0.2, total_price=10.0, queue_size=100) == pytest.approx(0.2)  # G_l1 only
    g = event_gain(6.0, 3, link_gain=0.0, total_price=10.0, queue_size=100)  # three Eq. 6 updates of 0.006
    assert g == pytest.approx(1 - (1 - 0.006) ** 3)
    assert event_gain(6.0, 500, link_gain=0.0, total_price=10.0, queue_size=100) == pytest.approx(
        1 - (1 - 0.006) ** 100)  # at most Q_size updates
    assert event_gain(6.0, 3, link_gain=0.0, total_price=0.0, queue_size=100) == 0.0


def test_random_sheds_a_random_best_effort_event() -> None:
    first = set()
    for seed in range(40):
        _, sh = shaper(MessageStrategy.RANDOM, rng=random.Random(seed))
        for vid in range(1, 6):
            push(sh, vid, value=float(vid))
        first.add(victims(sh, 1)[0])
    assert len(first) >= 4  # not the cheapest, not the oldest: any of them


@pytest.mark.parametrize("strategy", list(MessageStrategy))
def test_no_strategy_sheds_a_guaranteed_event_while_a_best_effort_one_is_queued(strategy: MessageStrategy) -> None:
    _, sh = shaper(strategy, rng=random.Random(1))
    for vid in (100, 101):
        push(sh, vid, value=0.01, count=1, guaranteed=True)  # cheap, one route, but guaranteed
    for vid in range(1, 9):
        push(sh, vid, value=50.0, count=9)  # valuable, many routes, best effort
    assert sorted(victims(sh, 8)) == list(range(1, 9))
    assert sorted(victims(sh, 2)) == [100, 101]
    assert sh.live == 0


def drain(ch: EventChannel, sh: Shaper) -> None:
    """Flush until empty, the bucket's clock jumping ahead between flushes."""
    now = [0.0]
    sh.clock = lambda: now[0]
    while sh.live:
        now[0] += 1e6
        assert ch.flush(lambda data, addr: None)


@pytest.mark.parametrize("strategy", list(MessageStrategy))
def test_the_victim_index_is_swept_as_events_leave(strategy: MessageStrategy) -> None:
    ch = EventChannel(name="out", peer_id=9, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", 9), sender_id=1)
    sh = ch.shape(ShapingConfig(1e9, DropPolicy.RED, strategy=strategy))
    for i in range(2000):
        push(sh, 1 + i % 40, value=float(i % 7))
    drain(ch, sh)
    assert sh.victims is not None and sh.victims.size() <= 64


def test_the_strategy_is_resolved_when_the_channel_is_shaped() -> None:
    kinds = {}
    for strategy in MessageStrategy:
        _, sh = shaper(strategy)
        kinds[strategy] = type(sh.victims).__name__
    assert kinds[MessageStrategy.CHEAPEST] == kinds[MessageStrategy.COUNT]  # one heap, another key
    assert len({kinds[MessageStrategy.CHEAPEST], kinds[MessageStrategy.LOWEST], kinds[MessageStrategy.RANDOM]}) == 3
    ch = EventChannel(name="out", peer_id=9, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", 9), sender_id=1)
    assert ch.shape(ShapingConfig(1e3, DropPolicy.TAIL)).victims is None  # tail drop chooses no victim


def test_the_count_key_is_compiled_from_the_routes_on_the_channel() -> None:
    chans = {n: EventChannel(name=n, peer_id=10 + i, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", 9),
                             sender_id=1) for i, n in enumerate(("a", "b"))}

    def resolve(name: str, priority: int) -> Target:
        return chans[name].queue(priority)

    table = RoutingTable(Variant.CLOSE, resolve)
    for j, (name, price, be) in enumerate([("a", 2.0, True), ("a", 3.0, True), ("a", 0.5, True), ("b", 9.0, False)]):
        table.install(Route(f"r{j}", 7, 0, name, 20 * (j + 1), 1, price=price, best_effort=be), pub_interval_ms=20)
    for ch in chans.values():
        ch.shape(ShapingConfig(1e9, strategy=MessageStrategy.COUNT))
    table.recompile_all()
    entry = table.entry(7)
    assert entry is not None
    keys = {t.channel.name: (t.value, t.key) for t in entry.sparse_targets}  # type: ignore[attr-defined]
    assert keys == {"a": (5.5, 3.0), "b": (9.0, GUARANTEED + 1.0)}
    fw = Forwarder(table, future_tolerance_ms=10**12)
    fw.by_sender[5] = EventChannel(name="pub", peer_id=5, kind=ChannelKind.PUBLISHER, address=None, sender_id=1)
    fw.process(wire.encode_datagram(5, 1, [ev(7)]), T0)
    queued = [(it[0], it[4]) for q in chans["a"].shaper.fifo for it in q]  # type: ignore[union-attr]
    assert queued == [(3.0, 5.5)]  # ranked by count, billed by price


def test_choose_kind_is_linear_in_the_counts() -> None:
    # P(publication) = n_pub / (n_pub + n_sub): u below 3/4 picks a publication.
    assert choose_kind(3, 1, 0.0) is MessageKind.PUBLICATION
    assert choose_kind(3, 1, 0.7499) is MessageKind.PUBLICATION
    assert choose_kind(3, 1, 0.75) is MessageKind.SUBSCRIPTION
    assert choose_kind(0, 4, 0.0) is MessageKind.SUBSCRIPTION
    assert choose_kind(4, 0, 0.9999) is MessageKind.PUBLICATION  # a GridStat event queue: publications only
    assert choose_kind(0, 0, 0.5) is None
    rnd = random.Random(11)
    for n_pub, n_sub in ((1, 1), (9, 1), (2, 7)):
        picks = sum(choose_kind(n_pub, n_sub, rnd.random()) is MessageKind.PUBLICATION for _ in range(20_000))
        assert picks / 20_000 == pytest.approx(n_pub / (n_pub + n_sub), abs=0.015)


def test_a_subscription_is_worth_its_price_and_what_it_covers() -> None:
    assert subscription_value(2.0, [8.0, 0.5]) == pytest.approx(10.5)
    assert subscription_value(2.0, []) == 2.0


def test_event_gain_is_what_the_channel_bills() -> None:
    ch = EventChannel(name="out", peer_id=9, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", 9), sender_id=1)
    ch.capacity = 50
    sh = ch.shape(ShapingConfig(1_000, DropPolicy.VALUE, 0, 2000))
    sh.total_price, sh.link_gain = 20.0, 0.05
    push(sh, 1, value=6.0)
    for i in range(30):
        push(sh, 2 + i, value=1.0 + i % 3)
    assert sh.drops_total > 0
    live = [it for q in sh.fifo for it in q if it[2] is not None]
    expected = sum(it[4] * event_gain(it[4], sh.drops_total - it[5], link_gain=0.05, total_price=20.0,
                                      queue_size=50) for it in live)
    drain(ch, sh)
    assert sh.revenue == pytest.approx(expected)


def test_strategies_are_validated() -> None:
    with pytest.raises(ValidationError, match="cheapest, lowest, count or random"):
        MessageStrategy.parse("priciest")
    with pytest.raises(ValidationError, match="chooses no victim"):
        ShapingConfig(1e3, DropPolicy.TAIL, strategy=MessageStrategy.COUNT)
    assert MessageStrategy.parse("") is MessageStrategy.CHEAPEST


def test_the_shape_flag_names_a_strategy_per_channel() -> None:
    name, c = parse_shape("sub:ops=1000:red:lowest", 500, 1000)
    assert (name, c.policy, c.strategy) == ("sub:ops", DropPolicy.RED, MessageStrategy.LOWEST)
    _, c = parse_shape("x=1000::count", 500, 1000)
    assert (c.policy, c.strategy) == (DropPolicy.RED, MessageStrategy.COUNT)
    _, c = parse_shape("x=1000", 500, 1000, MessageStrategy.RANDOM)  # --message-strategy's default
    assert c.strategy is MessageStrategy.RANDOM
    _, c = parse_shape("x=1000:tail", 500, 1000, MessageStrategy.RANDOM)  # tail drop chooses no victim
    assert c.strategy is MessageStrategy.CHEAPEST
    for bad in ("x=1000:red:priciest", "x=1000:tail:count", "x=1000:red:count:more"):
        with pytest.raises(ValidationError):
            parse_shape(bad, 500, 1000)
