"""A bounded record buffer between the roles and the Kafka producer.

The roles put records here from the event loop that also runs their data plane, so ``put``
must never block and never grow without bound (GridStat's rule for the data plane: drop and
count, never wait). When the buffer is full the *oldest* record goes: a telemetry consumer
would rather see what happens now than what happened before an outage. Every record that
goes is counted, and the sequence numbers the exporter stamps on records make the hole
visible downstream too.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Pending:
    """One record waiting for the producer."""

    topic: str
    key: bytes | None
    record: dict[str, Any]
    #: The Kafka record timestamp (ms since the Unix epoch); None: the producer's clock at append.
    #: Measurements carry their event time, so the archive can be searched by time
    #: (``offsets_for_times``, docs/history.md).
    timestamp_ms: int | None = None


class RecordBuffer:
    """A FIFO of at most ``capacity`` records; full means the oldest record is dropped."""

    __slots__ = ("_items", "_ready", "capacity", "overflowed")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"buffer capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._items: deque[Pending] = deque()
        self._ready = asyncio.Event()
        #: Records dropped because the buffer was full, since the buffer was made.
        self.overflowed = 0

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: Pending) -> bool:
        """Append without waiting; False when an older record had to go to make room."""
        items = self._items
        dropped = len(items) >= self.capacity
        if dropped:
            items.popleft()
            self.overflowed += 1
        items.append(item)
        self._ready.set()
        return not dropped

    def take(self, limit: int) -> list[Pending]:
        """Remove and return up to ``limit`` records, oldest first."""
        items = self._items
        n = min(limit, len(items))
        out = [items.popleft() for _ in range(n)]
        if not items:
            self._ready.clear()
        return out

    def push_front(self, batch: list[Pending]) -> int:
        """Put an unsent batch back at the head, as far as the bound allows; returns how many did not fit."""
        room = self.capacity - len(self._items)
        keep = batch[len(batch) - room:] if room < len(batch) else batch
        if room <= 0:
            keep = []
        self._items.extendleft(reversed(keep))
        if self._items:
            self._ready.set()
        return len(batch) - len(keep)

    async def wait(self, timeout_s: float) -> bool:
        """Until a record is buffered or ``timeout_s`` passes; True if records are buffered."""
        if self._items:
            return True
        try:
            await asyncio.wait_for(self._ready.wait(), timeout_s)
        except TimeoutError:
            pass
        return bool(self._items)
