"""``gridstat up`` on a topology that describes a real grid (docs/topology.md, "Stations" and "Broker
hierarchy"): a three-level broker tree started level by level with ``--parent`` pointing up, an
inter-cloud subscription whose lowest common ancestor is the root and one whose LCA is a regional
parent, and variables that carry their station's attributes for where-expressions (docs/queries.md)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BROKER_RE = re.compile(r"^\s+broker name=(\S+) role=(leaf|parent) pid=\d+ port=(\d+)$", re.M)
KV_RE = re.compile(r"(\w+)=(\S+)")

#       root               inter-cloud links: A-B (LCA west), B-C (LCA root)
#      /    \
#   west    east
#   /  \       \
#  A    B       C
GRID = """\
clouds:
  - {name: A, broker: west, description: utility A}
  - {name: B, broker: west}
  - {name: C, broker: east}
brokers:
  - {name: root, description: the interconnection}
  - {name: west, parent: root, region: west}
  - {name: east, parent: root, region: east}
routers:
  - {name: eA, role: edge-border, cloud: A, site: Grizzly, latitude: 45.1, longitude: -121.2, owner: utility-a}
  - {name: eB, role: edge-border, cloud: B}
  - {name: eC, role: edge-border, cloud: C}
links:
  - {a: eA, b: eB, latency_ms: 2}
  - {a: eB, b: eC, latency_ms: 2}
stations:
  - {name: GRIZZLY, router: eA, latitude: 45.1, longitude: -121.2, voltage_kv: 500, owner: utility-a,
     region: west, description: 500 kV switchyard}
  - {name: BURNS, router: eA, voltage_kv: 230, owner: utility-a, region: west}
  - {name: MIDWAY, router: eC, voltage_kv: 345, owner: utility-c, region: east}
publishers:
  - name: pmu-grizzly         # a C37.118 device: the pmu-gateway adds the station's attributes to its own
    station: GRIZZLY
    c37118: {frames_per_s: 30, phasors: 0}
  - name: pmu-burns
    station: BURNS
    variables: [{name: freq, type: float, interval_ms: 20}]
  - name: pmu-midway
    station: MIDWAY
    variables: [{name: freq, type: float, interval_ms: 20}]
subscriptions:
  - {name: ems-c, edge: eC, variable: pmu-grizzly/freq, interval_ms: 100, latency_ms: 200}
  - {name: ems-b, edge: eB, variable: pmu-burns/freq, interval_ms: 100, latency_ms: 200}
"""


def env_for(tmp_path: Path) -> dict[str, str]:
    """The demo's certificates and its running-demo record go under tmp_path, not the user's ~/.local/state."""
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "xdg"), "COLUMNS": "200"}


def final_rows(stdout: str) -> list[dict[str, str]]:
    _, _, tail = stdout.partition("FINAL (")
    assert tail, f"no FINAL summary in:\n{stdout}"
    return [dict(KV_RE.findall(line)) | {"_kind": line.split()[0]}
            for line in tail.splitlines()[1:] if line.startswith("  ")]


def test_a_three_level_hierarchy_delivers_through_the_root_and_variables_carry_their_station(
        tmp_path: Path) -> None:
    path = tmp_path / "grid.yaml"
    path.write_text(GRID)
    env = env_for(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "up", str(path), "--plain",
                             "--summary-every", "600", "--duration", "12"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    startup = []
    try:
        for line in proc.stdout:  # until traffic flows
            startup.append(line)
            if "publishers sending" in line:
                break
        out = "".join(startup)
        assert "publishers sending" in out, out + (proc.stderr.read() if proc.stderr else "")
        assert "  hierarchy root(west(A,B),east(C))" in out
        assert re.search(r"stations count=3 routers=2 regions=east=1,west=2 voltage_kv=230=1,345=1,500=1 ", out), out
        assert "publisher name=pmu-grizzly edge=eA station=GRIZZLY " in out
        ports = {name: port for name, _, port in BROKER_RE.findall(out)}
        assert set(ports) == {"root", "west", "east", "A", "B", "C"}

        # While it runs: the CLI selects variables by their station's attributes at cloud A's leaf.
        listed = subprocess.run(
            [sys.executable, "-m", "gridstat.cli.main", "variables", "list", "--broker", f"127.0.0.1:{ports['A']}",
             "--where", "region = 'west' and voltage_kv >= 345", "-o", "json"],
            capture_output=True, text=True, timeout=60, env=env)
        assert listed.returncode == 0, listed.stderr
        variables = json.loads(listed.stdout)["variables"]
        assert [v["variable"] for v in variables] == ["pmu-grizzly/dfreq", "pmu-grizzly/freq"]
        freq = variables[1]["attributes"]
        assert {k: freq[k] for k in ("station", "region", "owner", "voltage_kv", "latitude", "longitude", "router",
                                     "kind", "units")} == {
            "station": "GRIZZLY", "region": "west", "owner": "utility-a", "voltage_kv": "500",
            "latitude": "45.1", "longitude": "-121.2", "router": "eA", "kind": "freq", "units": "Hz"}
        # The SDK publisher at BURNS (230 kV) carries its station too: only the voltage level kept it out.
        listed = subprocess.run(
            [sys.executable, "-m", "gridstat.cli.main", "variables", "list", "--broker", f"127.0.0.1:{ports['A']}",
             "--where", "station = 'BURNS' and owner = 'utility-a'", "-o", "json"],
            capture_output=True, text=True, timeout=60, env=env)
        assert [v["variable"] for v in json.loads(listed.stdout)["variables"]] == ["pmu-burns/freq"], listed
        # What a router is, as the file says, is held by its broker and shown with the topology.
        shown = subprocess.run(
            [sys.executable, "-m", "gridstat.cli.main", "topology", "show", "--broker", f"127.0.0.1:{ports['A']}",
             "-o", "json"], capture_output=True, text=True, timeout=60, env=env)
        assert shown.returncode == 0, shown.stderr
        (ea,) = [r for r in json.loads(shown.stdout)["routers"] if r["name"] == "eA"]
        assert ea["attributes"] == {"latitude": "45.1", "longitude": "-121.2", "owner": "utility-a",
                                    "site": "Grizzly"}, ea
        # Every cloud's variables, from cloud C's leaf: its parent asks the root (docs/queries.md).
        listed = subprocess.run(
            [sys.executable, "-m", "gridstat.cli.main", "variables", "list", "--all-clouds", "--broker",
             f"127.0.0.1:{ports['C']}", "--where", "name = 'freq'", "-o", "json"],
            capture_output=True, text=True, timeout=60, env=env)
        assert listed.returncode == 0, listed.stderr
        assert [(v["cloud"], v["variable"]) for v in json.loads(listed.stdout)["variables"]] == [
            ("A", "pmu-burns/freq"), ("A", "pmu-grizzly/freq"), ("C", "pmu-midway/freq")], listed.stdout
        rest, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
    out += rest
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    assert "Traceback" not in err, err
    subs = {r["name"]: r for r in final_rows(out) if r["_kind"] == "sub"}
    # C's subscription to A: the lowest common ancestor of A and C is the root, which holds it.
    c = subs["ems-c"]
    assert c["status"] == "admitted" and c["route"] == "eA>eB>eC", c
    assert set(c["held_by"].split(",")) == {"root", "C"}, c
    assert int(c["delivered"]) > 0, c
    # B's subscription to A: the regional parent west is their LCA; the root is not involved.
    b = subs["ems-b"]
    assert b["status"] == "admitted" and b["route"] == "eA>eB", b
    assert set(b["held_by"].split(",")) == {"west", "B"}, b
    assert int(b["delivered"]) > 0, b
    brokers = {r["name"]: r for r in final_rows(out) if r["_kind"] == "broker"}
    assert {n: r["role"] for n, r in brokers.items()} == {
        "root": "parent", "west": "parent", "east": "parent", "A": "leaf", "B": "leaf", "C": "leaf"}
    assert all(r["exit"] == "0" for r in brokers.values()), brokers


EXAMPLE_DIR = Path(__file__).resolve().parents[2] / "examples" / "transmission-grid"


def test_the_transmission_grid_example_is_what_its_script_generates_and_is_valid() -> None:
    from gridstat.demo.topology import load_topology

    generated = subprocess.run([sys.executable, str(EXAMPLE_DIR / "generate.py")], capture_output=True, text=True,
                               timeout=60, check=True).stdout
    assert generated == (EXAMPLE_DIR / "topology.yaml").read_text(), \
        "examples/transmission-grid/topology.yaml is stale: run generate.py again (docs/topology.md)"
    t = load_topology(EXAMPLE_DIR / "topology.yaml")
    assert (len(t.stations), len(t.routers), len(t.clouds)) == (300, 30, 6)
    assert [(b.name, b.parent) for b in t.brokers] == [
        ("interconnection", None), ("west", "interconnection"), ("central", "interconnection"),
        ("east", "interconnection")]
    assert {s.voltage_kv for s in t.stations} == {230.0, 345.0, 500.0}
    assert len({s.router for s in t.stations}) == 18
    assert all(p.station is not None for p in t.publishers)
    # Three kinds of subscription: within a cloud, within a region, across regions (LCA the root).
    lca = {s.name: t.cloud_brokers[t.router(s.edge).cloud] == t.cloud_brokers[t.router(t.publisher_of(
        s.variable).edge).cloud] for s in t.subscriptions if t.crosses_clouds(s)}
    assert True in lca.values() and False in lca.values(), lca


def test_the_transmission_grid_example_runs(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gridstat.cli.main", "up", str(EXAMPLE_DIR / "topology.yaml"), "--plain",
         "--summary-every", "600", "--duration", "6"],
        capture_output=True, text=True, timeout=120, env=env_for(tmp_path))
    out = result.stdout
    assert result.returncode == 0, f"stdout:\n{out}\nstderr:\n{result.stderr}"
    assert "8 of 8 subscriptions admitted" in out, out
    assert "hierarchy interconnection(west(cascade,sierra),central(prairie,lakes),east(appalachian,coastal))" in out
    subs = {r["name"]: r for r in final_rows(out) if r["_kind"] == "sub"}
    assert len(subs) == 8 and all(int(r["delivered"]) > 0 for r in subs.values()), subs
    assert "interconnection" in subs["lakes-rc-freq"]["held_by"].split(","), subs["lakes-rc-freq"]
    assert "stopped 30 router and 10 broker processes;" in out
