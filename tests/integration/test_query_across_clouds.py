"""A standing query subscription that matches variables of other clouds (docs/queries.md, "Across clouds").

       R              real brokers and routers on 127.0.0.1; inter-cloud channels A-B at P1, B-C at R
     /   \\
   P1     P2          the subscriber is in C; its query matches FREQ variables of A (three levels up
  /  \\     \\         and down again) and of B, one registered after the query; an unregistered one is
 A    B     C         dropped; a cloud whose broker stops keeps its members (its absence is not a removal)
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gridstat.v1 import broker_pb2 as bpb

from . import brokerprocs
from .brokerprocs import FLOAT, BrokerProc, register_subscriber, start_broker
from .fixtures import Feed, Sink, wait_for
from .routerprocs import RouterProc

pytestmark = pytest.mark.integration

CLOUDS = {"A": 1, "B": 2, "C": 3}
FREQ = {"signal": "FREQ", "region": "west"}


@contextlib.contextmanager
def hierarchy(tmp: Path) -> Iterator[tuple[dict[str, BrokerProc], dict[str, RouterProc]]]:
    with brokerprocs.started() as (brokers, routers):
        brokers["R"] = start_broker("R", str(tmp / "R.sqlite"), extra=("--role", "parent"))
        for p in ("P1", "P2"):
            brokers[p] = start_broker(p, str(tmp / f"{p}.sqlite"), extra=("--role", "parent", "--parent",
                                                                         brokers["R"].address))
        for cloud, k in CLOUDS.items():
            brokerprocs.start_leaf(tmp, brokers, routers, brokers["P1" if cloud in "AB" else "P2"], cloud, k,
                                   extra=("--query-refresh-s", "0.3"))
        for p in ("P1", "P2"):
            brokers["R"].stub.AddChildBroker(bpb.AddChildBrokerRequest(child=bpb.ChildBroker(
                name=p, address=brokers[p].address)), timeout=10)
        brokerprocs.add_inter_cloud(brokers["P1"], "A", "B")
        brokerprocs.add_inter_cloud(brokers["R"], "B", "C")
        yield brokers, routers


def publish(leaf: BrokerProc, publisher: str, edge: str, variables: dict[str, dict[str, str]]) -> tuple[int, list[int]]:
    """Publisher ``publisher`` at ``edge`` with FLOAT ``variables`` (name -> attributes) at 10 ms."""
    client = leaf.stub.RegisterClient(bpb.RegisterClientRequest(
        name=publisher, kind=bpb.CLIENT_KIND_PUBLISHER, edge_router=edge, first_time=True), timeout=5)
    ids = [leaf.stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
        publisher=publisher, variable=v, type=FLOAT, interval_ms=10, edge_router=edge, attributes=attrs)),
        timeout=5).publication.variable_id for v, attrs in variables.items()]
    return client.client_id, ids


def members(leaf: BrokerProc) -> dict[str, bpb.QueryMember]:
    (q,) = leaf.stub.ListQueries(bpb.ListQueriesRequest(subscriber="ems"), timeout=5).queries
    return {m.variable: m for m in q.members}


def held_at_root(root: BrokerProc) -> list[str]:
    return sorted(s.subscription.variable for s in root.stub.ListSubscriptions(
        bpb.ListSubscriptionsRequest(), timeout=5).subscriptions)


def test_a_query_matches_the_other_clouds_variables_now_and_later(tmp_path: Path) -> None:
    sink = Sink()
    feeds: list[Feed] = []
    try:
        with hierarchy(tmp_path) as (brokers, routers):
            a, b, c, root = brokers["A"], brokers["B"], brokers["C"], brokers["R"]
            pmu1, (freq1, _) = publish(a, "pmu1", "eA", {"freq": FREQ, "vphm": {"signal": "VPHM"}})
            publish(c, "pmu3", "eC", {"freq": FREQ})  # this cloud's own match, admitted locally
            register_subscriber(c, "ems", "eC", sink.port)

            # The leaf's own listing is its cloud's; with all_clouds the parent answers for the whole
            # hierarchy (its root), each publication with its cloud -- the CLI's --all-clouds too.
            listed = c.stub.ListPublications(bpb.ListPublicationsRequest(where="signal = 'FREQ'"), timeout=5)
            assert [(p.publisher, p.variable) for p in listed.publications] == [("pmu3", "freq")]
            every = c.stub.ListPublications(bpb.ListPublicationsRequest(where="signal = 'FREQ'", all_clouds=True),
                                            timeout=10)
            assert sorted((p.cloud, p.publisher) for p in every.publications) == [("A", "pmu1"), ("C", "pmu3")]
            assert not every.unreachable
            out = subprocess.run([sys.executable, "-m", "gridstat.cli.main", "variables", "list", "--all-clouds",
                                  "--where", "signal = 'FREQ'", "-o", "json", "--broker", c.address],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            assert [(v["cloud"], v["variable"]) for v in json.loads(out.stdout)["variables"]] == \
                [("A", "pmu1/freq"), ("C", "pmu3/freq")]

            reply = c.stub.SubscribeQuery(bpb.SubscribeQueryRequest(query=bpb.QuerySubscription(
                subscriber="ems", where="signal = 'FREQ' and region = 'west'", edge_router="eC",
                qos=[bpb.ModeQoS(mode=0, interval_ms=20, latency_ms=100)])), timeout=60)
            got = {m.variable: m for m in reply.members}
            assert sorted(got) == ["pmu1/freq", "pmu3/freq"], got
            assert all(m.admitted for m in got.values()), got
            remote = got["pmu1/freq"]
            assert remote.subscription.variable_id == freq1 and remote.subscription_id.startswith("C-s")
            assert list(remote.subscription.allocations[0].paths[0].routers) == ["eA", "bA", "bB", "bC", "eC"]
            assert held_at_root(root) == ["pmu1/freq"]  # the inter-cloud one is held by the LCA

            feeds.append(Feed(routers["eA"].port, pmu1, freq1))
            assert wait_for(lambda: sum(1 for v, _ in sink.events if v == freq1) > 10, timeout_s=10), \
                "pmu1/freq's events did not cross from A to C"

            # A matching variable registered later in B is admitted at the next refresh, and flows.
            pmu2, (freq2,) = publish(b, "pmu2", "eB", {"freq": FREQ})
            assert wait_for(lambda: "pmu2/freq" in members(c), timeout_s=10), members(c)
            assert members(c)["pmu2/freq"].admitted, members(c)["pmu2/freq"]
            feeds.append(Feed(routers["eB"].port, pmu2, freq2))
            assert wait_for(lambda: sum(1 for v, _ in sink.events if v == freq2) > 10, timeout_s=10), \
                "pmu2/freq's events did not cross from B to C"
            assert held_at_root(root) == ["pmu1/freq", "pmu2/freq"]

            # Unregistered in A: dropped from the query, and its inter-cloud subscription removed.
            a.stub.UnregisterPublication(bpb.UnregisterPublicationRequest(publisher="pmu1", variable="freq"),
                                         timeout=10)
            assert wait_for(lambda: "pmu1/freq" not in members(c), timeout_s=10), members(c)
            assert wait_for(lambda: held_at_root(root) == ["pmu2/freq"], timeout_s=10), held_at_root(root)

            # B's broker stops: its variables are missing from the listing, but not removed, so the
            # member stays (and its routes keep forwarding: routers hold hard state).
            b.stop()
            seen = sum(1 for v, _ in sink.events if v == freq2)
            assert wait_for(lambda: sum(1 for v, _ in sink.events if v == freq2) > seen + 20, timeout_s=10)
            assert sorted(members(c)) == ["pmu2/freq", "pmu3/freq"]
            brokers["B"] = start_broker("B", b.state, port=b.port, extra=(
                "--variable-id-base", "2000000", "--parent", brokers["P1"].address, "--query-refresh-s", "0.3"))

            # The query removed: its members' subscriptions go, here and above.
            (q,) = c.stub.ListQueries(bpb.ListQueriesRequest(subscriber="ems"), timeout=5).queries
            removed = c.stub.UnsubscribeQuery(bpb.UnsubscribeQueryRequest(query_id=q.query.query_id), timeout=60)
            assert removed.subscriptions_removed == 2
            assert c.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(subscriber="ems"), timeout=5) \
                .subscriptions == []
    finally:
        for f in feeds:
            f.stop()
        sink.close()
