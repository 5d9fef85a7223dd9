"""The child processes ``gridstat up`` starts: their command lines (no process is started here)."""

from __future__ import annotations

from pathlib import Path

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
