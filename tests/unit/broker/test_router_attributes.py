"""What a router is (RouterInfo.attributes: description, coordinates, owner, site; docs/topology.md,
"Routers"): kept by the leaf broker, served by GetTopology, stored, replaced only when given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from gridstat.broker.leaf import LeafBroker, check_router_attributes
from gridstat.broker.service import QoSBrokerServicer
from gridstat.broker.state import RouterEndpoint
from gridstat.broker.store import BrokerStore
from gridstat.broker.topology import RouterRole
from gridstat.errors import ValidationError
from gridstat.v1 import broker_pb2 as pb
from gridstat.v1 import broker_pb2_grpc as pb_grpc

SITE = {"description": "Grand Coulee 500 kV", "latitude": "47.956", "longitude": "-118.982", "owner": "BPA"}


def ep(port: int = 1) -> RouterEndpoint:
    return RouterEndpoint("e1", 1, f"127.0.0.1:{port}", "127.0.0.1", 40001)


async def topology_of(broker: LeafBroker) -> pb.TopologyView:
    server = grpc.aio.server()
    pb_grpc.add_QoSBrokerServicer_to_server(QoSBrokerServicer(broker), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub: Any = pb_grpc.QoSBrokerStub(channel)  # type: ignore[no-untyped-call]
            view: pb.TopologyView = await stub.GetTopology(pb.GetTopologyRequest(), timeout=5)
            return view
    finally:
        await server.stop(0)


async def test_attributes_are_served_stored_and_replaced_only_when_given(tmp_path: Path) -> None:
    path = str(tmp_path / "A.sqlite")
    broker = LeafBroker("A", BrokerStore(path), supervise_interval_s=60)
    try:
        await broker.add_router(ep(), RouterRole.EDGE, 50_000, SITE)
        (info,) = (await topology_of(broker)).routers
        assert dict(info.attributes) == SITE
        await broker.add_router(ep(2), RouterRole.EDGE, 50_000)  # a moved pod announced without them: kept
        assert broker.state.router_attributes["e1"] == SITE
        await broker.add_router(ep(2), RouterRole.EDGE, 50_000, {"owner": "Avista"})  # given: replaced
        assert broker.state.router_attributes["e1"] == {"owner": "Avista"}
    finally:
        await broker.stop()
    again = LeafBroker("A", BrokerStore(path), supervise_interval_s=60)
    try:
        again._load()
        (info,) = (await topology_of(again)).routers
        assert dict(info.attributes) == {"owner": "Avista"}  # read back by a restarted broker
        await again.remove_router("e1")
        assert "e1" not in again.state.router_attributes
    finally:
        again.store.close()


@pytest.mark.parametrize(("attributes", "field"), [
    ({f"k{i}": "v" for i in range(17)}, "router.attributes"),
    ({"": "v"}, "router.attributes"),
    ({"owner": "x" * 257}, "router.attributes.owner"),
    ({"owner": "line\nbreak"}, "router.attributes.owner"),
])
def test_bad_attributes_are_refused_naming_the_entry(attributes: dict[str, str], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        check_router_attributes(attributes)
    assert info.value.field == field
