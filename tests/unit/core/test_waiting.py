"""core.waiting: a condition polled until it holds or its deadline passes, from a thread or on the loop."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from gridstat.core.waiting import NotReached, eventually, until, wait_for


def counter(after: int) -> tuple[list[int], Callable[[], bool]]:
    """A predicate that holds from its ``after``-th poll on, and the list counting its polls."""
    polls: list[int] = []

    def predicate() -> bool:
        polls.append(1)
        return len(polls) >= after

    return polls, predicate


def test_wait_for_polls_until_the_condition_holds() -> None:
    polls, predicate = counter(3)
    assert wait_for(predicate, step_s=0.001)
    assert len(polls) == 3


def test_wait_for_gives_up_at_its_deadline_and_names_what_it_awaited_when_asked() -> None:
    started = time.monotonic()
    assert not wait_for(lambda: False, timeout_s=0.05, step_s=0.01)
    assert 0.05 <= time.monotonic() - started < 1.0
    with pytest.raises(NotReached, match=r"the router's routes: not reached within 0\.05 s"):
        wait_for(lambda: False, timeout_s=0.05, step_s=0.01, what="the router's routes")


def test_a_tolerated_exception_counts_as_not_yet_and_any_other_is_raised() -> None:
    polls: list[int] = []

    def flaky() -> bool:
        polls.append(1)
        if len(polls) < 3:
            raise ConnectionError("not up yet")
        return True

    assert wait_for(flaky, step_s=0.001, tolerate=(ConnectionError,))
    with pytest.raises(ZeroDivisionError):
        wait_for(lambda: 1 / 0, timeout_s=0.05)


async def test_eventually_polls_on_the_loop_with_the_same_rules() -> None:
    polls, predicate = counter(3)
    assert await eventually(predicate, step_s=0.001)
    assert len(polls) == 3
    assert not await eventually(lambda: False, timeout_s=0.02)
    with pytest.raises(NotReached, match=r"20 events: not reached within 0\.02 s"):
        await eventually(lambda: False, timeout_s=0.02, what="20 events")


def test_until_returns_the_value_and_names_the_last_thing_seen() -> None:
    replies = iter([None, ConnectionError("refused"), {"ready": True}])

    def probe() -> dict[str, bool] | None:
        reply = next(replies)
        if isinstance(reply, Exception):
            raise reply
        return reply

    assert until(probe, what="the pod", timeout_s=2, step_s=0.001, tolerate=(ConnectionError,)) == {"ready": True}
    def refused() -> None:
        raise ConnectionError("refused")

    with pytest.raises(NotReached, match=r"the pod: not reached within 0\.02 s \(last: refused\)"):
        until(refused, what="the pod", timeout_s=0.02, step_s=0.005, tolerate=(ConnectionError,))
