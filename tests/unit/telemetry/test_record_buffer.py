"""The exporter's bounded buffer: never blocks, drops the oldest when full, counts every drop."""

from __future__ import annotations

import pytest

from gridstat.telemetry.buffering import Pending, RecordBuffer


def item(n: int) -> Pending:
    return Pending("t", None, {"n": n})


def test_full_buffer_drops_the_oldest_and_counts_it() -> None:
    buf = RecordBuffer(3)
    assert [buf.put(item(n)) for n in range(5)] == [True, True, True, False, False]
    assert buf.overflowed == 2
    assert [p.record["n"] for p in buf.take(10)] == [2, 3, 4]
    assert len(buf) == 0


def test_take_returns_at_most_the_limit_in_order() -> None:
    buf = RecordBuffer(10)
    for n in range(6):
        buf.put(item(n))
    assert [p.record["n"] for p in buf.take(4)] == [0, 1, 2, 3]
    assert [p.record["n"] for p in buf.take(4)] == [4, 5]


def test_push_front_keeps_order_and_reports_what_did_not_fit() -> None:
    buf = RecordBuffer(4)
    for n in range(4):
        buf.put(item(n))
    batch = buf.take(3)  # 0, 1, 2 in flight; 3 still buffered
    buf.put(item(4))
    # room for two of the three: the newest of the batch are kept, ahead of what is buffered
    assert buf.push_front(batch) == 1
    assert [p.record["n"] for p in buf.take(10)] == [1, 2, 3, 4]


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError):
        RecordBuffer(0)


async def test_wait_wakes_on_put_and_times_out_when_empty() -> None:
    buf = RecordBuffer(2)
    assert await buf.wait(0.01) is False
    buf.put(item(1))
    assert await buf.wait(1.0) is True
