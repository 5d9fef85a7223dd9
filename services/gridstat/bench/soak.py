"""Soak: one router process under constant load for a long time, memory and drops sampled (issue 9).

``gridstat chaos soak --minutes 30 --rate R`` (R defaults to half of the router saturation measured in
docs/benchmarks.md) runs the ``gridstat bench router`` load generator (wire-format datagrams, 16 events
each) through one router process to the benchmark subscriber in back-to-back windows, and after each
window samples the router's RSS (/proc/PID/status VmRSS), its drop counters by reason, and the events
lost between publisher and subscriber. Verdict: memory is flat (RSS growth from the first sampled
window to the last under ``--rss-slack-mb``, default 8 MiB) and drops do not grow (no window after the
first has more router drops or losses than the first). Every window and the whole run are bounded.

Python heap (tracemalloc) is not sampled: the router runs in its own process and does not expose it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gridstat.bench.router import Bench

#: Half of the 1,178,515 events/s saturation in docs/benchmarks.md (router benchmark headline).
DEFAULT_RATE = 589_000


@dataclass
class Window:
    index: int
    end_s: float
    offered: int
    sent: int
    received: int
    rss_kib: int
    drops: dict[str, int]

    @property
    def lost(self) -> int:
        return max(0, self.sent - self.received)


@dataclass
class SoakResult:
    minutes: float
    rate: int
    windows: list[Window] = field(default_factory=list)
    rss_slack_kib: int = 8 * 1024

    @property
    def rss_growth_kib(self) -> int:
        steady = self.windows[1:] or self.windows
        return steady[-1].rss_kib - steady[0].rss_kib if steady else 0

    @property
    def drops_growing(self) -> bool:
        if len(self.windows) < 2:
            return False
        first = self.windows[0]
        return any(sum(w.drops.values()) > max(0, sum(first.drops.values())) or w.lost > first.lost
                   for w in self.windows[1:])

    @property
    def ok(self) -> bool:
        return bool(self.windows) and self.rss_growth_kib <= self.rss_slack_kib and not self.drops_growing


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def run_soak(*, minutes: float, rate: int = DEFAULT_RATE, window_s: float = 10.0, rss_slack_mb: float = 8.0,
             log: Callable[[str], None] = print) -> SoakResult:
    result = SoakResult(minutes, rate, rss_slack_kib=int(rss_slack_mb * 1024))
    bench = Bench(variant="close", vars_per_chain={1: max(1, rate // 1000)}, log=log)
    try:
        router = bench.routers[0]
        deadline = time.monotonic() + minutes * 60
        start = time.monotonic()
        prev: Counter[str] = Counter(dict(router.stats().drops))
        index = 0
        while time.monotonic() < deadline and index < 100_000:
            index += 1
            t = bench._trial(1, rate, min(window_s, max(1.0, deadline - time.monotonic())), record=False,
                             pack=16, pacing="burst")
            now: Counter[str] = Counter(dict(router.stats().drops))
            delta = {k: v - prev.get(k, 0) for k, v in now.items() if v - prev.get(k, 0)}
            prev = now
            w = Window(index, time.monotonic() - start, rate, t.sent, t.received, rss_kib(router.proc.pid), delta)
            result.windows.append(w)
            log(f"window {index:4d} at {w.end_s:7.1f} s: sent {w.sent:,} received {w.received:,} lost {w.lost:,} "
                f"rss {w.rss_kib / 1024:.1f} MiB drops {delta or 0}")
    finally:
        bench.close()
    return result


def report(r: SoakResult) -> str:
    """Markdown: the verdict and a table of sampled windows (at most 20 rows, evenly spaced)."""
    ws = r.windows
    pick = ws if len(ws) <= 20 else [ws[round(i * (len(ws) - 1) / 19)] for i in range(20)]
    sent = sum(w.sent for w in ws)
    lost = sum(w.lost for w in ws)
    lines = [
        f"Soak of {r.minutes:g} min at {r.rate:,} events/s offered, {len(ws)} windows: "
        f"**{'PASS' if r.ok else 'FAIL'}** -- router RSS growth after the first window "
        f"{r.rss_growth_kib / 1024:+.1f} MiB (limit {r.rss_slack_kib / 1024:.0f} MiB), drops "
        f"{'growing' if r.drops_growing else 'not growing'}; {sent:,} events sent, {lost:,} lost "
        f"({100 * lost / sent if sent else 0:.3f} %).",
        "",
        "| window | at (s) | sent | received | lost | router RSS (MiB) | router drops in window |",
        "|---:|---:|---:|---:|---:|---:|---|",
    ]
    for w in pick:
        drops = ", ".join(f"{k} {v:,}" for k, v in sorted(w.drops.items())) or "0"
        lines.append(f"| {w.index} | {w.end_s:.0f} | {w.sent:,} | {w.received:,} | {w.lost:,} | "
                     f"{w.rss_kib / 1024:.1f} | {drops} |")
    return "\n".join(lines)
