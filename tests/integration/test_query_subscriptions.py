"""A standing query subscription through real processes (docs/queries.md): a leaf broker and two edge
routers on 127.0.0.1, publishers at e1 and a subscriber at e2 using only the SDK. The query matches
one variable of each of two publishers; a third publisher registering a matching variable later is
added and its events arrive; an unregistered variable is dropped, at the broker and locally."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gridstat.client import Publisher, Subscriber
from gridstat.core.model import FLOAT
from gridstat.v1 import broker_pb2 as bpb

from .brokerprocs import edge_pair
from .fixtures import eventually

pytestmark = pytest.mark.integration

WEST_FREQ = {"kind": "freq", "region": "west"}


async def test_a_query_follows_registrations_and_unregistrations(tmp_path: Path) -> None:
    with edge_pair(tmp_path) as (broker, routers):
        e1, e2 = (f"127.0.0.1:{routers[n].control_port}" for n in ("e1", "e2"))
        pubs = [await Publisher.connect(name, e1) for name in ("pmu1", "pmu2")]
        sub = await Subscriber.connect("ems", e2)
        tasks: list[asyncio.Task[int]] = []
        try:
            registered = [await pubs[0].register("freq", FLOAT, 20, attributes=WEST_FREQ),
                          await pubs[0].register("vphm", FLOAT, 20, attributes={"kind": "vphm", "region": "west"}),
                          await pubs[1].register("freq", FLOAT, 20, attributes=WEST_FREQ),
                          await pubs[1].register("freq2", FLOAT, 20, attributes={"kind": "freq", "region": "east"})]
            query = await sub.subscribe_query("kind = 'freq' and region = 'west'", interval_ms=40, latency_ms=200,
                                              follow_s=0.2)
            assert sorted(query.members) == ["pmu1/freq", "pmu2/freq"] and not query.rejected
            assert query.members["pmu1/freq"].variable.attributes == WEST_FREQ
            for pub, handle in zip((pubs[0], pubs[0], pubs[1], pubs[1]), registered, strict=True):
                tasks.append(asyncio.create_task(pub.run_periodic(handle, float)))
            await eventually(lambda: all(s.stats.delivered >= 5 for s in query.members.values()),
                             what="events of both matching variables")
            assert all(s.interval_ms == 40 for s in query.members.values())

            # a third publisher registers a matching variable later: the broker admits it, the SDK follows
            pubs.append(await Publisher.connect("pmu3", e1))
            later = await pubs[2].register("freq", FLOAT, 20, attributes=WEST_FREQ)
            tasks.append(asyncio.create_task(pubs[2].run_periodic(later, float)))
            await eventually(lambda: "pmu3/freq" in query.members, what="pmu3/freq in the query")
            await eventually(lambda: query.members["pmu3/freq"].stats.delivered >= 5, what="pmu3/freq's events")

            # an unregistered variable is dropped, at the broker and locally
            assert pubs[0].session is not None
            await pubs[0].session.unregister_publication("pmu1", "freq")
            await eventually(lambda: "pmu1/freq" not in query.members, what="pmu1/freq dropped")
            held = await asyncio.to_thread(broker.stub.ListSubscriptions, bpb.ListSubscriptionsRequest(
                subscriber="ems"), timeout=5)
            assert sorted(s.subscription.variable for s in held.subscriptions) == ["pmu2/freq", "pmu3/freq"]
            listed = await asyncio.to_thread(broker.stub.ListQueries, bpb.ListQueriesRequest(), timeout=5)
            assert [sorted(m.variable for m in q.members if m.admitted) for q in listed.queries] == \
                [["pmu2/freq", "pmu3/freq"]]

            assert await query.close() == 2
            assert not query.members
            held = await asyncio.to_thread(broker.stub.ListSubscriptions, bpb.ListSubscriptionsRequest(), timeout=5)
            assert not held.subscriptions
        finally:
            for task in tasks:
                task.cancel()
            await sub.stop()
            for pub in pubs:
                await pub.stop()
