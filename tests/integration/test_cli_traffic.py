"""``gridstat publish`` and ``gridstat subscribe`` as processes against a real leaf broker and routers.

A diamond cloud on 127.0.0.1 whose edge routers proxy their clients to the broker::

    e1 - i1 - e2
     \\        /
      i2 ----

A publisher on e1; a subscriber on e2 that admits itself with two node-disjoint paths, and one
that only registers and gets its events once ``gridstat sub add`` admits a subscription for it.
Everything is judged from their JSON stats lines.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import pytest

from gridstat.chaos.diamond import LINKS, ROUTERS
from gridstat.v1 import broker_pb2 as bpb

from . import brokerprocs
from .brokerprocs import BrokerProc
from .fixtures import unused_port, wait_for
from .routerprocs import RouterProc

pytestmark = pytest.mark.integration

INTERVAL_MS = 20
LATENCY_MS = 30


@dataclass
class Cloud:
    broker: BrokerProc
    routers: dict[str, RouterProc]

    def edge(self, name: str) -> str:
        return f"127.0.0.1:{self.routers[name].control_port}"


@dataclass
class Client:
    """A ``gridstat publish|subscribe`` process; its stdout lines are read as they come."""

    proc: subprocess.Popen[str]
    #: stderr goes to a file: a pipe nobody reads could fill up and block the client.
    err: IO[str]
    lines: list[str] = field(default_factory=list)
    err_text: str = ""

    def read(self, timeout_s: float) -> None:
        """Read every line available within ``timeout_s``."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                break
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, prefix: str, timeout_s: float = 20.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.lines:
                if line.startswith(prefix):
                    return line
            if self.proc.poll() is not None and not self._more():
                break
            self.read(0.2)
        raise AssertionError(f"no {prefix!r} line within {timeout_s} s: {self.lines[-5:]} {self.stderr()}")

    def _more(self) -> bool:
        before = len(self.lines)
        self.read(0.1)
        return len(self.lines) > before

    def json_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines if line.startswith("{")]

    def wait_json(self, predicate: Any, timeout_s: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for data in self.json_lines():
                if predicate(data):
                    return data
            self.read(0.3)
        raise AssertionError(f"no matching stats line within {timeout_s} s: {self.lines[-3:]} {self.stderr()}")

    def stop(self) -> tuple[int, dict[str, Any]]:
        """SIGTERM; the exit code and the final stats line."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rest = self.proc.communicate(timeout=15)[0]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rest = self.proc.communicate(timeout=5)[0]
        self.close()
        self.lines.extend(rest.splitlines())
        finals = [d for d in self.json_lines() if d.get("final")]
        assert finals, f"no final line: {self.lines[-3:]}"
        return self.proc.returncode, finals[-1]

    def stderr_so_far(self) -> str:
        """What the running process wrote on stderr yet; unlike ``stderr`` it leaves the shared file offset
        where the process writes alone."""
        return os.pread(self.err.fileno(), 1 << 20, 0).decode(errors="replace")

    def stderr(self) -> str:
        if self.err.closed:
            return self.err_text
        self.err.seek(0)
        return self.err.read()

    def close(self) -> None:
        """After the process ended: keep what it wrote on stderr, close the file."""
        self.err_text = self.stderr()
        self.err.close()


def gridstat(*argv: str) -> Client:
    err = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed with the Client's process
    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", *argv, "--exit-with-parent"],
                            stdout=subprocess.PIPE, stderr=err, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "POD_IP": ""})
    return Client(proc, err)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with brokerprocs.cloud(tmp_path_factory.mktemp("cli-traffic"), ROUTERS, LINKS, proxied=("e1", "e2")) as c:
        yield Cloud(*c)


@pytest.fixture(scope="module")
def publisher(cloud: Cloud) -> Iterator[Client]:
    pub = gridstat("publish", "--name", "pmu1", "--edge", cloud.edge("e1"), "--variable", "freq", "--type", "float",
                   "--interval-ms", str(INTERVAL_MS), "--stats-every-s", "1", "-o", "json")
    try:
        ready = pub.wait_line("READY ")
        assert "name=pmu1" in ready and "variables=pmu1/freq:" in ready and f"interval_ms={INTERVAL_MS}" in ready
        yield pub
    finally:
        if pub.proc.poll() is None:
            pub.stop()


def check_delivery(v: dict[str, Any], *, min_distinct: int) -> None:
    assert v["bound"] and v["distinct"] >= min_distinct, v
    assert v["missing"] == 0, v
    assert v["stale"] == 0, v
    assert v["interval_ms"] == pytest.approx(INTERVAL_MS, abs=0.01), v
    assert v["expected_interval_ms"] == INTERVAL_MS
    assert v["last_ts_ms"] - v["first_ts_ms"] == (v["distinct"] - 1) * INTERVAL_MS
    lat = v["latency_ms"]
    assert lat["p50"] is not None and 0 <= lat["p50"] <= lat["p99"] <= lat["max"]
    assert lat["p99"] <= LATENCY_MS, lat


def test_admitted_subscriber_gets_every_event_twice_within_the_bound(cloud: Cloud, publisher: Client) -> None:
    sub = gridstat("subscribe", "--name", "ems", "--edge", cloud.edge("e2"), "--variable", "pmu1/freq", "--admit",
                   "--interval-ms", str(INTERVAL_MS), "--latency-ms", str(LATENCY_MS), "--redundancy", "2",
                   "--stats-every-s", "1", "-o", "json")
    try:
        ready = sub.wait_line("READY ")
        assert "name=ems" in ready and "mode=admit" in ready and "advertise=127.0.0.1" in ready
        sub.wait_json(lambda d: d["variables"]["pmu1/freq"]["distinct"] >= 100)
    finally:
        code, final = sub.stop()
    assert code == 0
    assert final["kind"] == "subscribe" and final["name"] == "ems" and final["mode"] == "admit"
    v = final["variables"]["pmu1/freq"]
    check_delivery(v, min_distinct=100)
    # Two node-disjoint paths: (nearly) every timestamp arrives twice; the copies are counted, not delivered.
    assert v["duplicates"] >= v["distinct"] - 5, v
    assert v["received"] == v["distinct"] + v["duplicates"]
    periods = [d for d in sub.json_lines() if not d["final"]]
    assert periods and all(set(d["variables"]["pmu1/freq"]["period"]) >= {"received", "latency_ms"}
                           for d in periods)
    # It removed what it admitted when it stopped.
    assert not cloud.broker.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(subscriber="ems"),
                                                   timeout=5).subscriptions


def test_registered_only_subscriber_receives_once_sub_add_admits_it(cloud: Cloud, publisher: Client) -> None:
    sub = gridstat("subscribe", "--name", "hist", "--edge", cloud.edge("e2"), "--variable", "pmu1/freq",
                   "--interval-ms", str(INTERVAL_MS), "--latency-ms", str(LATENCY_MS), "--stats-every-s", "0.5",
                   "-o", "json")
    try:
        ready = sub.wait_line("READY ")
        assert "mode=registered" in ready
        first = sub.wait_json(lambda d: not d["final"])
        assert first["variables"]["pmu1/freq"]["received"] == 0 and not first["variables"]["pmu1/freq"]["bound"]
        added = subprocess.run([sys.executable, "-m", "gridstat.cli.main", "sub", "add", "pmu1/freq",
                                "--subscriber", "hist", "--edge", "e2", "--interval-ms", str(INTERVAL_MS),
                                "--latency-ms", str(LATENCY_MS), "--broker", cloud.broker.address, "-o", "json"],
                               capture_output=True, text=True, timeout=30)
        assert added.returncode == 0, added.stderr
        sub.wait_json(lambda d: d["variables"]["pmu1/freq"]["distinct"] >= 100)
    finally:
        code, final = sub.stop()
    assert code == 0 and final["mode"] == "registered"
    v = final["variables"]["pmu1/freq"]
    check_delivery(v, min_distinct=100)
    assert v["duplicates"] == 0  # one path
    # A registered-only subscriber leaves the subscription to whoever admitted it.
    assert [s.subscription.subscriber for s in cloud.broker.stub.ListSubscriptions(
        bpb.ListSubscriptionsRequest(subscriber="hist"), timeout=5).subscriptions] == ["hist"]


def test_admitting_subscriber_waits_for_its_publisher(cloud: Cloud, publisher: Client) -> None:
    """Started before its publisher: UnknownVariable is retried until the publisher registers."""
    sub = gridstat("subscribe", "--name", "late", "--edge", cloud.edge("e2"), "--variable", "pmu2/freq", "--admit",
                   "--interval-ms", "40", "--latency-ms", str(LATENCY_MS), "--retry-max-s", "0.5", "-o", "json")
    pub: Client | None = None
    try:
        time.sleep(1.5)
        assert sub.proc.poll() is None and not [line for line in sub.lines if line.startswith("READY")]
        pub = gridstat("publish", "--name", "pmu2", "--edge", cloud.edge("e1"), "--variable", "freq",
                       "--interval-ms", str(INTERVAL_MS), "-o", "json")
        pub.wait_line("READY ")
        sub.wait_line("READY ")
        sub.wait_json(lambda d: d["variables"]["pmu2/freq"]["distinct"] >= 25)
    finally:
        code, final = sub.stop()
        if pub is not None:
            pub.stop()
    assert code == 0
    v = final["variables"]["pmu2/freq"]
    assert v["expected_interval_ms"] == 40 and v["interval_ms"] == pytest.approx(40, abs=0.01)
    assert v["missing"] == 0 and v["duplicates"] == 0
    err = sub.stderr()
    assert "UnknownVariable" in err and "retrying in" in err and "Traceback" not in err


def test_publisher_stats_and_clean_stop(publisher: Client) -> None:
    publisher.wait_json(lambda d: d["sent"] >= 50)
    code, final = publisher.stop()
    assert code == 0
    assert final["kind"] == "publish" and final["name"] == "pmu1" and final["variables"] == ["pmu1/freq"]
    assert final["sent"] == final["instants"] >= 50 and final["last_ts_ms"] % INTERVAL_MS == 0
    assert final["dropped"] == 0


def test_unreachable_edge_retries_then_exits_4_with_once() -> None:
    with unused_port() as port:
        edge = f"127.0.0.1:{port}"
        once = subprocess.run([sys.executable, "-m", "gridstat.cli.main", "subscribe", "--name", "ems", "--edge", edge,
                               "--variable", "pmu1/freq", "--once"], capture_output=True, text=True, timeout=30)
        assert once.returncode == 4 and "giving up" in once.stderr and "Traceback" not in once.stderr
        retrying = gridstat("publish", "--name", "pmu9", "--edge", edge, "--variable", "freq", "--retry-max-s", "0.5")
        assert wait_for(lambda: retrying.stderr_so_far().count("retrying in") >= 2, timeout_s=20), \
            retrying.stderr_so_far()
        retrying.proc.send_signal(signal.SIGTERM)
        retrying.proc.communicate(timeout=15)
        retrying.close()
        assert retrying.proc.returncode == 0
        err = retrying.stderr()
        assert err.count("retrying in") >= 2 and "Traceback" not in err
