"""The two experiments of ``gridstat bench shapes`` (module ``shapes``): multicast with filtering and
condensation, each over its loads and variants."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import grpc

from gridstat.bench import peers
from gridstat.bench.shape_plans import (
    COND_CHAIN,
    COND_FUNCTION,
    COND_OUT_OFFSET,
    COND_SUBS,
    COND_TRIGGER_MS,
    FILTER_CHAIN,
    FILTER_SUBS,
    MAX_FILT,
    VAR_BLOCK,
    condensation_routes,
    condensation_setup,
    filter_routes,
    rotated,
)
from gridstat.bench.shape_rig import (
    NoiseBudget,
    Rig,
    ShapeTrial,
    _fmt_trial,
    cond_topology,
    filter_topology,
    noisy_trial,
)
from gridstat.v1 import router_pb2 as pb

Log = Callable[[str], None]

# -- experiment 1: multicast with filtering -----------------------------------------------------------------
def _filter_base(f: int) -> int:
    return (1 + f) * VAR_BLOCK


@dataclass
class FilterResult:
    rates: list[int]
    reps: int
    duration: float
    trials: dict[tuple[int, int], list[ShapeTrial]] = field(default_factory=dict)  # (rate, f) -> reps
    wall_s: float = 0.0
    repeated: int = 0
    waited_s: float = 0.0


def run_filtering(*, rates: Sequence[int], reps: int, duration: float, log: Log,
                  budget: NoiseBudget | None = None) -> FilterResult:
    t_start = time.monotonic()
    res = FilterResult(list(rates), reps, duration)
    nvars = max(rates) // 1000
    plans = {}
    for f in range(MAX_FILT + 1):
        base = _filter_base(f)
        plans[f] = filter_routes(f, [peers.load_var(base, i) for i in range(nvars)], peers.ref_var(base))
    rig = Rig(filter_topology(), log)
    budget = budget or NoiseBudget(0, 0.0)
    repeated0, waited0 = budget.repeated, budget.waited_s
    try:
        for f in range(MAX_FILT + 1):
            rig.install(plans[f])
        log(f"filtering: routers {', '.join(FILTER_CHAIN)} up, routes of filt=0..{MAX_FILT} installed "
            f"({nvars} load variables each)")
        for f in range(MAX_FILT + 1):  # warm-up: every variant once
            rig.trial("warm-up", min(rates), 0.4, _filter_base(f), ref_subs=("ref",), load_subs=FILTER_SUBS)
        fs = list(range(MAX_FILT + 1))
        for rep in range(reps):
            for rate in rates:
                for f in rotated(fs, rep):
                    def run(f: int = f, rate: int = rate) -> ShapeTrial:
                        return rig.trial(f"filt={f}", rate, duration, _filter_base(f), ref_subs=("ref",),
                                         load_subs=FILTER_SUBS)
                    t = noisy_trial(rig, run, budget, log)
                    res.trials.setdefault((rate, f), []).append(t)
                    log(f"  rep {rep + 1} {rate:>7,} ev/s filt={f}: " + _fmt_trial(t, FILTER_CHAIN, FILTER_SUBS))
    finally:
        rig.close()
    res.repeated, res.waited_s = budget.repeated - repeated0, budget.waited_s - waited0
    res.wall_s = time.monotonic() - t_start
    return res



# -- experiment 2: condensation ---------------------------------------------------------------------------
def _cond_bases(li: int) -> tuple[int, int]:
    """Variable blocks of load index li: (without the function, with it)."""
    return (10 + li) * VAR_BLOCK, (20 + li) * VAR_BLOCK


class CondensationUnavailable(RuntimeError):
    """SetupCondensation does not work on these routers (yet)."""


@dataclass
class CondResult:
    rates: list[int]
    reps: int
    duration: float
    trigger_ms: int
    trials: dict[tuple[int, bool], list[ShapeTrial]] = field(default_factory=dict)  # (rate, with) -> reps
    wall_s: float = 0.0
    repeated: int = 0
    waited_s: float = 0.0
    error: str = ""


def _setup_function(rig: Rig, function_id: str, load_vars: Sequence[int], out_var: int, trigger_ms: int) -> str:
    router = COND_CHAIN[0]
    try:
        reply = rig.stub(router).SetupCondensation(
            condensation_setup(function_id, load_vars, out_var, trigger_ms=trigger_ms), timeout=10)
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        detail = exc.details() if hasattr(exc, "details") else str(exc)
        raise CondensationUnavailable(f"SetupCondensation on {router} failed: {code}: {detail}") from exc
    channel = str(reply.channel)
    if not channel:
        raise CondensationUnavailable(f"SetupCondensation on {router} returned no channel")
    return channel


def run_condensation(*, rates: Sequence[int], reps: int, duration: float, log: Log,
                     trigger_ms: int = COND_TRIGGER_MS, budget: NoiseBudget | None = None) -> CondResult:
    """Without -> with the function at each rate. The function is set up (and its input routes installed)
    just before each with-trial and terminated after it, so it never runs during a without-trial."""
    t_start = time.monotonic()
    res = CondResult(list(rates), reps, duration, trigger_ms)
    rig = Rig(cond_topology(), log)
    budget = budget or NoiseBudget(0, 0.0)
    repeated0, waited0 = budget.repeated, budget.waited_s
    try:
        blocks: dict[int, tuple[list[int], int, int, int]] = {}
        for li, rate in enumerate(rates):
            raw, cf = _cond_bases(li)
            nvars = rate // 1000
            blocks[rate] = ([peers.load_var(cf, i) for i in range(nvars)], raw, cf, cf + COND_OUT_OFFSET)
            rig.install(condensation_routes(False, [peers.load_var(raw, i) for i in range(nvars)],
                                            peers.ref_var(raw), 0))
            # The output variable's and the reference's routes stay; the input routes come with the function.
            rig.install([r for r in condensation_routes(True, [], peers.ref_var(cf), cf + COND_OUT_OFFSET,
                                                        function_channel="-", out_interval_ms=trigger_ms)])
        log(f"condensation: routers {', '.join(COND_CHAIN)} up, routes installed")

        def with_function(rate: int, dur: float, label: str) -> ShapeTrial:
            inputs, _raw, cf, out_var = blocks[rate]
            fid = f"{COND_FUNCTION}{rate // 1000}"
            channel = _setup_function(rig, fid, inputs, out_var, trigger_ms)
            try:
                rig.install([r for r in condensation_routes(True, inputs, peers.ref_var(cf), out_var,
                                                            function_channel=channel, out_interval_ms=trigger_ms)
                             if r.route_id == "cf"])
                time.sleep(0.2)
                return rig.trial(label, rate, dur, cf, ref_subs=("ref1", "ref2"), load_subs=COND_SUBS,
                                 function_id=fid)
            finally:
                rig.stub(COND_CHAIN[0]).TerminateCondensation(pb.TerminateCondensationRequest(function_id=fid),
                                                              timeout=10)

        def without(rate: int, dur: float, label: str) -> ShapeTrial:
            return rig.trial(label, rate, dur, blocks[rate][1], ref_subs=("ref1", "ref2"), load_subs=COND_SUBS)

        for rate in rates:  # warm-up
            without(rate, 0.4, "warm-up")
            try:
                t = with_function(rate, 0.4, "warm-up")
            except CondensationUnavailable as exc:
                res.error = str(exc)
                log(f"condensation: {exc}")
                return res
            if not t.function.get("outputs"):
                log(f"condensation: warm-up with the function at {rate:,} ev/s gave no outputs ({t.function})")
        for rep in range(reps):
            for rate in rates:
                for w in rotated([False, True], rep):
                    def run(w: bool = w, rate: int = rate) -> ShapeTrial:
                        return (with_function if w else without)(rate, duration, "with" if w else "without")
                    t = noisy_trial(rig, run, budget, log)
                    res.trials.setdefault((rate, w), []).append(t)
                    log(f"  rep {rep + 1} {rate:>7,} ev/s {'with   ' if w else 'without'}: "
                        + _fmt_trial(t, COND_CHAIN, COND_SUBS)
                        + (f", function outputs {t.function.get('outputs', 0)}" if w else ""))
    except CondensationUnavailable as exc:
        res.error = str(exc)
        log(f"condensation: {exc}")
    finally:
        rig.close()
    res.repeated, res.waited_s = budget.repeated - repeated0, budget.waited_s - waited0
    res.wall_s = time.monotonic() - t_start
    return res
