"""``gridstat bench dnp3``: the DNP3 gateway's throughput and its alerts' latency (docs/dnp3.md, "Performance").

Real processes on 127.0.0.1: a leaf broker and edge routers e1 and e2 (two routers); a DNP3 outstation
made for the benchmark (its own process, ``python -m gridstat.bench.dnp3 outstation``: our codec on the
outstation's side, unsolicited responses, each waiting for the master's CONFIRM as the standard asks);
``gridstat dnp3-gateway`` publishing through e1.

* **Points per second per gateway core.** The outstation sends unsolicited responses of 150 analog input
  events with time (g32v7) as fast as the gateway confirms them, over ``analogs`` points, each a periodic
  variable at 100 ms. Over a window: points read by the gateway (its stats line), its CPU time from /proc,
  and points/s per core = points / CPU seconds; also the events it published.
* **Alert latency.** A second run: the outstation changes one of 10 binary inputs every 20 ms and reports
  it at once (g2v2, its device time the change's wall-clock millisecond); an SDK subscriber behind e2 takes
  the 10 alert variables; latency = the callback's wall-clock time minus the device time (the device time
  has millisecond resolution: up to 1 ms is rounding). Gateway, two routers and the subscriber are in it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gridstat.bench.gateway_rig import edge_cloud
from gridstat.bench.pmu import Child, _cpu_s
from gridstat.core import children

TARGET_POINTS_PER_S = 50_000
TARGET_P99_MS = 10.0
MASTER, OUTSTATION = 1, 10
EVENTS_PER_FRAGMENT = 150
BINARIES = 10
CHANGE_EVERY_S = 0.02


@dataclass
class Dnp3Run:
    analogs: int
    window_s: float
    points: int
    gateway_cpu_s: float
    events_published: int
    latency_ms: list[float] = field(default_factory=list)
    alerts_sent: int = 0
    alerts_too_early: int = 0
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    cpu_pct: dict[str, float] = field(default_factory=dict)

    @property
    def points_per_core_s(self) -> float:
        return self.points / self.gateway_cpu_s if self.gateway_cpu_s else float("nan")

    def pct(self, q: float) -> float:
        xs = sorted(self.latency_ms)
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


# -- the outstation (its own process) ------------------------------------------------------------------

class _Outstation:
    """Answers every request with an empty response; after ENABLE UNSOLICITED, reports by itself."""

    def __init__(self, mode: str, analogs: int) -> None:
        from gridstat.gateways.dnp3.link import LinkDecoder
        from gridstat.gateways.dnp3.segments import Reassembler, Segmenter

        self.mode = mode
        self.analogs = analogs
        self.link = LinkDecoder()
        self.reassembler = Reassembler()
        self.segmenter = Segmenter()
        self.uns_seq = 0
        self.enabled = asyncio.Event()
        self.confirmed = asyncio.Event()
        self.writer: asyncio.StreamWriter | None = None

    def send(self, fragment: bytes) -> None:
        from gridstat.gateways.dnp3.link import PRM, PrimaryFunction, encode_frame

        assert self.writer is not None
        self.writer.write(b"".join(encode_frame(PRM | PrimaryFunction.UNCONFIRMED_USER_DATA, MASTER, OUTSTATION, s)
                                   for s in self.segmenter.segment(fragment)))

    def on_fragment(self, fragment: bytes) -> None:
        if len(fragment) < 2:
            return
        control, function = fragment[0], fragment[1]
        if function == 0x00:  # CONFIRM
            self.confirmed.set()
            return
        self.send(bytes((0xC0 | (control & 0x0F), 0x81, 0, 0)))
        if function == 0x14:
            self.enabled.set()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        reporting = asyncio.ensure_future(self.report())
        try:
            while data := await reader.read(65536):
                for frame in self.link.feed(data):
                    if frame.user_data and (done := self.reassembler.add(frame.user_data)) is not None:
                        self.on_fragment(done)
        finally:
            reporting.cancel()

    def unsolicited(self, objects: bytes) -> None:
        self.confirmed.clear()
        self.send(bytes((0xF0 | self.uns_seq, 0x82, 0, 0)) + objects)  # FIR FIN CON UNS
        self.uns_seq = (self.uns_seq + 1) & 0x0F

    async def report(self) -> None:
        await self.enabled.wait()
        await asyncio.sleep(0.2)
        event = struct.Struct("<HBf6s")
        if self.mode == "flood":
            index = 0
            while True:
                now = int(time.time() * 1000).to_bytes(6, "little")
                body = bytearray((32, 7, 0x28)) + EVENTS_PER_FRAGMENT.to_bytes(2, "little")
                for _ in range(EVENTS_PER_FRAGMENT):
                    body += event.pack(index, 0x01, float(index), now)
                    index = (index + 1) % self.analogs
                self.unsolicited(bytes(body))
                try:
                    await asyncio.wait_for(self.confirmed.wait(), 5.0)
                except TimeoutError:
                    continue
        else:
            state = [False] * BINARIES
            i = 0
            while True:
                await asyncio.sleep(CHANGE_EVERY_S)
                state[i] = not state[i]
                now = int(time.time() * 1000).to_bytes(6, "little")
                flags = 0x81 if state[i] else 0x01
                self.unsolicited(bytes((2, 2, 0x28)) + (1).to_bytes(2, "little") + i.to_bytes(2, "little")
                                 + bytes((flags,)) + now)
                i = (i + 1) % BINARIES


def _outstation_main(mode: str, analogs: int) -> None:
    async def main() -> None:
        station = _Outstation(mode, analogs)
        server = await asyncio.start_server(station.serve, "127.0.0.1", 0)
        print(f"READY name=outstation port={server.sockets[0].getsockname()[1]}", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# -- the runs ------------------------------------------------------------------------------------------

def _gateway(port: int, e1: str, *extra: str) -> Child:
    return Child([sys.executable, "-m", "gridstat.cli.main", "dnp3-gateway", "--outstation", f"127.0.0.1:{port}",
                  "--address", str(OUTSTATION), "--edge", e1, "--unsolicited", "--event-poll-s", "0",
                  "--integrity-poll-s", "0", "-o", "json", "--stats-every-s", "0.5", "--exit-with-parent", *extra],
                 "dnp3-gateway")


async def _wait(pred: Callable[[], bool], timeout_s: float, what: str) -> None:
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout_s:
            raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(0.2)


async def _one(analogs: int, window_s: float, log: Callable[[str], None]) -> Dnp3Run:
    from gridstat.client import Subscriber
    from gridstat.core.model import BOOL

    py = sys.executable
    started: list[Child] = []
    with tempfile.TemporaryDirectory(prefix="gridstat-bench-dnp3-") as tmp:
        try:
            cloud = await edge_cloud(tmp, started)
            e1, e2 = cloud.e1, cloud.e2
            # Throughput: analog events flooded, each point a periodic variable at 100 ms.
            flood = Child([py, "-m", "gridstat.bench.dnp3", "outstation", "flood", str(analogs)], "outstation")
            started.append(flood)
            gw = _gateway(children.ready_port(flood.ready), e1, "--interval-ms", "100")
            started.append(gw)
            t0 = time.monotonic()
            await _wait(lambda: gw.last.get("registrations", 0) >= analogs, 120, f"{analogs} registrations")
            log(f"dnp3: the gateway registered {analogs:,} variables in {time.monotonic() - t0:.1f} s")
            await asyncio.sleep(1.0)
            watched = {"gateway": gw, "outstation": flood}
            g0, c0, w0 = dict(gw.last), {k: _cpu_s(c.pid) for k, c in watched.items()}, time.monotonic()
            await asyncio.sleep(window_s)
            g1, c1 = dict(gw.last), {k: _cpu_s(c.pid) for k, c in watched.items()}
            elapsed = time.monotonic() - w0
            span = float(g1["uptime_s"]) - float(g0["uptime_s"])
            cpu = (c1["gateway"] - c0["gateway"]) * span / elapsed  # the CPU over the stats lines' own span
            run = Dnp3Run(analogs=analogs, window_s=span,
                          points=g1["points"].get("ai_event", 0) - g0["points"].get("ai_event", 0),
                          gateway_cpu_s=cpu, events_published=g1["events_published"] - g0["events_published"],
                          cpu_pct={k: 100 * (c1[k] - c0[k]) / elapsed for k in c1})
            log(f"dnp3: {run.points / span:,.0f} points/s read, {run.points_per_core_s:,.0f} per gateway core; "
                f"{run.events_published / span:,.0f} events/s published")
            for c in (gw, flood):
                c.stop()
                started.remove(c)
            # Alert latency: binary changes reported unsolicited, through e1 and e2 to a subscriber.
            alerts = Child([py, "-m", "gridstat.bench.dnp3", "outstation", "alerts", "1"], "outstation")
            started.append(alerts)
            gw = _gateway(children.ready_port(alerts.ready), e1, "--min-interval-ms", "10")
            started.append(gw)
            sub = await Subscriber.connect("alerts", e2)
            latencies: list[float] = []
            recording = [False]

            def on_event(_s: Any, h: Any) -> None:
                if recording[0]:
                    latencies.append(time.time() * 1000 - h.timestamp_ms)

            for i in range(BINARIES):
                deadline = time.monotonic() + 30
                while True:
                    try:
                        await sub.subscribe_remote(f"dnp{OUTSTATION}/bi{i}", BOOL, interval_ms=10, latency_ms=50,
                                                   on_event=on_event)
                        break
                    except Exception:
                        if time.monotonic() > deadline:
                            raise
                        await asyncio.sleep(0.2)
            await asyncio.sleep(1.0)
            a0 = dict(gw.last)
            recording[0] = True
            await asyncio.sleep(window_s)
            recording[0] = False
            a1 = dict(gw.last)
            await sub.stop()
            run.latency_ms = latencies
            run.alerts_sent = a1.get("alerts_published", 0) - a0.get("alerts_published", 0)
            run.alerts_too_early = a1.get("alerts_too_early", 0)
            run.load = os.getloadavg()
            log(f"dnp3: {len(latencies)} alerts, latency p50 {run.pct(0.5):.2f} ms p99 {run.pct(0.99):.2f} ms")
            return run
        finally:
            for c in reversed(started):
                c.stop()


def run_dnp3_bench(*, analogs: int, reps: int, window_s: float, log: Callable[[str], None]) -> list[Dnp3Run]:
    runs = []
    for rep in range(reps):
        log(f"dnp3: repetition {rep + 1}/{reps}: {analogs} analog inputs, {window_s:g} s windows ...")
        runs.append(asyncio.run(_one(analogs, window_s, log)))
    return runs


def report(runs: list[Dnp3Run], facts_line: str) -> str:
    r0 = runs[0]
    lines = [
        "## DNP3 into status variables (`gridstat bench dnp3`)", "", facts_line, "",
        "**Method.** Real processes on 127.0.0.1 (module docstring of `gridstat.bench.dnp3`): a leaf broker, edge "
        "routers e1 and e2, `gridstat dnp3-gateway` publishing through e1 with unsolicited responses enabled, and "
        "an outstation made for the benchmark (our codec on the outstation's side, every unsolicited response "
        "waiting for the master's CONFIRM). Throughput: responses of 150 analog input events with time (g32v7) "
        f"over {r0.analogs:,} points, each a periodic variable at 100 ms; points/s per core = points the gateway "
        "read / its CPU seconds (/proc). Alert latency: one of 10 binary inputs changes every 20 ms, reported at "
        "once as g2v2; an SDK subscriber behind e2 (two routers) takes the alerts; latency = callback wall clock "
        "minus the event's device time (millisecond resolution). Targets: "
        f"{TARGET_POINTS_PER_S:,} points/s per gateway core, alert p99 <= {TARGET_P99_MS:g} ms.", "",
        "| rep | window (s) | points read/s | gateway CPU | points/s per gateway core | events published/s | "
        "alerts | alert latency p50 / p99 / max (ms) | too early | load (1 / 5 / 15 min) |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for i, r in enumerate(runs, start=1):
        lines.append(f"| {i} | {r.window_s:.1f} | {r.points / r.window_s:,.0f} | {r.cpu_pct.get('gateway', 0):.0f}% | "
                     f"**{r.points_per_core_s:,.0f}** | {r.events_published / r.window_s:,.0f} | {len(r.latency_ms)} | "
                     f"{r.pct(0.5):.2f} / **{r.pct(0.99):.2f}** / {max(r.latency_ms, default=0):.2f} | "
                     f"{r.alerts_too_early} | {r.load[0]:.2f} / {r.load[1]:.2f} / {r.load[2]:.2f} |")
    per_core = statistics.median(r.points_per_core_s for r in runs)
    p99 = statistics.median(r.pct(0.99) for r in runs)
    lines += ["", f"Medians: **{per_core:,.0f} points/s per gateway core** (target {TARGET_POINTS_PER_S:,}: "
              f"{'met' if per_core >= TARGET_POINTS_PER_S else 'not met'}), alert p99 **{p99:.2f} ms** (target "
              f"{TARGET_P99_MS:g} ms: {'met' if p99 <= TARGET_P99_MS else 'not met'}), on a shared machine under the "
              "load quoted.", ""]
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="300 points, 5 s windows, one repetition (< 1 min)")
    p.add_argument("--analogs", type=int, default=0, help="analog input points (default 1,000, quick 300)")
    p.add_argument("--reps", type=int, default=0, help="repetitions (default 2, quick 1)")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "outstation":
        _outstation_main(sys.argv[2], int(sys.argv[3]))
