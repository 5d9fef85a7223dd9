"""Operating modes over real routers and a real leaf broker (dissertation 6.3; docs/modes.md).

A subscription of both modes must see every event across a switch, none twice; a subscription
of the old mode only stops, one of the new mode only starts; subscribers are told before and
after; asking for the current mode changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from gridstat.chaos.diamond import LINKS, ROUTERS
from gridstat.core import wire
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import router_pb2 as rpb

from . import brokerprocs
from .brokerprocs import FLOAT, BrokerProc, Cloud, register_publisher, register_subscriber
from .fixtures import Feed, Sink, wait_for
from .routerprocs import start_router

pytestmark = pytest.mark.integration


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[Cloud]:
    with brokerprocs.cloud(tmp_path, ROUTERS, LINKS) as c:
        yield c


def subscribe(broker: BrokerProc, variable: str, modes: list[int], interval_ms: int = 10) -> bpb.SubscribeReply:
    reply: bpb.SubscribeReply = broker.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
        subscriber="ems", variable=variable, type=FLOAT, edge_router="e2",
        qos=[bpb.ModeQoS(mode=m, interval_ms=interval_ms, latency_ms=50) for m in modes])), timeout=10)
    return reply


def setup(broker: BrokerProc, sink: Sink) -> tuple[int, dict[str, int]]:
    """pmu1 at e1 publishing both, old and new; ems at e2 on ``sink``: the publisher's id, the variables' ids."""
    pub_id, ids = register_publisher(broker, "pmu1", "e1", ("both", "old", "new"))
    register_subscriber(broker, "ems", "e2", sink.port)
    return pub_id, dict(zip(("both", "old", "new"), ids, strict=True))


def reason(exc: grpc.RpcError) -> str:
    return dict(exc.trailing_metadata() or ()).get("gridstat-reason", "")  # type: ignore[attr-defined]


def test_switch_keeps_common_streams_whole_stops_old_starts_new_and_tells_subscribers(cloud: Cloud) -> None:
    broker, _routers = cloud
    sink = Sink()
    pub_id, ids = setup(broker, sink)
    # A subscription may only name a defined mode.
    with pytest.raises(grpc.RpcError) as err:
        subscribe(broker, "pmu1/new", [1])
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and reason(err.value) == "UnknownMode"
    info = broker.stub.DefineMode(bpb.DefineModeRequest(mode=1, name="contingency"), timeout=5)
    assert (info.mode, info.name, info.current) == (1, "contingency", False)
    assert subscribe(broker, "pmu1/both", [0, 1]).admitted
    assert subscribe(broker, "pmu1/old", [0]).admitted
    assert subscribe(broker, "pmu1/new", [1]).admitted
    listed = broker.stub.ListModes(bpb.ListModesRequest(), timeout=5)
    assert [(m.mode, m.name, m.current, m.subscriptions) for m in listed.modes] == [
        (0, "normal", True, 2), (1, "contingency", False, 2)]
    feed = Feed(_routers["e1"].port, pub_id, list(ids.values()))
    try:
        assert wait_for(lambda: len(sink.events) > 30)
        switched_at = time.time_ns() // 1_000_000
        reply = broker.stub.ChangeMode(bpb.ChangeModeRequest(name="contingency"), timeout=10)
        assert reply.changed and (reply.previous_mode, reply.current_mode) == (0, 1)
        assert [p.name for p in reply.phases] == ["warn", "prepare", "switch-internal", "switch-edge", "commit"]
        assert [p.routers for p in reply.phases] == [2, 2, 2, 2, 2]
        time.sleep(0.4)
        again = broker.stub.ChangeMode(bpb.ChangeModeRequest(mode=1), timeout=10)
        assert not again.changed and again.current_mode == 1
        time.sleep(0.2)
    finally:
        sent = feed.stop()

    def common_caught_up() -> bool:  # every event of the common subscription sent since its first arrived
        got = {ts for v, ts in sink.events if v == ids["both"]}
        return bool(got) and all(ts in got for ts in sent if ts >= min(got))

    wait_for(common_caught_up, timeout_s=5)
    sink.close()
    both = [ts for v, ts in sink.events if v == ids["both"]]
    assert len(both) == len(set(both)), "a common subscription got a duplicate across the switch"
    first = min(both)
    missing = [ts for ts in sent if ts >= first and ts not in set(both)]
    assert missing == [], f"{len(missing)} events of the common subscription lost across the switch"
    old = [ts for v, ts in sink.events if v == ids["old"]]
    new = [ts for v, ts in sink.events if v == ids["new"]]
    assert old and max(old) < switched_at + 200, "the old-only stream kept flowing after the switch"
    assert new and min(new) >= switched_at - 20, "the new-only stream flowed before the switch"
    # Phase 1 and phase 5 notices reached the subscriber, each sent twice, in order.
    phases = [(p, m, prev) for p, m, prev, _ in sink.notices]
    assert phases[:2] == [(wire.MODE_PREPARE, 1, 0)] * 2 and phases[2:] == [(wire.MODE_COMMIT, 1, 0)] * 2
    # Every router is in the new mode; routes of both modes stay installed.
    for r in _routers.values():
        assert r.stub.ListRoutes(rpb.ListRoutesRequest(), timeout=5).current_mode == 1


def test_bad_mode_requests_get_specific_errors_and_a_concurrent_change_is_refused(cloud: Cloud) -> None:
    broker, _routers = cloud
    with pytest.raises(grpc.RpcError) as err:
        broker.stub.ChangeMode(bpb.ChangeModeRequest(name="winter"), timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and reason(err.value) == "UnknownMode"
    with pytest.raises(grpc.RpcError) as err:
        broker.stub.ChangeMode(bpb.ChangeModeRequest(mode=3), timeout=5)
    assert reason(err.value) == "UnknownMode"
    with pytest.raises(grpc.RpcError) as err:
        broker.stub.DefineMode(bpb.DefineModeRequest(mode=16, name="x"), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    broker.stub.DefineMode(bpb.DefineModeRequest(mode=1, name="contingency"), timeout=5)
    broker.stub.DefineMode(bpb.DefineModeRequest(mode=2, name="summer"), timeout=5)
    with pytest.raises(grpc.RpcError) as err:
        broker.stub.DefineMode(bpb.DefineModeRequest(mode=3, name="summer"), timeout=5)
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    # Many changes at once: each either runs or is refused as retriable, never anything else.
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(broker.stub.ChangeMode, bpb.ChangeModeRequest(mode=m), timeout=10)
                   for m in (1, 2, 1, 2)]
    outcomes = []
    for f in futures:
        try:
            outcomes.append(f.result().current_mode)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE and reason(exc) == "ModeChangeInProgress"
            outcomes.append(-1)
    assert any(o >= 0 for o in outcomes)
    final = broker.stub.ListModes(bpb.ListModesRequest(), timeout=5)
    assert not final.changing
    for r in _routers.values():
        assert r.stub.ListRoutes(rpb.ListRoutesRequest(), timeout=5).current_mode == final.current_mode


def test_a_restarted_router_is_rebuilt_into_the_current_mode(cloud: Cloud) -> None:
    broker, routers = cloud
    broker.stub.DefineMode(bpb.DefineModeRequest(mode=4, name="storm"), timeout=5)
    broker.stub.ChangeMode(bpb.ChangeModeRequest(name="storm"), timeout=10)
    victim = routers["i1"]
    port, control_port = victim.port, victim.control_port
    victim.stop()
    time.sleep(0.5)
    routers["i1"] = restarted = start_router("i1", 2, port=port, control_port=control_port)
    assert wait_for(lambda: restarted.stub.ListRoutes(rpb.ListRoutesRequest(), timeout=2).current_mode == 4,
                    timeout_s=10)


def test_cli_defines_lists_and_changes_modes(cloud: Cloud) -> None:
    import json
    import subprocess
    import sys

    broker, _routers = cloud

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gridstat.cli.main", "mode", *argv, "--broker", broker.address],
                              capture_output=True, text=True, timeout=60)

    assert cli("define", "2", "summer").stdout.strip() == "mode 2 is 'summer'"
    out = cli("change", "summer")
    assert out.returncode == 0 and out.stdout.startswith("mode 0 -> 2 in "), out.stderr
    assert "switch-internal" in out.stdout
    same = cli("change", "2")
    assert same.returncode == 0 and "already current" in same.stdout
    listed = json.loads(cli("list", "-o", "json").stdout)
    assert listed["current_mode"] == 2
    assert [(m["mode"], m["name"], m["current"]) for m in listed["modes"]] == [
        (0, "normal", False), (2, "summer", True)]
    bad = cli("change", "winter")
    assert bad.returncode == 2 and "UnknownMode" in bad.stderr + bad.stdout


async def test_sdk_subscriber_is_told_and_sees_no_false_violation_across_a_switch(tmp_path: Path) -> None:
    import asyncio

    from gridstat.client import Holder, Publisher, Subscriber, Subscription, Violation
    from gridstat.core.model import FLOAT as FLOAT_T

    proxied = brokerprocs.cloud(tmp_path, ROUTERS, LINKS, proxied=("e1", "e2"))
    broker, routers = await asyncio.to_thread(proxied.__enter__)
    pub = sub = None
    try:
        await asyncio.to_thread(broker.stub.DefineMode, bpb.DefineModeRequest(mode=1, name="contingency"),
                                timeout=5)
        got: list[int] = []
        bad: list[Violation] = []
        told: list[tuple[str, int, int]] = []
        pub = await Publisher.connect("pmu1", f"127.0.0.1:{routers['e1'].control_port}")
        sub = await Subscriber.connect("ems", f"127.0.0.1:{routers['e2'].control_port}")
        sub.on_mode_change = lambda phase, mode, prev: told.append((phase, mode, prev))
        handle = await pub.register("freq", FLOAT_T, 10)

        def on_event(s: Subscription, h: Holder) -> None:
            got.append(h.timestamp_ms)

        s = await sub.subscribe_remote("pmu1/freq", FLOAT_T, interval_ms=0, latency_ms=200, modes={0: 20, 1: 40},
                                       on_event=on_event, on_violation=lambda _s, v: bad.append(v))
        assert s.interval_ms == 20 and sub.current_mode == 0

        last = [0]

        async def publish_for(seconds: float) -> None:
            # Every 10 ms instant exactly once, catching up after a late wake-up: the publisher
            # itself never leaves a gap, so any gap would be the switch's.
            end = asyncio.get_running_loop().time() + seconds
            while asyncio.get_running_loop().time() < end:
                now = handle.default_ts()
                ts = last[0] + 10 if last[0] else now
                while ts <= now:
                    handle.publish(50.0, ts)
                    last[0] = ts
                    ts += 10
                await asyncio.sleep(0.005)

        await publish_for(0.6)
        assert got, "no events before the switch"
        switching = asyncio.create_task(publish_for(1.0))
        await asyncio.sleep(0.2)
        reply = await asyncio.to_thread(broker.stub.ChangeMode, bpb.ChangeModeRequest(name="contingency"), timeout=10)
        assert reply.changed
        await switching
        assert told == [("prepare", 1, 0), ("commit", 1, 0)]
        assert sub.current_mode == 1 and not sub.is_mode_change and s.interval_ms == 40
        assert bad == [], f"false QoS callbacks across the switch: {bad}"
        after = [t for t in got if t > got[-1] - 400]
        assert all(t % 40 == 0 for t in after[-5:]), "the new mode's interval is not applied"
        assert len(got) == len(set(got))
    finally:
        if pub is not None:
            await pub.stop()
        if sub is not None:
            await sub.stop()
        await asyncio.to_thread(proxied.__exit__, None, None, None)
