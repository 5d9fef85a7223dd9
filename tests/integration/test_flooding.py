"""Limited flooding over real routers and brokers (dissertation 5): one copy per timestamp in a cyclic
cloud, no gap for an existing subscription while flooding is switched on and off, a flood-all
subscriber through the SDK, and a level-2 flood across two clouds under a parent broker.

Cyclic cloud (every router-to-router link both ways):

    e1 --- i1 --- e2          publisher pmu1 at e1; subscribers at e2:
      \\    |    /             "ems" subscribes at 20 ms, "all" holds a flood-all subscription
       --- i2 ---
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from pathlib import Path

import pytest

from gridstat.client import Subscriber
from gridstat.core import filtering
from gridstat.core.model import FLOAT
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import router_pb2 as rpb

from . import brokerprocs
from .brokerprocs import BrokerProc, Cloud, register_publisher, register_subscriber, start_broker
from .fixtures import Feed, Sink, wait_for
from .routerprocs import RouterProc

pytestmark = pytest.mark.integration

ROUTERS = [("e1", 1, "edge"), ("i1", 2, "internal"), ("i2", 3, "internal"), ("e2", 4, "edge")]
LINKS = [("e1", "i1", 1.0), ("i1", "e2", 1.0), ("e1", "i2", 1.0), ("i2", "e2", 1.0), ("i1", "i2", 1.0)]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def cyclic_cloud(tmp: Path) -> contextlib.AbstractContextManager[Cloud]:
    return brokerprocs.cloud(tmp, ROUTERS, LINKS, proxied=("e2",))


def register(broker: BrokerProc, subscribers: dict[str, Sink]) -> tuple[int, int]:
    pub_id, (var,) = register_publisher(broker, "pmu1", "e1")
    for name, sink in subscribers.items():
        register_subscriber(broker, name, "e2", sink.port)
    return pub_id, var


def stats(r: RouterProc) -> rpb.RouterStats:
    s: rpb.RouterStats = r.stub.GetStats(rpb.GetStatsRequest(), timeout=2)
    return s


def test_flooding_in_a_cyclic_cloud_one_copy_per_timestamp_and_no_gap_for_a_subscription(tmp_path: Path) -> None:
    ems, everything = Sink(), Sink()
    try:
        with cyclic_cloud(tmp_path) as (broker, routers):
            pub_id, var = register(broker, {"ems": ems, "all": everything})
            reply = broker.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
                subscriber="ems", variable="pmu1/freq", edge_router="e2",
                qos=[bpb.ModeQoS(mode=0, interval_ms=20, latency_ms=50)])), timeout=10)
            assert reply.admitted, reply.rejection
            broker.stub.SetFloodAll(bpb.SetFloodAllRequest(subscriber="all", enabled=True), timeout=5)
            feed = Feed(routers["e1"].port, pub_id, var)
            windows: list[tuple[int, int]] = []  # (flooding set everywhere, removal asked) in ms
            try:
                assert wait_for(lambda: len(ems.events) > 5)
                for hold_s in (1.0, 0.5):
                    broker.stub.SetFlooding(bpb.BrokerFloodingRequest(variable="pmu1/freq", modes=[0]), timeout=10)
                    on = now_ms()
                    assert all(stats(r).flooded_variables == 1 for r in routers.values())
                    time.sleep(hold_s)
                    off = now_ms()
                    broker.stub.RemoveFlooding(bpb.BrokerFloodingRequest(variable="pmu1/freq", modes=[0]),
                                               timeout=10)
                    windows.append((on, off))
                    time.sleep(0.4)
            finally:
                sent = feed.stop()

            def subscription_caught_up() -> bool:  # what the assertions below check, once delivered
                have = {ts for v, ts in ems.events if v == var}
                return bool(have) and all(ts in have for ts in sent
                                          if ts >= min(have) and filtering.should_forward(ts, 10, 20))

            wait_for(subscription_caught_up, timeout_s=5)
            duplicates = sum(stats(r).drops["flood_duplicate"] for r in routers.values())
            assert all(stats(r).flooded_variables == 0 for r in routers.values())
    finally:
        ems.close()
        everything.close()

    # The flood-all subscriber: exactly once per timestamp, everything sent while flooded, nothing
    # well outside the flooded windows.
    got = Counter(ts for v, ts in everything.events if v == var)
    assert got and max(got.values()) == 1, [ts for ts, n in got.items() if n > 1][:10]
    for on, off in windows:
        flooded = [ts for ts in sent if on + 30 <= ts <= off - 30]
        assert flooded and [ts for ts in flooded if ts not in got] == []
    quiet = [ts for ts in got if not any(on - 100 <= ts <= off + 150 for on, off in windows)]
    assert quiet == []
    # Redundant channels: each flooded event is received 7 times by the routers, 3 of them first
    # copies (e1 floods on 2 channels, i1, i2 on 2, e2 on 1): 4 duplicates dropped per event.
    assert 3 * len(got) <= duplicates <= 5 * len(got) + 40

    # The 20 ms subscription lost nothing while flooding came and went (it saw every event meanwhile).
    have = {ts for v, ts in ems.events if v == var}
    first = min(have)
    missing = [ts for ts in sent if ts >= first and filtering.should_forward(ts, 10, 20) and ts not in have]
    assert missing == []
    assert any(ts % 20 for ts in have)  # the flooded 10 ms events reached it too


async def test_flood_all_subscriber_through_the_sdk_decodes_variables_flooded_later(tmp_path: Path) -> None:
    with cyclic_cloud(tmp_path) as (broker, routers):
        pub_id, var = register(broker, {})
        (other,) = brokerprocs.register_publications(broker, "pmu1", "e1", ("volt",))
        broker.stub.SetFlooding(bpb.BrokerFloodingRequest(variable="pmu1/freq", modes=[0]), timeout=10)
        got: list[tuple[str, int, object]] = []
        sub = await Subscriber.connect("all", f"127.0.0.1:{routers['e2'].control_port}")
        feeds: list[Feed] = []
        try:
            feed = await sub.subscribe_flooded(lambda v, h: got.append((v.full_name, h.timestamp_ms, h.value)))
            assert [v.full_name for v in feed.variables.values()] == ["pmu1/freq"]
            assert feed.variables[var].type == FLOAT
            feeds = [Feed(routers["e1"].port, pub_id, var), Feed(routers["e1"].port, pub_id, other)]
            for _ in range(400):
                if len(got) > 10:
                    break
                await asyncio.sleep(0.01)
            assert {name for name, _, _ in got} == {"pmu1/freq"}
            # A variable flooded after the call: its first events are unknown, then the feed refreshes.
            broker.stub.SetFlooding(bpb.BrokerFloodingRequest(variable="pmu1/volt", modes=[0]), timeout=10)
            for _ in range(400):
                if any(name == "pmu1/volt" for name, _, _ in got):
                    break
                await asyncio.sleep(0.01)
            assert any(name == "pmu1/volt" for name, _, _ in got)
            assert feed.stats.refreshes >= 1 and feed.holders[other].value == 0.0
            per = Counter((name, ts) for name, ts, _ in got)
            assert max(per.values()) == 1
            await sub.unsubscribe_flooded()
            assert sub.flooded is None
        finally:
            for f in feeds:
                f.stop()
            await sub.stop()


def test_a_parent_floods_to_level_2_across_two_clouds_and_a_leaf_only_its_own(tmp_path: Path) -> None:
    """Clouds A and B under parent P, joined by bA - bB (level 2). Flooding set at P reaches a flood-all
    subscriber in B; the same variable flooded by A's leaf alone (level 1) stays in A."""
    sink = Sink()
    try:
        with brokerprocs.started() as (brokers, routers):
            brokers["P"] = start_broker("P", str(tmp_path / "P.sqlite"), extra=("--role", "parent"))
            for cloud, k in (("A", 1), ("B", 2)):
                brokerprocs.start_leaf(tmp_path, brokers, routers, brokers["P"], cloud, k)
            brokerprocs.add_inter_cloud(brokers["P"], "A", "B")
            levels = {c.name: c.level for c in routers["bA"].stub.ListChannels(rpb.ListChannelsRequest(),
                                                                               timeout=5).channels}
            assert levels == {"eA": 1, "bB": 2}
            a, b, p = brokers["A"], brokers["B"], brokers["P"]
            pub_id, (var,) = register_publisher(a, "pmu1", "eA")
            register_subscriber(b, "all", "eB", sink.port)
            b.stub.SetFloodAll(bpb.SetFloodAllRequest(subscriber="all", enabled=True), timeout=5)
            feed = Feed(routers["eA"].port, pub_id, var)
            try:
                # A's leaf alone: level 1, the flood stops at the level-2 channel.
                a.stub.SetFlooding(bpb.BrokerFloodingRequest(variable="pmu1/freq", modes=[0]), timeout=10)
                time.sleep(0.5)
                assert sink.events == []
                assert stats(routers["bA"]).flooded_variables == 1 and stats(routers["bB"]).flooded_variables == 0
                # The parent: its height (2) covers both clouds and overrides A's own setting.
                reply = p.stub.SetFlooding(bpb.BrokerFloodingRequest(variable="pmu1/freq", modes=[0]), timeout=20)
                assert [(e.level, e.publication.cloud) for e in reply.flooding] == [(2, "A")]
                assert wait_for(lambda: len(sink.events) > 10, timeout_s=5)
                listed = a.stub.ListFlooding(bpb.ListFloodingRequest(), timeout=5).flooding
                assert [(e.level, e.from_parent) for e in listed] == [(2, True), (1, False)]
                # The parent removes its flood: A falls back to its own level 1, B stops.
                p.stub.RemoveFlooding(bpb.BrokerFloodingRequest(variable="pmu1/freq", modes=[0]), timeout=20)
                time.sleep(0.2)
                n = len(sink.events)
                time.sleep(0.4)
                assert len(sink.events) == n
                assert stats(routers["bB"]).flooded_variables == 0 and stats(routers["bA"]).flooded_variables == 1
            finally:
                feed.stop()
            got = Counter(ts for v, ts in sink.events if v == var)
            assert max(got.values()) == 1
    finally:
        sink.close()
