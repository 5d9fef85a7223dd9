"""A subscriber fills the gap of a killed router from the archive (docs/gap-recovery.md), with real routers,
a real leaf broker, real Kafka, ``gridstat archive`` and ``gridstat history-server`` processes.

e1 - i1 - e2 is the only path: the publisher and the archive are at e1 (``gridstat publish``,
``gridstat archive``), two subscribers at e2 with redundancy 1 and gap filling on (the SDK with
``on_recovered``, ``gridstat subscribe --history`` in order, at twice the interval). i1 is killed
with SIGKILL for 2 s and started again (its broker gives it its tables back: docs/redundancy.md,
"Healing"); the subscribers lose the 2 s and, a few seconds later, have every lost instant back
with the value and timestamp the archive holds.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gridstat.client import Holder, Subscriber, Subscription
from gridstat.core import children
from gridstat.core.model import FLOAT
from gridstat.telemetry import records
from gridstat.v1 import broker_pb2 as bpb

from .brokerprocs import cloud
from .fixtures import eventually
from .kafkaprocs import KafkaProc, consume
from .routerprocs import RouterProc, start_router, stop_process

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

INTERVAL_MS = 10
VARIABLE = "pmugap/freq"
ROUTERS = (("e1", 1, "edge"), ("e2", 2, "edge"), ("i1", 3, "internal"))
LINKS = (("e1", "i1", 1.0), ("i1", "e2", 1.0))
DOWN_S = 2.0
RECOVER_AFTER_MS = 2000


def spawn(what: str, *args: str, stderr: int = subprocess.DEVNULL) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """A ``gridstat`` role, once it printed READY; ``stderr=subprocess.PIPE`` for :func:`final_line`."""
    cmd = [sys.executable, "-m", "gridstat.cli.main", *args, "--exit-with-parent"]
    started: tuple[subprocess.Popen[str], dict[str, str]] = children.spawn(cmd, what=what, timeout_s=60,
                                                                            stderr=stderr)
    return started


@pytest.fixture
def grid(tmp_path: Path) -> Iterator[tuple[Any, dict[str, RouterProc]]]:
    with cloud(tmp_path, ROUTERS, LINKS, proxied=("e1", "e2", "i1")) as (broker, routers):
        yield broker, routers


async def test_a_router_killed_for_two_seconds_leaves_no_unrecoverable_event(
        grid: tuple[Any, dict[str, RouterProc]], kafka: KafkaProc) -> None:
    broker, routers = grid

    def control(name: str) -> str:
        return f"127.0.0.1:{routers[name].control_port}"

    procs: dict[str, subprocess.Popen[str]] = {}
    sub: Subscriber | None = None
    live: list[int] = []
    arrived: dict[int, int] = {}  # live timestamp -> received_ms

    def on_event(_: Subscription, h: Holder) -> None:
        live.append(h.timestamp_ms)
        arrived.setdefault(h.timestamp_ms, h.received_ms)

    recovered: list[Holder] = []
    try:
        procs["publisher"], _ = await asyncio.to_thread(
            spawn, "gridstat publish", "publish", "--name", "pmugap", "--edge", control("e1"), "--variable", "freq",
            "--interval-ms", str(INTERVAL_MS), "--stats-every-s", "0", "-o", "json", stderr=subprocess.PIPE)
        procs["archive"], _ = await asyncio.to_thread(
            spawn, "gridstat archive", "archive", "--name", "gaparchive", "--edge", control("e1"), "--kafka",
            kafka.bootstrap, "--interval-ms", str(INTERVAL_MS), "--latency-ms", "500", VARIABLE)
        procs["history"], ready = await asyncio.to_thread(
            spawn, "gridstat history-server", "history-server", "--kafka", kafka.bootstrap, "--listen", "127.0.0.1:0")
        server = f"127.0.0.1:{children.ready_port(ready)}"

        sub = await Subscriber.connect("ems", control("e2"), history=server, recover_after_ms=RECOVER_AFTER_MS)
        s: Subscription = await sub.subscribe_remote(
            VARIABLE, FLOAT, interval_ms=INTERVAL_MS, latency_ms=50, redundancy=1,
            on_event=on_event, recover=True,
            on_recovered=lambda _, h: recovered.append(h))
        procs["cli"], _ = await asyncio.to_thread(
            spawn, "gridstat subscribe", "subscribe", "--name", "ops", "--edge", control("e2"), "--variable", VARIABLE,
            "--admit", "--interval-ms", str(2 * INTERVAL_MS), "--latency-ms", "50", "--history", server,
            "--recover-after-ms", str(RECOVER_AFTER_MS), "--stats-every-s", "0", "-o", "json", stderr=subprocess.PIPE)
        listed = broker.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(subscriber="ems"), timeout=5)
        assert [tuple(p.routers) for r in listed.subscriptions for a in r.allocations for p in a.paths] == \
            [("e1", "i1", "e2")]

        await asyncio.sleep(1.5)
        old = routers["i1"]
        old.stop(signal.SIGKILL)
        await asyncio.sleep(DOWN_S)
        routers["i1"] = await asyncio.to_thread(start_router, "i1", 3, role="internal", port=old.port,
                                                control_port=old.control_port, extra=("--broker", broker.address))
        await eventually(lambda: s.stats.lost > 0, timeout_s=10, what="the stream back after i1's restart")
        await asyncio.sleep(1.0)
        published = await asyncio.to_thread(final_line, procs.pop("publisher"))
        await eventually(lambda: s.stats.recovery_pending == 0, timeout_s=60,
                         what="the lost instants recovered or given up")
        st = s.stats
        seen = arrived[min(t for t in live if t > min(h.timestamp_ms for h in recovered))]  # the gap's end
        delays = [h.received_ms - seen for h in recovered]
        print(f"\nrecovered {min(delays)}..{max(delays)} ms after the gap was seen "
              f"(recover_after_ms={RECOVER_AFTER_MS})", end="")
        print(f"\ni1 down {DOWN_S} s: lost {st.lost}, recovered {st.recovered}, unrecoverable {st.unrecoverable} "
              f"(gap filler {sub.gapfill.stats if sub.gapfill is not None else None}; the publisher skipped "
              f"{published['skipped']}, published {published['late']} late)")
        assert st.lost >= DOWN_S * 1000 / INTERVAL_MS * 0.8, st
        assert (st.recovered, st.unrecoverable) == (st.lost, 0), st
        assert s.holder is not None and s.holder.timestamp_ms == max(live) and not s.holder.recovered

        await asyncio.sleep(2.0)  # the CLI subscriber saw the same gap at the same time: margin for its queries
        d = (await asyncio.to_thread(final_line, procs.pop("cli")))["variables"][VARIABLE]
        print(f"gridstat subscribe at {2 * INTERVAL_MS} ms: missing {d['missing']}, recovered {d['recovered']}, "
              f"unrecoverable {d['unrecoverable']}")
        assert d["missing"] > 0 and (d["recovered"], d["unrecoverable"]) == (d["missing"], 0), d
        stop_process(procs.pop("archive"))  # flushes what it buffered to Kafka
    finally:
        if sub is not None:
            await sub.stop()
        for p in reversed(procs.values()):
            stop_process(p)

    # Every instant the archive holds that did not arrive live was recovered, once, with the archived
    # value and timestamp.
    rows = await consume(kafka.bootstrap, records.TOPICS.measurements, min_records=len(live))
    archived = {r["event_ts_ms"]: r["value"] for r in (json.loads(v) for k, v in rows if k == VARIABLE.encode())}
    window = {t for t in archived if min(live) < t < max(live)} - set(live)
    assert sorted(h.timestamp_ms for h in recovered) == sorted(window)
    wrong = [(h.timestamp_ms, h.value, archived[h.timestamp_ms]) for h in recovered
             if not h.recovered or h.value != archived[h.timestamp_ms]]
    assert wrong == [], wrong[:5]


def final_line(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """SIGTERM a ``gridstat publish`` or ``subscribe`` process and return its final JSON stats line."""
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    final: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert final["final"] is True, out
    return final
