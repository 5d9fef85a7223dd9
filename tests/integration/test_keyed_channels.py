"""Keys on the channels that were unkeyed (docs/security.md): inter-cloud channels between border routers,
keyed by the parent broker that registers them (``--channel-auth``), and the channels of
condensation functions (the standalone ``gridstat condense host`` and a function in a router slot)
under ``--channel-auth all``. Real processes: each channel is authenticated, carries the stream
with tagged datagrams (pings included: the links stay up), and drops forged datagrams as auth_failed."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gridstat.client import Publisher, Subscriber
from gridstat.core import wire
from gridstat.core.model import FLOAT
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import condensation_pb2 as cpb
from gridstat.v1 import router_pb2 as rpb

from . import brokerprocs
from .brokerprocs import register_publisher, register_subscriber, start_broker
from .fixtures import Feed, Sink, wait_for
from .routerprocs import RouterProc, stop_process

pytestmark = pytest.mark.integration

PB_FLOAT = bpb.ValueType(kind=bpb.VALUE_KIND_FLOAT)


def channel(r: RouterProc, name: str) -> rpb.Channel:
    for c in r.stub.ListChannels(rpb.ListChannelsRequest(), timeout=5).channels:
        if c.name == name:
            return c
    raise AssertionError(f"{r.name} has no channel {name!r}")


def stats(r: RouterProc) -> rpb.RouterStats:
    return r.stub.GetStats(rpb.GetStatsRequest(), timeout=5)


def channel_stats(r: RouterProc, name: str) -> rpb.ChannelStats:
    return next(c for c in stats(r).channels if c.name == name)


def forge(port: int, *datagrams: bytes) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
        for d in datagrams:
            raw.sendto(d, ("127.0.0.1", port))


def forged_events(sender: int, var: int) -> bytes:
    return wire.encode_datagram(sender, 4_000_000, [wire.encode_event(wire.Event(1, var, b"\0" * 8))])


def test_inter_cloud_channels_are_keyed_by_the_parent(tmp_path: Path) -> None:
    sink = Sink()
    try:
        with brokerprocs.started() as (brokers, routers):
            parent = brokers["P"] = start_broker("P", str(tmp_path / "P.sqlite"),
                                                 extra=("--role", "parent", "--channel-auth", "routers"))
            for cloud, k in (("A", 1), ("B", 2)):
                brokerprocs.start_leaf(tmp_path, brokers, routers, parent, cloud, k)
            brokerprocs.add_inter_cloud(parent, "A", "B")
            ba, bb = routers["bA"], routers["bB"]
            assert wait_for(lambda: channel(ba, "bB").authenticated and channel(bb, "bA").authenticated)
            assert not channel(ba, "eA").authenticated  # the leaves themselves run without --channel-auth
            # The key is never shown: not in the leaves' topology.
            view = brokers["A"].stub.GetTopology(bpb.GetTopologyRequest(), timeout=5)
            assert [c.key for c in view.inter_cloud_channels] == [b""]

            a, b = brokers["A"], brokers["B"]
            pub_id, (var,) = register_publisher(a, "pmu1", "eA")
            register_subscriber(b, "ems", "eB", sink.port)
            reply = b.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
                subscriber="ems", variable="pmu1/freq", type=PB_FLOAT, edge_router="eB",
                qos=[bpb.ModeQoS(mode=0, interval_ms=10, latency_ms=50)])), timeout=60)
            assert reply.admitted, reply.rejection
            feed = Feed(routers["eA"].port, pub_id, var)
            try:
                assert wait_for(lambda: len(sink.events) > 10, timeout_s=10)
                # Forgeries on the inter-cloud channel: events and a ping "from bA", a replayed-looking shed notice.
                before = stats(bb).drops.get("auth_failed", 0)
                forge(bb.port, forged_events(ba.router_id, var), wire.encode_ping(wire.KIND_PING, ba.router_id, 0, 1),
                      *wire.encode_shed_notices(ba.router_id, 0, reason=1, action=1, entries=[(var, 0)]))
                assert wait_for(lambda: stats(bb).drops.get("auth_failed", 0) == before + 3, timeout_s=5)
                n = len(sink.events)
                assert wait_for(lambda: len(sink.events) > n + 10, timeout_s=5)  # the stream keeps flowing
            finally:
                feed.stop()
            inbound = channel_stats(bb, "bA")
            assert inbound.datagrams_in > 10 and inbound.up  # tagged events and pings verified: the link is up
            assert {v for v, _ in sink.events} == {var}
    finally:
        sink.close()


async def test_condensation_channels_are_keyed(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        broker, routers = stack.enter_context(brokerprocs.edge_pair(
            tmp_path, ids=(11, 12), name="C", broker_extra=("--channel-auth", "all")))
        e1, e2 = routers["e1"], routers["e2"]
        assert wait_for(lambda: channel(e1, "e2").authenticated)
        spec = tmp_path / "host.yaml"
        spec.write_text(textwrap.dedent("""
            function_id: host1
            inputs:
              - {variable: pmu1/v, latency_ms: 50}
            output: {publisher: hostpub, variable: avg}
            spec:
              calculator: average
              trigger: {kind: time, interval_ms: 100}
        """))
        async with await Publisher.connect("pmu1", f"127.0.0.1:{e1.control_port}") as pub, \
                await Subscriber.connect("ems", f"127.0.0.1:{e2.control_port}") as sub:
            assert pub.key is not None and sub.key is not None
            handle = await pub.register("v", FLOAT, 10)
            # A condensation function in a router slot (e2): its output channel is keyed too.
            broker.stub.CreateCondensation(bpb.CreateCondensationRequest(
                creator="ops", function_id="slot1", placement_router="e2",
                output=bpb.Publication(publisher="cf", variable="avg", type=PB_FLOAT, interval_ms=100),
                inputs=[bpb.CondensationInputRequest(variable="pmu1/v", latency_ms=50)],
                spec=cpb.CondensationSpec(calculator="average",
                                          trigger=cpb.Trigger(kind=cpb.TRIGGER_KIND_TIME, interval_ms=100))),
                timeout=15)
            host = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "condense", "host", "--edge",
                                     f"127.0.0.1:{e1.control_port}", "--spec", str(spec), "--status-interval-s", "0",
                                     "--exit-with-parent"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    text=True)
            stack.callback(stop_process, host)
            assert host.stdout is not None
            publishing = True

            async def feed() -> None:
                while publishing:
                    handle.publish(1.0)
                    await asyncio.sleep(0.01)

            task = asyncio.create_task(feed())
            try:
                line = await asyncio.to_thread(host.stdout.readline)
                assert line.startswith("READY name=host1 output=hostpub/avg"), line
                got: dict[str, int] = {"hostpub/avg": 0, "cf/avg": 0}
                for name in got:
                    await sub.subscribe_remote(name, FLOAT, interval_ms=100, latency_ms=1000,
                                               on_event=lambda s, _h: got.__setitem__(s.variable.full_name,
                                                                                      got[s.variable.full_name] + 1))
                for _ in range(100):
                    if min(got.values()) >= 3:
                        break
                    await asyncio.sleep(0.05)
                assert min(got.values()) >= 3, got
                # The host's channels at its edge router (its publisher's and its subscriber's), and the
                # slot's output channel at e2, are all keyed.
                names = {c.name: c for c in e1.stub.ListChannels(rpb.ListChannelsRequest(), timeout=5).channels}
                host_pub, host_sub = names["pub:hostpub"], names["sub:host1"]
                assert host_pub.authenticated and host_sub.authenticated
                slot_out = channel(e2, "pub:cf")
                assert slot_out.authenticated
                assert channel_stats(e1, "pub:hostpub").events_in >= 3  # tagged, verified
                # Forgeries in the host's and the slot's name are dropped.
                before1 = stats(e1).drops.get("auth_failed", 0)
                before2 = stats(e2).drops.get("auth_failed", 0)
                var_ids = {p.publisher: p.variable_id for p in
                           broker.stub.ListPublications(bpb.ListPublicationsRequest(), timeout=5).publications}
                forge(e1.port, forged_events(host_pub.peer_id, var_ids["hostpub"]))
                forge(e2.port, forged_events(slot_out.peer_id, var_ids["cf"]))
                assert wait_for(lambda: stats(e1).drops.get("auth_failed", 0) == before1 + 1
                                and stats(e2).drops.get("auth_failed", 0) == before2 + 1, timeout_s=5)
                # A forged shed notice to the subscriber is dropped; its streams keep flowing.
                forge(sub.address[1], *wire.encode_shed_notices(12, 0, reason=1, action=1,
                                                                entries=[(var_ids["cf"], 0)]))
                n = dict(got)
                for _ in range(100):
                    if sub.stats.drops["auth_failed"] >= 1 and all(got[k] > n[k] for k in got):
                        break
                    await asyncio.sleep(0.05)
                assert sub.stats.drops["auth_failed"] == 1 and sub.stats.shed_notices == 0
                assert all(got[k] > n[k] for k in got), (got, n)
            finally:
                publishing = False
                await task
