"""ns/event of the router's hot path (Forwarder.process) with and without a channel key (docs/security.md),
and for a variable at a device frame rate (docs/frame-rates.md).

10-event datagrams, 2 routes (close variant), 20,000 datagrams per run, best of 7 runs.
Usage: .venv/bin/python scripts/bench-auth-hotpath.py [--key] [--frames]
(--frames: the variable at 100 frames/s, its routes every frame and every 2nd frame, the same events)
"""

from __future__ import annotations

import sys
import time

from gridstat.core import wire
from gridstat.router.channels import ChannelKind, EventChannel
from gridstat.router.forwarding import Forwarder
from gridstat.router.tables import Route, RoutingTable, Variant


class Target:
    __slots__ = ("events", "filtered")

    def __init__(self) -> None:
        self.events: list[bytes] = []
        self.filtered = 0

    def push(self, ev: bytes) -> None:
        self.events.append(ev)


def main() -> None:
    key = bytes(range(32)) if "--key" in sys.argv else None
    now, n = 1_700_000_000_000, 20_000
    events = [wire.encode_event(wire.Event(now - 10 * i, 1, b"\0" * 8)) for i in range(10)]
    datagrams = [wire.encode_datagram(7, i + 1, events) for i in range(n)]
    if key:
        datagrams = [wire.sign_datagram(key, d) for d in datagrams]
    best = float("inf")
    for _ in range(7):
        targets: dict[tuple[str, int], Target] = {}
        table = RoutingTable(Variant.CLOSE, lambda c, p, t=targets: t.setdefault((c, p), Target()))  # type: ignore[misc]
        frames = 100 if "--frames" in sys.argv else 0
        table.install(Route("1", 1, 0, "a", 10, 1), pub_interval_ms=10, frames_per_s=frames)
        table.install(Route("2", 1, 0, "b", 20, 1), pub_interval_ms=10, frames_per_s=frames)
        fw = Forwarder(table)
        ch = EventChannel(name="pub", peer_id=7, kind=ChannelKind.PUBLISHER, address=None, sender_id=1)
        if key:
            ch.set_key(key)
        fw.by_sender[7] = ch
        t0 = time.perf_counter_ns()
        for d in datagrams:
            fw.process(d, now)
        best = min(best, (time.perf_counter_ns() - t0) / (n * 10))
        assert fw.events_in == n * 10 and not fw.drops, dict(fw.drops)
    what = ("keyed" if key else "no key") + (", 100 frames/s" if "--frames" in sys.argv else "")
    print(f"{what}: {best:.1f} ns/event (best of 7, {n} datagrams x 10 events)")


if __name__ == "__main__":
    main()
