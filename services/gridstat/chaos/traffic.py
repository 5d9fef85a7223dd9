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
from dataclasses import dataclass, field

from gridstat.client import Holder, Subscriber, Subscription, Violation
from gridstat.core import wire
from gridstat.core.model import FLOAT, StatusVariable


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Feed:
    """Publishes one event per ``interval_ms`` (aligned timestamps) to an edge router until stopped."""

    def __init__(self, edge_port: int, sender: int, variable_id: int, interval_ms: int = 10,
                 key: bytes = b"", host: str = "127.0.0.1") -> None:
        self.key, self.host = key, host
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.edge_port, self.sender, self.variable_id, self.interval_ms = edge_port, sender, variable_id, interval_ms
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
                ev = wire.encode_event(wire.Event(ts, self.variable_id, b"\0" * 8))
                data = wire.encode_datagram(self.sender, seq, [ev])
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
    """A raw subscriber socket collecting (variable, timestamp, arrival ms) in a thread."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.events: list[tuple[int, int, int]] = []
        #: With a channel key (``set_key``): datagrams whose tag verifies, and those that do not.
        self.key = b""
        self.verified = self.unverified = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-sink", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def set_key(self, key: bytes) -> None:
        self.key = key

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except (TimeoutError, OSError):
                continue
            arrived = now_ms()
            if self.key and data[3:4] == bytes((wire.KIND_EVENTS,)):
                if not wire.verify_datagram(self.key, data):
                    self.unverified += 1
                    continue
                self.verified += 1
            with contextlib.suppress(wire.DecodeError):
                self.events.extend((e.variable_id, e.timestamp_ms, arrived) for e in wire.decode_datagram(data).events)

    def timestamps(self, variable_id: int) -> set[int]:
        return {ts for v, ts, _ in list(self.events) if v == variable_id}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


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
        with contextlib.suppress(Exception):
            self._call(self.sub.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        self.loop.close()


class ImpairedLink:
    """A UDP relay that degrades an event channel in user space: loss, delay (+ jitter, which
    reorders), duplication. Used where tc netem is unavailable (docs/chaos.md). Seeded: runs repeat.

    Datagrams sent to ``port`` go to ``target`` after the impairment; nothing leaves 127.0.0.1.
    """

    def __init__(self, target_port: int, *, loss: float = 0.0, delay_ms: float = 0.0, jitter_ms: float = 0.0,
                 duplicate: float = 0.0, seed: int = 9) -> None:
        self.target = ("127.0.0.1", target_port)
        self.loss, self.delay_ms, self.jitter_ms, self.duplicate = loss, delay_ms, jitter_ms, duplicate
        self.rng = random.Random(seed)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.005)
        self.out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.counts = {"in": 0, "lost": 0, "duplicated": 0, "out": 0}
        self._pending: list[tuple[float, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-impair", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                data = self.sock.recv(65536)
                self.counts["in"] += 1
                if self.rng.random() < self.loss:
                    self.counts["lost"] += 1
                else:
                    copies = 2 if self.rng.random() < self.duplicate else 1
                    self.counts["duplicated"] += copies - 1
                    for _ in range(copies):
                        wait_ms = max(0.0, self.delay_ms + self.rng.uniform(-1, 1) * self.jitter_ms)
                        due = time.monotonic() + wait_ms / 1e3
                        self._pending.append((due, data))
            now = time.monotonic()
            ready = [p for p in self._pending if p[0] <= now]
            if ready:
                self._pending = [p for p in self._pending if p[0] > now]
                for _, data in sorted(ready, key=lambda p: p[0]):
                    with contextlib.suppress(OSError):
                        self.out.sendto(data, self.target)
                        self.counts["out"] += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()
        self.out.close()
