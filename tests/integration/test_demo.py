"""``gridstat up``: the embedded example utility runs, delivers every subscription, and cleans up."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gridstat.demo.planner import expected_rate
from gridstat.demo.topology import DEFAULT_TOPOLOGY_PATH, load_topology

pytestmark = pytest.mark.integration

ROUTER_RE = re.compile(r"^\s+router name=(\S+) role=\S+ cloud=\S+ pid=(\d+) port=\d+ control_port=\d+$", re.M)
KV_RE = re.compile(r"(\w+)=(\S+)")


def gridstat(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "gridstat.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def final_block(stdout: str) -> list[dict[str, str]]:
    """The ``key=value`` lines of the FINAL summary."""
    _, _, tail = stdout.partition("FINAL (")
    assert tail, f"no FINAL summary in:\n{stdout}"
    return [dict(KV_RE.findall(line)) | {"_kind": line.split()[0]}
            for line in tail.splitlines()[1:] if line.startswith("  ")]


def assert_reaped(pids: list[int]) -> None:
    deadline = time.monotonic() + 5
    for pid in pids:
        while True:
            try:
                proc = psutil.Process(pid)
                alive = proc.status() != psutil.STATUS_ZOMBIE and "router" in proc.cmdline()
            except psutil.NoSuchProcess:
                alive = False
            if not alive:
                break
            assert time.monotonic() < deadline, f"router process {pid} is still running"
            time.sleep(0.1)


def test_up_runs_the_default_utility_and_stops_cleanly() -> None:
    result = gridstat("up", "--duration", "6")
    out = result.stdout
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{out}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr

    topology = load_topology()
    routers = dict(ROUTER_RE.findall(out))
    assert set(routers) == {r.name for r in topology.routers}
    assert_reaped([int(pid) for pid in routers.values()])
    assert f"stopped {len(topology.routers)} router processes;" in out  # every router exited 0

    rows = final_block(out)
    subs = {r["name"]: r for r in rows if r["_kind"] == "sub"}
    assert set(subs) == {s.name for s in topology.subscriptions}
    for spec in topology.subscriptions:
        row = subs[spec.name]
        want = expected_rate(spec, topology)
        assert int(row["delivered"]) > 0, row
        assert float(row["expected_per_s"]) == pytest.approx(want, abs=0.01)
        rate = float(row["rate_per_s"])
        assert 0.6 * want <= rate <= 1.4 * want, (spec.name, rate, want)
        # about duration x rate events, minus startup; generous for a loaded CI machine
        assert int(row["delivered"]) >= 0.5 * 6 * want - 2, row
        if spec.redundancy == 2:
            assert row["paths"] == "2"
            # the second path delivers a copy of (almost) every event, and never more than one
            assert 0.5 * int(row["delivered"]) < int(row["duplicates"]) <= int(row["delivered"]), row
        else:
            assert row["paths"] == "1"
            assert row["duplicates"] == "0", row  # one path, and no instant published twice
    router_rows = {r["name"]: r for r in rows if r["_kind"] == "router"}
    assert set(router_rows) == set(routers)
    assert sum(int(r["forwarded"]) for r in router_rows.values()) > 0


def test_up_stops_on_sigterm_and_sigint() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "up", "--variant", "sparse"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:  # wait until traffic flows
            lines.append(line)
            if "publishers sending" in line:
                break
        time.sleep(1.0)
        children = [p.pid for p in psutil.Process(proc.pid).children()]
        assert len(children) == 10
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, f"{sig.name}: exit {proc.returncode}\n{err}"
        assert f"FINAL (stopped by {sig.name})" in out
        assert "variant=sparse" in out
        assert_reaped(children)


def test_bad_topology_exits_2_naming_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    default = DEFAULT_TOPOLOGY_PATH.read_text()
    bad = default.replace("{a: b-int1, b: b-int2,", "{a: b-int1, b: r9,")
    assert bad != default
    path.write_text(bad)
    line = next(i for i, t in enumerate(bad.splitlines(), start=1) if "b: r9" in t)
    result = gridstat("up", str(path), timeout=30)
    assert result.returncode == 2, result
    assert f"{path}:{line}: links[11].b: unknown router 'r9'" in result.stderr
    assert result.stdout == ""
