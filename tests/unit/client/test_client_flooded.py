"""A flood-all subscription at the subscriber: decoding, one copy per timestamp, unknown ids and refresh."""

from __future__ import annotations

import asyncio

from gridstat.client.flooded import REFRESH_INTERVAL_MS, FloodedFeed
from gridstat.client.holders import Holder
from gridstat.client.session import flooded_variables
from gridstat.client.subscriber import Subscriber
from gridstat.core import wire
from gridstat.core.model import FLOAT, INT, StatusVariable
from gridstat.core.protoconv import type_to_pb
from gridstat.v1 import broker_pb2 as bpb

FREQ = StatusVariable("pmu", "freq", FLOAT, 10, variable_id=5)
COUNT = StatusVariable("pmu", "count", INT, 10, variable_id=6)
NOW = 1_700_000_000_000


def event(var: StatusVariable, ts: int, value: object) -> wire.Event:
    return wire.Event(ts, var.variable_id, wire.encode_value(var.type, value))


def test_events_are_decoded_once_per_timestamp_into_holders_and_the_callback() -> None:
    got: list[tuple[str, Holder]] = []
    feed = FloodedFeed("ems", [FREQ], on_event=lambda v, h: got.append((v.full_name, h)))
    assert feed.handle(event(FREQ, NOW, 50.0), NOW + 3)
    assert feed.handle(event(FREQ, NOW, 50.0), NOW + 4)  # a second copy: handled, not delivered
    assert feed.handle(event(FREQ, NOW + 10, 50.5), NOW + 12)
    assert [(n, h.timestamp_ms - NOW, h.value, h.latency_ms) for n, h in got] == [
        ("pmu/freq", 0, 50.0, 3), ("pmu/freq", 10, 50.5, 2)]
    assert feed.holders[5].value == 50.5
    assert (feed.stats.events, feed.stats.duplicates) == (2, 1)


def test_a_failing_callback_is_counted_and_never_raises() -> None:
    def boom(v: StatusVariable, h: Holder) -> None:
        raise RuntimeError("user bug")

    feed = FloodedFeed("ems", [FREQ], on_event=boom)
    assert feed.handle(event(FREQ, NOW, 1.0), NOW)
    assert feed.stats.callback_errors == 1 and feed.holders[5].value == 1.0


async def test_an_unknown_id_refreshes_the_flooded_variables_at_most_once_a_second() -> None:
    calls = 0

    async def refresh() -> list[StatusVariable]:
        nonlocal calls
        calls += 1
        return [FREQ, COUNT]

    feed = FloodedFeed("ems", [FREQ], refresh=refresh)
    assert not feed.handle(event(COUNT, NOW, 7), NOW)
    assert not feed.handle(event(COUNT, NOW + 10, 8), NOW + 10)
    await asyncio.sleep(0.01)
    assert calls == 1 and feed.stats.refreshes == 1 and feed.stats.unknown == 2
    assert feed.handle(event(COUNT, NOW + 20, 9), NOW + 20) and feed.holders[6].value == 9
    feed.update([FREQ])
    assert not feed.handle(event(COUNT, NOW + 30, 9), NOW + 30)  # within the interval: no new refresh
    assert not feed.handle(event(COUNT, NOW + 40, 9), NOW + REFRESH_INTERVAL_MS + 1)
    await asyncio.sleep(0.01)
    assert calls == 2
    feed.close()


def test_the_broker_reply_lists_each_variable_once() -> None:
    pub = bpb.Publication(publisher="pmu", variable="freq", type=type_to_pb(FLOAT), interval_ms=10, priority=1,
                          variable_id=5)
    reply = bpb.BrokerFloodingReply(flooding=[
        bpb.FloodingEntry(variable="pmu/freq", variable_id=5, mode=0, level=1, publication=pub),
        bpb.FloodingEntry(variable="pmu/freq", variable_id=5, mode=2, level=2, from_parent=True, publication=pub)])
    assert flooded_variables(reply) == [FREQ]


def test_the_subscriber_gives_unclaimed_events_to_the_feed_and_counts_the_rest() -> None:
    sub = Subscriber("ems", 9)
    sub.flooded = FloodedFeed("ems", [FREQ])
    data = wire.encode_datagram(1, 1, [wire.encode_event(event(FREQ, NOW, 1.0)),
                                       wire.encode_event(event(COUNT, NOW, 1))])
    sub.process(data, NOW)
    assert sub.flooded.holders[5].value == 1.0
    assert sub.stats.drops["unknown_variable"] == 1
