"""Condensation functions with real processes: a leaf broker places them, routers run them.

Cloud: e1 - i1 - e2 (1 ms links). Publishers p1 and p2 at e1, p3 at e2 publish constant
values every 10 ms; subscriber "ems" at e2. The routers can load the calculator ``boom``
(it always raises) from an entry point installed for the test (PYTHONPATH).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import grpc
import pytest

from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import condensation_pb2 as cpb
from gridstat.v1 import router_pb2 as rpb

from . import brokerprocs
from .brokerprocs import FLOAT, BrokerProc, Cloud, register_publisher, register_subscriber, start_broker
from .fixtures import Feed, Sink, wait_for
from .routerprocs import RouterProc, start_router

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

VALUES = {"p1": 1.0, "p2": 2.0, "p3": 6.0}  # average 3.0, sum 9.0
EDGE = {"p1": "e1", "p2": "e1", "p3": "e2"}


@contextlib.contextmanager
def feeding(broker: BrokerProc, routers: Mapping[str, RouterProc],
            edges: Mapping[str, str]) -> Iterator[tuple[Sink, dict[str, int]]]:
    """Publishers (name -> edge router) publishing their ``VALUES`` as ``v`` every 10 ms, and subscriber
    ems at e2: its sink and the variable ids by publisher."""
    sink = Sink()
    feeds: list[Feed] = []
    try:
        ids: dict[str, int] = {}
        for pub, edge in edges.items():
            client, (ids[pub],) = register_publisher(broker, pub, edge, ("v",))
            feeds.append(Feed(routers[edge].port, client, ids[pub], value=struct.pack(">d", VALUES[pub])))
        register_subscriber(broker, "ems", "e2", sink.port)
        yield sink, ids
    finally:
        for f in feeds:
            f.stop()
        sink.close()


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A distribution registering calculator ``boom`` under ``gridstat.calculators``."""
    root = tmp_path_factory.mktemp("calcs")
    (root / "gs_it_calcs.py").write_text(textwrap.dedent("""
        from gridstat.condensation import Calculator

        class Boom(Calculator):
            def calculate(self):
                raise RuntimeError("calculator bug")
    """))
    dist = root / "gs_it_calcs-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: gs-it-calcs\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[gridstat.calculators]\nboom = gs_it_calcs:Boom\n")
    yield root


@pytest.fixture(scope="module")
def cloud(plugin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(plugin), os.environ.get("PYTHONPATH", "")) if p))
        with brokerprocs.cloud(tmp_path_factory.mktemp("broker"), [("e1", 1, "edge"), ("i1", 2, "internal"),
                               ("e2", 3, "edge")], [("e1", "i1", 1.0), ("i1", "e2", 1.0)]) as c:
            yield c


#: The cloud, the subscriber's sink and the variable ids by publisher, while the publishers feed.
Running = tuple[BrokerProc, dict[str, RouterProc], Sink, dict[str, int]]


@pytest.fixture(scope="module")
def running(cloud: Cloud) -> Iterator[Running]:
    """The three publishers feeding and the subscriber's sink registered; yields variable ids by publisher."""
    broker, routers = cloud
    with feeding(broker, routers, EDGE) as (sink, ids):
        yield broker, routers, sink, ids


def create(broker: BrokerProc, function_id: str, inputs: list[str], output: str, *, calculator: str = "average",
           trigger: cpb.Trigger | None = None, creator: str = "ops", publisher: str = "cf") -> bpb.CondensationInfo:
    return broker.stub.CreateCondensation(bpb.CreateCondensationRequest(
        creator=creator, function_id=function_id,
        output=bpb.Publication(publisher=publisher, variable=output, type=FLOAT, interval_ms=100),
        inputs=[bpb.CondensationInputRequest(variable=v, latency_ms=50) for v in inputs],
        spec=cpb.CondensationSpec(calculator=calculator,
                                  trigger=trigger or cpb.Trigger(kind=cpb.TRIGGER_KIND_TIME, interval_ms=100))),
        timeout=15)


def subscribe(broker: BrokerProc, variable: str, interval_ms: int) -> bpb.SubscribeReply:
    reply = broker.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
        subscriber="ems", variable=variable, type=FLOAT, edge_router="e2",
        qos=[bpb.ModeQoS(mode=0, interval_ms=interval_ms, latency_ms=50)])), timeout=10)
    assert reply.admitted, reply.rejection
    return reply


def status(broker: BrokerProc, function_id: str) -> cpb.CondensationStatus | None:
    for f in broker.stub.ListCondensations(bpb.ListCondensationsRequest(), timeout=5).functions:
        if f.function_id == function_id:
            return f.status
    return None


def average(broker: BrokerProc) -> int:
    """The output variable of ``avg`` (the average of p1, p2, p3), created and subscribed to if not yet."""
    if status(broker, "avg") is None:
        create(broker, "avg", ["p1/v", "p2/v", "p3/v"], "avg")
        subscribe(broker, "cf/avg", 100)
    return next(f for f in broker.stub.ListCondensations(bpb.ListCondensationsRequest(), timeout=5).functions
                if f.function_id == "avg").output.variable_id


def functions(r: RouterProc) -> set[str]:
    """The condensation functions router ``r`` runs."""
    return {c.function_id for c in r.stub.GetStats(rpb.GetStatsRequest(), timeout=5).condensations}


def metadata(exc: grpc.RpcError) -> dict[str, str]:
    return {k: v for k, v in (exc.trailing_metadata() or ())}  # type: ignore[attr-defined]


def test_an_average_of_three_publishers_on_two_edges_reaches_a_subscriber(running: Running) -> None:
    broker, _, sink, _ = running
    info = create(broker, "avg", ["p1/v", "p2/v", "p3/v"], "avg")
    # The inputs are on two edge routers: the search puts the function where the worst input path
    # is shortest, i1 (1 link away from each edge).
    assert (info.router, info.placement) == ("i1", "search")
    assert info.output.variable_id and info.output.edge_router == "i1"
    assert list(info.input_subscriptions) == ["cf.avg.0", "cf.avg.1", "cf.avg.2"]
    out = subscribe(broker, "cf/avg", 100)
    assert [tuple(p.routers) for p in out.allocations[0].paths] == [("i1", "e2")]
    vid = info.output.variable_id
    assert wait_for(lambda: len(sink.floats(vid)) >= 5, timeout_s=8)
    got = sink.floats(vid)
    assert all(v == pytest.approx(3.0) for _, v in got[1:])  # the first may precede an input's first event
    assert all(ts % 100 == 0 for ts, _ in got)
    assert {b - a for (a, _), (b, _) in itertools.pairwise(got)} == {100}
    s = status(broker, "avg")
    assert s is not None and s.router == "i1" and s.outputs >= 5 and s.calculator_errors == 0
    assert s.inputs >= 3 * 10 * s.outputs // 2  # every 10 ms input reaches the function


def test_an_unknown_input_is_refused_with_the_field_and_nothing_is_left(running: Running) -> None:
    broker, routers, _, _ = running
    before = len(broker.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions)
    with pytest.raises(grpc.RpcError) as info:
        create(broker, "bad", ["p1/v", "p9/nope"], "bad")
    assert info.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
    md = metadata(info.value)
    assert (md["gridstat-reason"], md["gridstat-field"]) == ("UnknownVariable", "inputs[1].variable")
    # A calculator no router has is refused by the router, and the broker undoes the placement.
    with pytest.raises(grpc.RpcError) as info:
        create(broker, "bad", ["p1/v", "p3/v"], "bad", calculator="not_installed")
    assert metadata(info.value)["gridstat-field"] == "spec.calculator"
    assert status(broker, "bad") is None
    assert len(broker.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions) == before
    pubs = broker.stub.ListPublications(bpb.ListPublicationsRequest(), timeout=5).publications
    assert "bad" not in {p.variable for p in pubs}
    assert all("bad" not in functions(r) for r in routers.values())


def test_a_raising_calculator_is_counted_while_admitted_streams_keep_flowing(running: Running) -> None:
    broker, _, sink, ids = running
    avg = average(broker)
    subscribe(broker, "p2/v", 20)
    info = create(broker, "boom", ["p1/v"], "boom", calculator="boom", publisher="alarms",
                  trigger=cpb.Trigger(kind=cpb.TRIGGER_KIND_EVENTS, count=1))
    assert (info.router, info.placement) == ("e1", "shared-edge")
    assert wait_for(lambda: (status(broker, "boom") or cpb.CondensationStatus()).calculator_errors >= 20, timeout_s=8)
    s = status(broker, "boom")
    assert s is not None and s.last_error == "RuntimeError: calculator bug" and s.outputs == 0
    # The direct stream and the other function's output keep flowing on every router.
    n_direct, n_avg = len(sink.floats(ids["p2"])), len(sink.floats(avg))
    # 50 a second at 20 ms and 10 a second at 100 ms: about a second's worth of each.
    assert wait_for(lambda: len(sink.floats(ids["p2"])) >= n_direct + 40 and len(sink.floats(avg)) >= n_avg + 8,
                    timeout_s=10), (len(sink.floats(ids["p2"])) - n_direct, len(sink.floats(avg)) - n_avg)


def test_only_the_creator_removes_a_function(running: Running) -> None:
    broker, routers, sink, _ = running
    info = create(broker, "sum", ["p1/v", "p3/v"], "sum", calculator="sum", creator="alice")
    subscribe(broker, "cf/sum", 100)
    vid = info.output.variable_id
    assert wait_for(lambda: len(sink.floats(vid)) >= 2, timeout_s=8)
    assert all(v == pytest.approx(7.0) for _, v in sink.floats(vid)[1:])
    with pytest.raises(grpc.RpcError) as refused:
        broker.stub.RemoveCondensation(bpb.RemoveCondensationRequest(function_id="sum", creator="mallory"),
                                       timeout=5)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
    assert metadata(refused.value)["gridstat-reason"] == "Unauthorized"
    assert status(broker, "sum") is not None
    reply = broker.stub.RemoveCondensation(bpb.RemoveCondensationRequest(function_id="sum", creator="alice"),
                                           timeout=10)
    assert reply.subscriptions_removed == 3  # two inputs and ems's subscription to the output
    assert status(broker, "sum") is None
    subs = broker.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions
    assert not any(s.subscription.subscription_id.startswith("cf.sum.") or s.subscription.variable == "cf/sum"
                   for s in subs)
    r = routers[info.router]
    assert wait_for(lambda: "sum" not in functions(r))
    n = len(sink.floats(vid))
    time.sleep(0.4)
    assert len(sink.floats(vid)) <= n + 1  # nothing more after the removal (one may be in flight)


def test_a_restarted_router_gets_its_function_back(running: Running) -> None:
    broker, routers, sink, _ = running
    avg = average(broker)
    victim = routers["i1"]
    port, control_port = victim.port, victim.control_port
    victim.stop(signal.SIGKILL)
    time.sleep(0.5)
    routers["i1"] = start_router("i1", 2, port=port, control_port=control_port)
    n = len(sink.floats(avg))
    assert wait_for(lambda: len(sink.floats(avg)) >= n + 5, timeout_s=10)
    assert all(v == pytest.approx(3.0) for _, v in sink.floats(avg)[n + 1:])


def test_a_restarted_broker_restores_its_functions_and_can_remove_them(running: Running) -> None:
    broker, routers, sink, _ = running
    avg = average(broker)
    broker.stop(signal.SIGKILL)
    n = len(sink.floats(avg))
    # The router runs the function without the broker (10 outputs a second).
    assert wait_for(lambda: len(sink.floats(avg)) >= n + 3, timeout_s=10), len(sink.floats(avg)) - n
    again = start_broker("A", broker.state)
    broker.proc, broker.port, broker.channel, broker.stub = again.proc, again.port, again.channel, again.stub
    info = next(f for f in broker.stub.ListCondensations(bpb.ListCondensationsRequest(), timeout=5).functions
                if f.function_id == "avg")
    assert (info.router, info.creator, info.output.variable_id) == ("i1", "ops", avg)
    assert info.status.router == "i1" and info.status.outputs > 0
    # The restored reservations and publisher: a new function can share the publisher at i1.
    assert create(broker, "max", ["p1/v", "p3/v"], "max", calculator="max").router == "i1"
    assert broker.stub.RemoveCondensation(bpb.RemoveCondensationRequest(function_id="avg", creator="ops"),
                                          timeout=10).subscriptions_removed == 4
    assert wait_for(lambda: "avg" not in functions(routers["i1"]))


def gridstat(*args: str, timeout_s: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gridstat.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout_s)


def test_cli_create_list_remove(running: Running, tmp_path: Path) -> None:
    broker, _, sink, _ = running
    spec = tmp_path / "area.yaml"
    spec.write_text(textwrap.dedent("""
        function_id: area-max
        creator: ops
        inputs:
          - {variable: p2/v, latency_ms: 50}
          - {variable: p3/v, latency_ms: 50}
        output: {publisher: area, variable: max, interval_ms: 100}
        spec:
          calculator: max
          trigger: {kind: time, interval_ms: 100}
    """))
    made = gridstat("condense", "create", "--spec", str(spec), "--broker", broker.address, "-o", "json")
    assert made.returncode == 0, made.stderr
    (info,) = json.loads(made.stdout)
    assert info["function_id"] == "area-max" and info["output"] == "area/max"
    subscribe(broker, "area/max", 100)
    assert wait_for(lambda: len(sink.floats(info["output_variable_id"])) >= 3, timeout_s=8)
    assert all(v == 6.0 for _, v in sink.floats(info["output_variable_id"])[1:])
    listed = gridstat("condense", "list", "--broker", broker.address, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    (row,) = [f for f in json.loads(listed.stdout) if f["function_id"] == "area-max"]
    assert row["status"]["outputs"] >= 3 and row["router"] == info["router"]
    assert "area-max" in gridstat("condense", "list", "--broker", broker.address).stdout
    refused = gridstat("condense", "remove", "area-max", "--creator", "eve", "--broker", broker.address)
    assert refused.returncode == 2 and "Unauthorized" in refused.stderr
    removed = gridstat("condense", "remove", "area-max", "--creator", "ops", "--broker", broker.address)
    assert removed.returncode == 0 and "3 subscriptions removed" in removed.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("inputs: [{variable: p1/v}]\noutput: {variable: x}\nspec: {calculator: avg, trigger: {count: -1}}\n")
    failed = gridstat("condense", "create", "--spec", str(bad), "--creator", "ops", "--broker", broker.address)
    assert failed.returncode == 2 and "spec.trigger" in failed.stderr


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[Cloud]:
    """A broker and two edge routers that proxy their clients' commands to it (--broker)."""
    with brokerprocs.edge_pair(tmp_path, ids=(11, 12), name="B") as c:
        yield c


def test_the_standalone_host_role_condenses_through_an_edge_router(proxied: Cloud, tmp_path: Path) -> None:
    broker, routers = proxied
    spec = tmp_path / "host.yaml"
    spec.write_text(textwrap.dedent("""
        function_id: host1
        inputs:
          - {variable: p1/v, latency_ms: 50}
          - {variable: p3/v, latency_ms: 50}
        output: {publisher: hostpub, variable: avg}
        spec:
          calculator: average
          trigger: {kind: time, interval_ms: 100}
    """))
    with feeding(broker, routers, {"p1": "e1", "p3": "e2"}) as (sink, _):
        host = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "condense", "host", "--edge",
                                 f"127.0.0.1:{routers['e1'].control_port}", "--spec", str(spec), "--exit-with-parent"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert host.stdout is not None
            line = host.stdout.readline()
            assert line.startswith("READY name=host1 output=hostpub/avg"), (line, host.stderr.read() if
                                                                           host.poll() is not None else "")
            vid = int(line.rsplit("variable_id=", 1)[1])
            out = broker.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
                subscriber="ems", variable="hostpub/avg", type=FLOAT, edge_router="e2",
                qos=[bpb.ModeQoS(mode=0, interval_ms=100, latency_ms=50)])), timeout=10)
            assert out.admitted, out.rejection
            assert wait_for(lambda: len(sink.floats(vid)) >= 4, timeout_s=8)
            assert all(v == pytest.approx(3.5) and ts % 100 == 0 for ts, v in sink.floats(vid)[1:])
            host.send_signal(signal.SIGTERM)
            rest, _ = host.communicate(timeout=10)
            final = json.loads(rest.split("STATUS ", 1)[1])
            assert final["outputs"] >= 4 and final["calculator_errors"] == 0 and final["function_id"] == "host1"
            # On exit the host removed its input subscriptions and its publication (and so ems's subscription).
            subs = broker.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions
            assert subs == []
            pubs = broker.stub.ListPublications(bpb.ListPublicationsRequest(), timeout=5).publications
            assert sorted(f"{p.publisher}/{p.variable}" for p in pubs) == ["p1/v", "p3/v"]
        finally:
            if host.poll() is None:
                host.kill()
                host.wait(timeout=5)
