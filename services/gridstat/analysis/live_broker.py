"""One broker process of a live run of seed 001's hierarchical routing (``gridstat analyze --live``).

Why a process per broker: the model's claim is about a distributed system, so the check runs
one: each broker is its own OS process with its own event loop, connected to its parent by a
TCP connection on 127.0.0.1, and learns about its subtree only from the messages its children
send (``live_routing.Router`` decides what to forward). Its own subscribers and publishers are
the file's workload at this broker, time-compressed and seeded (``live_routing.local_events``).

Protocol, one ASCII line per message: ``H name`` (hello, a child to its parent), ``S class`` /
``U class`` (subscription / unsubscription), ``N class`` (notification). The launcher
(``live``) starts the process with a JSON config on argv, reads ``READY port=N`` from stdout,
writes ``START epoch`` to stdin once every broker is ready, and reads one ``DONE {json}`` line
with the totals of the measurement window. Every ``sample_ms`` of that window the broker exports
a ``model_broker`` record (telemetry/schemas/v1) through the telemetry exporter, when ``kafka``
is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import sys
import time
from typing import Any

from gridstat.analysis import live_routing as lr
from gridstat.analysis.loading import load_analysis_file
from gridstat.telemetry import ExporterConfig, TelemetryExporter, records

_KINDS = {"S": "subscribe", "U": "unsubscribe"}


class LiveBroker:
    """A broker's sockets, routing state and measurement (see the module docstring)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        workload = lr.time_scaled(load_analysis_file(cfg["topology"]), float(cfg["time_scale"]))
        tree = workload.tree
        self.index = tree.index(cfg["broker"])
        self.name = cfg["broker"]
        self.parent = None if tree.parents[self.index] == -1 else tree.names[tree.parents[self.index]]
        self.depth = tree.depths[self.index]
        self.child_names = [tree.names[c] for c in tree.children[self.index]]
        self.classes = lr.broker_classes(workload, self.index)
        self.router = lr.Router(cfg["strategy"], len(self.child_names), root=self.parent is None)
        self.writers: dict[int, asyncio.StreamWriter] = {}
        self.all_children = asyncio.Event()
        if not self.child_names:
            self.all_children.set()
        self.meter: lr.Meter | None = None
        self.totals = dict.fromkeys(("period_ms", *lr.Meter.COUNTERS), 0)
        self.areas = {"entries": 0.0, "local": 0.0}
        self.exporter: TelemetryExporter | None = None
        if cfg.get("kafka"):
            self.exporter = TelemetryExporter(ExporterConfig(bootstrap=cfg["kafka"], role="model_broker",
                                                             source=self.name))

    # -- messages ----------------------------------------------------------------------------------
    def _send(self, dests: list[int], kind: str, cls: int) -> None:
        line = f"{kind} {cls}\n".encode()
        for d in dests:
            w = self.writers.get(d)
            if w is None or w.is_closing():
                continue
            w.write(line)
            if self.meter is not None:
                self.meter.count("control_sent" if kind in _KINDS else "notifications_sent")

    def handle(self, kind: str, cls: int, src: int) -> None:
        """A message from ``src`` (``LOCAL``, ``PARENT`` or a child index), or a local workload event."""
        m = self.meter
        if kind == "N":
            if m is not None:
                m.count("notifications_published" if src == lr.LOCAL else "notifications_received")
            self._send(self.router.notify(cls, src), "N", cls)
            return
        if m is not None and src != lr.LOCAL:
            m.count("control_received")
        if m is not None and src == lr.LOCAL and kind == "S":
            m.count("subscriptions_started")
        r = self.router
        self._send(r.subscribe(cls, src) if kind == "S" else r.unsubscribe(cls, src), kind, cls)
        if m is not None:
            m.level(time.monotonic(), r.entries, r.local_total)

    async def _read(self, reader: asyncio.StreamReader, src: int) -> None:
        with contextlib.suppress(ConnectionError):
            while line := await reader.readline():
                self.handle(chr(line[0]), int(line[2:-1]), src)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hello = (await reader.readline()).decode().split()
        if len(hello) != 2 or hello[0] != "H" or hello[1] not in self.child_names:
            writer.close()
            return
        c = self.child_names.index(hello[1])
        self.writers[c] = writer
        if len(self.writers) - (lr.PARENT in self.writers) == len(self.child_names):
            self.all_children.set()
        await self._read(reader, c)

    # -- the run -----------------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        cfg = self.cfg
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        tasks = []
        if self.parent is not None:
            reader, writer = await asyncio.open_connection("127.0.0.1", int(cfg["parent_port"]))
            writer.write(f"H {self.name}\n".encode())
            self.writers[lr.PARENT] = writer
            tasks.append(asyncio.create_task(self._read(reader, lr.PARENT)))
        if self.exporter is not None:
            await self.exporter.start()
        print(f"READY port={port}", flush=True)
        start_epoch = float((await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)).split()[1])
        await asyncio.wait_for(self.all_children.wait(), 10.0)
        start = time.monotonic() + (start_epoch - time.time())
        warmup, seconds = float(cfg["warmup_s"]), float(cfg["seconds"])
        sampler = asyncio.create_task(self._sample(start + warmup, start + warmup + seconds, cfg["sample_ms"] / 1000))
        rng = random.Random(f"{cfg['seed']}:{self.index}")
        done = 0
        for t, kind, cls in lr.local_events(self.classes, rng, warmup + seconds):
            delay = start + t - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            elif (done := done + 1) % 64 == 0:
                await asyncio.sleep(0)  # behind schedule: still let the readers in
            self.handle({lr.ARRIVE: "S", lr.DEPART: "U", lr.PUBLISH: "N"}[kind], cls, lr.LOCAL)
        await sampler
        if self.exporter is not None:
            await self.exporter.stop(10.0)
        for task in tasks:
            task.cancel()
        for w in self.writers.values():
            w.close()
        server.close()
        span = self.totals["period_ms"] / 1000 or 1.0
        return {"broker": self.name, "seconds": span, "table_entries": self.areas["entries"] / span,
                "local_subscriptions": self.areas["local"] / span,
                **{f"{k}_per_s": self.totals[k] / span for k in ("control_sent", "control_received",
                                                                 "notifications_sent", "notifications_received")},
                "lost_records": 0 if self.exporter is None else self.exporter.stats.lost_total}

    async def _sample(self, begin: float, end: float, every_s: float) -> None:
        await asyncio.sleep(max(0.0, begin - time.monotonic()))
        r = self.router
        self.meter = m = lr.Meter(time.monotonic())
        m.level(time.monotonic(), r.entries, r.local_total)
        periods = max(1, math.ceil((end - begin) / every_s - 1e-9))
        for i in range(1, periods + 1):
            nxt = end if i == periods else begin + i * every_s
            await asyncio.sleep(max(0.0, nxt - time.monotonic()))
            p = m.period(time.monotonic())
            for k in ("period_ms", *lr.Meter.COUNTERS):
                self.totals[k] += p[k]
            self.areas["entries"] += p["entries_avg"] * p["period_ms"] / 1000
            self.areas["local"] += p["local_subscriptions_avg"] * p["period_ms"] / 1000
            if self.exporter is not None:
                self.exporter.emit(records.TOPICS.model_brokers, records.model_broker(
                    run=self.cfg["run"], strategy=r.strategy, broker=self.name, parent=self.parent, depth=self.depth,
                    time_scale=float(self.cfg["time_scale"]), **p), key=f"{self.cfg['run']}/{self.name}")
        self.meter = None


def main(argv: list[str] | None = None) -> int:
    cfg = json.loads((argv or sys.argv[1:])[0])
    summary = asyncio.run(LiveBroker(cfg).run())
    print("DONE " + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
