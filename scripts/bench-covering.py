#!/usr/bin/env python3
"""Covering-graph operations at 10,000 advertisements (admission.covering; docs/benchmarks.md).

    scripts/bench-covering.py [--ads 10000] [--queries 1000] [--runs 3]

Two shapes: GridStat's (one advertisement per variable, ``publisher=P, variable=V``, plus one per
publisher covering its variables) and a nested one (price ranges under regions, many levels). Prints
the median microseconds of ``advertise`` (the last 1,000 of the build) and of ``requirement`` for a
variable, a publisher wildcard and a filter that is no node, and the load average. Run it against an
older tree with ``PYTHONPATH=<tree>/services`` to compare.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from gridstat.admission.covering import AdvertisementGraph
from gridstat.admission.filters import Filter


def gridstat_shape(n: int) -> list[tuple[str, str, float]]:
    publishers = max(1, int(n ** 0.5))
    out = []
    for p in range(publishers):
        out.append((f"pub{p}", f"publisher=pmu{p}", 60.0))
        for v in range(n // publishers - 1):
            out.append((f"v{p}.{v}", f"publisher=pmu{p}, variable=v{v}", 30.0))
    return out[:n]


def nested_shape(n: int) -> list[tuple[str, str, float]]:
    rnd = random.Random(7)
    out = []
    for i in range(n):
        region = rnd.randrange(50)
        lo = rnd.randrange(0, 900)
        out.append((f"a{i}", f"region={region}, price>{lo}, price<{lo + rnd.randrange(1, 100)}", 5.0))
    return out


def queries(shape: str, n: int) -> dict[str, list[str]]:
    rnd = random.Random(11)
    if shape == "gridstat":
        publishers = max(1, int(n ** 0.5))
        return {
            "variable (a node)": [f"publisher=pmu{rnd.randrange(publishers)}, variable=v{rnd.randrange(10)}"
                                  for _ in range(200)],
            "all of a variable (no node)": [f"variable=v{rnd.randrange(10)}" for _ in range(20)],
        }
    return {"price range (no node)": [f"region={rnd.randrange(50)}, price>{rnd.randrange(900)}" for _ in range(200)]}


def run(shape: str, n: int) -> dict[str, float]:
    ads = gridstat_shape(n) if shape == "gridstat" else nested_shape(n)
    g = AdvertisementGraph()
    times = []
    for i, (aid, text, rate) in enumerate(ads):
        filt = Filter.parse(text)
        t0 = time.perf_counter()
        g.advertise(aid, filt, rate)
        if i >= len(ads) - 1000:
            times.append(time.perf_counter() - t0)
    out = {"advertise": statistics.median(times) * 1e6}
    for name, texts in queries(shape, n).items():
        qt = []
        for text in texts:
            filt = Filter.parse(text)
            t0 = time.perf_counter()
            g.requirement(filt, interval_ms=20)
            qt.append(time.perf_counter() - t0)
        out[f"requirement: {name}"] = statistics.median(qt) * 1e6
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ads", type=int, default=10_000)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for shape in ("gridstat", "nested"):
        results: dict[str, list[float]] = {}
        for _ in range(args.runs):
            for k, v in run(shape, args.ads).items():
                results.setdefault(k, []).append(v)
        for k, vs in results.items():
            print(f"{shape:9} {k:40} median {statistics.median(vs):10.1f} us  (runs: "
                  f"{', '.join(f'{v:.1f}' for v in vs)})")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
