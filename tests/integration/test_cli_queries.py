"""``gridstat variables list`` and ``gridstat sub add --where`` (docs/queries.md) as subprocesses against a
real leaf broker over two real edge routers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gridstat.v1 import broker_pb2 as bpb

from .brokerprocs import FLOAT, edge_pair, register_subscriber
from .fixtures import unused_port

pytestmark = pytest.mark.integration


def cli(*argv: str, broker: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GRIDSTAT_BROKER"}
    return subprocess.run([sys.executable, "-m", "gridstat.cli.main", *argv, "--broker", broker],
                          capture_output=True, text=True, timeout=60, env=env)


def publish(stub: object, publisher: str, variable: str, **attributes: str) -> None:
    stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(  # type: ignore[attr-defined]
        publisher=publisher, variable=variable, type=FLOAT, interval_ms=20, edge_router="e1",
        attributes=attributes)), timeout=5)


def test_variables_are_browsed_and_subscribed_by_their_attributes(tmp_path: Path) -> None:
    with edge_pair(tmp_path) as (broker, _), unused_port() as port:
        for publisher in ("pmu1", "pmu2"):
            broker.stub.RegisterClient(bpb.RegisterClientRequest(
                name=publisher, kind=bpb.CLIENT_KIND_PUBLISHER, edge_router="e1", first_time=True), timeout=5)
        publish(broker.stub, "pmu1", "freq", kind="freq", region="west", station="WEST_1")
        publish(broker.stub, "pmu1", "vphm", kind="phasor", region="west", station="WEST_1")
        publish(broker.stub, "pmu2", "freq", kind="freq", region="east", station="EAST_7")
        register_subscriber(broker, "ems", "e2", port)

        listed = cli("variables", "list", "--where", "kind = 'freq' and station like 'WEST%'", "-o", "json",
                     broker=broker.address)
        assert listed.returncode == 0, listed.stderr
        data = json.loads(listed.stdout)
        assert data["where"] == "kind = 'freq' and station like 'WEST%'"
        assert [(v["variable"], v["attributes"]["region"]) for v in data["variables"]] == [("pmu1/freq", "west")]
        table = cli("variables", "list", broker=broker.address)
        assert table.returncode == 0 and all(n in table.stdout for n in ("pmu1/freq", "pmu1/vphm", "pmu2/freq"))
        assert "station=EAST_7" in table.stdout

        bad = cli("variables", "list", "--where", "kind = 'freq' and", "-o", "json", broker=broker.address)
        assert bad.returncode == 2
        error = json.loads(bad.stdout)["error"]
        assert error["field"] == "where" and "column 18" in error["message"]

        add = ("sub", "add", "--subscriber", "ems", "--edge", "e2", "--interval-ms", "40", "--latency-ms", "100")
        done = cli(*add, "--where", "kind = 'freq'", "-o", "json", broker=broker.address)
        assert done.returncode == 0, done.stderr
        query = json.loads(done.stdout)
        assert [(m["variable"], m["admitted"]) for m in query["members"]] == [("pmu1/freq", True), ("pmu2/freq", True)]
        assert query["members"][0]["subscription"]["allocations"][0]["paths"][0]["routers"] == ["e1", "e2"]
        shown = cli("sub", "list", "--queries", broker=broker.address)
        assert shown.returncode == 0 and query["query_id"] in shown.stdout and "2 of 2 variables admitted" in \
            shown.stdout

        none = cli(*add, "--where", "kind = 'freq' and interval_ms < 5", broker=broker.address)
        assert none.returncode == 0 and "no variable matches yet" in none.stdout
        both = cli(*add, "pmu1/freq", "--where", "kind = 'freq'", broker=broker.address)
        assert both.returncode == 2 and "either VARIABLE or --where" in both.stderr
        typed = cli(*add, "--where", "kind = 'freq'", "--type", "float", broker=broker.address)
        assert typed.returncode == 2 and "type = 'float'" in typed.stderr

        gone = cli("sub", "rm", "--query", query["query_id"], broker=broker.address)
        assert gone.returncode == 0 and "2 subscriptions removed" in gone.stdout
        held = broker.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(subscriber="ems"), timeout=5)
        assert not held.subscriptions
