"""``gridstat up``: the example utility on the real management plane (leaf brokers, parent broker when
available, edge-proxied clients) delivers every admitted subscription, shows refusals, and cleans up."""

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

from gridstat.demo.topology import DEFAULT_TOPOLOGY_PATH, load_topology

pytestmark = pytest.mark.integration

ROUTER_RE = re.compile(r"^\s+router name=(\S+) role=\S+ cloud=\S+ pid=(\d+) port=\d+ control_port=\d+$", re.M)
BROKER_RE = re.compile(r"^\s+broker name=(\S+) role=(leaf|parent) pid=(\d+) port=\d+$", re.M)
KV_RE = re.compile(r"(\w+)=(\S+)")
DURATION = 8


def gridstat(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "gridstat.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def final_block(stdout: str) -> list[dict[str, str]]:
    """The ``key=value`` lines of the FINAL summary."""
    _, _, tail = stdout.partition("FINAL (")
    assert tail, f"no FINAL summary in:\n{stdout}"
    return [dict(KV_RE.findall(line)) | {"_kind": line.split()[0]}
            for line in tail.splitlines()[1:] if line.startswith("  ")]


def child_pids(stdout: str) -> list[int]:
    """Pids of every broker and router, as printed at start."""
    return [int(pid) for _, pid in ROUTER_RE.findall(stdout)] + [int(m[2]) for m in BROKER_RE.findall(stdout)]


def assert_reaped(pids: list[int]) -> None:
    deadline = time.monotonic() + 5
    for pid in pids:
        while True:
            try:
                proc = psutil.Process(pid)
                alive = proc.status() != psutil.STATUS_ZOMBIE and "gridstat.cli.main" in proc.cmdline()
            except psutil.NoSuchProcess:
                alive = False
            if not alive:
                break
            assert time.monotonic() < deadline, f"child process {pid} is still running: {proc.cmdline()}"
            time.sleep(0.1)


def test_up_runs_the_default_utility_on_the_brokers_and_stops_cleanly() -> None:
    result = gridstat("up", "--duration", str(DURATION))
    out = result.stdout
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{out}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr

    topology = load_topology()
    routers = dict(ROUTER_RE.findall(out))
    assert set(routers) == {r.name for r in topology.routers}
    brokers = {name: role for name, role, _ in BROKER_RE.findall(out)}
    with_parent = "parent" in brokers.values()
    assert {n for n, role in brokers.items() if role == "leaf"} == set(topology.clouds)
    assert_reaped(child_pids(out))
    # every router and broker exited 0
    assert f"stopped {len(topology.routers)} router and {len(brokers)} broker processes;" in out

    rows = final_block(out)
    subs = {r["name"]: r for r in rows if r["_kind"] == "sub"}
    broker_rows = {r["name"]: r for r in rows if r["_kind"] == "broker"}
    assert set(subs) == {s.name for s in topology.subscriptions}
    assert set(broker_rows) == set(brokers)
    held = {name for b in broker_rows.values() for name in b["held"].split(",") if name != "-"}
    for b in broker_rows.values():
        # The final summary is printed after the teardown: each role's state is how it ended.
        assert (b["state"], b["exit"], b["routers_down"]) == ("stopped", "0", "0"), b
    for spec in topology.subscriptions:
        row = subs[spec.name]
        if row["status"] != "admitted":
            # Only an inter-cloud subscription of a build without the parent broker may be refused,
            # and the refusal carries the broker's machine-readable reason.
            assert not with_parent and topology.crosses_clouds(spec), row
            assert row["status"] == "rejected" and row["reason"] not in ("", "-"), row
            assert row["delivered"] == "0" and row["held_by"] == "-", row
            assert f"subscription name={spec.name} var={spec.variable} REJECTED reason={row['reason']}" in out
            continue
        assert spec.name in held and row["held_by"] != "-", row   # the brokers report it
        want = topology.expected_rate(spec)
        assert float(row["expected_per_s"]) == pytest.approx(want, abs=0.01)
        rate = float(row["rate_per_s"])
        assert 0.6 * want <= rate <= 1.4 * want, (spec.name, rate, want)
        # about duration x rate events, minus startup; generous for a loaded CI machine
        assert int(row["delivered"]) >= 0.5 * DURATION * want - 2, row
        paths = row["route"].split("|")
        assert int(row["paths"]) == len(paths) == spec.redundancy, row
        for p in paths:
            hops = p.split(">")
            assert hops[0] == topology.publisher_of(spec.variable).edge and hops[-1] == spec.edge, row
        if spec.redundancy == 2:
            a, b = (p.split(">") for p in paths)
            assert not set(a[1:-1]) & set(b[1:-1]), row  # node-disjoint interiors
            # the second path delivers a copy of (almost) every event, and the SDK suppresses it
            assert 0.5 * int(row["delivered"]) < int(row["duplicates"]) <= int(row["delivered"]), row
        else:
            assert row["duplicates"] == "0", row  # one path, and no instant published twice
    admitted = [s for s in subs.values() if s["status"] == "admitted"]
    assert any(s["paths"] == "2" for s in admitted), "the redundancy-2 subscription was not admitted"
    if with_parent:
        assert len(admitted) == len(topology.subscriptions)
    assert sum(int(b["subscriptions"]) for b in broker_rows.values()) >= len(admitted)  # QoSBroker.Health
    router_rows = {r["name"]: r for r in rows if r["_kind"] == "router"}
    assert set(router_rows) == set(routers)
    assert sum(int(r["forwarded"]) for r in router_rows.values()) > 0
    # The C37.118 PMUs (a simulated device read by a pmu-gateway) at exactly 60 frames/s: the full-rate
    # subscription expects 60.00 events/s, not the 58.82 of a 17 ms period (docs/frame-rates.md).
    devices = [p for p in topology.publishers if p.device is not None]
    assert devices and all(f"publisher name={p.name} " in out and "fed=c37118" in out for p in devices)
    assert subs["ems-a-freq"]["expected_per_s"] == "60.00" and subs["ems-a-freq"]["gaps"] == "0"


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
        printed = child_pids("".join(lines))
        children = [p.pid for p in psutil.Process(proc.pid).children()]
        assert sorted(children) == sorted(printed)
        assert len(printed) >= 12  # 10 routers, 2 leaf brokers (and the parent when there is one)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, f"{sig.name}: exit {proc.returncode}\n{err}"
        assert f"FINAL (stopped by {sig.name})" in out
        assert "variant=sparse" in out
        ended = [r for r in final_block(out) if r["_kind"] in ("router", "broker")]
        assert len(ended) == len(printed)
        assert all((r["state"], r["exit"]) == ("stopped", "0") for r in ended), ended
        assert_reaped(printed)


def summaries(text: str) -> list[dict[str, dict[str, str]]]:
    """Each plain summary (STATUS or FINAL) as {name: fields} of its ``sub``, ``router`` and ``broker`` lines."""
    out: list[dict[str, dict[str, str]]] = []
    for line in text.splitlines():
        if line.startswith(("STATUS ", "FINAL (")):
            out.append({})
        elif out and line.startswith("  ") and line.split()[0] in ("sub", "router", "broker"):
            fields = dict(KV_RE.findall(line))
            out[-1][f"{line.split()[0]}:{fields.get('name')}"] = fields
    return out


def test_up_restarts_a_crashed_router_and_broker_and_traffic_goes_on() -> None:
    """Killed with SIGKILL, a router and a leaf broker are restarted by gridstat up's supervisor on their
    ports and state; the subscriptions keep delivering afterwards (docs/topology.md, "Restarts")."""
    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "up", "--plain", "--summary-every", "1",
                             "--duration", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        if "publishers sending" in line:
            break
    start = "".join(lines)
    routers = dict(ROUTER_RE.findall(start))
    brokers = {name: int(pid) for name, _role, pid in BROKER_RE.findall(start)}
    time.sleep(2)
    os.kill(int(routers["a-int1"]), signal.SIGKILL)
    os.kill(brokers["B"], signal.SIGKILL)
    out, err = proc.communicate(timeout=90)
    out = start + out
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err}"
    assert re.search(r"supervisor: router a-int1 \(pid \d+\) killed by SIGKILL; restarting in", out), out
    assert re.search(r"supervisor: broker B \(pid \d+\) killed by SIGKILL; restarting in", out), out
    assert "supervisor: router a-int1 restarted" in out and "supervisor: broker B restarted" in out, out
    final = summaries(out)[-1]
    assert (final["router:a-int1"]["state"], final["router:a-int1"]["restarts"]) == ("stopped", "1")
    assert (final["broker:B"]["restarts"], final["broker:B"]["routers_down"]) == ("1", "0"), final["broker:B"]
    # After both came back (the last 5 s of summaries), every admitted subscription still delivers.
    tail = summaries(out)[-6:]
    for key, row in final.items():
        if key.startswith("sub:") and row["status"] == "admitted":
            assert int(row["delivered"]) > int(tail[0][key]["delivered"]), (key, tail[0][key], row)
    assert_reaped([int(p) for p in routers.values()] + list(brokers.values()))


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


def test_bad_router_capacity_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    default = DEFAULT_TOPOLOGY_PATH.read_text()
    bad = default.replace("{name: a-int2, role: internal, cloud: A}",
                          "{name: a-int2, role: internal, cloud: A, capacity_eps: 0}")
    assert bad != default
    path.write_text(bad)
    line = next(i for i, t in enumerate(bad.splitlines(), start=1) if "capacity_eps: 0" in t)
    result = gridstat("up", str(path), timeout=30)
    assert result.returncode == 2, result
    assert f"{path}:{line}: routers[3].capacity_eps: 0 is out of range" in result.stderr


def test_refused_subscriptions_are_shown_with_reason_and_offer_and_the_rest_runs(tmp_path: Path) -> None:
    """Without the parent broker the inter-cloud subscriptions are refused by their leaf; a bound below
    the best path's latency is refused with the offer of that latency. The others still deliver."""
    path = tmp_path / "tight.yaml"
    path.write_text(DEFAULT_TOPOLOGY_PATH.read_text() + "  - {name: too-tight, edge: a-edge2, variable: pmu-a1/vmag, "
                    "interval_ms: 17, latency_ms: 1}\n")
    topology = load_topology(path)
    result = gridstat("up", str(path), "--no-parent", "--duration", "4")
    out = result.stdout
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{out}\nstderr:\n{result.stderr}"
    assert not [role for _, role, _ in BROKER_RE.findall(out) if role == "parent"]
    assert_reaped(child_pids(out))
    subs = {r["name"]: r for r in final_block(out) if r["_kind"] == "sub"}
    tight = subs["too-tight"]
    assert (tight["status"], tight["reason"]) == ("rejected", "LatencyUnattainable"), tight
    assert tight["offer"].startswith("best_latency_ms="), tight
    for spec in topology.subscriptions:
        row = subs[spec.name]
        if topology.crosses_clouds(spec):
            assert row["status"] == "rejected" and row["reason"] not in ("", "-"), row
        elif spec.name != "too-tight":
            assert row["status"] == "admitted" and int(row["delivered"]) > 0, row
    assert "note no parent broker (--no-parent)" in out


EDGE_BORDER = """\
clouds:
  - name: A
  - name: B
routers:
  - {name: sub-a, role: edge-border, cloud: A}
  - {name: ia, role: internal, cloud: A}
  - {name: ea, role: edge, cloud: A}
  - {name: sub-b, role: edge-border, cloud: B}
  - {name: eb, role: edge, cloud: B}
links:
  - {a: sub-a, b: ia, latency_ms: 1}
  - {a: ia, b: ea, latency_ms: 1}
  - {a: sub-a, b: sub-b, latency_ms: 5}
  - {a: sub-b, b: eb, latency_ms: 1}
publishers:
  - name: pmu-sub-a
    edge: sub-a
    variables:
      - {name: freq, type: float, interval_ms: 20}
  - name: pmu-sub-b
    edge: sub-b
    variables:
      - {name: freq, type: float, interval_ms: 20}
subscriptions:
  - {name: same-router, edge: sub-a, variable: pmu-sub-a/freq, interval_ms: 20, latency_ms: 50}
  - {name: in-cloud, edge: ea, variable: pmu-sub-a/freq, interval_ms: 40, latency_ms: 50}
  - {name: across, edge: eb, variable: pmu-sub-a/freq, interval_ms: 20, latency_ms: 50}
  - {name: back, edge: sub-a, variable: pmu-sub-b/freq, interval_ms: 20, latency_ms: 50}
"""


def test_an_edge_border_router_hosts_clients_and_ends_the_link_between_clouds(tmp_path: Path) -> None:
    """A substation router that is edge and border at once (docs/topology.md, "Router roles"): its
    publisher's variable reaches a subscriber on the same router, one in its cloud and one across the
    inter-cloud link it ends; a subscriber on it receives the other cloud's variable."""
    path = tmp_path / "edge-border.yaml"
    path.write_text(EDGE_BORDER)
    result = gridstat("up", str(path), "--duration", "5", "--plain")
    out = result.stdout
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{out}\nstderr:\n{result.stderr}"
    assert_reaped(child_pids(out))
    assert re.search(r"router name=sub-a role=edge-border ", out), out
    subs = {r["name"]: r for r in final_block(out) if r["_kind"] == "sub"}
    assert set(subs) == {"same-router", "in-cloud", "across", "back"}, subs
    for name, row in subs.items():
        assert row["status"] == "admitted" and int(row["delivered"]) > 0, (name, row)
