"""Invariants of a chaos scenario and the table they are printed as."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Check:
    """One invariant: what it is, what was required, what was observed, and whether it held."""

    invariant: str
    required: str
    observed: str
    ok: bool


@dataclass
class Outcome:
    scenario: str
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def check(self, invariant: str, required: str, observed: str, ok: bool) -> bool:
        self.checks.append(Check(invariant, required, observed, bool(ok)))
        return bool(ok)


def table(outcome: Outcome) -> str:
    """A fixed-width table: one row per invariant, then PASS/FAIL and the scenario's notes."""
    head = ("invariant", "required", "observed", "")
    rows = [(c.invariant, c.required, c.observed, "ok" if c.ok else "FAIL") for c in outcome.checks]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    line = "  ".join("-" * w for w in widths)
    out = [f"chaos {outcome.scenario}: {'PASS' if outcome.ok else 'FAIL'} in {outcome.seconds:.1f} s",
           "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip(), line]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    out += [f"  note: {n}" for n in outcome.notes]
    return "\n".join(out)


def first_violation(violations: Sequence[tuple[Any, Any]], before: int,
                    latency_ms: int) -> tuple[list[Any], Any | None, int | None]:
    """The late/gap violations an SDK subscriber recorded since index ``before``, the first of them, and
    how long after its deadline (expected timestamp + latency bound) that one was reported, ms."""
    late = [v for _, v in violations[before:] if v.kind in ("late", "gap")]
    first = late[0] if late else None
    lag = (first.detected_ms - (first.expected_ts_ms + latency_ms)) if first is not None else None
    return late, first, lag


def check_reported(out: Outcome, late: Sequence[Any], lag: int | None, interval_ms: int, what: str) -> None:
    """The invariant "a broken guarantee is reported to the subscriber within one interval"."""
    out.check(what, ">= 1 late/gap violation", f"{len(late)} violations", bool(late))
    out.check("reported within one interval of the missed deadline", f"<= {interval_ms} ms",
              f"{lag} ms" if lag is not None else "never", lag is not None and lag <= interval_ms)
