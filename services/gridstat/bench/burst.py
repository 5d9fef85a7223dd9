"""A burst of Subscribe calls against a real leaf broker, and one legitimate call during it.

``scripts/bench-admission-burst.py`` (docs/benchmarks.md, "Admission burst") and
``tests/integration/test_admission_burst.py`` use it. The cloud is the chaos suite's diamond (four
real routers and a real ``gridstat broker`` process, ``chaos.diamond.cloud``); a flooding client
``flood`` sends ``calls`` Subscribe RPCs (each to another variable) from one asyncio client with at
most ``parallelism`` in flight, and 0.5 s into the burst another client, ``ems``, on its own channel, subscribes once.
Every answer is classified: a reply (admitted, or rejected with its reason) or a gRPC status code;
a RESOURCE_EXHAUSTED answer is checked for the retry hint (``gridstat-retry-after-ms`` and a
``google.rpc.RetryInfo``, broker.gate).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import grpc

from gridstat.broker.gate import RETRY_AFTER_KEY, STATUS_DETAILS_KEY, retry_after_ms_of
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import broker_pb2_grpc as bpb_grpc

FLOAT = bpb.ValueType(kind=bpb.VALUE_KIND_FLOAT)


@dataclass
class BurstResult:
    calls: int = 0
    parallelism: int = 0
    seconds: float = 0.0
    #: Answers by outcome: "admitted", "rejected:<reason>", or a status code's name.
    outcomes: Counter[str] = field(default_factory=Counter)
    #: RESOURCE_EXHAUSTED answers without a retry hint (metadata or RetryInfo missing, or disagreeing).
    unhinted: int = 0
    hints_ms: list[int] = field(default_factory=list)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    legit_ms: float | None = None
    legit_outcome: str = ""
    loadavg_before: str = ""
    loadavg_after: str = ""
    broker_cpu_s: float | None = None

    def median_ms(self, outcome: str) -> float | None:
        xs = self.latency_ms.get(outcome)
        return statistics.median(xs) if xs else None


def subscribe_request(name: str, variable: int, interval_ms: int = 10) -> bpb.SubscribeRequest:
    return bpb.SubscribeRequest(subscription=bpb.Subscription(
        subscriber=name, variable=f"pmu1/v{variable}", type=FLOAT, edge_router="e2",
        qos=[bpb.ModeQoS(mode=0, interval_ms=interval_ms, latency_ms=50, redundancy=1)]))


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:  # pragma: no cover - not Linux
        return "?"


def _classify(reply: bpb.SubscribeReply) -> str:
    return "admitted" if reply.admitted else f"rejected:{reply.rejection.reason or '?'}"


async def run_burst(address: str, *, calls: int, parallelism: int, deadline_s: float = 30.0,
                    legit_after_s: float = 0.5, legit_deadline_s: float = 10.0) -> BurstResult:
    """The burst against the broker at ``address`` (clients ``flood`` and ``ems`` registered at e2)."""
    out = BurstResult(calls=calls, parallelism=parallelism, loadavg_before=loadavg())
    sem = asyncio.Semaphore(parallelism)
    # The flood is one client on one channel. The legitimate client is another process, as it would be
    # in the field: in this one its call would wait for this event loop, busy with the flood's answers.
    legit = _LegitimateClient(address, legit_after_s, legit_deadline_s)
    flood_ch = grpc.aio.insecure_channel(address)
    flood = bpb_grpc.QoSBrokerStub(flood_ch)  # type: ignore[no-untyped-call]
    interval = [10, 20, 50, 100]

    async def one(i: int) -> None:
        async with sem:
            t0 = time.perf_counter()
            call = flood.Subscribe(subscribe_request("flood", i, interval[i % 4] * (1 + i % 7)), timeout=deadline_s)
            try:
                reply = await call
                outcome = _classify(reply)
            except grpc.aio.AioRpcError as exc:
                outcome = exc.code().name
                if exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED:
                    md = dict(exc.trailing_metadata() or ())
                    hint = md.get(RETRY_AFTER_KEY)
                    details: Any = md.get(STATUS_DETAILS_KEY)
                    info = retry_after_ms_of(details) if isinstance(details, bytes) else None
                    if hint is None or info is None or int(hint) != info or "retry after" not in (exc.details() or ""):
                        out.unhinted += 1
                    else:
                        out.hints_ms.append(info)
            ms = (time.perf_counter() - t0) * 1000
            out.outcomes[outcome] += 1
            out.latency_ms.setdefault(outcome, []).append(ms)

    t0 = time.perf_counter()
    try:
        legit.go()
        await asyncio.gather(*(one(i) for i in range(calls)))
        out.legit_outcome, out.legit_ms = await asyncio.to_thread(legit.result, legit_after_s + legit_deadline_s + 30)
    finally:
        out.seconds = time.perf_counter() - t0
        out.loadavg_after = loadavg()
        await flood_ch.close()
        legit.close()
    return out


def _legitimate_call(conn: Connection, address: str, after_s: float, deadline_s: float) -> None:
    """In its own process: connect, say ready, wait for go, sleep ``after_s``, Subscribe once as ``ems``."""
    ch = grpc.insecure_channel(address)
    stub = bpb_grpc.QoSBrokerStub(ch)  # type: ignore[no-untyped-call]
    grpc.channel_ready_future(ch).result(timeout=30)
    conn.send("ready")
    conn.recv()
    time.sleep(after_s)
    t0 = time.perf_counter()
    try:
        outcome = _classify(stub.Subscribe(subscribe_request("ems", 0, 100), timeout=deadline_s))
    except grpc.RpcError as exc:
        outcome = exc.code().name
    conn.send((outcome, (time.perf_counter() - t0) * 1000))
    ch.close()


class _LegitimateClient:
    """The legitimate client's process (spawned: gRPC does not survive a fork)."""

    def __init__(self, address: str, after_s: float, deadline_s: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_legitimate_call, args=(child, address, after_s, deadline_s), daemon=True)
        self._proc.start()
        if not self._conn.poll(60) or self._conn.recv() != "ready":
            self.close()
            raise RuntimeError("the legitimate client's process did not start")

    def go(self) -> None:
        self._conn.send("go")

    def result(self, timeout_s: float) -> tuple[str, float | None]:
        if not self._conn.poll(timeout_s):
            return "no answer", None
        outcome, ms = self._conn.recv()
        return str(outcome), float(ms)

    def close(self) -> None:
        self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(timeout=5)


async def register_clients(address: str, variables: int) -> None:
    """Publisher pmu1 with variables v0 .. v<variables-1> at e1, subscribers ``flood`` and ``ems`` at e2.

    A client subscribes to a variable once (a second Subscribe is ALREADY_EXISTS): call i of the
    burst asks for v<i>."""
    async with grpc.aio.insecure_channel(address) as ch:
        stub = bpb_grpc.QoSBrokerStub(ch)  # type: ignore[no-untyped-call]
        await stub.RegisterClient(bpb.RegisterClientRequest(name="pmu1", kind=bpb.CLIENT_KIND_PUBLISHER,
                                                            edge_router="e1", first_time=True), timeout=5)
        for name in ("flood", "ems"):
            await stub.RegisterClient(bpb.RegisterClientRequest(
                name=name, kind=bpb.CLIENT_KIND_SUBSCRIBER, edge_router="e2", host="127.0.0.1", port=9,
                first_time=True), timeout=5)
        sem = asyncio.Semaphore(32)  # under the admission bound: registrations are not gated anyway

        async def publish(i: int) -> None:
            async with sem:
                await stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
                    publisher="pmu1", variable=f"v{i}", type=FLOAT, interval_ms=10, edge_router="e1")), timeout=30)

        await asyncio.gather(*(publish(i) for i in range(variables)))


def process_cpu_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):  # pragma: no cover - not Linux
        return None


def burst_in_cloud(cloud: Callable[..., AbstractContextManager[Any]], *, calls: int, parallelism: int,
                   broker_extra: tuple[str, ...] = (), deadline_s: float = 30.0) -> BurstResult:
    """Start a cloud (``cloud(broker_extra=...)``: the chaos suite's ``diamond.cloud``, passed in by
    the caller so that the benchmarks do not depend on the chaos package), register the clients, run
    the burst, stop everything."""
    with cloud(broker_extra=broker_extra) as c:
        assert c.broker is not None and c.broker.proc is not None
        asyncio.run(register_clients(c.broker.address, calls))
        pid = c.broker.proc.pid
        cpu0 = process_cpu_s(pid)
        result = asyncio.run(run_burst(c.broker.address, calls=calls, parallelism=parallelism,
                                       deadline_s=deadline_s))
        cpu1 = process_cpu_s(pid)
        if cpu0 is not None and cpu1 is not None:
            result.broker_cpu_s = cpu1 - cpu0
        return result


def report(rows: list[tuple[str, BurstResult]]) -> str:
    """A markdown table of runs (docs/benchmarks.md)."""
    lines = ["| run | calls / in flight | wall | outcomes | median latency by outcome | retry hints (median) | "
             "legit call | load avg before -> after | broker CPU |",
             "|---|---|---:|---|---|---|---|---|---:|"]
    for label, r in rows:
        outcomes = ", ".join(f"{k} {v:,}" for k, v in r.outcomes.most_common())
        med = ", ".join(f"{k} {statistics.median(v):.0f} ms" for k, v in sorted(r.latency_ms.items()))
        hints = f"{len(r.hints_ms):,} ({statistics.median(r.hints_ms):.0f} ms)" if r.hints_ms else "-"
        if r.unhinted:
            hints += f"; {r.unhinted} without"
        legit = f"{r.legit_outcome} in {r.legit_ms:.0f} ms" if r.legit_ms is not None else "-"
        cpu = f"{r.broker_cpu_s:.1f} s" if r.broker_cpu_s is not None else "-"
        lines.append(f"| {label} | {r.calls:,} / {r.parallelism:,} | {r.seconds:.1f} s | {outcomes} | {med} | "
                     f"{hints} | {legit} | {r.loadavg_before} -> {r.loadavg_after} | {cpu} |")
    return "\n".join(lines)
