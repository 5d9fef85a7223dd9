"""The child processes ``gridstat up`` starts: their command lines (no process is started here)."""

from __future__ import annotations

from pathlib import Path

from gridstat.demo.localtls import CertDir
from gridstat.demo.processes import BrokerProcess, RouterProcess, parent_role_available


def test_leaf_broker_command(tmp_path: Path) -> None:
    b = BrokerProcess("A", "leaf", tmp_path / "A.sqlite", tmp_path / "A.log", variable_id_base=1_000_000,
                      parent="127.0.0.1:7000")
    cmd = b.command()
    assert cmd[1:4] == ["-m", "gridstat.cli.main", "broker"]
    for flag, value in (("--name", "A"), ("--port", "0"), ("--state", str(tmp_path / "A.sqlite")),
                        ("--variable-id-base", "1000000"), ("--parent", "127.0.0.1:7000")):
        assert cmd[cmd.index(flag) + 1] == value
    assert "--exit-with-parent" in cmd and "--role" not in cmd
    assert "--parent" not in BrokerProcess("A", "leaf", tmp_path / "a", tmp_path / "b").command()


def test_parent_broker_command(tmp_path: Path) -> None:
    cmd = BrokerProcess("parent", "parent", tmp_path / "p.sqlite", tmp_path / "p.log").command()
    assert cmd[cmd.index("--role") + 1] == "parent"
    assert "--exit-with-parent" in cmd and "--variable-id-base" not in cmd and "--parent" not in cmd


def test_router_command_edge_routers_proxy_to_their_broker(tmp_path: Path) -> None:
    edge = RouterProcess("e1", 1, "edge", "A", "sparse", tmp_path / "e1.log", broker="127.0.0.1:7001").command()
    assert edge[edge.index("--broker") + 1] == "127.0.0.1:7001"
    assert edge[edge.index("--variant") + 1] == "sparse" and "--exit-with-parent" in edge
    assert "--broker" not in RouterProcess("i1", 2, "internal", "A", "close", tmp_path / "i1.log").command()


def test_parent_role_detection_is_a_bool() -> None:
    assert isinstance(parent_role_available(), bool)


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_with_certificates_every_child_serves_mtls_and_brokers_authenticate_datagrams(tmp_path: Path) -> None:
    certs = CertDir(tmp_path / "certs")
    ca = str(certs.ca)
    leaf = BrokerProcess("A", "leaf", tmp_path / "A.sqlite", tmp_path / "A.log", parent="127.0.0.1:7000",
                         certs=certs).command()
    # each leaf broker its own identity, which its cloud's routers take control calls from only
    assert (flag(leaf, "--tls-cert"), flag(leaf, "--tls-key")) == (str(certs.cert("broker-A")),
                                                                  str(certs.key("broker-A")))
    assert flag(leaf, "--tls-client-ca") == flag(leaf, "--router-tls-ca") == flag(leaf, "--peer-tls-ca") == ca
    assert flag(leaf, "--channel-auth") == "all"
    alone = BrokerProcess("A", "leaf", tmp_path / "a", tmp_path / "b", certs=certs).command()
    assert "--peer-tls-ca" not in alone and flag(alone, "--channel-auth") == "all"
    parent = BrokerProcess("parent", "parent", tmp_path / "p", tmp_path / "p.log", certs=certs).command()
    assert flag(parent, "--tls-cert") == str(certs.cert("parent")) and flag(parent, "--peer-tls-ca") == ca
    assert flag(parent, "--tls-client-ca") == ca and flag(parent, "--channel-auth") == "routers"
    edge = RouterProcess("e1", 1, "edge", "A", "close", tmp_path / "e1.log", broker="127.0.0.1:7001",
                         certs=certs).command()
    assert flag(edge, "--tls-cert") == flag(edge, "--broker-tls-cert") == str(certs.cert("router"))
    assert flag(edge, "--tls-key") == flag(edge, "--broker-tls-key") == str(certs.key("router"))
    assert flag(edge, "--tls-client-ca") == flag(edge, "--broker-tls-ca") == ca
    inner = RouterProcess("i1", 2, "internal", "A", "close", tmp_path / "i1.log", certs=certs).command()
    assert flag(inner, "--tls-client-ca") == ca and "--broker-tls-ca" not in inner
    assert flag(edge, "--broker-identity") == flag(inner, "--broker-identity") == "broker-A"
    other = RouterProcess("i9", 9, "internal", "B", "close", tmp_path / "i9.log", certs=certs).command()
    assert flag(other, "--broker-identity") == "broker-B"


def test_without_certificates_nothing_is_secured(tmp_path: Path) -> None:
    leaf = BrokerProcess("A", "leaf", tmp_path / "A.sqlite", tmp_path / "A.log", parent="127.0.0.1:7000").command()
    edge = RouterProcess("e1", 1, "edge", "A", "close", tmp_path / "e1.log", broker="127.0.0.1:7001").command()
    assert not [a for a in leaf + edge if a.startswith("--tls") or a.endswith("tls-ca") or a == "--channel-auth"
                or a == "--broker-identity"]
