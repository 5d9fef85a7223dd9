"""The machine's own scheduling gaps, so a latency tail can be read against what the hardware allows.

A process spinning on ``time.perf_counter_ns`` on an otherwise idle core should see consecutive
readings a fraction of a microsecond apart. Every gap longer than ``threshold_us`` is time the core
was taken away: an interrupt, a kernel thread, or (in a VM) the host descheduling the virtual CPU.
No software on that core can answer faster than those gaps, and at utilization rho a gap of g
delays the events behind it for about g / (1 - rho). The router benchmark runs this probe on the
router's core between trials and prints it beside the per-hop tail latency.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

_PROBE = r"""
import json, os, sys, time
cpu, seconds, threshold_ns = int(sys.argv[1]), float(sys.argv[2]), int(float(sys.argv[3]) * 1000)
if cpu >= 0:
    os.sched_setaffinity(0, {cpu})
clock = time.perf_counter_ns
start = last = clock()
end = start + int(seconds * 1e9)
gaps = []
while last < end:
    t = clock()
    if t - last > threshold_ns:
        gaps.append(-(-(t - last) // 1000))  # us, rounded up: every one is above the threshold
    last = t
print(json.dumps({"seconds": (last - start) / 1e9, "gaps_us": gaps}))
"""


@dataclass(frozen=True)
class Gaps:
    """Gaps above ``threshold_us`` seen by a spinning probe over ``seconds``."""

    cpu: int
    seconds: float
    threshold_us: int
    gaps_us: tuple[int, ...]

    @property
    def lost_pct(self) -> float:
        """Share of the probe's time spent in gaps, %."""
        return 100 * sum(self.gaps_us) / (self.seconds * 1e6) if self.seconds else 0.0

    @property
    def per_s(self) -> float:
        return len(self.gaps_us) / self.seconds if self.seconds else 0.0

    @property
    def largest_us(self) -> int:
        return max(self.gaps_us, default=0)

    def over(self, us: int) -> int:
        """Number of gaps longer than ``us``."""
        return sum(1 for g in self.gaps_us if g > us)


def probe_gaps(cpu: int, seconds: float = 2.0, threshold_us: int = 50) -> Gaps:
    """Spin ``seconds`` on ``cpu`` (-1: unpinned) in a child process and collect the gaps."""
    out = subprocess.run([sys.executable, "-c", _PROBE, str(cpu), str(seconds), str(threshold_us)],
                         capture_output=True, text=True, timeout=seconds + 30, check=True)
    doc = json.loads(out.stdout)
    return Gaps(cpu, float(doc["seconds"]), threshold_us, tuple(int(g) for g in doc["gaps_us"]))
