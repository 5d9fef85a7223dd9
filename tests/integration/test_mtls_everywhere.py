"""mTLS on every control channel (docs/security.md): certificates from scripts/gen-certs.sh; admission controller,
parent and leaf brokers, routers with their edge proxy, and the client SDK, each serving TLS only and
requiring client certificates. A client without a certificate is refused everywhere; a renewed
server certificate is used for new connections without a restart."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import time
from pathlib import Path

import grpc
import pytest

from gridstat.chaos.procs import Admission, Broker, wait_for
from gridstat.client import Publisher, Subscriber
from gridstat.core.model import FLOAT
from gridstat.core.tls import TlsFiles
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import broker_pb2_grpc as bpb_grpc
from gridstat.v1 import router_pb2 as rpb
from gridstat.v1 import router_pb2_grpc as rpb_grpc

from .brokerprocs import client_tls, mtls_edges, tls_args
from .fixtures import launched

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def server_cert_der(port: int, certs: Path) -> bytes:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    ctx.load_cert_chain(str(certs / "client.pem"), str(certs / "client.key"))
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def pem_der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


def subscribe_at(broker: str, certs: Path, subscriber: str, variable: str, *, interval_ms: int) -> bpb.SubscribeReply:
    """``subscriber``, with its own certificate, registered and subscribing at the broker itself (at e2)."""
    stub = bpb_grpc.QoSBrokerStub(grpc.secure_channel(  # type: ignore[no-untyped-call]
        broker, client_tls(certs, subscriber).channel_credentials()))
    stub.RegisterClient(bpb.RegisterClientRequest(name=subscriber, kind=bpb.CLIENT_KIND_SUBSCRIBER,
                                                  edge_router="e2", host="127.0.0.1", port=9), timeout=5)
    reply: bpb.SubscribeReply = stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
        subscriber=subscriber, variable=variable, type=bpb.ValueType(kind=bpb.VALUE_KIND_FLOAT),
        edge_router="e2", qos=[bpb.ModeQoS(mode=0, interval_ms=interval_ms, latency_ms=100)])), timeout=20)
    return reply


async def test_every_control_channel_is_mutual_tls(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    subprocess.run([str(ROOT / "scripts/gen-certs.sh"), str(certs)], check=True, capture_output=True)
    # Clients' certificates name them (CN): the leaf broker binds client names to them (broker.authz).
    subprocess.run([str(ROOT / "scripts/gen-certs.sh"), str(certs), "pmu1", "ems", "ems2", "far"], check=True,
                   capture_output=True)
    ca = str(certs / "ca.pem")
    admin = client_tls(certs, "admin")  # the administrator (core.access)
    with launched() as start:
        adm = start(Admission("admission", args=tls_args(certs, "admission")))
        parent = start(Broker("P", state=str(tmp_path / "P.sqlite"), tls=admin,
                              extra=("--role", "parent", *tls_args(certs, "parent"), "--peer-tls-ca", ca)))
        leaf = start(Broker("A", state=str(tmp_path / "A.sqlite"), tls=admin, extra=(
            *tls_args(certs, "broker"), "--router-tls-ca", ca, "--admission", adm.address, "--admission-tls-ca", ca,
            "--parent", parent.address, "--peer-tls-ca", ca, "--channel-auth", "all")))
        routers = mtls_edges(start, certs, leaf, admin)  # leaf -> routers over mTLS
        assert leaf.stub is not None and parent.stub is not None
        # parent -> leaf over mTLS
        parent.stub.AddChildBroker(bpb.AddChildBrokerRequest(child=bpb.ChildBroker(name="A", address=leaf.address)),
                                   timeout=10)
        # SDK -> edge proxy -> leaf -> admission and routers, all mTLS; datagrams signed with broker-issued keys.
        e1, e2 = (f"127.0.0.1:{routers[n].control_port}" for n in ("e1", "e2"))
        async with await Publisher.connect("pmu1", e1, tls=client_tls(certs, "pmu1")) as pub, \
                await Subscriber.connect("ems", e2, tls=client_tls(certs, "ems")) as sub:
            assert pub.key is not None and sub.key is not None
            handle = await pub.register("freq", FLOAT, 10)
            got: list[int] = []
            s = await sub.subscribe_remote("pmu1/freq", FLOAT, interval_ms=10, latency_ms=1000,
                                           on_event=lambda _s, h: got.append(h.timestamp_ms))
            for _ in range(100):
                if len(got) >= 5:
                    break
                handle.publish(1.0)
                await asyncio.sleep(0.01)
            assert len(got) >= 5 and sub.stats.drops["auth_failed"] == 0
            del s
        # leaf -> admission controller over mTLS: it decides.
        second = subscribe_at(leaf.address, certs, "ems2", "pmu1/freq", interval_ms=20)
        assert second.admitted and second.admission.decided_by == "controller", second.admission
        # leaf -> parent over mTLS: a variable no cloud publishes is asked of the parent, which answers.
        far = subscribe_at(leaf.address, certs, "far", "elsewhere/freq", interval_ms=10)
        assert not far.admitted and far.rejection.reason == "UnknownVariable", far.rejection

        # Without a client certificate: refused by every server.
        no_cert = TlsFiles("", "", ca)
        for port in (adm.port, parent.port, leaf.port, routers["e1"].control_port):
            with grpc.secure_channel(f"127.0.0.1:{port}", no_cert.channel_credentials()) as ch:
                with pytest.raises(grpc.RpcError) as exc:
                    rpb_grpc.RouterControlStub(ch).Health(rpb.HealthRequest(), timeout=3)  # type: ignore[no-untyped-call]
                assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
        # Plaintext: refused too.
        with grpc.insecure_channel(f"127.0.0.1:{routers['e1'].control_port}") as ch, pytest.raises(grpc.RpcError):
            rpb_grpc.RouterControlStub(ch).Health(rpb.HealthRequest(), timeout=3)  # type: ignore[no-untyped-call]

        # Rotation without restart: renew the router certificate; new connections get the new one.
        port = routers["e1"].control_port
        old = server_cert_der(port, certs)
        assert old == pem_der(certs / "router.pem")
        time.sleep(0.01)
        subprocess.run([str(ROOT / "scripts/gen-certs.sh"), str(certs), "router"], check=True, capture_output=True)
        new = pem_der(certs / "router.pem")
        assert new != old
        assert wait_for(lambda: server_cert_der(port, certs) == new, timeout_s=5)
        assert routers["e1"].running
        assert routers["e1"].stub is not None
        routers["e1"].stub.Health(rpb.HealthRequest(), timeout=3)  # the old connection still works
