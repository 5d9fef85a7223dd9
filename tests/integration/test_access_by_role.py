"""Every gRPC method of every service, called with each role's certificate, against real role processes
with mTLS: refused as PERMISSION_DENIED exactly when core.access's rules give the caller's role no right
to it (docs/security.md, "Control by role"). Requests are empty messages: an allowed call may still fail
on its arguments, but never on the caller's role."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gridstat.chaos.procs import Admission, Broker, Router
from gridstat.core import access
from gridstat.core.tls import TlsFiles
from gridstat.v1 import admission_pb2, broker_pb2, edge_pb2, router_pb2

from .brokerprocs import client_tls, edge_tls_args, tls_args
from .fixtures import launched

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
#: Certificate identity -> the role it has by default.
CALLERS = {"admin": access.ADMIN, "broker": access.BROKER, "router": access.ROUTER, "observer": access.OBSERVER,
           "pmu1": access.CLIENT}
MARK = "Control by role"


def methods(module: object, service: str) -> list[tuple[str, bool]]:
    desc = module.DESCRIPTOR.services_by_name[service]  # type: ignore[attr-defined]
    return [(f"/{desc.full_name}/{m.name}", m.server_streaming) for m in desc.methods]


def call(channel: grpc.Channel, method: str, streaming: bool) -> tuple[grpc.StatusCode, str]:
    """Call with an empty request; the status and details (OK when it answered)."""
    try:
        if streaming:
            stream = channel.unary_stream(method)(b"", timeout=2)
            next(iter(stream), None)
            stream.cancel()
        else:
            channel.unary_unary(method)(b"", timeout=3)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("access")
    certs = tmp / "certs"
    subprocess.run([str(ROOT / "scripts/gen-certs.sh"), str(certs), "admission", "parent", *CALLERS],
                   check=True, capture_output=True)
    ca = str(certs / "ca.pem")
    admin = client_tls(certs, "admin")
    with launched() as start:
        adm = start(Admission("adm", args=tls_args(certs, "admission")))
        parent = start(Broker("P", state=str(tmp / "P.sqlite"), tls=admin,
                              extra=("--role", "parent", *tls_args(certs, "parent"), "--peer-tls-ca", ca)))
        leaf = start(Broker("A", state=str(tmp / "A.sqlite"), tls=admin, extra=(
            *tls_args(certs, "broker"), "--router-tls-ca", ca, "--admission", adm.address,
            "--admission-tls-ca", ca)))
        edge = start(Router("e1", router_id=1, role="edge", tls=admin, extra=edge_tls_args(certs, leaf.address)))
        yield certs, {"router": f"127.0.0.1:{edge.control_port}", "leaf": leaf.address, "parent": parent.address,
                      "admission": adm.address}


TARGETS = [
    ("router", router_pb2, "RouterControl"), ("router", edge_pb2, "EdgeProxy"),
    ("leaf", broker_pb2, "QoSBroker"), ("leaf", broker_pb2, "Segments"),
    ("parent", broker_pb2, "QoSBroker"), ("parent", broker_pb2, "Segments"),
    ("admission", admission_pb2, "AdmissionControl"),
]


@pytest.mark.parametrize("server, module, service", TARGETS, ids=[f"{t[0]}-{t[2]}" for t in TARGETS])
def test_each_method_with_each_role(servers: tuple[Path, dict[str, str]], server: str, module: object,
                                    service: str) -> None:
    certs, addresses = servers
    table = methods(module, service)
    assert table
    wrong: list[str] = []
    denied = allowed = 0
    for identity, role in CALLERS.items():
        creds = client_tls(certs, identity).channel_credentials()
        with grpc.secure_channel(addresses[server], creds) as channel:
            for method, streaming in table:
                code, details = call(channel, method, streaming)
                by_role = code is grpc.StatusCode.PERMISSION_DENIED and MARK in details
                expected = role in access.RULES[method]
                if by_role == expected:
                    wrong.append(f"{method} as {identity} ({role}): {code.name} {details!r}")
                if by_role:
                    denied += 1
                    assert repr(identity) in details and method.rpartition("/")[2] in details
                else:
                    allowed += 1
    assert not wrong, "\n".join(wrong)
    assert denied and allowed


def test_a_router_with_broker_identity_takes_changes_from_its_own_leaf_broker_only(tmp_path: Path) -> None:
    """``--broker-identity``: two clouds' brokers both have the broker role, but a router of cloud a
    takes control calls from a's broker only; administrators still read it."""
    certs = tmp_path / "certs"
    subprocess.run([str(ROOT / "scripts/gen-certs.sh"), str(certs), "router", "admin", "broker-a", "broker-b"],
                   check=True, capture_output=True)
    ca = str(certs / "ca.pem")
    admin = client_tls(certs, "admin")
    router = Router("i1", router_id=2, role="internal", tls=admin,
                    extra=(*tls_args(certs, "router"), "--broker-identity", "broker-a")).start()
    try:
        changes = [m for m, _ in methods(router_pb2, "RouterControl") if access.RULES[m] == {access.BROKER}]
        reads = [(m, s) for m, s in methods(router_pb2, "RouterControl") if access.ADMIN in access.RULES[m]]
        assert changes and reads
        outcome: dict[str, dict[str, tuple[grpc.StatusCode, str]]] = {}
        for identity in ("broker-a", "broker-b", "admin"):
            creds = TlsFiles(str(certs / f"{identity}.pem"), str(certs / f"{identity}.key"), ca).channel_credentials()
            with grpc.secure_channel(f"127.0.0.1:{router.control_port}", creds) as channel:
                outcome[identity] = {m: call(channel, m, False) for m in changes}
                outcome[identity].update({m: call(channel, m, s) for m, s in reads})
        for m in changes:
            code, details = outcome["broker-b"][m]
            assert code is grpc.StatusCode.PERMISSION_DENIED and "'broker-b'" in details, (m, code, details)
            assert "client" in details, details  # on this router broker-b holds no role at all
            assert outcome["broker-a"][m][0] is not grpc.StatusCode.PERMISSION_DENIED, (m, outcome["broker-a"][m])
            assert outcome["admin"][m][0] is grpc.StatusCode.PERMISSION_DENIED, m
        for m, _ in reads:
            assert outcome["admin"][m][0] is not grpc.StatusCode.PERMISSION_DENIED, (m, outcome["admin"][m])
    finally:
        router.stop()
