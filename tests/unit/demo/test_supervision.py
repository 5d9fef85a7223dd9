"""The supervisor's back-off rule (docs/topology.md, "Restarts")."""

from __future__ import annotations

from gridstat.demo.supervision import FIRST_BACKOFF_S, MAX_BACKOFF_S, RESET_AFTER_S, next_backoff_s


def test_backoff_doubles_while_a_child_keeps_crashing_and_is_capped() -> None:
    waits = []
    wait = None
    for _ in range(8):
        wait = next_backoff_s(wait, up_for_s=1.0)
        waits.append(wait)
    assert waits[:5] == [FIRST_BACKOFF_S * 2**k for k in range(5)]
    assert max(waits) == MAX_BACKOFF_S and waits[-1] == MAX_BACKOFF_S


def test_a_child_that_stayed_up_long_enough_starts_over() -> None:
    assert next_backoff_s(MAX_BACKOFF_S, up_for_s=RESET_AFTER_S) == FIRST_BACKOFF_S
    assert next_backoff_s(MAX_BACKOFF_S, up_for_s=RESET_AFTER_S - 1) == MAX_BACKOFF_S
