"""Traffic for the chaos suite: a publisher feed, raw and SDK subscribers, an impaired channel.

All run in daemon threads with bounded waits; ``stop``/``close`` join them.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from gridstat.client import Holder, Subscriber, Subscription, Violation
from gridstat.core import udpsink, wire
from gridstat.core.model import FLOAT, StatusVariable


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Feed:
    """Publishes an event of each variable (``variable_ids``: one or several, one datagram for all) per
    ``interval_ms`` (aligned timestamps, all carrying ``value``) to an edge router until stopped."""

    def __init__(self, edge_port: int, sender: int, variable_ids: int | Sequence[int], interval_ms: int = 10,
                 key: bytes = b"", host: str = "127.0.0.1", value: bytes = b"\0" * 8) -> None:
        self.key, self.host, self.value = key, host, value
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.edge_port, self.sender, self.interval_ms = edge_port, sender, interval_ms
        self.variable_ids = (variable_ids,) if isinstance(variable_ids, int) else tuple(variable_ids)
        self.sent: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-feed", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        seq = 0
        while not self._stop.is_set():
            now = now_ms()
            ts = now - now % self.interval_ms
            if not self.sent or ts > self.sent[-1]:
                seq += 1
                evs = [wire.encode_event(wire.Event(ts, v, self.value)) for v in self.variable_ids]
                data = wire.encode_datagram(self.sender, seq, evs)
                if self.key:
                    data = wire.sign_datagram(self.key, data)
                with contextlib.suppress(OSError):
                    self.sock.sendto(data, (self.host, self.edge_port))
                self.sent.append(ts)
            time.sleep(0.002)

    def stop(self) -> list[int]:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()
        return self.sent


class Sink:
    """A raw subscriber socket (core.udpsink): every event and mode notice it receives, from its thread."""

    def __init__(self) -> None:
        self.received: list[wire.Event] = []
        self.notices: list[tuple[int, int, int, int]] = []
        #: With a channel key (``set_key``): datagrams whose tag verifies, and those that do not.
        self.key = b""
        self.verified = self.unverified = 0
        self.udp = udpsink.UdpSink(self._on, name="chaos-sink")

    @property
    def port(self) -> int:
        return self.udp.port

    def set_key(self, key: bytes) -> None:
        self.key = key

    def _on(self, data: bytes, _arrived_ms: int) -> None:
        if self.key and data[3:4] == bytes((wire.KIND_EVENTS,)):
            if not wire.verify_datagram(self.key, data):
                self.unverified += 1
                return
            self.verified += 1
        try:
            d = wire.decode_datagram(data)
        except wire.DecodeError:
            return
        if d.mode_notice is not None:
            self.notices.append(d.mode_notice)
        self.received.extend(d.events)

    @property
    def events(self) -> list[tuple[int, int]]:
        """(variable, timestamp) of every event received, in arrival order (repeats kept)."""
        return [(e.variable_id, e.timestamp_ms) for e in list(self.received)]

    def timestamps(self, variable_id: int) -> set[int]:
        return {e.timestamp_ms for e in list(self.received) if e.variable_id == variable_id}

    def count(self, variable_id: int, since_ms: int = 0) -> int:
        """Events of ``variable_id`` received with a timestamp of ``since_ms`` or later."""
        return sum(1 for e in list(self.received) if e.variable_id == variable_id and e.timestamp_ms >= since_ms)

    def floats(self, variable_id: int) -> list[tuple[int, float]]:
        """(timestamp, value) of every event of a FLOAT variable received, in arrival order."""
        return [(e.timestamp_ms, cast(float, wire.decode_value(FLOAT, e.value)))
                for e in list(self.received) if e.variable_id == variable_id]

    def close(self) -> None:
        self.udp.close()


@dataclass
class SdkSubscriber:
    """The client SDK's Subscriber on its own event loop thread; records events and QoS violations
    with their monotonic arrival time."""

    name: str
    subscriber_id: int
    events: list[int] = field(default_factory=list)
    violations: list[tuple[float, Violation]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="chaos-sdk", daemon=True)
        self._thread.start()
        self.sub = Subscriber(self.name, self.subscriber_id)
        self._call(self.sub.start())
        self.subscription: Subscription | None = None

    def _call(self, coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=10)  # type: ignore[arg-type]

    @property
    def port(self) -> int:
        return int(self.sub.address[1])

    def count_after(self, ms: int) -> int:
        """Events received with a timestamp after ``ms``."""
        return sum(1 for ts in list(self.events) if ts > ms)

    def set_key(self, key: bytes) -> None:
        self.sub.key = wire.check_key(key)

    def subscribe(self, publisher: str, name: str, variable_id: int, *, pub_interval_ms: int, interval_ms: int,
                  latency_ms: int) -> None:
        var = StatusVariable(publisher, name, FLOAT, pub_interval_ms, variable_id=variable_id)

        def on_event(_s: Subscription, h: Holder) -> None:
            self.events.append(h.timestamp_ms)

        def on_violation(_s: Subscription, v: Violation) -> None:
            self.violations.append((time.monotonic(), v))

        async def go() -> None:
            self.subscription = self.sub.subscribe(var, interval_ms=interval_ms, latency_ms=latency_ms,
                                                   on_event=on_event, on_violation=on_violation)

        self._call(go())

    def close(self) -> None:
        if self.loop.is_closed():
            return
        with contextlib.suppress(Exception):
            self._call(self.sub.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        self.loop.close()


class ImpairedLink(udpsink.UdpSink):
    """A UDP relay that degrades an event channel in user space: loss, delay (+ jitter, which
    reorders), duplication. Used where tc netem is unavailable (docs/chaos.md). Seeded: runs repeat.

    Datagrams sent to ``port`` go to ``target`` after the impairment; nothing leaves 127.0.0.1.
    """

    def __init__(self, target_port: int, *, loss: float = 0.0, delay_ms: float = 0.0, jitter_ms: float = 0.0,
                 duplicate: float = 0.0, seed: int = 9) -> None:
        self.target = ("127.0.0.1", target_port)
        self.loss, self.delay_ms, self.jitter_ms, self.duplicate = loss, delay_ms, jitter_ms, duplicate
        self.rng = random.Random(seed)
        self.out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.counts = {"in": 0, "lost": 0, "duplicated": 0, "out": 0}
        self._pending: list[tuple[float, bytes]] = []
        super().__init__(self._impair, name="chaos-impair", poll_s=0.005)

    def _impair(self, data: bytes, _arrived_ms: int) -> None:
        self.counts["in"] += 1
        if self.rng.random() < self.loss:
            self.counts["lost"] += 1
            return
        copies = 2 if self.rng.random() < self.duplicate else 1
        self.counts["duplicated"] += copies - 1
        for _ in range(copies):
            wait_ms = max(0.0, self.delay_ms + self.rng.uniform(-1, 1) * self.jitter_ms)
            self._pending.append((time.monotonic() + wait_ms / 1e3, data))

    def tick(self) -> None:
        """Send on the datagrams whose delay is over, in the order they fall due."""
        now = time.monotonic()
        ready = [p for p in self._pending if p[0] <= now]
        if ready:
            self._pending = [p for p in self._pending if p[0] > now]
            for _, data in sorted(ready, key=lambda p: p[0]):
                with contextlib.suppress(OSError):
                    self.out.sendto(data, self.target)
                    self.counts["out"] += 1

    def close(self) -> None:
        super().close()
        self.out.close()
