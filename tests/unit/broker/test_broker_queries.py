"""Standing query subscriptions at the leaf broker (broker.querying, docs/queries.md): the pure plan,
then a broker in process over two real routers' control services: variables matched now and
registered later admitted one by one, rejections kept per variable, unregistered ones dropped,
restart, the listing's where and the errors of a bad expression."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from gridstat.broker.leaf import LeafBroker
from gridstat.broker.querying import Member, Query, plan, query_from_json, query_to_json
from gridstat.broker.service import QoSBrokerServicer
from gridstat.broker.state import ModeQoS, RouterEndpoint
from gridstat.broker.store import BrokerStore
from gridstat.broker.topology import RouterRole
from gridstat.core.model import FLOAT, StatusVariable
from gridstat.errors import ValidationError
from gridstat.router.control import serve
from gridstat.router.process import RouterConfig, StatusRouter
from gridstat.v1 import broker_pb2 as pb
from gridstat.v1 import broker_pb2_grpc as pb_grpc

QOS = (ModeQoS(0, 20, 50.0, 1),)
WEST_FREQ = {"kind": "freq", "region": "west"}


def var(publisher: str, name: str, vid: int, **attributes: str) -> StatusVariable:
    return StatusVariable(publisher, name, FLOAT, 20, variable_id=vid, attributes=attributes)


# -- the plan (pure) ----------------------------------------------------------------------------------


def test_the_plan_admits_matching_variables_without_a_member_and_forgets_gone_ones() -> None:
    q = Query("A-q1", "ems", "kind = 'freq' and region = 'west'", QOS, "e1",
              members={"pmu1/freq": Member("pmu1/freq", "A-s1"), "old/freq": Member("old/freq", "A-s2"),
                       "pmu4/freq": Member("pmu4/freq", reason="NoFeasiblePath", message="no path")})
    variables = [var("pmu1", "freq", 1, **WEST_FREQ), var("pmu1", "vphm", 2, kind="vphm", region="west"),
                 var("pmu2", "freq", 3, **WEST_FREQ), var("pmu3", "freq", 4, kind="freq", region="east"),
                 var("pmu4", "freq", 5, **WEST_FREQ)]
    todo = plan(q, variables)
    assert [v.full_name for v in todo.admit] == ["pmu2/freq"]  # pmu4 was rejected: not retried
    assert todo.forget == ("old/freq",)


def test_an_incomplete_listing_forgets_no_missing_variable_but_a_changed_one() -> None:
    """Another cloud's broker did not answer (docs/queries.md, "Across clouds"): a variable missing from
    the listing may be there still, so only one listed that no longer matches is forgotten."""
    q = Query("A-q1", "ems", "kind = 'freq'", QOS, "e1",
              members={"b1/freq": Member("b1/freq", "A-s1"), "b2/freq": Member("b2/freq", "A-s2")})
    listed = [var("b2", "freq", 2, kind="vphm"), var("b3", "freq", 3, kind="freq")]
    todo = plan(q, listed, keep_missing=True)
    assert [v.full_name for v in todo.admit] == ["b3/freq"] and todo.forget == ("b2/freq",)
    assert plan(q, listed).forget == ("b1/freq", "b2/freq")


def test_a_query_is_stored_as_json_and_read_back() -> None:
    q = Query("A-q1", "ems", "station like 'W%'", QOS, "e1",
              members={"a/b": Member("a/b", "A-s1"), "c/d": Member("c/d", reason="X", message="m", field="f"),
                       "e/f": Member("e/f", "A-s2", reply=pb.SubscribeReply(admitted=True).SerializeToString())})
    back = query_from_json(query_to_json(q))
    assert back == q and back.members == q.members and back.expression == q.expression


def test_a_bad_expression_is_refused_with_the_field_and_column() -> None:
    with pytest.raises(ValidationError, match=r"query\.where at column 6") as caught:
        Query("A-q1", "ems", "kind ~ 'x'", QOS, "e1")
    assert caught.value.field == "query.where"


# -- a broker in process --------------------------------------------------------------------------------


@dataclass
class Cloud:
    broker: LeafBroker
    stub: pb_grpc.QoSBrokerStub
    path: Path


@pytest.fixture
async def cloud(tmp_path: Path) -> AsyncIterator[Cloud]:
    """Leaf broker A over e1 and e2 (no channel between them: e2's publishers have no path to e1)."""
    servers = []
    broker = LeafBroker("A", BrokerStore(str(tmp_path / "A.sqlite")), supervise_interval_s=60)
    await broker.start()
    for name, rid in (("e1", 1), ("e2", 2)):
        rserver, rport = await serve(StatusRouter(RouterConfig(name=name, router_id=rid)), "127.0.0.1", 0)
        servers.append(rserver)
        await broker.add_router(RouterEndpoint(name, rid, f"127.0.0.1:{rport}", "127.0.0.1", 40000 + rid),
                                RouterRole.EDGE, 50_000)
    for publisher in ("pmu1", "pmu2", "pmu3", "far"):
        await broker.register_client(publisher, "publisher", "e2" if publisher == "far" else "e1")
    await broker.register_client("ems", "subscriber", "e1", "127.0.0.1", 40009)
    server = grpc.aio.server()
    pb_grpc.add_QoSBrokerServicer_to_server(QoSBrokerServicer(broker), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield Cloud(broker, pb_grpc.QoSBrokerStub(channel), tmp_path)  # type: ignore[no-untyped-call]
    await server.stop(0)
    await broker.stop()
    for rserver in servers:
        await rserver.stop(0)


async def publish(b: LeafBroker, publisher: str, name: str, **attributes: str) -> StatusVariable:
    edge = "e2" if publisher == "far" else "e1"
    return await b.register_publication(publisher, name, FLOAT, interval_ms=20, priority=1, edge_router=edge,
                                        attributes=attributes)


async def until(predicate: object, what: str) -> None:
    for _ in range(200):
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_matching_variables_now_and_later_are_admitted_and_unregistered_ones_dropped(cloud: Cloud) -> None:
    b = cloud.broker
    await publish(b, "pmu1", "freq", **WEST_FREQ)
    await publish(b, "pmu1", "vphm", kind="vphm", region="west")
    await publish(b, "pmu2", "freq", **WEST_FREQ)
    await publish(b, "far", "freq", **WEST_FREQ)
    q = await b.queries.add("ems", "kind = 'freq' and region = 'west'", QOS, edge_router="e1")
    assert sorted(m.variable for m in q.members.values() if m.admitted) == ["pmu1/freq", "pmu2/freq"]
    far = q.members["far/freq"]
    assert not far.admitted and far.reason == "NoFeasiblePath"  # one rejection leaves the others admitted
    subs = {r.variable: r for r in b.state.subscriptions.values()}
    assert set(subs) == {"pmu1/freq", "pmu2/freq"} and all(r.subscriber == "ems" for r in subs.values())
    assert subs["pmu1/freq"].qos == QOS

    await publish(b, "pmu3", "freq", **WEST_FREQ)  # registered later: admitted in the background
    await publish(b, "pmu3", "temp", kind="temp", region="west")  # not matching: left alone
    await until(lambda: "pmu3/freq" in b.queries.queries[q.query_id].members, "pmu3/freq admitted")
    assert b.queries.queries[q.query_id].members["pmu3/freq"].admitted
    assert {r.variable for r in b.state.subscriptions.values()} == {"pmu1/freq", "pmu2/freq", "pmu3/freq"}

    await b.unregister_publication("pmu1/freq")
    assert "pmu1/freq" not in b.queries.queries[q.query_id].members
    assert {r.variable for r in b.state.subscriptions.values()} == {"pmu2/freq", "pmu3/freq"}

    listed = await cloud.stub.ListQueries(pb.ListQueriesRequest(subscriber="ems"), timeout=5)
    (reply,) = listed.queries
    assert reply.query.where == "kind = 'freq' and region = 'west'" and reply.query.qos[0].interval_ms == 20
    outcome = {m.variable: (m.admitted, m.rejection.reason) for m in reply.members}
    assert outcome == {"pmu2/freq": (True, ""), "pmu3/freq": (True, ""), "far/freq": (False, "NoFeasiblePath")}
    assert all(m.subscription.allocations[0].paths[0].routers == ["e1"] for m in reply.members if m.admitted)

    # a restarted broker reads the query back, and its subscriptions with the others
    again = LeafBroker("A", BrokerStore(str(cloud.path / "A.sqlite")), supervise_interval_s=60)
    again._load()
    try:
        held = again.queries.queries[q.query_id]
        assert held.where == q.where and set(held.members) == {"pmu2/freq", "pmu3/freq", "far/freq"}
    finally:
        again.store.close()

    gone = await cloud.stub.UnsubscribeQuery(pb.UnsubscribeQueryRequest(query_id=q.query_id), timeout=5)
    assert gone.subscriptions_removed == 2 and not b.state.subscriptions and not b.queries.queries


async def test_a_restarted_subscriber_loses_its_queries(cloud: Cloud) -> None:
    b = cloud.broker
    await publish(b, "pmu1", "freq", **WEST_FREQ)
    await b.queries.add("ems", "kind = 'freq'", QOS, edge_router="e1")
    assert len(b.state.subscriptions) == 1
    await b.register_client("ems", "subscriber", "e1", "127.0.0.1", 40009, first_time=True)
    assert not b.queries.queries and not b.state.subscriptions
    assert not b.store.all("queries")


async def test_the_rpcs_refuse_bad_input_with_the_field_and_column(cloud: Cloud) -> None:
    b = cloud.broker
    await publish(b, "pmu1", "freq", **WEST_FREQ)
    await publish(b, "pmu1", "vphm", kind="vphm", region="west")
    listed = await cloud.stub.ListPublications(pb.ListPublicationsRequest(where="kind in ('vphm')"), timeout=5)
    assert [(p.publisher, p.variable, p.attributes["kind"]) for p in listed.publications] == [("pmu1", "vphm", "vphm")]
    everything = await cloud.stub.ListPublications(pb.ListPublicationsRequest(), timeout=5)
    assert len(everything.publications) == 2

    async def status(call: object) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call  # type: ignore[misc]
        return caught.value.code(), caught.value.details() or ""

    code, details = await status(cloud.stub.ListPublications(pb.ListPublicationsRequest(where="kind = "),
                                                              timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "where at column 8" in details
    query = pb.QuerySubscription(subscriber="ems", where="kind = 'freq' or", edge_router="e1",
                                 qos=[pb.ModeQoS(mode=0, interval_ms=20, latency_ms=50, redundancy=1)])
    code, details = await status(cloud.stub.SubscribeQuery(pb.SubscribeQueryRequest(query=query), timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "query.where at column 17" in details
    query.where, query.edge_router = "kind = 'freq'", "e2"
    code, details = await status(cloud.stub.SubscribeQuery(pb.SubscribeQueryRequest(query=query), timeout=5))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "not 'e2'" in details
    code, _ = await status(cloud.stub.UnsubscribeQuery(pb.UnsubscribeQueryRequest(query_id="A-q9"), timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND
    assert not b.queries.queries and not b.state.subscriptions
