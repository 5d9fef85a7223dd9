"""``gridstat bench broker``: admission decisions and installs on a generated 200-router cloud.

Two measurements (docs/benchmarks.md targets: decision p99 <= 5 ms with 10,000 subscriptions
held; 10,000 subscriptions installed within 20 s):

* **decision**: ``CloudState.admit`` in-process (path search, the loop-free tree
  rule, exact reservations), timed per subscription while 0 .. N are held;
* **install**: a real ``gridstat broker`` process over 200 real routers (router farm
  processes, see ``bench.farm``), Subscribe RPCs from a client with a bounded number
  in flight; each admitted subscription is prepared and committed on every router of
  its paths and written to SQLite before the reply.

The cloud is ``broker.generate.random_cloud`` (a ring plus chords, seeded); variables
publish at 10-100 ms from random edge routers; subscriptions ask 1-20 x the
publication interval, a 60 ms bound, and two disjoint paths for a quarter of them.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from gridstat.broker.generate import edge_routers, random_cloud
from gridstat.broker.rejections import AdmissionRejected
from gridstat.broker.state import CloudState, ModeQoS, RouterEndpoint
from gridstat.broker.topology import Topology
from gridstat.core.children import parse_ready, ready_port
from gridstat.core.model import FLOAT
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import broker_pb2_grpc as bpb_grpc

INTERVALS = (10, 20, 25, 50, 100)
#: Subscriptions made one at a time after the bulk load, to time the interactive case.
SINGLE = 100


@dataclass(frozen=True)
class Workload:
    topology: Topology
    variables: list[tuple[str, int]]  # (publisher edge router, publication interval)
    subscriptions: list[tuple[int, str, int, int]]  # (variable index, subscriber edge, interval, redundancy)


def workload(n_routers: int, n_subs: int, seed: int, n_variables: int = 2_000) -> Workload:
    rng = random.Random(seed)
    topology = random_cloud(n_routers, seed=seed)
    edges = edge_routers(topology)
    variables = [(rng.choice(edges), rng.choice(INTERVALS)) for _ in range(n_variables)]
    subs = []
    for _ in range(n_subs):
        v = rng.randrange(n_variables)
        subs.append((v, rng.choice(edges), variables[v][1] * rng.randint(1, 20), 2 if rng.random() < 0.25 else 1))
    return Workload(topology, variables, subs)


def percentiles(samples: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(samples, n=1000)
    return {"p50": cuts[499], "p99": cuts[989], "p999": cuts[998], "max": max(samples)}


def bench_decisions(w: Workload) -> dict[str, Any]:
    st = CloudState("bench", topology=w.topology)
    for i, r in enumerate(w.topology):
        st.endpoints[r.name] = RouterEndpoint(r.name, i + 1, "-", "127.0.0.1", 1)
    for i, (edge, pub) in enumerate(w.variables):
        st.register_client(f"p{i}", "publisher", edge, "", 0)
        st.registry.register(f"p{i}", "v", FLOAT, interval_ms=pub)
    for n, (_, edge, _, _) in enumerate(w.subscriptions):
        st.register_client(f"c{n}", "subscriber", edge, "127.0.0.1", 9)
    gc.collect()
    gc.freeze()
    times: list[float] = []
    admitted = rejected = 0
    start = time.perf_counter()
    for n, (v, edge, interval, k) in enumerate(w.subscriptions):
        var = st.registry.lookup(f"p{v}/v")
        t0 = time.perf_counter()
        try:
            st.admit(f"s{n}", f"c{n}", var, (ModeQoS(0, interval, 60.0, k),), edge)
            admitted += 1
        except AdmissionRejected:
            rejected += 1
        times.append((time.perf_counter() - t0) * 1000)
    gc.unfreeze()
    tail = times[-max(2, len(times) // 10):]
    return {"all": percentiles(times), "tail_p99": statistics.quantiles(tail, n=100)[98],
            "admitted": admitted, "rejected": rejected, "total_s": time.perf_counter() - start}


def _spawn(cmd: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def read_until(proc: subprocess.Popen[str], last: str, timeout_s: float) -> list[dict[str, str]]:
    """The READY lines' fields (core.children.parse_ready) a child prints up to the line ``last``."""
    assert proc.stdout is not None
    found: list[dict[str, str]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"process {proc.args!r} exited ({proc.poll()})")
        fields = parse_ready(line)
        if fields is not None:
            found.append(fields)
        if line.startswith(last):
            return found
    raise RuntimeError(f"process {proc.args!r} not ready within {timeout_s} s")


async def add_channels(stub: Any, topology: Topology) -> None:
    """AddChannel for every link of a generated topology (both directions in one call)."""
    seen = set()
    for c in topology.channels.values():
        if (c.dst, c.src) in seen:
            continue
        seen.add((c.src, c.dst))
        await stub.AddChannel(bpb.AddTopologyChannelRequest(channel=bpb.TopologyChannel(
            a=c.src, b=c.dst, bandwidth_bps=int(c.bandwidth_bps), latency_ms=c.latency_ms,
            both_directions=True)), timeout=30)


async def _install(w: Workload, broker_port: int, farm: dict[str, tuple[int, int]], concurrency: int,
                   log: Callable[[str], None], procs: list[subprocess.Popen[str]]) -> dict[str, Any]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker_port}") as channel:
        stub = bpb_grpc.QoSBrokerStub(channel)  # type: ignore[no-untyped-call]
        t0 = time.monotonic()
        for i, r in enumerate(w.topology):
            port, control = farm[r.name]
            await stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(
                name=r.name, role=r.role.value, capacity_eps=int(r.capacity_eps), router_id=i + 1,
                control_address=f"127.0.0.1:{control}", event_address=f"127.0.0.1:{port}")), timeout=30)
        await add_channels(stub, w.topology)
        for i, (edge, pub) in enumerate(w.variables):
            await stub.RegisterClient(bpb.RegisterClientRequest(name=f"p{i}", kind=bpb.CLIENT_KIND_PUBLISHER,
                                                                edge_router=edge, first_time=True), timeout=30)
            await stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
                publisher=f"p{i}", variable="v", type=bpb.ValueType(kind=bpb.VALUE_KIND_FLOAT), interval_ms=pub,
                edge_router=edge)), timeout=30)
        for n, (_, edge, _, _) in enumerate(w.subscriptions):
            await stub.RegisterClient(bpb.RegisterClientRequest(
                name=f"c{n}", kind=bpb.CLIENT_KIND_SUBSCRIBER, edge_router=edge, host="127.0.0.1", port=9,
                first_time=True), timeout=30)
        log(f"  topology and clients registered in {time.monotonic() - t0:.1f} s")
        times: list[float] = []
        outcome: dict[str, int] = {}
        queue = list(enumerate(w.subscriptions))

        async def worker() -> None:
            while queue:
                n, (v, edge, interval, k) = queue.pop(0)
                t = time.perf_counter()
                request = bpb.SubscribeRequest(subscription=bpb.Subscription(
                    subscriber=f"c{n}", variable=f"p{v}/v", edge_router=edge,
                    qos=[bpb.ModeQoS(mode=0, interval_ms=interval, latency_ms=60, redundancy=k)]))
                while True:  # over the broker's admission bound: retry after its hint (broker.gate)
                    try:
                        reply = await stub.Subscribe(request, timeout=60)
                        break
                    except grpc.aio.AioRpcError as exc:
                        if exc.code() is not grpc.StatusCode.RESOURCE_EXHAUSTED:
                            raise
                        hint = dict(exc.trailing_metadata() or ()).get("gridstat-retry-after-ms", "100")
                        outcome["retried (busy)"] = outcome.get("retried (busy)", 0) + 1
                        await asyncio.sleep(int(str(hint)) / 1000)
                times.append((time.perf_counter() - t) * 1000)
                key = "admitted" if reply.admitted else reply.rejection.reason
                outcome[key] = outcome.get(key, 0) + 1

        start = time.monotonic()
        before = _cpu(procs)
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        total = time.monotonic() - start
        after = _cpu(procs)
        # Then single subscriptions, one at a time, on the loaded broker: the interactive case.
        single: list[float] = []
        for n, (v, edge, interval, k) in enumerate(w.subscriptions[:SINGLE]):
            await stub.RegisterClient(bpb.RegisterClientRequest(
                name=f"q{n}", kind=bpb.CLIENT_KIND_SUBSCRIBER, edge_router=edge, host="127.0.0.1", port=9,
                first_time=True), timeout=30)
            t = time.perf_counter()
            await stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
                subscriber=f"q{n}", variable=f"p{v}/v", edge_router=edge,
                qos=[bpb.ModeQoS(mode=0, interval_ms=interval, latency_ms=60, redundancy=k)])), timeout=60)
            single.append((time.perf_counter() - t) * 1000)
        health = await stub.Health(bpb.BrokerHealthRequest(), timeout=30)
    return {"total_s": total, "rate": len(w.subscriptions) / total, "rpc": percentiles(times), "outcome": outcome,
            "held": health.subscriptions, "routers_up": health.routers_up, "cpu_broker_s": after[-1] - before[-1],
            "cpu_routers_s": sum(after[:-1]) - sum(before[:-1]), "single": percentiles(single)}


def _cpu(procs: list[subprocess.Popen[str]]) -> list[float]:
    import psutil

    out = []
    for p in procs:
        t = psutil.Process(p.pid).cpu_times()
        out.append(t.user + t.system)
    return out


def bench_install(w: Workload, *, farms: int, concurrency: int, log: Callable[[str], None]) -> dict[str, Any]:
    names = [r.name for r in w.topology]
    procs: list[subprocess.Popen[str]] = []
    farm: dict[str, tuple[int, int]] = {}
    with tempfile.TemporaryDirectory(prefix="gridstat-bench-broker-") as tmp:
        try:
            share = -(-len(names) // farms)
            for f in range(farms):
                chunk = names[f * share:(f + 1) * share]
                if not chunk:
                    continue
                p = _spawn([sys.executable, "-m", "gridstat.bench.farm", "--names", ",".join(chunk),
                            "--first-id", str(f * share + 1)])
                procs.append(p)
                for ready in read_until(p, "FARM READY", 120):
                    farm[ready["name"]] = (ready_port(ready), ready_port(ready, "control_port"))
            broker = _spawn([sys.executable, "-m", "gridstat.cli.main", "broker", "--name", "bench", "--port", "0",
                             "--state", os.path.join(tmp, "bench.sqlite"), "--exit-with-parent"])
            procs.append(broker)
            (ready,) = read_until(broker, "READY", 60)
            log(f"  {len(farm)} routers in {len(procs) - 1} farm processes; broker on port {ready['port']}")
            return asyncio.run(_install(w, ready_port(ready), farm, concurrency, log, procs))
        finally:
            stop_all(procs)


def stop_all(procs: list[subprocess.Popen[str]]) -> None:
    """SIGTERM every child, then wait for each (SIGKILL after 10 s)."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def report(dec: dict[str, Any], inst: dict[str, Any] | None, *, routers: int, subs: int, concurrency: int,
           facts: dict[str, str]) -> str:
    a = dec["all"]
    lines = [
        "## Broker: admission decisions and installs",
        "",
        f"Machine: {facts.get('cpu', '?')}, {facts.get('nproc', '?')} cores, Python {facts.get('python', '?')}; "
        f"run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Cloud: {routers} routers "
        f"(ring + chords, seed 1), 2,000 variables, {subs:,} subscriptions (25 % with 2 disjoint paths).",
        "",
        "| measurement | p50 | p99 | p99.9 | max | p99 of last 10 % | target | verdict |",
        "|---|---|---|---|---|---|---|---|",
        f"| decision (`CloudState.admit`, in-process) | {a['p50']:.2f} ms | {a['p99']:.2f} ms | {a['p999']:.2f} ms "
        f"| {a['max']:.1f} ms | {dec['tail_p99']:.2f} ms | p99 <= 5 ms | "
        f"{'PASS' if max(a['p99'], dec['tail_p99']) <= 5 else 'FAIL'} |",
    ]
    if inst is not None:
        r = inst["rpc"]
        lines.append(
            f"| Subscribe RPC end to end, bulk ({concurrency} in flight) | {r['p50']:.1f} ms | {r['p99']:.1f} ms | "
            f"{r['p999']:.1f} ms | {r['max']:.0f} ms | - | - | - |")
        q = inst["single"]
        lines.append(
            f"| Subscribe RPC end to end, one at a time ({SINGLE}, after the bulk) | {q['p50']:.1f} ms | "
            f"{q['p99']:.1f} ms | {q['p999']:.1f} ms | {q['max']:.0f} ms | - | - | - |")
    lines += ["", f"Decisions: {dec['admitted']:,} admitted, {dec['rejected']:,} rejected, "
                  f"{dec['total_s']:.1f} s for all."]
    if inst is not None:
        verdict = "PASS" if inst["total_s"] <= 20 * subs / 10_000 else "FAIL"
        lines += ["", f"Install through a real broker process and {inst['routers_up']} real routers: "
                      f"**{subs:,} subscriptions in {inst['total_s']:.1f} s** ({inst['rate']:.0f}/s; "
                      f"outcomes {inst['outcome']}; {inst['held']:,} held at the end; CPU over the install: broker "
                      f"{inst['cpu_broker_s']:.1f} s, routers {inst['cpu_routers_s']:.1f} s, on 2 cores). "
                      f"Target 10,000 within 20 s: **{verdict}**."]
    lines += [
        "",
        "How an install is spent: the broker decides under its lock (the decision row), then writes the "
        "routers outside it; concurrent installs are grouped into one two-phase transaction per router "
        "(group commit, lingering while requests keep arriving, up to 1 s), so a burst costs about two "
        "RPCs per router touched rather than two per subscription. The broker process is the bottleneck "
        "(one Python thread for decisions, gRPC and SQLite: about 2 ms of CPU per subscription at 10,000 "
        "held); the 200 routers share the other core in four farm processes. A single Subscribe on an idle "
        "broker is not delayed by the group commit (no linger without contention): see the one-at-a-time row.",
    ]
    return "\n".join(lines) + "\n"


def run_broker_bench(*, routers: int, subs: int, farms: int, concurrency: int, install: bool,
                     log: Callable[[str], None]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    w = workload(routers, subs, seed=1)
    log(f"decisions: {routers} routers, {subs} subscriptions ...")
    dec = bench_decisions(w)
    log(f"  p50 {dec['all']['p50']:.2f} ms p99 {dec['all']['p99']:.2f} ms")
    inst = None
    if install:
        log("install through a real broker ...")
        inst = bench_install(w, farms=farms, concurrency=concurrency, log=log)
        log(f"  {subs} in {inst['total_s']:.1f} s")
    return dec, inst
