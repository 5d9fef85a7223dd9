"""Mode-change benchmark (docs/modes.md, docs/benchmarks.md): switch time with 10,000 subscriptions over 20 routers.

Two set-ups, each with real routers (farm processes, ``bench.farm``) and real broker processes:

* one cloud: a leaf broker over 20 routers;
* a two-level hierarchy: a parent broker over two leaf brokers of 10 routers each.

The subscriptions are spread over two modes: 40 % in both (at the same interval), 30 % in mode
0 only, 30 % in mode 1 only, held by 200 subscriber applications. Then the mode is switched back
and forth; each switch is timed at the caller (the ChangeMode RPC) and per phase by the broker.
Meanwhile probe publishers send 10 ms streams to probe subscribers (real UDP sockets in this
process) subscribed in both modes: every probe event sent after the first one received must
arrive exactly once, across every switch (the dissertation's requirement 2 of 6.2).
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from gridstat.bench.broker import _spawn, add_channels, read_until, stop_all
from gridstat.broker.generate import edge_routers, random_cloud
from gridstat.broker.topology import Topology
from gridstat.core import wire
from gridstat.core.children import ready_port
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import broker_pb2_grpc as bpb_grpc

FLOAT = bpb.ValueType(kind=bpb.VALUE_KIND_FLOAT)
INTERVALS = (10, 20, 50, 100)
SUBSCRIBERS = 200
PROBES_PER_CLOUD = 4
PROBE_INTERVAL_MS = 10


@dataclass
class Cloud:
    name: str
    topology: Topology
    variable_id_base: int
    router_id_base: int = 0
    farm: dict[str, tuple[int, int]] = field(default_factory=dict)
    broker_port: int = 0


def _renamed(prefix: str, n_routers: int, seed: int) -> Topology:
    """``random_cloud`` with router names prefixed, so two clouds' routers never share a name."""
    src = random_cloud(n_routers, seed=seed)
    out = Topology()
    for r in src:
        out.add_router(prefix + r.name, r.role, r.capacity_eps)
    seen = set()
    for c in src.channels.values():
        if (c.dst, c.src) in seen:
            continue
        seen.add((c.src, c.dst))
        out.add_link(prefix + c.src, prefix + c.dst, bandwidth_bps=c.bandwidth_bps, latency_ms=c.latency_ms)
    return out


class Probes:
    """Probe publishers (one thread) and probe subscribers (UDP sockets read by one thread)."""

    def __init__(self) -> None:
        self.socks: list[socket.socket] = []
        self.feeds: list[tuple[int, int, int]] = []  # (edge port, sender id, variable id)
        self.got: dict[int, list[int]] = {}
        self.sent: list[int] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def sink(self) -> int:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
        self.socks.append(s)
        return int(s.getsockname()[1])

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._send, daemon=True),
                         threading.Thread(target=self._recv, daemon=True)]
        for t in self._threads:
            t.start()

    def _send(self) -> None:
        out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        seq = 0
        while not self._stop.is_set():
            now = time.time_ns() // 1_000_000
            ts = now - now % PROBE_INTERVAL_MS
            if not self.sent or ts > self.sent[-1]:
                seq += 1
                for port, sender, var in self.feeds:
                    ev = wire.encode_event(wire.Event(ts, var, b"\0" * 8))
                    out.sendto(wire.encode_datagram(sender, seq, [ev]), ("127.0.0.1", port))
                self.sent.append(ts)
            time.sleep(0.001)
        out.close()

    def _recv(self) -> None:
        import select

        while not self._stop.is_set():
            ready, _, _ = select.select(self.socks, [], [], 0.05)
            for s in ready:
                while True:
                    try:
                        data = s.recv(65536)
                    except BlockingIOError:
                        break
                    d = wire.decode_datagram(data)
                    for e in d.events:
                        self.got.setdefault(e.variable_id, []).append(e.timestamp_ms)

    def stop(self) -> dict[str, int]:
        time.sleep(0.2)
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2)
        for s in self.socks:
            s.close()
        lost = dup = expected = 0
        for _, _, var in self.feeds:
            got = self.got.get(var, [])
            if not got:
                lost += len(self.sent)
                continue
            first, last = min(got), self.sent[-1] - 100  # the last 100 ms may still be in flight
            want = [ts for ts in self.sent if first <= ts <= last]
            have = set(got)
            expected += len(want)
            lost += sum(1 for ts in want if ts not in have)
            dup += len(got) - len(have)
        return {"expected": expected, "lost": lost, "duplicates": dup}


async def _load_cloud(stub: Any, cloud: Cloud, n_subs: int, rng: random.Random, probes: Probes,
                      log: Callable[[str], None]) -> dict[str, int]:
    t0 = time.monotonic()
    topo = cloud.topology
    for i, r in enumerate(topo):
        port, control = cloud.farm[r.name]
        await stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(
            name=r.name, role=r.role.value, capacity_eps=int(r.capacity_eps),
            router_id=cloud.router_id_base + i + 1,
            control_address=f"127.0.0.1:{control}", event_address=f"127.0.0.1:{port}")), timeout=30)
    await add_channels(stub, topo)
    await stub.DefineMode(bpb.DefineModeRequest(mode=1, name="contingency"), timeout=30)
    edges = edge_routers(topo)
    n_vars = max(50, n_subs // 5)
    variables = []
    for i in range(n_vars):
        edge = rng.choice(edges)
        await stub.RegisterClient(bpb.RegisterClientRequest(name=f"{cloud.name}p{i}", kind=bpb.CLIENT_KIND_PUBLISHER,
                                                            edge_router=edge, first_time=True), timeout=30)
        pub = rng.choice(INTERVALS)
        await stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
            publisher=f"{cloud.name}p{i}", variable="v", type=FLOAT, interval_ms=pub, edge_router=edge)), timeout=30)
        variables.append(pub)
    subscribers = []
    for n in range(SUBSCRIBERS):
        edge = rng.choice(edges)
        await stub.RegisterClient(bpb.RegisterClientRequest(
            name=f"{cloud.name}c{n}", kind=bpb.CLIENT_KIND_SUBSCRIBER, edge_router=edge, host="127.0.0.1", port=9,
            first_time=True), timeout=30)
        subscribers.append(edge)
    # Probes: a publisher per probe variable at one edge, a real subscriber socket at another.
    for k in range(PROBES_PER_CLOUD):
        pub_edge, sub_edge = edges[k % len(edges)], edges[(k + 1) % len(edges)]
        reply = await stub.RegisterClient(bpb.RegisterClientRequest(
            name=f"{cloud.name}probe{k}", kind=bpb.CLIENT_KIND_PUBLISHER, edge_router=pub_edge, first_time=True),
            timeout=30)
        pubr = await stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
            publisher=f"{cloud.name}probe{k}", variable="v", type=FLOAT, interval_ms=PROBE_INTERVAL_MS,
            edge_router=pub_edge)), timeout=30)
        port = probes.sink()
        await stub.RegisterClient(bpb.RegisterClientRequest(
            name=f"{cloud.name}probesub{k}", kind=bpb.CLIENT_KIND_SUBSCRIBER, edge_router=sub_edge,
            host="127.0.0.1", port=port, first_time=True), timeout=30)
        r = await stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
            subscriber=f"{cloud.name}probesub{k}", variable=f"{cloud.name}probe{k}/v", edge_router=sub_edge,
            qos=[bpb.ModeQoS(mode=m, interval_ms=PROBE_INTERVAL_MS, latency_ms=100) for m in (0, 1)])), timeout=30)
        if not r.admitted:
            raise RuntimeError(f"probe subscription refused: {r.rejection.reason} {r.rejection.message}")
        probes.feeds.append((cloud.farm[pub_edge][0], reply.client_id, pubr.publication.variable_id))
    taken: set[tuple[int, int]] = set()
    work = []
    for _ in range(n_subs):
        while True:
            ci, vi = rng.randrange(SUBSCRIBERS), rng.randrange(n_vars)
            if (ci, vi) not in taken:
                taken.add((ci, vi))
                break
        roll = rng.random()
        modes = (0, 1) if roll < 0.4 else (0,) if roll < 0.7 else (1,)
        work.append((ci, vi, variables[vi] * rng.randint(1, 10), modes))
    outcome: dict[str, int] = {}

    async def worker() -> None:
        while work:
            ci, vi, interval, modes = work.pop()
            reply = await stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
                subscriber=f"{cloud.name}c{ci}", variable=f"{cloud.name}p{vi}/v", edge_router=subscribers[ci],
                qos=[bpb.ModeQoS(mode=m, interval_ms=interval, latency_ms=80) for m in modes])), timeout=120)
            key = "admitted" if reply.admitted else reply.rejection.reason
            outcome[key] = outcome.get(key, 0) + 1

    await asyncio.gather(*(worker() for _ in range(512)))
    log(f"  cloud {cloud.name}: {len(topo)} routers, {n_subs} subscriptions {outcome} in "
        f"{time.monotonic() - t0:.1f} s")
    return outcome


def _percentiles(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    if len(xs) == 1:
        return {"p50": xs[0], "p99": xs[0], "max": xs[0]}
    q = statistics.quantiles(xs, n=100, method="inclusive")
    return {"p50": statistics.median(xs), "p99": q[98], "max": xs[-1]}


async def _switches(address: str, n: int, log: Callable[[str], None]) -> dict[str, Any]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = bpb_grpc.QoSBrokerStub(channel)  # type: ignore[no-untyped-call]
        rpc_ms: list[float] = []
        broker_ms: list[float] = []
        phases: dict[str, list[float]] = {}
        mode = 0
        for _ in range(n):
            mode = 1 - mode
            await asyncio.sleep(0.15)
            t = time.perf_counter()
            reply = await stub.ChangeMode(bpb.ChangeModeRequest(mode=mode), timeout=60)
            rpc_ms.append((time.perf_counter() - t) * 1000)
            broker_ms.append(reply.duration_ms)
            if not reply.changed:
                raise RuntimeError(f"switch to {mode} was a no-op")
            for p in reply.phases:
                phases.setdefault(p.name, []).append(p.duration_ms)
        noop_t = time.perf_counter()
        await stub.ChangeMode(bpb.ChangeModeRequest(mode=mode), timeout=60)
        noop_ms = (time.perf_counter() - noop_t) * 1000
        await asyncio.sleep(0.3)
    log(f"  {n} switches: rpc p50 {statistics.median(rpc_ms):.1f} ms")
    return {"rpc": _percentiles(rpc_ms), "broker": _percentiles(broker_ms), "noop_ms": noop_ms,
            "phases": {k: statistics.median(v) for k, v in phases.items()}}


def _start_farms(clouds: list[Cloud], procs: list[subprocess.Popen[str]]) -> None:
    for cloud in clouds:
        names = [r.name for r in cloud.topology]
        p = _spawn([sys.executable, "-m", "gridstat.bench.farm", "--names", ",".join(names),
                    "--first-id", str(cloud.router_id_base + 1)])
        procs.append(p)
        for ready in read_until(p, "FARM READY", 120):
            cloud.farm[ready["name"]] = (ready_port(ready), ready_port(ready, "control_port"))


def _broker(args: list[str], procs: list[subprocess.Popen[str]]) -> int:
    p = _spawn([sys.executable, "-m", "gridstat.cli.main", "broker", "--port", "0", "--exit-with-parent", *args])
    procs.append(p)
    (ready,) = read_until(p, "READY", 60)
    return ready_port(ready)


def bench_one_cloud(n_subs: int, n_switches: int, log: Callable[[str], None]) -> dict[str, Any]:
    procs: list[subprocess.Popen[str]] = []
    cloud = Cloud("A", _renamed("a", 20, seed=1), 0)
    probes = Probes()
    with tempfile.TemporaryDirectory(prefix="gridstat-bench-modes-") as tmp:
        try:
            _start_farms([cloud], procs)
            cloud.broker_port = _broker(["--name", "A", "--state", os.path.join(tmp, "A.sqlite")], procs)

            async def load() -> dict[str, int]:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{cloud.broker_port}") as ch:
                    return await _load_cloud(bpb_grpc.QoSBrokerStub(ch), cloud, n_subs,  # type: ignore[no-untyped-call]
                                             random.Random(1), probes, log)
            outcome = asyncio.run(load())
            probes.start()
            time.sleep(0.5)
            res = asyncio.run(_switches(f"127.0.0.1:{cloud.broker_port}", n_switches, log))
            res["probes"] = probes.stop()
            res["outcome"] = outcome
            return res
        finally:
            stop_all(procs)


def bench_hierarchy(n_subs: int, n_switches: int, log: Callable[[str], None]) -> dict[str, Any]:
    procs: list[subprocess.Popen[str]] = []
    clouds = [Cloud("A", _renamed("a", 10, seed=1), 0),
              Cloud("B", _renamed("b", 10, seed=2), 1_000_000, router_id_base=500)]
    probes = Probes()
    with tempfile.TemporaryDirectory(prefix="gridstat-bench-modes-") as tmp:
        try:
            _start_farms(clouds, procs)
            parent_port = _broker(["--name", "R", "--role", "parent", "--state", os.path.join(tmp, "R.sqlite")],
                                  procs)
            for c in clouds:
                c.broker_port = _broker(["--name", c.name, "--state", os.path.join(tmp, f"{c.name}.sqlite"),
                                         "--variable-id-base", str(c.variable_id_base + 1),
                                         "--parent", f"127.0.0.1:{parent_port}"], procs)

            async def load() -> dict[str, int]:
                total: dict[str, int] = {}
                async with grpc.aio.insecure_channel(f"127.0.0.1:{parent_port}") as pch:
                    parent = bpb_grpc.QoSBrokerStub(pch)  # type: ignore[no-untyped-call]
                    for c in clouds:
                        await parent.AddChildBroker(bpb.AddChildBrokerRequest(child=bpb.ChildBroker(
                            name=c.name, address=f"127.0.0.1:{c.broker_port}", leaf=True)), timeout=30)
                        async with grpc.aio.insecure_channel(f"127.0.0.1:{c.broker_port}") as ch:
                            out = await _load_cloud(bpb_grpc.QoSBrokerStub(ch), c,  # type: ignore[no-untyped-call]
                                                    n_subs // len(clouds), random.Random(len(total) + 1), probes, log)
                        for k, v in out.items():
                            total[k] = total.get(k, 0) + v
                    await parent.DefineMode(bpb.DefineModeRequest(mode=1, name="contingency"), timeout=30)
                return total
            outcome = asyncio.run(load())
            probes.start()
            time.sleep(0.5)
            res = asyncio.run(_switches(f"127.0.0.1:{parent_port}", n_switches, log))
            res["probes"] = probes.stop()
            res["outcome"] = outcome
            return res
        finally:
            stop_all(procs)


def report(one: dict[str, Any], two: dict[str, Any] | None, *, subs: int, switches: int,
           facts: dict[str, str]) -> str:
    lines = [
        "## Operating modes: switch time",
        "",
        f"Machine: {facts.get('cpu', '?')}, {facts.get('nproc', '?')} cores, Python {facts.get('python', '?')}; "
        f"run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. {subs:,} subscriptions over 20 routers "
        f"(40 % in both modes, 30 % in mode 0 only, 30 % in mode 1 only; {SUBSCRIBERS} subscriber applications "
        f"per cloud), {switches} switches alternating 0 -> 1 -> 0; probe streams at {PROBE_INTERVAL_MS} ms "
        "subscribed in both modes, published throughout.",
        "",
        "| set-up | ChangeMode RPC p50 | p99 | max | broker's own p50 | no-op | probe events | lost | duplicates "
        "| target | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [("one cloud, 20 routers", one)] + ([("two-level: parent + 2 clouds x 10 routers", two)] if two else [])
    for name, r in rows:
        p, q = r["rpc"], r["probes"]
        ok = p["p50"] <= 100 and q["lost"] == 0 and q["duplicates"] == 0 if name.startswith("one") else None
        verdict = "-" if ok is None else ("PASS" if ok else "FAIL")
        target = "p50 <= 100 ms, 0 lost" if ok is not None else "-"
        lines.append(f"| {name} | {p['p50']:.1f} ms | {p['p99']:.1f} ms | {p['max']:.1f} ms | "
                     f"{r['broker']['p50']:.1f} ms | {r['noop_ms']:.1f} ms | {q['expected']:,} | {q['lost']} | "
                     f"{q['duplicates']} | {target} | {verdict} |")
    lines += ["", "Median time per phase (ms), as the leaf brokers report them:", "",
              "| set-up | warn | prepare | switch-internal | switch-edge | commit |", "|---|---|---|---|---|---|"]
    for name, r in rows:
        ph = r["phases"]
        lines.append(f"| {name} | " + " | ".join(f"{ph.get(k, 0):.1f}" for k in
                                                  ("warn", "prepare", "switch-internal", "switch-edge", "commit"))
                     + " |")
    lines += [
        "",
        "Admission outcomes: one cloud " + str(one["outcome"]) + (f"; hierarchy {two['outcome']}" if two else "")
        + ". The dissertation reports no timing for a mode change (\"quick\"; its cost is five rounds of "
        "synchronous calls per cloud, clouds one after another): this table is the first figure for it. "
        "A switch is five rounds of parallel control calls; the routers' part is a pointer swap, so the time "
        "is gRPC round trips and, in phases 1 and 5, one mode notice per subscriber application (sent twice). "
        "In the hierarchy the parent switches its clouds one after another (6.3.1), so the time adds up.",
    ]
    return "\n".join(lines) + "\n"
