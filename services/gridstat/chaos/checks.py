"""Invariants of a chaos scenario and the table they are printed as."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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


def text_table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Rows under a header as plain text (rich's table layout, no colour, no wrapping)."""
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table

    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1))
    for h in head:
        t.add_column(h, no_wrap=True)
    for r in rows:
        t.add_row(*r)
    console = Console(file=io.StringIO(), width=10_000, color_system=None, record=True, soft_wrap=True)
    console.print(t)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines() if line.strip())


def table(outcome: Outcome) -> str:
    """One row per invariant, then PASS/FAIL and the scenario's notes."""
    rows = [(c.invariant, c.required, c.observed, "ok" if c.ok else "FAIL") for c in outcome.checks]
    out = [f"chaos {outcome.scenario}: {'PASS' if outcome.ok else 'FAIL'} in {outcome.seconds:.1f} s",
           text_table(("invariant", "required", "observed", ""), rows)]
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
