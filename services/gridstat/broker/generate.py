"""Seeded random clouds and the admission benchmark (docs/benchmarks.md).

A generated cloud is a ring plus random chords. A ring is 2-connected, so by
Menger's theorem every pair of routers has two interior-disjoint paths; chords add
shortcuts and more disjoint paths. Every link is added in both directions (ECs are
per direction). Every ``edge_every``-th router is an edge router, two are border
routers, the rest internal. Everything is drawn from ``random.Random(seed)`` in a
fixed order, so a seed names one cloud.

The benchmark target (docs/benchmarks.md): admission decision p99 <= 5 ms on a 200-router
cloud holding 10,000 subscriptions, and 10,000 installs within 20 s.
``python -m gridstat.broker.generate --bench`` prints the figures.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass

from gridstat.broker.allocation import SubscriptionRequest, commit, plan_subscription
from gridstat.broker.rejections import AdmissionRejected
from gridstat.broker.resources import Reservations
from gridstat.broker.topology import RouterRole, Topology


def random_cloud(
    n_routers: int,
    *,
    seed: int = 1,
    chords: int | None = None,
    edge_every: int = 4,
    bandwidth_bps: float = 1e9,
    latency_ms: tuple[float, float] = (0.5, 5.0),
    router_capacity_eps: float = 50_000,
) -> Topology:
    """A connected, 2-connected random cloud of ``n_routers`` routers named ``r0``, ``r1``, ..."""
    if n_routers < 3:
        raise ValueError("a ring needs at least 3 routers")
    rng = random.Random(seed)
    topology = Topology()
    names = [f"r{i}" for i in range(n_routers)]
    for i, name in enumerate(names):
        if i % edge_every == 0:
            role = RouterRole.EDGE
        elif i in (1, n_routers // 2 + 1):
            role = RouterRole.BORDER
        else:
            role = RouterRole.INTERNAL
        topology.add_router(name, role, router_capacity_eps)

    def link(a: str, b: str) -> None:
        latency = round(rng.uniform(*latency_ms), 3)
        topology.add_link(a, b, bandwidth_bps=bandwidth_bps, latency_ms=latency)

    for i in range(n_routers):
        link(names[i], names[(i + 1) % n_routers])
    wanted = n_routers // 2 if chords is None else chords
    added = attempts = 0
    while added < wanted and attempts < 20 * wanted + 100:
        attempts += 1
        a, b = rng.sample(names, 2)
        if b in topology.out_channels(a):
            continue
        link(a, b)
        added += 1
    return topology


def edge_routers(topology: Topology) -> list[str]:
    return [r.name for r in topology if r.role.hosts_clients]


@dataclass(frozen=True)
class BenchResult:
    """Per-decision (plan + commit) latency percentiles in ms and the total wall time in s."""

    p50_ms: float
    p99_ms: float
    #: p99 of the last tenth of the decisions, taken with 90-100 % of the subscriptions held.
    p99_full_ms: float
    max_ms: float
    total_s: float
    admitted: int
    rejected: int


def bench_admission(n_routers: int = 200, n_subs: int = 10_000, seed: int = 1, *, n_variables: int = 2_000,
                    redundant_share: float = 0.25) -> BenchResult:
    """Install ``n_subs`` random subscriptions one by one, timing each admission decision.

    Variables publish at 10-100 ms from random edge routers; subscriptions ask for
    1-20 x the publication interval, a 60 ms bound, and two disjoint paths for
    ``redundant_share`` of them. The last decisions are taken with ~n_subs held.
    """
    rng = random.Random(seed)
    topology = random_cloud(n_routers, seed=seed)
    reservations = Reservations(topology)
    edges = edge_routers(topology)
    variables = [(rng.choice(edges), rng.choice((10, 20, 25, 50, 100))) for _ in range(n_variables)]
    times: list[float] = []
    admitted = rejected = 0
    start = time.perf_counter()
    for i in range(n_subs):
        variable_id = rng.randrange(n_variables)
        publisher_router, pub = variables[variable_id]
        request = SubscriptionRequest(
            subscription_id=f"s{i}", variable_id=variable_id + 1, publisher_router=publisher_router,
            subscriber_router=(edge := rng.choice(edges)), subscriber=f"{edge}-c{rng.randrange(4)}",
            pub_interval_ms=pub, sub_interval_ms=pub * rng.randint(1, 20), latency_bound_ms=60.0,
            redundancy=2 if rng.random() < redundant_share else 1,
        )
        t0 = time.perf_counter()
        try:
            commit(reservations, plan_subscription(topology, reservations, request))
            admitted += 1
        except AdmissionRejected:
            rejected += 1
        times.append((time.perf_counter() - t0) * 1000)
    total = time.perf_counter() - start
    cuts = statistics.quantiles(times, n=100)
    full = statistics.quantiles(times[-max(2, n_subs // 10):], n=100)
    return BenchResult(cuts[49], cuts[98], full[98], max(times), total, admitted, rejected)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bench", action="store_true", help="run the admission benchmark")
    parser.add_argument("--routers", type=int, default=200)
    parser.add_argument("--subs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.bench:
        result = bench_admission(args.routers, args.subs, args.seed)
        print(f"routers={args.routers} subscriptions={args.subs} admitted={result.admitted} "
              f"rejected={result.rejected} p50={result.p50_ms:.3f} ms p99={result.p99_ms:.3f} ms "
              f"p99(last 10%)={result.p99_full_ms:.3f} ms "
              f"max={result.max_ms:.3f} ms total={result.total_s:.2f} s")
    else:
        topology = random_cloud(args.routers, seed=args.seed)
        print(f"{len(topology)} routers, {len(topology.channels)} channels, {len(edge_routers(topology))} edge")


if __name__ == "__main__":
    main()
