"""``gridstat bench heal``: redundancy restored after a router fails, with many affected subscriptions
(docs/redundancy.md, "Healing").

Real processes on 127.0.0.1: a leaf broker (health checks every 200 ms) and six routers, ``e1 - i1..i4 -
e2`` (i1 and i2 the fastest interiors). ``subs`` redundancy-2 subscriptions, each of its own variable,
run over i1 and i2; one of them is a probe stream at 10 ms through the client SDK, the others carry no
events (admission and routes only). i1 is killed with SIGKILL; the broker declares it down at its next
check and re-plans every subscription through it onto i3 or i4. Measured per repetition: the time
from the kill until every subscription is repaired (detection included), the broker's own time for the
pass (planning under its lock plus the routers' two-phase transaction), the probe's events lost
meanwhile (the surviving path must deliver every one) and its duplicates after the repair (both paths
deliver again).
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from gridstat.core import children
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import broker_pb2_grpc as bpb_grpc

INTERVAL_MS = 10
TARGET_S = 2.0
ROUTERS = (("e1", "edge"), ("e2", "edge"), ("i1", "internal"), ("i2", "internal"), ("i3", "internal"),
           ("i4", "internal"))
LINKS = tuple((edge, f"i{k}", float(k)) for k in range(1, 5) for edge in ("e1", "e2"))
FLOAT = bpb.ValueType(kind=bpb.VALUE_KIND_FLOAT)


@dataclass
class HealRun:
    subs: int
    repaired: int
    unrepaired: int
    kill_to_repaired_s: float
    broker_pass_s: float
    probe_lost: int
    probe_duplicates_after: int
    paths_through_failed: int
    load_1m: float


def _spawn(cmd: list[str], what: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    return children.spawn(cmd, what=what)


async def _one(subs: int, log: Callable[[str], None]) -> HealRun:
    from gridstat.client import Publisher, Subscriber
    from gridstat.core.model import FLOAT as FLOAT_TYPE

    procs: dict[str, subprocess.Popen[str]] = {}
    with tempfile.TemporaryDirectory(prefix="gridstat-bench-heal-") as tmp:
        try:
            broker, ready = _spawn([sys.executable, "-m", "gridstat.broker.main", "--name", "A", "--port", "0",
                                    "--state", str(Path(tmp) / "A.sqlite"), "--supervise-interval-ms", "200",
                                    "--exit-with-parent"], "broker A")
            procs["broker"] = broker
            address = f"127.0.0.1:{children.ready_port(ready)}"
            ports: dict[str, tuple[int, int]] = {}
            for rid, (name, role) in enumerate(ROUTERS, start=1):
                proc, fields = _spawn([sys.executable, "-m", "gridstat.cli.main", "router", "--name", name, "--id",
                                       str(rid), "--port", "0", "--control-port", "0", "--role", role,
                                       "--broker", address, "--ping-interval-ms", "50", "--failure-timeout-ms", "300",
                                       "--exit-with-parent"], f"router {name}")
                procs[name] = proc
                ports[name] = (children.ready_port(fields), children.ready_port(fields, "control_port"))
            async with grpc.aio.insecure_channel(address) as channel:
                stub = bpb_grpc.QoSBrokerStub(channel)  # type: ignore[no-untyped-call]
                for rid, (name, role) in enumerate(ROUTERS, start=1):
                    await stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(
                        name=name, role=role, capacity_eps=10_000_000, control_address=f"127.0.0.1:{ports[name][1]}",
                        event_address=f"127.0.0.1:{ports[name][0]}", router_id=rid)), timeout=10)
                for a, b, ms in LINKS:
                    await stub.AddChannel(bpb.AddTopologyChannelRequest(channel=bpb.TopologyChannel(
                        a=a, b=b, bandwidth_bps=10_000_000_000, latency_ms=ms, both_directions=True)), timeout=10)
                pub = await Publisher.connect("probe", f"127.0.0.1:{ports['e1'][1]}")
                sub = await Subscriber.connect("ems", f"127.0.0.1:{ports['e2'][1]}")
                try:
                    return await _measure(stub, pub, sub, subs, procs, FLOAT_TYPE, log)
                finally:
                    await pub.stop()
                    await sub.stop()
        finally:
            for proc in procs.values():
                children.stop(proc, signal.SIGKILL)


async def _measure(stub: Any, pub: Any, sub: Any, subs: int, procs: dict[str, subprocess.Popen[str]],
                   float_type: Any, log: Callable[[str], None]) -> HealRun:
    handle = await pub.register("freq", float_type, INTERVAL_MS)
    got: set[int] = set()
    probe = await sub.subscribe_remote("probe/freq", float_type, interval_ms=INTERVAL_MS, latency_ms=100,
                                       redundancy=2, on_event=lambda _, holder: got.add(holder.timestamp_ms))
    await stub.RegisterClient(bpb.RegisterClientRequest(name="bulk", kind=bpb.CLIENT_KIND_PUBLISHER,
                                                        edge_router="e1", first_time=True), timeout=10)
    await stub.RegisterClient(bpb.RegisterClientRequest(name="bulk-sub", kind=bpb.CLIENT_KIND_SUBSCRIBER,
                                                        edge_router="e2", host="127.0.0.1", port=9,
                                                        first_time=True), timeout=10)
    limit = asyncio.Semaphore(24)  # below the broker's per-caller bound on admissions in progress (32)

    async def one(n: int) -> None:
        async with limit:
            await stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
                publisher="bulk", variable=f"v{n}", type=FLOAT, interval_ms=INTERVAL_MS, edge_router="e1")),
                timeout=30)
            reply = await stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
                subscriber="bulk-sub", variable=f"bulk/v{n}", edge_router="e2", qos=[bpb.ModeQoS(
                    mode=0, interval_ms=INTERVAL_MS, latency_ms=100, redundancy=2)])), timeout=30)
            if not reply.admitted:
                raise RuntimeError(f"bulk/v{n} was not admitted: {reply}")

    started = time.monotonic()
    await asyncio.gather(*(one(n) for n in range(subs - 1)))
    log(f"heal: {subs} redundancy-2 subscriptions admitted in {time.monotonic() - started:.1f} s")
    sent: list[int] = []
    def value(ts: int) -> float:
        sent.append(ts)
        return 60.0

    publishing = asyncio.ensure_future(pub.run_periodic(handle, value))
    await asyncio.sleep(1.0)
    before = await stub.Health(bpb.BrokerHealthRequest(), timeout=5)
    killed = time.monotonic()
    children.stop(procs["i1"], signal.SIGKILL)
    health = before
    while time.monotonic() - killed < 30:
        health = await stub.Health(bpb.BrokerHealthRequest(), timeout=5)
        if health.repaired - before.repaired >= subs or health.unrepaired:
            break
        await asyncio.sleep(0.01)
    took = time.monotonic() - killed
    duplicates = probe.stats.duplicates
    await asyncio.sleep(1.0)
    duplicates_after = probe.stats.duplicates - duplicates
    publishing.cancel()
    await asyncio.sleep(0.3)
    listed = await stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=30)
    through = sum(1 for r in listed.subscriptions for a in r.allocations for p in a.paths if "i1" in p.routers)
    last = max(sent) if sent else 0
    lost = sum(1 for ts in sent if ts not in got and ts < last - 200)
    return HealRun(subs, health.repaired - before.repaired, health.unrepaired, took, health.last_repair_s, lost,
                   duplicates_after, through, os.getloadavg()[0])


def run_heal_bench(*, subs: int, reps: int, log: Callable[[str], None]) -> list[HealRun]:
    runs = []
    for rep in range(reps):
        log(f"heal: repetition {rep + 1}/{reps}, {subs} subscriptions ...")
        runs.append(asyncio.run(_one(subs, log)))
        r = runs[-1]
        log(f"heal: repaired {r.repaired}/{r.subs} in {r.kill_to_repaired_s:.3f} s after the kill "
            f"(broker pass {r.broker_pass_s:.3f} s), probe lost {r.probe_lost}")
    return runs


def report(runs: list[HealRun], facts_line: str) -> str:
    def med(xs: list[float]) -> float:
        return statistics.median(xs)

    subs = runs[0].subs
    lines = [
        "## Healing: redundancy restored after a router fails (`gridstat bench heal`)",
        "",
        f"{facts_line}",
        "",
        f"**Method.** Real processes on 127.0.0.1: a leaf broker checking its routers every 200 ms and six routers "
        f"`e1 - i1..i4 - e2`. {subs:,} redundancy-2 subscriptions, each to its own variable, run over i1 and i2; "
        f"one is a probe stream at {INTERVAL_MS} ms through the client SDK. i1 is killed with SIGKILL. The broker "
        "declares it down at its next check and re-plans every broken path onto i3 or i4, keeping the i2 paths "
        "(docs/redundancy.md, \"Healing\"). *Kill to repaired* includes that detection. *Broker pass* is the "
        "broker's own time: planning under its lock plus the routers' two-phase transaction. The target is "
        f"redundancy restored within {TARGET_S:g} s of detection.",
        "",
        "| repetition | subscriptions repaired | without a replacement | kill to repaired (s) | broker pass (s) | "
        "probe events lost | probe duplicates in the next 1 s | paths still through i1 | load (1 min) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, r in enumerate(runs, start=1):
        lines.append(f"| {n} | {r.repaired:,} / {r.subs:,} | {r.unrepaired} | {r.kill_to_repaired_s:.3f} | "
                     f"{r.broker_pass_s:.3f} | {r.probe_lost} | {r.probe_duplicates_after} | "
                     f"{r.paths_through_failed} | {r.load_1m:.2f} |")
    lines += [
        "",
        f"Median broker pass: **{med([r.broker_pass_s for r in runs]):.3f} s** for {subs:,} subscriptions "
        f"(target {TARGET_S:g} s after detection). Median kill to repaired, detection included: "
        f"{med([r.kill_to_repaired_s for r in runs]):.3f} s. Probe events lost in all: "
        f"{sum(r.probe_lost for r in runs)}.",
    ]
    return "\n".join(lines)


__all__ = ["HealRun", "report", "run_heal_bench"]
