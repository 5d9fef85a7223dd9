"""Multi-homed clients (docs/redundancy.md, "Multi-homed clients"): a publisher and a subscriber each
attached at two edge routers, a redundancy-2 subscription whose paths share no router at all, so that
killing either edge router of a path loses no event. Real router and broker processes, channel
authentication on (each edge router signs with its own key), the client SDK over the edge proxies.

The same run with single-homed clients loses the events published while the shared edge router is
down, which is what makes the zero here mean something.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import pytest

from gridstat.client import Publisher, Subscriber
from gridstat.core.model import FLOAT
from gridstat.v1 import broker_pb2 as bpb

from . import brokerprocs
from .brokerprocs import Cloud
from .routerprocs import RouterProc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

INTERVAL_MS = 10
#: e1 - i1 - e2 and e1b - i2 - e2b: two paths with no router in common; e1 - i2 as a tempting shortcut.
LINKS = (("e1", "i1", 1.0), ("i1", "e2", 1.0), ("e1b", "i2", 2.0), ("i2", "e2b", 2.0), ("e1", "i2", 1.0))


ROUTERS = [(name, rid, "edge" if name.startswith("e") else "internal")
           for rid, name in enumerate(("e1", "e1b", "i1", "i2", "e2", "e2b"), start=1)]


def grid(tmp: Path) -> contextlib.AbstractContextManager[Cloud]:
    """The cloud of LINKS, keyed channels, every edge router proxying its clients to the broker."""
    return brokerprocs.cloud(tmp, ROUTERS, LINKS, broker_extra=("--channel-auth", "all"),
                             proxied=[name for name, _, role in ROUTERS if role == "edge"])


def control(routers: dict[str, RouterProc], name: str) -> str:
    return f"127.0.0.1:{routers[name].control_port}"


async def run(cloud: Cloud, *, multi_homed: bool) -> tuple[list[int], int, int, list[tuple[str, ...]]]:
    """Publish for 3 s at 10 ms, SIGKILL e1 after 1 s; (the published instants never delivered, how
    many were delivered, duplicates, the paths)."""
    broker, routers = cloud
    pub = await Publisher.connect("pmu1", control(routers, "e1"),
                                  also_edges=[control(routers, "e1b")] if multi_homed else ())
    sub = await Subscriber.connect("ems", control(routers, "e2"),
                                   also_edges=[control(routers, "e2b")] if multi_homed else ())
    try:
        handle = await pub.register("freq", FLOAT, INTERVAL_MS)
        assert pub.key is not None and all(leg.key for leg in pub.legs)  # --channel-auth all: keyed legs
        got: set[int] = set()
        s = await sub.subscribe_remote("pmu1/freq", FLOAT, interval_ms=INTERVAL_MS, latency_ms=50,
                                       redundancy=2 if multi_homed else 1,
                                       on_event=lambda _, holder: got.add(holder.timestamp_ms))
        listed = broker.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5)
        paths = [tuple(p.routers) for r in listed.subscriptions for a in r.allocations for p in a.paths]
        await asyncio.sleep(0.5)  # routes installed on every router of both paths
        sent: list[int] = []
        publishing = asyncio.ensure_future(pub.run_periodic(handle, lambda ts: sent.append(ts) or 60.0,
                                                            count=300))
        await asyncio.sleep(1.0)
        routers["e1"].stop(signal.SIGKILL)
        await publishing
        await asyncio.sleep(0.3)
        return [ts for ts in sent if ts not in got], s.stats.delivered, s.stats.duplicates, paths
    finally:
        await pub.stop()
        await sub.stop()


async def test_killing_an_edge_router_of_a_multi_homed_pair_loses_nothing(tmp_path: Path) -> None:
    with grid(tmp_path) as cloud:
        missing, delivered, duplicates, paths = await run(cloud, multi_homed=True)
    assert sorted(paths) == [("e1", "i1", "e2"), ("e1b", "i2", "e2b")], paths
    # every instant published arrived (copies from two paths may arrive out of order: counted by instant)
    assert missing == [], f"{len(missing)} events lost while e1 was down (delivered {delivered})"
    assert delivered >= 295, delivered  # the first instants may precede the routes by a little
    assert duplicates > 50, duplicates  # both paths delivered until e1 died; one copy each was kept


async def test_the_same_kill_loses_events_of_a_single_homed_pair(tmp_path: Path) -> None:
    with grid(tmp_path) as cloud:
        _, delivered, _, paths = await run(cloud, multi_homed=False)
    assert paths and all(p[0] == "e1" for p in paths), paths
    # nothing arrives after e1 died: the ~200 events published from then on are lost
    assert delivered <= 150, f"{delivered} of 300 events delivered although e1 was down for 2 of the 3 s"
