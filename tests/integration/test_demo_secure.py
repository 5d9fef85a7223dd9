"""``gridstat up`` is secure by default (docs/security.md, "Certificates (embedded mode)"): certificates
made on the first start (0600 files in a 0700 directory), mTLS on every gRPC channel, the documented CLI
commands working against it without options, and events forged under a publisher's id refused at the
edge router (``auth_failed``) so that a subscriber gets none of them. ``--insecure`` prints its warning
banner, and there the same forged events do reach the subscriber (what the default prevents)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gridstat.client import Subscriber
from gridstat.core import clock, wire
from gridstat.core.model import FLOAT
from gridstat.demo import certs as democerts

pytestmark = pytest.mark.integration

ROUTER_RE = re.compile(r"^\s+router name=(\S+) role=\S+ cloud=\S+ pid=\d+ port=(\d+) control_port=(\d+)$", re.M)
BROKER_RE = re.compile(r"^\s+broker name=(\S+) role=(leaf|parent) pid=\d+ port=(\d+)$", re.M)
PUBLISHER_RE = re.compile(r"^\s+publisher name=(\S+) edge=(\S+) id=(\d+) signed=(yes|no)"
                          r"(?: fed=c37118 device=\S+ idcode=\d+ frames_per_s=\d+)? variables=(\S+)$", re.M)
FORGED_VALUE = -999.0
FORGED = 10  # instants; two datagrams each (unsigned, and signed with a wrong key)


def env_for(tmp_path: Path) -> dict[str, str]:
    """The demo's certificates and its running-demo record go under tmp_path, not the user's ~/.local/state."""
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "xdg"), "COLUMNS": "200"}


def gridstat(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gridstat.cli.main", *args], capture_output=True, text=True,
                          timeout=60, env=env)


def start_up(env: dict[str, str], *extra: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "up", "--plain", "--summary-every", "600",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # until traffic flows
        lines.append(line)
        if "publishers sending" in line:
            break
    return proc, "".join(lines)


def stop_up(proc: subprocess.Popen[str]) -> tuple[str, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    return out, err


def router_drops(final: str, router: str) -> dict[str, int]:
    m = re.search(rf"^\s+router name={router} .* drops=(\S+) ", final.partition("FINAL (")[2], re.M)
    assert m, final
    return {k: int(v) for k, v in (d.split(":") for d in m.group(1).split(",") if ":" in d)}


async def inject_forgeries(startup: str, tls_dir: Path | None) -> tuple[int, int]:
    """Subscribe a spy to pmu-a1/freq at a-edge1, then send that edge router events of pmu-a1/freq under
    pmu-a1's sender id with an impossible value: unsigned, and signed with a wrong key (the injection of
    tests/chaos and tests/integration/test_datagram_auth.py). Returns (forged, genuine) events the spy got."""
    routers = {name: (int(port), int(control)) for name, port, control in ROUTER_RE.findall(startup)}
    pubs = {m[0]: m for m in PUBLISHER_RE.findall(startup)}
    _, edge, pub_id, _, variables = pubs["pmu-a1"]
    assert edge == "a-edge1"
    var_id = int(dict(v.split("=") for v in variables.split(","))["pmu-a1/freq"])
    tls = democerts.ensure(tls_dir, ["spy"]).certs.tls("spy") if tls_dir is not None else None
    values: list[object] = []
    spy = await Subscriber.connect("spy", f"127.0.0.1:{routers['a-edge1'][1]}", tls=tls)
    try:
        await spy.subscribe_remote("pmu-a1/freq", FLOAT, interval_ms=17, latency_ms=200,
                                   on_event=lambda s, h: values.append(h.value))
        await asyncio.sleep(0.5)
        base = clock.next_aligned_ms(clock.now_ms(), 17) + 17 * 20  # instants the publisher has not sent yet
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for i in range(FORGED):
                ev = wire.encode_event(wire.Event(base + 17 * i, var_id, wire.encode_value(FLOAT, FORGED_VALUE)))
                sock.sendto(wire.encode_datagram(int(pub_id), 3_000_000_000 + i, [ev]),
                            ("127.0.0.1", routers["a-edge1"][0]))
                sock.sendto(wire.sign_datagram(b"x" * 32, wire.encode_datagram(int(pub_id), 3_100_000_000 + i, [ev])),
                            ("127.0.0.1", routers["a-edge1"][0]))
        finally:
            sock.close()
        await asyncio.sleep(1.5)  # past the forged instants: the genuine events of those instants arrive too
    finally:
        await spy.stop()
    forged = sum(1 for v in values if v == FORGED_VALUE)
    return forged, len(values) - forged


async def test_up_defaults_to_mtls_and_datagram_auth_and_the_cli_works_against_it(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    proc, startup = start_up(env)
    try:
        assert "publishers sending" in startup, startup + (proc.stderr.read() if proc.stderr else "")
        certs_dir = tmp_path / "xdg" / "gridstat" / "up" / "certs"
        assert f"certificates in {certs_dir}" in startup and "INSECURE" not in startup
        # (a) certificates: one per role identity and per client, private
        assert stat.S_IMODE(certs_dir.stat().st_mode) == 0o700
        files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in certs_dir.iterdir() if p.name != ".lock"}
        for name in (*democerts.ROLE_IDENTITIES, "broker-A", "broker-B", "pmu-a1", "ems-a-freq", "hist-b-vmag"):
            assert f"{name}.pem" in files and f"{name}.key" in files, sorted(files)
        assert "ca.pem" in files and "ca.key" in files
        assert set(files.values()) == {0o600}, files
        pubs = PUBLISHER_RE.findall(startup)
        assert pubs and all(signed == "yes" for _, _, _, signed, _ in pubs), pubs  # keyed publisher channels
        # The README's commands, as printed at start: no --tls-* needed while the demo runs.
        leaf = {name: port for name, _, port in BROKER_RE.findall(startup)}["A"]
        shown = gridstat(env, "topology", "show", "--broker", f"127.0.0.1:{leaf}", "-o", "json")
        assert shown.returncode == 0, shown.stderr
        assert {"a-edge1", "a-int1"} <= {r["name"] for r in json.loads(shown.stdout)["routers"]}
        routes = gridstat(env, "routes", "a-edge1", "--broker", f"127.0.0.1:{leaf}", "-o", "json")
        assert routes.returncode == 0, routes.stderr
        listed = gridstat(env, "sub", "list", "--broker", f"127.0.0.1:{leaf}", "-o", "json")
        assert listed.returncode == 0 and "ems-a-freq" in listed.stdout, listed.stderr
        # Without the demo's certificates (another state home: no running demo there) plaintext is refused.
        bare = gridstat({**env, "XDG_STATE_HOME": str(tmp_path / "other")}, "topology", "show", "--broker",
                        f"127.0.0.1:{leaf}", "--timeout", "2")
        assert bare.returncode == 4, bare
        # (b) forged events under pmu-a1's id: refused at the edge router, none reaches a subscriber
        forged, genuine = await inject_forgeries(startup, certs_dir)
        assert forged == 0 and genuine > 20, (forged, genuine)
    finally:
        out, err = stop_up(proc)
    assert proc.returncode == 0, err
    assert router_drops(out, "a-edge1").get("auth_failed", 0) >= 2 * FORGED, out
    assert not list((tmp_path / "xdg" / "gridstat" / "up" / "running").glob("*.json"))  # unregistered at exit


async def test_insecure_prints_the_banner_and_lets_forged_events_through(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    proc, startup = start_up(env, "--insecure")
    try:
        assert "publishers sending" in startup, startup + (proc.stderr.read() if proc.stderr else "")
        assert startup.startswith("WARNING: gridstat up --insecure: mTLS and datagram authentication are OFF.")
        assert "inject forged events" in startup
        assert not (tmp_path / "xdg" / "gridstat" / "up" / "certs").exists()  # no certificates made
        pubs = PUBLISHER_RE.findall(startup)
        assert pubs and all(signed == "no" for _, _, _, signed, _ in pubs), pubs
        forged, genuine = await inject_forgeries(startup, None)
        assert forged > 0 and genuine > 0, (forged, genuine)  # what the secure default prevents
    finally:
        out, err = stop_up(proc)
    assert proc.returncode == 0, err
    final = out.partition("FINAL (")[2]
    assert "note INSECURE (--insecure)" in final
    assert "WARNING: gridstat up --insecure: mTLS and datagram authentication are OFF." in final
