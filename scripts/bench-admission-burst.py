"""10,000 Subscribe calls against a real leaf broker, with and without its admission bound (broker.gate).

Figures for docs/benchmarks.md, "Admission burst": outcomes by status code, median latency per outcome,
retry hints, a legitimate client's Subscribe during the burst, machine load (/proc/loadavg).
Usage: .venv/bin/python scripts/bench-admission-burst.py [--calls 10000]
"""

from __future__ import annotations

import argparse

from gridstat.bench.burst import burst_in_cloud, report
from gridstat.chaos import diamond

NO_BOUND = ("--max-admissions", "1000000", "--max-admissions-per-caller", "1000000")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=10_000)
    p.add_argument("--deadline-s", type=float, default=10.0)
    args = p.parse_args()
    n = args.calls
    runs = [("no bound, all at once", NO_BOUND, n), ("no bound, 1,000 in flight", NO_BOUND, 1_000),
            ("default bound (128, 32 per caller), 1,000 in flight", (), 1_000),
            ("default bound, all at once", (), n)]
    rows = []
    for label, extra, parallelism in runs:
        rows.append((label, burst_in_cloud(diamond.cloud, calls=n, parallelism=parallelism, broker_extra=extra,
                                           deadline_s=args.deadline_s)))
        print(f"{label}: {dict(rows[-1][1].outcomes)}", flush=True)
    print(report(rows))


if __name__ == "__main__":
    main()
