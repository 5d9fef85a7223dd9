"""``gridstat bench goose``: the GOOSE gateway's throughput and its alerts' latency (docs/goose.md, "Performance").

Real processes: a leaf broker and edge routers e1 and e2 on 127.0.0.1 (two routers); a GOOSE source made
for the benchmark (its own process, ``python -m gridstat.bench.goose source MODE``: our codec and raw
socket, on ``lo``); ``gridstat goose-gateway --interface lo`` publishing through e1. Needs root (AF_PACKET).

* **Points per second per gateway core.** The source sends ``blocks`` control blocks of ``members`` float
  members, every frame a new state (stNum + 1, a new ``t``), paced at ``states_per_s`` per block. Over a
  window: points the gateway published (its stats line), its CPU time from /proc, and points/s per core =
  points / CPU seconds. ``lo`` delivers every frame twice, so the gateway decodes two frames per state and
  drops one as a duplicate: that work is in the figure, as on a real subscriber of a doubled (PRP) LAN.
* **Alert latency.** A second run: one control block of 10 booleans, one of them changing every 20 ms,
  each change sent at once (``t`` = the change's wall-clock time) and retransmitted on the standard's curve
  (``retransmission.Retransmitter``: 4 ms doubling to 1 s); an SDK subscriber behind e2 takes the 10 alert
  variables; latency = the callback's wall-clock time minus ``t`` (``t`` is written in whole milliseconds:
  up to 1 ms is rounding). The source, the gateway, two routers and the subscriber are in it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gridstat.bench.dnp3 import _wait
from gridstat.bench.gateway_rig import edge_cloud
from gridstat.bench.pmu import Child, _cpu_s

TARGET_POINTS_PER_S = 50_000
TARGET_P99_MS = 10.0
ALERT_MEMBERS = 10
CHANGE_EVERY_S = 0.02


@dataclass
class GooseRun:
    blocks: int
    members: int
    window_s: float
    points: int
    states: int
    frames: int
    gateway_cpu_s: float
    latency_ms: list[float] = field(default_factory=list)
    alert_states: int = 0
    points_failed: int = 0
    drops: dict[str, int] = field(default_factory=dict)
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    cpu_pct: dict[str, float] = field(default_factory=dict)

    @property
    def points_per_core_s(self) -> float:
        return self.points / self.gateway_cpu_s if self.gateway_cpu_s else float("nan")

    def pct(self, q: float) -> float:
        xs = sorted(self.latency_ms)
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def gocb(i: int) -> str:
    return f"BENCH{i}/LLN0$GO$gcb"


def bench_map(blocks: int, members: int, kind: str) -> dict[str, Any]:
    return {"subscribe": [{"gocbRef": gocb(b), "appID": 0x2000 + b, "members": [
        {"index": m, "variable": f"goose{b}/m{m}", "kind": kind} for m in range(members)]} for b in range(blocks)]}


# -- the GOOSE source (its own process) ----------------------------------------------------------------

def _source_main(mode: str, blocks: int, members: int, states_per_s: float) -> None:
    from gridstat.gateways.goose import GooseFrame, RawSocket, Retransmitter, encode_frame, parse_map
    from gridstat.gateways.goose.values import UtcTime, Value

    sock = RawSocket("lo", receive=False)
    parent = os.getppid()
    print("READY name=goose-source", flush=True)
    if mode == "flood":
        st_num = [0] * blocks
        period_s = 1.0 / states_per_s
        next_s = time.monotonic()
        k = 0
        while os.getppid() == parent:  # the benchmark gone: stop flooding lo
            now_ms = int(time.time() * 1000)
            for b in range(blocks):
                st_num[b] += 1
                data: tuple[Value, ...] = tuple(float(k + m) for m in range(members))
                sock.send(encode_frame(GooseFrame(
                    app_id=0x2000 + b, gocb_ref=gocb(b), time_allowed_to_live_ms=2000, dat_set=f"BENCH{b}/LLN0$ds",
                    go_id=f"bench{b}", t=UtcTime.from_ms(now_ms), st_num=st_num[b], sq_num=0, simulation=False,
                    conf_rev=1, nds_com=False, all_data=data, src_mac=sock.mac)))
            k += 1
            next_s += period_s
            delay = next_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -1.0:  # far behind: do not burst to catch up
                next_s = time.monotonic()
    else:
        block = parse_map({"publish": [{"gocbRef": gocb(0), "datSet": "BENCH0/LLN0$ds", "appID": 0x2000,
                                        "min_time_ms": 4, "max_time_ms": 1000, "members": [
                                            {"variable": f"goose0/m{m}", "kind": "boolean"}
                                            for m in range(ALERT_MEMBERS)]}]}).publish[0]
        r = Retransmitter(block, src_mac=sock.mac)
        state = [False] * ALERT_MEMBERS
        i = 0
        next_change = time.monotonic() + CHANGE_EVERY_S
        while os.getppid() == parent:
            now = time.monotonic()
            if now >= next_change:
                state[i] = not state[i]
                sock.send(r.change({i: state[i]}, int(time.time() * 1000), now))
                i = (i + 1) % ALERT_MEMBERS
                next_change += CHANGE_EVERY_S
            for f in r.due(now):
                sock.send(f)
            wake = min(next_change, r.next_due_s or next_change)
            time.sleep(max(0.0, wake - time.monotonic()))


# -- the runs ------------------------------------------------------------------------------------------

def _gateway(tmp: str, e1: str, goose_map: dict[str, Any], name: str) -> Child:
    path = Path(tmp) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(goose_map))
    return Child([sys.executable, "-m", "gridstat.cli.main", "goose-gateway", "--interface", "lo", "--map", str(path),
                  "--edge", e1, "--name", name, "-o", "json", "--stats-every-s", "0.5", "--exit-with-parent"],
                 "goose-gateway")


def _source(mode: str, blocks: int, members: int, states_per_s: float) -> Child:
    return Child([sys.executable, "-m", "gridstat.bench.goose", "source", mode, str(blocks), str(members),
                  str(states_per_s)], "goose source")


async def _one(blocks: int, members: int, states_per_s: float, window_s: float,
               log: Callable[[str], None]) -> GooseRun:
    from gridstat.client import Subscriber
    from gridstat.core.model import BOOL

    started: list[Child] = []
    with tempfile.TemporaryDirectory(prefix="gridstat-bench-goose-") as tmp:
        try:
            cloud = await edge_cloud(tmp, started)
            e1, e2 = cloud.e1, cloud.e2
            n = blocks * members
            gw = _gateway(tmp, e1, bench_map(blocks, members, "float"), "goose-flood")
            started.append(gw)
            t0 = time.monotonic()
            await _wait(lambda: gw.last.get("registrations", 0) >= n, 120, f"{n} registrations")
            log(f"goose: the gateway registered {n:,} variables in {time.monotonic() - t0:.1f} s")
            source = _source("flood", blocks, members, states_per_s)
            started.append(source)
            await asyncio.sleep(1.5)
            watched = {"gateway": gw, "source": source}
            g0, c0, w0 = dict(gw.last), {k: _cpu_s(c.pid) for k, c in watched.items()}, time.monotonic()
            await asyncio.sleep(window_s)
            g1, c1 = dict(gw.last), {k: _cpu_s(c.pid) for k, c in watched.items()}
            elapsed = time.monotonic() - w0
            span = float(g1["uptime_s"]) - float(g0["uptime_s"])
            cpu = (c1["gateway"] - c0["gateway"]) * span / elapsed  # the CPU over the stats lines' own span
            run = GooseRun(blocks=blocks, members=members, window_s=span,
                           points=g1["points_published"] - g0["points_published"], states=g1["states"] - g0["states"],
                           frames=g1["frames"] - g0["frames"], gateway_cpu_s=cpu,
                           points_failed=g1["points_failed"] - g0["points_failed"],
                           drops={k: v - g0["drops"].get(k, 0) for k, v in g1["drops"].items()},
                           cpu_pct={k: 100 * (c1[k] - c0[k]) / elapsed for k in c1})
            log(f"goose: {run.points / span:,.0f} points/s published ({run.frames / span:,.0f} frames/s read), "
                f"{run.points_per_core_s:,.0f} points/s per gateway core")
            for c in (source, gw):
                c.stop()
                started.remove(c)
            gw = _gateway(tmp, e1, bench_map(1, ALERT_MEMBERS, "boolean"), "goose-alerts")
            started.append(gw)
            await _wait(lambda: gw.last.get("registrations", 0) >= ALERT_MEMBERS, 60, "alert registrations")
            sub = await Subscriber.connect("alerts", e2)
            latencies: list[float] = []
            recording = [False]

            def on_event(_s: Any, h: Any) -> None:
                if recording[0]:
                    latencies.append(time.time() * 1000 - h.timestamp_ms)

            for m in range(ALERT_MEMBERS):
                await sub.subscribe_remote(f"goose0/m{m}", BOOL, interval_ms=1, latency_ms=50, on_event=on_event)
            source = _source("alerts", 1, ALERT_MEMBERS, 0)
            started.append(source)
            await asyncio.sleep(1.0)
            a0 = dict(gw.last)
            recording[0] = True
            await asyncio.sleep(window_s)
            recording[0] = False
            a1 = dict(gw.last)
            await sub.stop()
            run.latency_ms = latencies
            run.alert_states = a1.get("states", 0) - a0.get("states", 0)
            run.load = os.getloadavg()
            log(f"goose: {run.alert_states} state changes, {len(latencies)} alerts, latency p50 {run.pct(0.5):.2f} ms "
                f"p99 {run.pct(0.99):.2f} ms")
            return run
        finally:
            for c in reversed(started):
                c.stop()


def run_goose_bench(*, blocks: int, members: int, states_per_s: float, reps: int, window_s: float,
                    log: Callable[[str], None]) -> list[GooseRun]:
    from gridstat.gateways.goose import packet_sockets_available

    if not packet_sockets_available():
        raise RuntimeError("gridstat bench goose needs root or CAP_NET_RAW (AF_PACKET raw sockets on lo)")
    runs = []
    for rep in range(reps):
        log(f"goose: repetition {rep + 1}/{reps}: {blocks} control blocks x {members} floats at {states_per_s:g} "
            f"states/s each, {window_s:g} s windows ...")
        runs.append(asyncio.run(_one(blocks, members, states_per_s, window_s, log)))
    return runs


def report(runs: list[GooseRun], facts_line: str) -> str:
    r0 = runs[0]
    lines = [
        "## GOOSE into status variables (`gridstat bench goose`)", "", facts_line, "",
        "**Method.** Real processes (module docstring of `gridstat.bench.goose`): a leaf broker, edge routers e1 "
        "and e2 on 127.0.0.1, `gridstat goose-gateway --interface lo` publishing through e1, and a GOOSE source "
        "made for the benchmark (our codec, a raw socket on `lo`). Throughput: "
        f"{r0.blocks} control blocks of {r0.members} float members, every frame a new state (each member an alert "
        "variable); lo delivers each frame twice, so the gateway decodes two frames per state and drops one as a "
        "duplicate; points/s per core = points published / the gateway's CPU seconds (/proc). Alert latency: one "
        f"of {ALERT_MEMBERS} booleans changes every 20 ms, sent at once and retransmitted on the standard's curve; "
        "an SDK subscriber behind e2 (two routers) takes the alerts; latency = callback wall clock minus the "
        "frame's `t` (whole milliseconds). Targets: "
        f"{TARGET_POINTS_PER_S:,} points/s per gateway core, alert p99 <= {TARGET_P99_MS:g} ms.", "",
        "| rep | window (s) | frames read/s | states/s | points published/s | gateway CPU | points/s per gateway core "
        "| alerts | alert latency p50 / p99 / max (ms) | load (1 / 5 / 15 min) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for i, r in enumerate(runs, start=1):
        lines.append(f"| {i} | {r.window_s:.1f} | {r.frames / r.window_s:,.0f} | {r.states / r.window_s:,.0f} | "
                     f"{r.points / r.window_s:,.0f} | {r.cpu_pct.get('gateway', 0):.0f}% | "
                     f"**{r.points_per_core_s:,.0f}** | {len(r.latency_ms)} | {r.pct(0.5):.2f} / "
                     f"**{r.pct(0.99):.2f}** / {max(r.latency_ms, default=0):.2f} | "
                     f"{r.load[0]:.2f} / {r.load[1]:.2f} / {r.load[2]:.2f} |")
    per_core = statistics.median(r.points_per_core_s for r in runs)
    p99 = statistics.median(r.pct(0.99) for r in runs)
    lines += ["", f"Medians: **{per_core:,.0f} points/s per gateway core** (target {TARGET_POINTS_PER_S:,}: "
              f"{'met' if per_core >= TARGET_POINTS_PER_S else 'not met'}), alert p99 **{p99:.2f} ms** (target "
              f"{TARGET_P99_MS:g} ms: {'met' if p99 <= TARGET_P99_MS else 'not met'}), on a shared machine under the "
              "load quoted.", ""]
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="5 s windows, one repetition (< 1 min)")
    p.add_argument("--blocks", type=int, default=10, help="control blocks of the throughput run (default 10)")
    p.add_argument("--members", type=int, default=30, help="float members per control block (default 30)")
    p.add_argument("--states-per-s", type=float, default=250.0,
                   help="new states per control block per second offered (default 250)")
    p.add_argument("--reps", type=int, default=0, help="repetitions (default 2, quick 1)")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "source":
        _source_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
