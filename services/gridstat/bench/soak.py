"""Soak: one router process under constant load for a long time, memory and drops sampled (docs/chaos.md).

``gridstat chaos soak --minutes 30 --rate R`` (R defaults to half of the router saturation headline in
docs/benchmarks.md, read at run time; 589,000 events/s when that file or line is missing) runs the
``gridstat bench router`` load generator (wire-format datagrams, 16 events each) through one router
process to the benchmark subscriber in back-to-back windows, and after each window samples the
router's RSS (/proc/PID/status VmRSS), its drop counters by reason, the events lost between publisher
and subscriber and, with ``--tracemalloc``, its Python heap as tracemalloc traces it (the router then
runs with ``--tracemalloc`` and reports traced current/peak bytes in GetStats). Tracing slows every
allocation: on the 2-core machine of docs/benchmarks.md a traced router loses events above about
40,000 events/s (at half the untraced saturation it lost 95 %), so a traced soak defaults to
TRACED_RATE.
Verdict: memory is flat (RSS growth from the first steady window -- the second -- to the last under
``--rss-slack-mb``, default 8 MiB, and traced-heap growth over the same windows under
``--heap-slack-mb``, default 2 MiB), drops do not grow (no window after the first has more router
drops or losses than the first) and at most ``--loss-slack-pct`` (0.1 %) of the events sent are lost
in all (an overloaded router must not pass on steady 95 % loss). Every window and the whole run are
bounded.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gridstat.bench.router import Bench
from gridstat.errors import ValidationError

#: Half of a 1,178,515 events/s saturation: the rate when docs/benchmarks.md has no router headline.
DEFAULT_RATE = 589_000
#: Default offered rate of a soak whose router traces its heap (--tracemalloc): well within what a
#: traced router forwards without loss on the benchmark machine (about 40,000 events/s).
TRACED_RATE = 20_000
#: The router benchmark's headline row in docs/benchmarks.md (``gridstat bench router`` writes it).
HEADLINE = re.compile(r"^\| events/s forwarded by one router at (?:sustained )?saturation[^|]*\| *([\d,]+) *\|", re.M)
BENCHMARKS_MD = Path(__file__).resolve().parents[3] / "docs" / "benchmarks.md"


def default_rate(path: Path = BENCHMARKS_MD) -> tuple[int, str]:
    """(half the measured router saturation, where it came from); DEFAULT_RATE when unknown."""
    try:
        m = HEADLINE.search(path.read_text())
    except OSError:
        m = None
    if m is None:
        return DEFAULT_RATE, "built-in default (no router headline in docs/benchmarks.md)"
    saturation = int(m.group(1).replace(",", ""))
    return max(1000, saturation // 2), f"half of {saturation:,} events/s, the router headline in {path.name}"


@dataclass
class Window:
    index: int
    end_s: float
    offered: int
    sent: int
    received: int
    rss_kib: int
    drops: dict[str, int]
    #: tracemalloc's traced Python heap in the router after the window, bytes (0: not traced).
    heap_bytes: int = 0
    heap_peak_bytes: int = 0
    #: sys.getallocatedblocks() in the router after the window: Python heap blocks, always sampled.
    blocks: int = 0

    @property
    def lost(self) -> int:
        return max(0, self.sent - self.received)


@dataclass
class SoakResult:
    minutes: float
    rate: int
    windows: list[Window] = field(default_factory=list)
    rss_slack_kib: int = 8 * 1024
    #: Whether the router traced its heap (--tracemalloc); then the heap must be flat too.
    traced: bool = False
    heap_slack_kib: int = 2 * 1024
    loss_slack_pct: float = 0.1
    #: Python allocator blocks the router may gain over the steady windows (a leak of one small object
    #: per event at half saturation would add millions).
    blocks_slack: int = 20_000

    @property
    def blocks_growth(self) -> int:
        steady = self.windows[1:] or self.windows
        return steady[-1].blocks - steady[0].blocks if steady else 0

    @property
    def rss_growth_kib(self) -> int:
        steady = self.windows[1:] or self.windows
        return steady[-1].rss_kib - steady[0].rss_kib if steady else 0

    @property
    def heap_growth_kib(self) -> int:
        """Traced-heap growth over the same windows as RSS (the first one warms up)."""
        steady = self.windows[1:] or self.windows
        return (steady[-1].heap_bytes - steady[0].heap_bytes) // 1024 if steady and self.traced else 0

    @property
    def lost_pct(self) -> float:
        sent = sum(w.sent for w in self.windows)
        return 100 * sum(w.lost for w in self.windows) / sent if sent else 0.0

    @property
    def heap_flat(self) -> bool:
        return not self.traced or self.heap_growth_kib <= self.heap_slack_kib

    @property
    def drops_growing(self) -> bool:
        if len(self.windows) < 2:
            return False
        first = self.windows[0]
        return any(sum(w.drops.values()) > max(0, sum(first.drops.values())) or w.lost > first.lost
                   for w in self.windows[1:])

    @property
    def ok(self) -> bool:
        return (bool(self.windows) and self.rss_growth_kib <= self.rss_slack_kib and self.heap_flat
                and self.blocks_growth <= self.blocks_slack
                and not self.drops_growing and self.lost_pct <= self.loss_slack_pct)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def run_soak(*, minutes: float, rate: int = DEFAULT_RATE, window_s: float = 10.0, rss_slack_mb: float = 8.0,
             heap_slack_mb: float = 2.0, loss_slack_pct: float = 0.1, tracemalloc: bool = False,
             log: Callable[[str], None] = print) -> SoakResult:
    result = SoakResult(minutes, rate, rss_slack_kib=int(rss_slack_mb * 1024), traced=tracemalloc,
                        heap_slack_kib=int(heap_slack_mb * 1024), loss_slack_pct=loss_slack_pct)
    bench = Bench(variant="close", vars_per_chain={1: max(1, rate // 1000)}, log=log,
                  router_args=("--tracemalloc",) if tracemalloc else ())
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
            stats = router.stats()
            now: Counter[str] = Counter(dict(stats.drops))
            delta = {k: v - prev.get(k, 0) for k, v in now.items() if v - prev.get(k, 0)}
            prev = now
            if tracemalloc and not stats.tracemalloc:
                raise ValidationError("the router does not report tracemalloc (started without --tracemalloc?)",
                                      field="tracemalloc")
            w = Window(index, time.monotonic() - start, rate, t.sent, t.received, rss_kib(router.proc.pid), delta,
                       heap_bytes=stats.traced_current_bytes, heap_peak_bytes=stats.traced_peak_bytes,
                       blocks=stats.python_allocated_blocks)
            result.windows.append(w)
            heap = f" heap {w.heap_bytes / 2**20:.2f} MiB (peak {w.heap_peak_bytes / 2**20:.2f})" if tracemalloc else ""
            log(f"window {index:4d} at {w.end_s:7.1f} s: sent {w.sent:,} received {w.received:,} lost {w.lost:,} "
                f"rss {w.rss_kib / 1024:.1f} MiB blocks {w.blocks:,}{heap} drops {delta or 0}")
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
        f"{r.rss_growth_kib / 1024:+.1f} MiB (limit {r.rss_slack_kib / 1024:g} MiB), "
        + (f"traced Python heap growth {r.heap_growth_kib / 1024:+.2f} MiB (limit {r.heap_slack_kib / 1024:g} MiB), "
           if r.traced else "Python heap not traced, ")
        + f"Python allocator blocks {r.blocks_growth:+,} (limit {r.blocks_slack:,}), "
        + f"drops {'growing' if r.drops_growing else 'not growing'}; {sent:,} events sent, {lost:,} lost "
        f"({r.lost_pct:.3f} %, limit {r.loss_slack_pct:g} %).",
        "",
        "| window | at (s) | sent | received | lost | router RSS (MiB) | Python blocks | traced heap / peak (MiB) "
        "| router drops in window |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for w in pick:
        drops = ", ".join(f"{k} {v:,}" for k, v in sorted(w.drops.items())) or "0"
        heap = f"{w.heap_bytes / 2**20:.2f} / {w.heap_peak_bytes / 2**20:.2f}" if r.traced else "-"
        lines.append(f"| {w.index} | {w.end_s:.0f} | {w.sent:,} | {w.received:,} | {w.lost:,} | "
                     f"{w.rss_kib / 1024:.1f} | {w.blocks:,} | {heap} | {drops} |")
    return "\n".join(lines)
