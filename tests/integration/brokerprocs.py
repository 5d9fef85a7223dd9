"""Start real ``gridstat broker`` processes on 127.0.0.1 and build clouds of real routers behind them."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from gridstat.chaos.procs import Broker, Router
from gridstat.core import children
from gridstat.core.tls import TlsFiles
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import broker_pb2_grpc as bpb_grpc

from .fixtures import wait_for
from .routerprocs import RouterProc, start_router, stop_process

FLOAT = bpb.ValueType(kind=bpb.VALUE_KIND_FLOAT)


@dataclass
class BrokerProc:
    name: str
    proc: subprocess.Popen[str]
    port: int
    state: str
    channel: grpc.Channel
    stub: bpb_grpc.QoSBrokerStub

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop_process(self.proc, sig)
        self.channel.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


#: A leaf broker and its routers by name, as :func:`cloud` yields them.
Cloud = tuple[BrokerProc, dict[str, RouterProc]]


def start_broker(name: str, state: str, *, port: int = 0, extra: tuple[str, ...] = ()) -> BrokerProc:
    cmd = [sys.executable, "-m", "gridstat.broker.main", "--name", name, "--port", str(port), "--state", state,
           "--supervise-interval-ms", "200", "--exit-with-parent", *extra]
    try:
        proc, ready = children.spawn(cmd, what=f"broker {name}")
    except children.ChildFailed as exc:
        raise RuntimeError(str(exc)) from None
    bound = children.ready_port(ready)
    channel = grpc.insecure_channel(f"127.0.0.1:{bound}")
    return BrokerProc(name, proc, bound, state, channel, bpb_grpc.QoSBrokerStub(channel))


def add_router(broker: BrokerProc, r: RouterProc, role: str, capacity_eps: int = 50_000) -> None:
    broker.stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(
        name=r.name, role=role, capacity_eps=capacity_eps, control_address=f"127.0.0.1:{r.control_port}",
        event_address=f"127.0.0.1:{r.port}", router_id=r.router_id)), timeout=5)


def add_link(broker: BrokerProc, a: str, b: str, *, latency_ms: float = 1.0, bandwidth_bps: int = 100_000_000) -> None:
    broker.stub.AddChannel(bpb.AddTopologyChannelRequest(channel=bpb.TopologyChannel(
        a=a, b=b, bandwidth_bps=bandwidth_bps, latency_ms=latency_ms, both_directions=True)), timeout=5)


@contextlib.contextmanager
def started() -> Iterator[tuple[dict[str, BrokerProc], dict[str, RouterProc]]]:
    """Two dicts a test starts its brokers and routers into; every one is stopped on the way out."""
    brokers: dict[str, BrokerProc] = {}
    routers: dict[str, RouterProc] = {}
    try:
        yield brokers, routers
    finally:
        for b in brokers.values():
            b.stop()
        for r in routers.values():
            r.stop()


@contextlib.contextmanager
def cloud(workdir: Path, routers: Sequence[tuple[str, int, str]], links: Sequence[tuple[str, str, float]], *,
          name: str = "A", broker_extra: tuple[str, ...] = (), proxied: Collection[str] = (),
          router_extra: Mapping[str, tuple[str, ...]] | None = None) -> Iterator[Cloud]:
    """A leaf broker ``name`` (state in ``workdir``) over real routers ``(name, id, role)`` joined by
    ``links`` ``(a, b, latency_ms)``; the routers named in ``proxied`` pass their clients' commands
    to the broker (``--broker``), ``router_extra`` adds options by router. Everything started is
    stopped on the way out."""
    with started() as (brokers, started_routers):
        broker = brokers[name] = start_broker(name, str(workdir / f"{name}.sqlite"), extra=broker_extra)
        for router, rid, role in routers:
            extra = ("--broker", broker.address) if router in proxied else ()
            extra += (router_extra or {}).get(router, ())
            started_routers[router] = start_router(router, rid, role=role, extra=extra)
            add_router(broker, started_routers[router], role)
        for a, b, latency_ms in links:
            add_link(broker, a, b, latency_ms=latency_ms)
        yield broker, started_routers


def edge_pair(workdir: Path, *, ids: tuple[int, int] = (1, 2), name: str = "A",
              broker_extra: tuple[str, ...] = ()) -> contextlib.AbstractContextManager[Cloud]:
    """:func:`cloud` of two edge routers, ``e1`` and ``e2`` (router ids ``ids``), on a 1 ms link, both
    relaying their clients' commands to the broker."""
    return cloud(workdir, [("e1", ids[0], "edge"), ("e2", ids[1], "edge")], [("e1", "e2", 1.0)], name=name,
                 broker_extra=broker_extra, proxied=("e1", "e2"))


def start_leaf(workdir: Path, brokers: dict[str, BrokerProc], routers: dict[str, RouterProc], parent: BrokerProc,
               cloud: str, k: int, *, extra: tuple[str, ...] = ()) -> BrokerProc:
    """Leaf broker ``cloud`` under ``parent`` (its variable ids from k x 1,000,000) over an edge router
    ``e<cloud>`` and a border router ``b<cloud>`` (ids 10k+1, 10k+2) on a 1 ms link, added to the
    parent as its child; the processes go into ``brokers`` and ``routers`` (see :func:`started`)."""
    leaf = brokers[cloud] = start_broker(cloud, str(workdir / f"{cloud}.sqlite"), extra=(
        "--variable-id-base", str(1_000_000 * k), "--parent", parent.address, *extra))
    for name, rid, role in ((f"e{cloud}", 10 * k + 1, "edge"), (f"b{cloud}", 10 * k + 2, "border")):
        routers[name] = start_router(name, rid, role=role)
        add_router(leaf, routers[name], role)
    add_link(leaf, f"e{cloud}", f"b{cloud}", latency_ms=1.0)
    parent.stub.AddChildBroker(bpb.AddChildBrokerRequest(child=bpb.ChildBroker(
        name=cloud, address=leaf.address)), timeout=10)
    return leaf


def add_inter_cloud(parent: BrokerProc, a: str, b: str, *, latency_ms: float = 2.0) -> None:
    """An inter-cloud channel between the border routers of clouds ``a`` and ``b`` (see :func:`start_leaf`)."""
    parent.stub.AddInterCloudChannel(bpb.AddInterCloudChannelRequest(channel=bpb.InterCloudChannel(
        cloud_a=a, router_a=f"b{a}", cloud_b=b, router_b=f"b{b}", bandwidth_bps=100_000_000,
        latency_ms=latency_ms)), timeout=20)


def register_publisher(broker: BrokerProc, name: str, edge: str, variables: Sequence[str] = ("freq",), *,
                       interval_ms: int = 10) -> tuple[int, list[int]]:
    """Publisher ``name`` at ``edge`` and its FLOAT ``variables``: its client id and their variable ids."""
    client = broker.stub.RegisterClient(bpb.RegisterClientRequest(
        name=name, kind=bpb.CLIENT_KIND_PUBLISHER, edge_router=edge, first_time=True), timeout=5)
    return client.client_id, register_publications(broker, name, edge, variables, interval_ms=interval_ms)


def register_publications(broker: BrokerProc, publisher: str, edge: str, variables: Sequence[str], *,
                          interval_ms: int = 10) -> list[int]:
    """More FLOAT ``variables`` of a registered publisher: their variable ids."""
    return [broker.stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
        publisher=publisher, variable=v, type=FLOAT, interval_ms=interval_ms, edge_router=edge)),
        timeout=5).publication.variable_id for v in variables]


def register_subscriber(broker: BrokerProc, name: str, edge: str, port: int) -> None:
    """Subscriber ``name`` at ``edge``, its events sent to 127.0.0.1:``port``."""
    broker.stub.RegisterClient(bpb.RegisterClientRequest(
        name=name, kind=bpb.CLIENT_KIND_SUBSCRIBER, edge_router=edge, host="127.0.0.1", port=port,
        first_time=True), timeout=5)


__all__ = ["FLOAT", "BrokerProc", "Cloud", "RouterProc", "add_inter_cloud", "add_link", "add_router", "client_tls",
           "cloud", "edge_pair", "edge_tls_args", "join_edges", "mtls_edges", "register_publications",
           "register_publisher", "register_subscriber", "start_broker", "start_leaf", "start_router", "started",
           "tls_args", "wait_for"]


def tls_args(certs: Path, role: str) -> tuple[str, ...]:
    """A server's mTLS options with the certificate of ``role`` (scripts/gen-certs.sh names: ROLE.pem,
    ROLE.key, ca.pem): TLS only, client certificates from that CA required."""
    return ("--tls-cert", str(certs / f"{role}.pem"), "--tls-key", str(certs / f"{role}.key"),
            "--tls-client-ca", str(certs / "ca.pem"))


def client_tls(certs: Path, name: str) -> TlsFiles:
    """The client certificate of ``name`` (its CN; scripts/gen-certs.sh), trusting the same CA."""
    return TlsFiles(str(certs / f"{name}.pem"), str(certs / f"{name}.key"), str(certs / "ca.pem"))


def edge_tls_args(certs: Path, broker: str) -> tuple[str, ...]:
    """An edge router's mTLS options: it serves with the router certificate and relays its clients'
    commands to the broker at ``broker`` over mTLS with it (``--broker-tls-*``)."""
    return (*tls_args(certs, "router"), "--broker", broker, "--broker-tls-ca", str(certs / "ca.pem"),
            "--broker-tls-cert", str(certs / "router.pem"), "--broker-tls-key", str(certs / "router.key"))


def mtls_edges(start: Callable[[Router], Router], certs: Path, leaf: Broker, admin: TlsFiles) -> dict[str, Router]:
    """Edge routers e1 and e2 (ids 1, 2) serving mTLS and relaying to ``leaf`` over it (:func:`edge_tls_args`),
    started with ``start`` (``fixtures.launched``) and joined at the leaf (:func:`join_edges`)."""
    routers = {name: start(Router(name, router_id=rid, role="edge", tls=admin,
                                  extra=edge_tls_args(certs, leaf.address))) for name, rid in (("e1", 1), ("e2", 2))}
    assert leaf.stub is not None
    join_edges(leaf.stub, routers)
    return routers


def join_edges(stub: bpb_grpc.QoSBrokerStub, routers: Mapping[str, Any]) -> None:
    """Two edge routers (``e1``, ``e2``: anything with name, router_id, port, control_port) added to the
    broker behind ``stub`` and linked (1 ms), then waited for until the broker sees them up."""
    for name, r in routers.items():
        stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(
            name=name, role="edge", capacity_eps=50_000, control_address=f"127.0.0.1:{r.control_port}",
            event_address=f"127.0.0.1:{r.port}", router_id=r.router_id)), timeout=5)
    stub.AddChannel(bpb.AddTopologyChannelRequest(channel=bpb.TopologyChannel(
        a="e1", b="e2", bandwidth_bps=100_000_000, latency_ms=1.0, both_directions=True)), timeout=5)
    assert wait_for(lambda: stub.Health(bpb.BrokerHealthRequest(), timeout=2).routers_up == len(routers))
