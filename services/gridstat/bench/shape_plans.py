"""The pure parts of ``gridstat bench shapes`` (module ``shapes``): its topologies' constants, the
dissertation's reference figures, and route planning for filt=f and condensation."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from gridstat.bench import peers
from gridstat.v1 import condensation_pb2 as cpb
from gridstat.v1 import router_pb2 as pb

Log = Callable[[str], None]

PUB_ID = 900_001
SUB_ID_BASE = 900_100
CF_SENDER_ID = 900_050
VAR_BLOCK = peers.VAR_BLOCK
REF_INTERVAL_MS = 50

#: The filtering tree: the publisher's edge router, then the chain i1..i4, i_k feeding load subscriber s_k.
FILTER_CHAIN = ("e", "i1", "i2", "i3", "i4")
FILTER_SUBS = ("s1", "s2", "s3", "s4")
MAX_FILT = len(FILTER_SUBS)
#: The condensation chain; i2 is the multicast split to s3 and s4; the function runs on i0.
COND_CHAIN = ("i0", "i1", "i2")
COND_SUBS = ("s3", "s4")
COND_FUNCTION = "avg"
COND_TRIGGER_MS = 1
COND_OUT_OFFSET = 5_000  # output variable id = block base + this
#: The average leaves out inputs older than this, so the output stops when the publisher does.
COND_MAX_AGE_MS = 20

#: Default offered loads (events/s) of the two experiments; see the report's method paragraph.
FILTER_RATES = (250_000, 500_000)
COND_RATES = (250_000, 500_000, 750_000)
QUICK_FILTER_RATES = (500_000,)
QUICK_COND_RATES = (500_000,)

#: Against other processes' load (the machine is shared): at most this many repeated trials and seconds waited
#: for a quiet machine before trials, over the whole run.
RETRIES, WAIT_S = 12, 120.0
QUICK_RETRIES, QUICK_WAIT_S = 2, 15.0

# -- dissertation reference figures (Chapter 8) ---------------------------------------------------
#: Tables 8.28-8.32, tlv -> per f = 0..4: (mean ms, sd ms, sub TP ev/ms, drop %).
DISS_FILTER: dict[int, tuple[tuple[float, float, float, float], ...]] = {
    40: ((1.616, .431, 70.13, .005), (1.674, 1.033, 61.85, .114), (1.558, .414, 53.69, .001),
         (1.544, .355, 44.57, .001), (1.466, .569, 34.88, .044)),
    80: ((3.516, 2.319, 122.96, 3.489), (3.347, 2.197, 107.82, 3.259), (2.713, 1.698, 92.61, 1.982),
         (2.267, 1.448, 78.07, 1.104), (1.78, 1.109, 61.9, .679)),
}
DISS_FILTER_CPU = ("forwarding half the events on a branch saves 7-10 % CPU (tlv 40) and 10-15 % (tlv 80); "
                   "at f=4 CPU roughly halves, e.g. tlv 80 i1: 56-65 % -> 26-37 %")
#: Tables 8.37-8.47, CF-average with a 1 ms time trigger: tlv -> (s1 ms, s2 ms, sub TP ev/ms, CPU i0, i1, i2 %,
#: drop %), each "without -> with".
DISS_COND: dict[int, tuple[str, str, str, str, str]] = {
    40: ("1.21 -> 1.055", "1.368 -> 1.079", "35.79 -> 1.875", "17-23, 10-15, 30-40 -> 18-23, 1-4, 2-5", "0 -> 0"),
    80: ("1.189 -> 1.06", "2.152 -> 1.067", "62.91 -> 1.961", "30-33, 20-25, 55-65 -> 32-38, 1-5, 2-5",
         "1.167 -> 0"),
    120: ("1.254 -> 1.13", "3.299 -> 1.119", "78.71 -> 2.021", "42-50, 25-30, 70-72 -> 42-46, 1-7, 2-5",
          "4.505 -> 0"),
}



# -- route planning (pure) --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RouteSpec:
    """One route to install: on ``router``, events of ``variable_id`` leave on ``channel``."""

    router: str
    route_id: str
    variable_id: int
    channel: str
    sub_interval_ms: int
    pub_interval_ms: int = 1

    def message(self) -> pb.Route:
        return pb.Route(route_id=self.route_id, variable_id=self.variable_id, mode=0, channel=self.channel,
                        sub_interval_ms=self.sub_interval_ms, priority=1, pub_interval_ms=self.pub_interval_ms)


def sub_intervals(f: int, n: int = MAX_FILT) -> list[int]:
    """Subscription interval (ms) of load subscribers s1..sn in variant filt=f: the last f at 2 ms."""
    if not 0 <= f <= n:
        raise ValueError(f"filt must be in 0..{n}, got {f}")
    return [1] * (n - f) + [2] * f


def filter_routes(f: int, load_vars: Sequence[int], ref_var: int, *, chain: Sequence[str] = FILTER_CHAIN,
                  subs: Sequence[str] = FILTER_SUBS, ref_sub: str = "ref") -> list[RouteSpec]:
    """The routes of variant filt=f, one per subscription path and hop, as a leaf broker installs them.

    Subscriber ``subs[k]`` hangs off ``chain[k + 1]``; its path is chain[0] -> ... -> chain[k + 1] -> subs[k]
    at its own interval. The reference variable goes the whole chain to ``ref_sub`` at 50 ms.
    """
    if len(chain) != len(subs) + 1:
        raise ValueError("the chain is the edge router plus one router per subscriber")
    intervals = sub_intervals(f, len(subs))
    out: list[RouteSpec] = []
    for k, (sub, interval) in enumerate(zip(subs, intervals, strict=True)):
        path = [*chain[:k + 2], sub]
        for hop, nxt in itertools.pairwise(path):
            out.extend(RouteSpec(hop, sub, v, nxt, interval) for v in load_vars)
    path = [*chain, ref_sub]
    out.extend(RouteSpec(hop, ref_sub, ref_var, nxt, REF_INTERVAL_MS, REF_INTERVAL_MS)
               for hop, nxt in itertools.pairwise(path))
    return out


def link_intervals(routes: Iterable[RouteSpec]) -> dict[tuple[str, str], int]:
    """Per (router, outgoing channel): the interval the link carries the load variables at.

    With 1-ms publications and subscriptions at 1 or 2 ms (multiples of each other), the close routing
    table keeps the smallest interval per channel, so a link carries the fastest of its paths.
    Reference routes (publication interval > 1 ms) are left out.
    """
    out: dict[tuple[str, str], int] = {}
    for r in routes:
        if r.pub_interval_ms != 1:
            continue
        key = (r.router, r.channel)
        out[key] = min(out.get(key, r.sub_interval_ms), r.sub_interval_ms)
    return out


def filtering_point(f: int, chain: Sequence[str] = FILTER_CHAIN) -> str:
    """Where the load variables are first filtered to 2 ms in variant filt=f ("-" for f=0: nowhere)."""
    if f == 0:
        return "-"
    n = len(chain) - 1
    if not 1 <= f <= n:
        raise ValueError(f"filt must be in 0..{n}, got {f}")
    return f"{chain[n - f]} -> {chain[n - f + 1]}"


def sub_tp_model(tp_pub: float, f: int, n: int = MAX_FILT) -> float:
    """Events/ms at the load subscribers: the dissertation's ``(TP_pub)(n - f) + TP_pub / 2 * f``
    (its reference-stream term left out: our reference variable goes to its own subscriber)."""
    return tp_pub * (n - f) + tp_pub / 2 * f


def condensation_routes(with_function: bool, load_vars: Sequence[int], ref_var: int, out_var: int, *,
                        function_channel: str = "", out_interval_ms: int = COND_TRIGGER_MS,
                        chain: Sequence[str] = COND_CHAIN, subs: Sequence[str] = COND_SUBS) -> list[RouteSpec]:
    """Routes of the condensation experiment.

    Without the function every load variable goes chain[0] -> ... -> chain[-1] -> each of ``subs`` at 1 ms.
    With it, the load variables go from chain[0] to ``function_channel`` only, and the function's output
    variable takes their place to ``subs`` (at the output interval). The reference variable always goes
    chain[0] -> "ref1" and chain[0] -> ... -> chain[-1] -> "ref2" at 50 ms.
    """
    out: list[RouteSpec] = []
    if with_function:
        if not function_channel:
            raise ValueError("with the function, its channel (from SetupCondensation) is needed")
        out.extend(RouteSpec(chain[0], "cf", v, function_channel, 1) for v in load_vars)
        streams: list[tuple[int, int]] = [(out_var, out_interval_ms)]
    else:
        streams = [(v, 1) for v in load_vars]
    for sub in subs:
        path = [*chain, sub]
        for hop, nxt in itertools.pairwise(path):
            out.extend(RouteSpec(hop, sub, v, nxt, iv, iv) for v, iv in streams)
    out.append(RouteSpec(chain[0], "ref1", ref_var, "ref1", REF_INTERVAL_MS, REF_INTERVAL_MS))
    path = [*chain, "ref2"]
    out.extend(RouteSpec(hop, "ref2", ref_var, nxt, REF_INTERVAL_MS, REF_INTERVAL_MS)
               for hop, nxt in itertools.pairwise(path))
    return out


def condensation_setup(function_id: str, load_vars: Sequence[int], out_var: int, *,
                       trigger_ms: int = COND_TRIGGER_MS) -> cpb.CondensationSetup:
    """An ``average`` over the load variables (8-byte ints), time trigger ``trigger_ms``, float output."""
    return cpb.CondensationSetup(
        function_id=function_id, creator="bench",
        inputs=[cpb.CondensationInput(variable_id=v, variable=f"bench/v{v}", value_type="int", pub_interval_ms=1)
                for v in load_vars],
        spec=cpb.CondensationSpec(calculator="average", parameters={"max_age_ms": float(COND_MAX_AGE_MS)},
                                  trigger=cpb.Trigger(kind=cpb.TRIGGER_KIND_TIME, interval_ms=trigger_ms),
                                  output_type="float"),
        output_variable_id=out_var, output_pub_interval_ms=trigger_ms, output_priority=1,
        output_sender_id=CF_SENDER_ID)


def rotated(items: Sequence[Any], k: int) -> list[Any]:
    """``items`` starting at index k mod len (trial order changes per repetition, so drift spreads)."""
    if not items:
        return []
    k %= len(items)
    return [*items[k:], *items[:k]]


def med(xs: Iterable[float]) -> float:
    ys = [x for x in xs if not math.isnan(x)]
    return median(ys) if ys else float("nan")
