"""The chaos suite's invariant table (no processes)."""

from __future__ import annotations

from gridstat.chaos.checks import Outcome, table


def test_table_marks_each_invariant_and_the_verdict() -> None:
    out = Outcome("x")
    assert not out.ok  # no invariant checked is not a pass
    assert out.check("a", "0 lost", "0 lost of 10", True)
    assert not out.check("bb", "<= 2 s", "never", False)
    out.notes.append("hello")
    text = table(out)
    lines = text.splitlines()
    assert lines[0].startswith("chaos x: FAIL")
    assert lines[3].endswith("ok") and lines[4].endswith("FAIL")
    assert lines[-1] == "  note: hello"
    assert not out.ok
