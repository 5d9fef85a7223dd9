"""``gridstat sub add --endpoint IP:PORT``: a subscriber endpoint of one's own program registered from the
CLI, against a real leaf broker and routers; its events arrive at that UDP port."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .brokerprocs import edge_pair, register_publisher
from .fixtures import Feed, Sink, wait_for

pytestmark = pytest.mark.integration


def gridstat(*argv: str, broker: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gridstat.cli.main", *argv], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "GRIDSTAT_BROKER": broker})


def test_a_subscriber_endpoint_registered_from_the_cli_receives_its_events(tmp_path: Path) -> None:
    sink = Sink()
    try:
        with edge_pair(tmp_path) as (broker, routers):
            pub_id, (var,) = register_publisher(broker, "pmu1", "e1")
            done = gridstat("sub", "add", "pmu1/freq", "--subscriber", "my-app", "--edge", "e2",
                            "--endpoint", f"127.0.0.1:{sink.port}", "--interval-ms", "20", "--latency-ms", "50",
                            "-o", "json", broker=broker.address)
            assert done.returncode == 0, done.stderr
            data = json.loads(done.stdout)
            assert data["registered"]["endpoint"] == f"127.0.0.1:{sink.port}"
            assert data["registered"]["edge_router_id"] == routers["e2"].router_id
            assert data["subscriber"] == "my-app" and data["variable_id"] == var
            feed = Feed(routers["e1"].port, pub_id, var)
            try:
                assert wait_for(lambda: len(sink.events) > 10, timeout_s=10)
            finally:
                feed.stop()
            # every other instant: the 20 ms subscription of a 10 ms publication, filtered in the network
            stamps = sorted(sink.timestamps(var))
            assert all(b - a == 20 for a, b in itertools.pairwise(stamps)), stamps[:10]
            text = gridstat("sub", "add", "pmu1/freq", "--subscriber", "my-app2", "--edge", "e2",
                            "--endpoint", f"127.0.0.1:{sink.port}", "--interval-ms", "20", "--latency-ms", "50",
                            broker=broker.address)
            assert text.returncode == 0, text.stderr
            assert f"registered subscriber my-app2 at e2: events to 127.0.0.1:{sink.port}" in text.stdout
    finally:
        sink.close()


@pytest.mark.parametrize("bad, said", [("localhost:9000", "IP must be an IP address"),
                                       ("127.0.0.1:0", "PORT must be 1..65535"),
                                       ("127.0.0.1", "IP must be an IP address")])
def test_a_bad_endpoint_is_refused_naming_the_flag(bad: str, said: str) -> None:
    done = gridstat("sub", "add", "pmu1/freq", "--subscriber", "x", "--edge", "e2", "--endpoint", bad,
                    "--interval-ms", "20", "--latency-ms", "50", broker="127.0.0.1:1")
    assert done.returncode == 2 and "--endpoint" in done.stderr and said in done.stderr, done.stderr
