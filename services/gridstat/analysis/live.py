"""A live run of seed 001's system: one broker process per broker of a TOPOLOGY.yaml, and the model's predictions.

Why: ``gridstat analyze`` predicts routing-table sizes and message rates, ``--simulate`` checks
the equations against the same bookkeeping in one process; a live run checks them against a
distributed system that really forwards messages (docs/analysis.md: the Spark job
``spark/model_validation.py`` compares what the brokers export to Kafka with what this module
writes as predictions). GridStat's own routers install explicit paths rather than running the
paper's hierarchical routing, so the run uses small dedicated brokers (``live_broker``).

The file's workload is compressed in time (``live_routing.time_scaled``) so that a run of
``seconds`` sees about twenty mean lifetimes; table sizes do not change, rates grow by the
scale, and the predictions are the model's figures for the compressed workload, i.e. per wall
second. Brokers start root first (each connects to its parent's port), all start their
workload at one common epoch, and measure after ``warmup_s`` for ``seconds``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gridstat.analysis import live_routing as lr
from gridstat.analysis import model
from gridstat.analysis.loading import load_analysis_file
from gridstat.errors import GridStatError, ValidationError

#: Above this many predicted messages per wall second (all brokers) a run would measure the
#: machine, not the routing: refuse and ask for a smaller time scale.
MAX_MESSAGES_PER_S = 20_000


class LiveRunError(GridStatError):
    """A broker process failed or did not report."""

    reason = "LiveRunFailed"


@dataclass(frozen=True)
class LivePlan:
    """What a run will do: the scaled workload's model figures per broker, and the run's settings."""

    run: str
    topology: str
    strategy: str
    seconds: float
    warmup_s: float
    time_scale: float
    seed: int
    sample_ms: int
    brokers: tuple[str, ...]
    parents: tuple[int, ...]
    predictions: list[dict[str, Any]] = field(repr=False)

    def data(self) -> dict[str, Any]:
        """The predictions file read by ``spark/model_validation.py``."""
        return {"run": self.run, "source": self.topology, "strategy": self.strategy, "seconds": self.seconds,
                "warmup_s": self.warmup_s, "time_scale": self.time_scale, "seed": self.seed,
                "sample_ms": self.sample_ms, "metrics": list(lr.METRICS), "brokers": self.predictions}


def plan(topology: str | Path, *, seconds: float = 45.0, strategy: str = "identity", time_scale: float | None = None,
         seed: int = 1, warmup_s: float = 1.0, sample_ms: int = 1000, run: str | None = None) -> LivePlan:
    """Parse the file as ``gridstat analyze`` does (same errors) and compute the run's predictions."""
    lr.check_strategy(strategy)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValidationError(f"--live must be > 0 seconds, got {seconds}", field="live")
    if sample_ms < 10:
        raise ValidationError(f"sample period must be >= 10 ms, got {sample_ms}", field="sample_ms")
    workload = load_analysis_file(topology)
    scale = lr.default_time_scale(workload, seconds) if time_scale is None else time_scale
    analysis = model.analyze(lr.time_scaled(workload, scale))
    preds = lr.predictions(analysis, strategy)
    load = sum(p["control_sent_per_s"] + p["notifications_sent_per_s"] for p in preds)
    if load > MAX_MESSAGES_PER_S:
        raise ValidationError(f"at time scale {scale:g} the brokers would exchange {load:,.0f} messages/s "
                              f"(limit {MAX_MESSAGES_PER_S:,}); give a smaller --time-scale or fewer classes",
                              field="time_scale")
    tree = workload.tree
    return LivePlan(run=run or uuid.uuid4().hex[:12], topology=str(topology), strategy=strategy, seconds=seconds,
                    warmup_s=warmup_s, time_scale=scale, seed=seed, sample_ms=sample_ms, brokers=tree.names,
                    parents=tree.parents, predictions=preds)


def _pre_order(parents: tuple[int, ...]) -> list[int]:
    order = [parents.index(-1)]
    for b in order:
        order.extend(i for i, p in enumerate(parents) if p == b)
    return order


def run_live(p: LivePlan, *, kafka: str | None = None, log_dir: Path | None = None) -> list[dict[str, Any]]:
    """Start every broker, run the plan, and return the brokers' own totals (``DONE`` lines), in tree order."""
    procs: dict[int, subprocess.Popen[str]] = {}
    ports: dict[int, int] = {}
    logs: list[IO[str]] = []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        for b in _pre_order(p.parents):
            cfg = {"topology": p.topology, "broker": p.brokers[b], "strategy": p.strategy, "seed": p.seed,
                   "time_scale": p.time_scale, "warmup_s": p.warmup_s, "seconds": p.seconds, "sample_ms": p.sample_ms,
                   "run": p.run, "kafka": kafka, "parent_port": ports.get(p.parents[b])}
            err: IO[str] | int = subprocess.DEVNULL
            if log_dir is not None:
                log_dir.mkdir(parents=True, exist_ok=True)
                err = open(log_dir / f"{p.brokers[b]}.log", "w")  # noqa: SIM115 - closed below
                logs.append(err)
            proc = subprocess.Popen([sys.executable, "-m", "gridstat.analysis.live_broker", json.dumps(cfg)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
            procs[b] = proc
            ports[b] = _ready_port(proc, p.brokers[b])
        start = time.time() + 0.5
        for proc in procs.values():
            assert proc.stdin is not None
            proc.stdin.write(f"START {start}\n")
            proc.stdin.flush()
        deadline = time.monotonic() + p.warmup_s + p.seconds + 60
        out: dict[int, dict[str, Any]] = {}
        for b, proc in procs.items():
            assert proc.stdout is not None
            try:
                text, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise LiveRunError(f"broker {p.brokers[b]} did not finish in time", field="broker") from None
            done = [ln for ln in text.splitlines() if ln.startswith("DONE ")]
            if proc.returncode != 0 or not done:
                raise LiveRunError(f"broker {p.brokers[b]} exited with {proc.returncode} without its totals",
                                   field="broker")
            out[b] = json.loads(done[-1][5:])
        return [out[b] for b in range(len(p.brokers))]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
        for f in logs:
            f.close()


def _ready_port(proc: subprocess.Popen[str], name: str) -> int:
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the broker prints READY within a second or exits
    if not line.startswith("READY port="):
        proc.kill()
        raise LiveRunError(f"broker {name} did not start (exit code {proc.wait(5)})", field="broker")
    return int(line.split("=", 1)[1])


def compare(predicted: list[dict[str, Any]], measured: list[dict[str, Any]], *, rel_tol: float,
            abs_tol: float) -> list[dict[str, Any]]:
    """Per broker and metric: predicted, measured, errors and the verdict (the Spark job's rule, in Python)."""
    rows = []
    for pr, me in zip(predicted, measured, strict=True):
        for m in lr.METRICS:
            e = me[m] - pr[m]
            rows.append({"broker": pr["broker"], "metric": m, "predicted": pr[m], "measured": me[m], "abs_error": e,
                         "rel_error": e / pr[m] if pr[m] else None,
                         "within": lr.within(me[m], pr[m], rel_tol, abs_tol)})
    return rows
