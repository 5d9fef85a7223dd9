"""Limited flooding at the leaf broker: holder precedence, the requests it sends, bad input, and the
push to (and rebuild of) a real router's control service in process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from gridstat.broker.flooding import FloodingHolder, check_level, check_modes, reconcile_plan, router_requests
from gridstat.broker.leaf import LeafBroker
from gridstat.broker.service import QoSBrokerServicer
from gridstat.broker.state import RouterEndpoint
from gridstat.broker.store import BrokerStore
from gridstat.broker.topology import RouterRole
from gridstat.core.model import FLOAT, StatusVariable
from gridstat.errors import ValidationError
from gridstat.router.control import serve
from gridstat.router.process import RouterConfig, StatusRouter
from gridstat.v1 import broker_pb2 as pb
from gridstat.v1 import broker_pb2_grpc as pb_grpc
from gridstat.v1 import router_pb2 as rpb

VAR = StatusVariable("pmu", "freq", FLOAT, 20, 1, variable_id=5)


# -- the holder (pure) ------------------------------------------------------------------------------
def test_the_parent_setting_overrides_the_local_one_and_removing_it_falls_back() -> None:
    h = FloodingHolder(VAR)
    h.set([0, 1], 1, from_parent=False)
    h.set([1, 4], 2, from_parent=True)
    assert h.effective() == {0: 1, 1: 2, 4: 2}
    assert h.entries() == [(0, 1, False), (1, 2, True), (1, 1, False), (4, 2, True)]
    assert h.remove([1, 4], from_parent=True) == 2
    assert h.effective() == {0: 1, 1: 1}
    assert h.remove([0, 1, 9], from_parent=False) == 2 and h.empty
    h.set([3], 3, from_parent=True)
    assert FloodingHolder.from_json(h.to_json()) == h


def test_router_requests_group_modes_by_level_and_remove_the_rest() -> None:
    h = FloodingHolder(VAR, local={0: 1, 2: 1}, parent={3: 2})
    sets, remove = router_requests(h, [0, 2, 3, 7])
    assert [(s.level, list(s.modes), s.pub_interval_ms, s.variable_id) for s in sets] == [(1, [0, 2], 20, 5),
                                                                                       (2, [3], 20, 5)]
    assert remove is not None and list(remove.modes) == [7]
    assert router_requests(h, [0])[1] is None


def test_reconcile_plan_sets_what_differs_and_removes_what_no_holder_wants() -> None:
    h = FloodingHolder(VAR, local={0: 1, 1: 1})
    have = [rpb.SetFloodingRequest(variable_id=5, pub_interval_ms=20, level=1, modes=[0]),
            rpb.SetFloodingRequest(variable_id=5, pub_interval_ms=20, level=2, modes=[1, 6]),
            rpb.SetFloodingRequest(variable_id=99, pub_interval_ms=10, level=1, modes=[0])]
    sets, removes = reconcile_plan([h], have)
    assert [(s.variable_id, s.level, list(s.modes)) for s in sets] == [(5, 1, [1])]
    assert sorted((r.variable_id, list(r.modes)) for r in removes) == [(5, [6]), (99, [0])]
    assert reconcile_plan([h], [rpb.SetFloodingRequest(variable_id=5, pub_interval_ms=20, level=1,
                                                       modes=[0, 1])]) == ([], [])


@pytest.mark.parametrize(("level", "from_parent", "expected"), [(0, False, 1), (1, False, 1), (2, True, 2)])
def test_levels(level: int, from_parent: bool, expected: int) -> None:
    assert check_level(level, height=1, from_parent=from_parent) == expected


@pytest.mark.parametrize(("level", "from_parent"), [(2, False), (0, True), (65, True)])
def test_bad_levels(level: int, from_parent: bool) -> None:
    with pytest.raises(ValidationError) as err:
        check_level(level, height=1, from_parent=from_parent)
    assert err.value.field == "level"


def test_modes_are_0_to_15() -> None:
    assert check_modes([3, 0, 3]) == (3, 0)
    with pytest.raises(ValidationError) as err:
        check_modes([16])
    assert err.value.field == "modes"


# -- a leaf broker over one router in process ---------------------------------------------------------
@dataclass
class Cloud:
    broker: LeafBroker
    router: StatusRouter
    stub: pb_grpc.QoSBrokerStub
    variable_id: int


@pytest.fixture
async def cloud(tmp_path: Path) -> AsyncIterator[Cloud]:
    router = StatusRouter(RouterConfig(name="e1", router_id=1))
    rserver, rport = await serve(router, "127.0.0.1", 0)
    broker = LeafBroker("A", BrokerStore(str(tmp_path / "A.sqlite")), supervise_interval_s=60)
    await broker.start()
    server = grpc.aio.server()
    pb_grpc.add_QoSBrokerServicer_to_server(QoSBrokerServicer(broker), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await broker.add_router(RouterEndpoint("e1", 1, f"127.0.0.1:{rport}", "127.0.0.1", 40000), RouterRole.EDGE,
                            50_000)
    await broker.register_client("pmu", "publisher", "e1")
    await broker.register_client("ems", "subscriber", "e1", "127.0.0.1", 40001)
    var = await broker.register_publication("pmu", "freq", FLOAT, interval_ms=20, priority=1, edge_router="e1")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield Cloud(broker, router, pb_grpc.QoSBrokerStub(channel), var.variable_id)  # type: ignore[no-untyped-call]
    await server.stop(0)
    await broker.stop()
    await rserver.stop(0)


def levels(router: StatusRouter, vid: int) -> dict[int, int]:
    return {m: s.level for (v, m), s in router.flooding.settings.items() if v == vid}


async def test_set_list_and_remove_reach_the_router(cloud: Cloud) -> None:
    stub, router, vid = cloud.stub, cloud.router, cloud.variable_id
    reply = await stub.SetFlooding(pb.BrokerFloodingRequest(variable="pmu/freq", modes=[0, 2]))
    assert [(e.mode, e.level, e.from_parent) for e in reply.flooding] == [(0, 1, False), (2, 1, False)]
    assert reply.flooding[0].publication.variable_id == vid and reply.flooding[0].publication.interval_ms == 20
    assert levels(router, vid) == {0: 1, 2: 1}
    assert router.table.entry(vid) is not None  # flooded, no route: the entry exists anyway

    # An ancestor floods it wider in mode 2 and 5: its setting wins where both are set.
    reply = await stub.SetFlooding(pb.BrokerFloodingRequest(variable="pmu/freq", level=2, modes=[2, 5],
                                                            from_parent=True))
    assert levels(router, vid) == {0: 1, 2: 2, 5: 2}
    listed = await stub.ListFlooding(pb.ListFloodingRequest())
    assert [(e.mode, e.level, e.from_parent) for e in listed.flooding] == [(0, 1, False), (2, 2, True),
                                                                          (2, 1, False), (5, 2, True)]
    # The ancestor's removal falls back to the local setting.
    await stub.RemoveFlooding(pb.BrokerFloodingRequest(variable="pmu/freq", modes=[2, 5], from_parent=True))
    assert levels(router, vid) == {0: 1, 2: 1}
    await stub.RemoveFlooding(pb.BrokerFloodingRequest(variable="pmu/freq", modes=[0, 2]))
    assert levels(router, vid) == {} and router.table.entry(vid) is None
    assert (await stub.ListFlooding(pb.ListFloodingRequest())).flooding == []


async def test_empty_modes_mean_the_current_mode(cloud: Cloud) -> None:
    await cloud.stub.SetFlooding(pb.BrokerFloodingRequest(variable="pmu/freq"))
    assert levels(cloud.router, cloud.variable_id) == {cloud.broker.current_mode: 1}


async def test_flood_all_sets_the_subscriber_channel_in_place(cloud: Cloud) -> None:
    await cloud.stub.SetFlooding(pb.BrokerFloodingRequest(variable="pmu/freq", modes=[0]))
    ch = cloud.router.channels["sub:ems"]
    reply = await cloud.stub.SetFloodAll(pb.SetFloodAllRequest(subscriber="ems", enabled=True))
    assert [e.variable for e in reply.flooding] == ["pmu/freq"]
    assert cloud.router.channels["sub:ems"] is ch and ch.flood_all  # the same channel: its routes stayed
    await cloud.stub.SetFloodAll(pb.SetFloodAllRequest(subscriber="ems", enabled=False))
    assert not ch.flood_all


async def test_a_restarted_router_gets_its_flooding_back(cloud: Cloud) -> None:
    b, router, vid = cloud.broker, cloud.router, cloud.variable_id
    await b.flooding.set("pmu/freq", modes=[0, 1])
    await b.flooding.set_flood_all("ems", True)
    router.flooding.remove(vid)  # as if restarted empty ...
    router.update_channel("sub:ems", level=1, flood_all=False)
    router.flooding.set(77, pub_interval_ms=10, level=1, modes=[0])  # ... or stale
    await b.supervisor.reconcile_now("e1")
    assert levels(router, vid) == {0: 1, 1: 1} and levels(router, 77) == {}
    assert router.channels["sub:ems"].flood_all


async def test_a_restarted_broker_restores_flooding_and_flood_all(cloud: Cloud, tmp_path: Path) -> None:
    b = cloud.broker
    await b.flooding.set("pmu/freq", modes=[0])
    await b.flooding.set("pmu/freq", level=3, modes=[0, 4], from_parent=True)
    await b.flooding.set_flood_all("ems", True)
    again = LeafBroker("A", BrokerStore(str(tmp_path / "A.sqlite")), supervise_interval_s=60)
    again._load()
    try:
        held = again.flooding.holders["pmu/freq"]
        assert held.local == {0: 1} and held.parent == {0: 3, 4: 3}
        assert again.state.flood_all == {"ems"}
    finally:
        again.store.close()


async def test_a_parent_floods_a_variable_published_in_another_cloud(cloud: Cloud) -> None:
    publication = pb.Publication(publisher="far", variable="v", type=pb.ValueType(kind=pb.VALUE_KIND_INT),
                                 interval_ms=10, variable_id=2_000_001, cloud="B")
    reply = await cloud.stub.SetFlooding(pb.BrokerFloodingRequest(variable="far/v", level=2, modes=[0],
                                                                  from_parent=True, publication=publication))
    assert reply.flooding[0].publication.cloud == "B"
    assert levels(cloud.router, 2_000_001) == {0: 2}
    # Removing what a parent never set here is a no-op (a child added later).
    await cloud.stub.RemoveFlooding(pb.BrokerFloodingRequest(variable="no/such", modes=[0], from_parent=True))


async def error(call: object) -> tuple[grpc.StatusCode, str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call  # type: ignore[misc]
    md = dict(err.value.trailing_metadata() or ())
    return err.value.code(), str(md.get("gridstat-reason")), str(md.get("gridstat-field"))


async def test_bad_requests_get_specific_errors_and_change_nothing(cloud: Cloud) -> None:
    s = cloud.stub
    assert await error(s.SetFlooding(pb.BrokerFloodingRequest(variable="pmu/nope"))) == (
        grpc.StatusCode.NOT_FOUND, "UnknownVariable", "variable")
    assert await error(s.SetFlooding(pb.BrokerFloodingRequest(variable="pmu/freq", level=2))) == (
        grpc.StatusCode.INVALID_ARGUMENT, "InvalidArgument", "level")
    assert await error(s.SetFlooding(pb.BrokerFloodingRequest(variable="pmu/freq", modes=[16]))) == (
        grpc.StatusCode.INVALID_ARGUMENT, "InvalidArgument", "modes")
    assert await error(s.SetFlooding(pb.BrokerFloodingRequest(variable="noslash"))) == (
        grpc.StatusCode.INVALID_ARGUMENT, "InvalidArgument", "variable")
    assert await error(s.SetFlooding(pb.BrokerFloodingRequest(variable="far/v", level=2, from_parent=True))) == (
        grpc.StatusCode.NOT_FOUND, "UnknownVariable", "variable")  # from a parent, without the publication
    assert await error(s.RemoveFlooding(pb.BrokerFloodingRequest(variable="pmu/freq"))) == (
        grpc.StatusCode.NOT_FOUND, "NotFound", "variable")
    assert await error(s.SetFloodAll(pb.SetFloodAllRequest(subscriber="nobody", enabled=True))) == (
        grpc.StatusCode.PERMISSION_DENIED, "Unauthorized", "subscriber")
    assert (await s.ListFlooding(pb.ListFloodingRequest())).flooding == []
    assert cloud.router.flooding.flooded() == []


# -- a parent's requests to one child -------------------------------------------------------------------
def test_a_parent_tells_children_outside_the_publishers_subtree_only_levels_at_its_height() -> None:
    from gridstat.broker.parent_flooding import child_requests

    h = FloodingHolder(VAR, local={0: 2}, parent={1: 3}, cloud="A")
    home = [(s, r.level, list(r.modes), r.from_parent) for s, r in child_requests(h, (0, 1, 2), in_scope=True,
                                                                                 height=3)]
    assert home == [(True, 2, [0], True), (True, 3, [1], True), (False, 0, [2], True)]
    other = [(s, r.level, list(r.modes)) for s, r in child_requests(h, (0, 1, 2), in_scope=False, height=3)]
    assert other == [(True, 3, [1]), (False, 0, [0, 2])]
    first = child_requests(h, (0,), in_scope=True, height=3)[0][1]
    assert first.publication.variable_id == 5 and first.publication.cloud == "A"
