"""``gridstat bench tables``: the routing-table forwarding path in-process, no sockets.

For each variant (close, sparse), C outgoing channels (1, 10, 100) and K
distinct subscription intervals (1..10), a ``RoutingTable`` is built over real
``EventChannel`` queues and ``Forwarder.process`` is fed pre-built datagrams of
8 events (8 variables, one timestamp per datagram, 1000 consecutive
timestamps so every filter phase occurs).

Intervals: the publication interval is 1 ms and the K distinct subscription
intervals are the first K of 2, 3, 5, 7, 11, 13, 17, 19, 23, 29 ms (pairwise
non-multiples, so none is folded away by the smallest-non-multiple rule; K = 1
means every subscription is at 2 ms and half the events pass). Interval j goes to channel
j mod C; a channel with no interval left gets interval ``I[c mod K]``; so with
C < K a channel holds several intervals (the close variant walks them in
order), with C >= K each interval is held by about C/K channels (the sparse
variant ORs their masks).

Columns: ``process`` is ns per input event of ``Forwarder.process`` alone (the
queues are cleared between chunks of 16 datagrams, outside the timed region);
``+flush`` also packs and "sends" each chunk with ``EventChannel.flush`` to a
no-op ``sendto`` (the cost of packing, as after one 16-datagram drain). Each
figure is the median of ``reps`` repetitions of 1000 datagrams (8000 events).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from statistics import median

from gridstat.core import wire
from gridstat.router.channels import ChannelKind, EventChannel
from gridstat.router.forwarding import Forwarder
from gridstat.router.tables import Route, RoutingTable, Target, Variant

INTERVALS = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29)
EVENTS_PER_DATAGRAM = 8
DATAGRAMS = 1000
CHUNK = 16
PUB_ID = 7
T0 = 1_700_000_000_000  # ms; a fixed, GPS-like timestamp base


@dataclass
class TableResult:
    variant: str
    channels: int
    intervals: int
    ns_process: float
    ns_flush: float
    pushes_per_event: float
    forwarded_fraction: float


def build(variant: Variant, channels: int, k: int) -> tuple[Forwarder, list[EventChannel]]:
    chans = [EventChannel(name=f"c{i}", peer_id=100 + i, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", 9),
                          sender_id=1) for i in range(channels)]
    by_name = {c.name: c for c in chans}

    def resolve(name: str, priority: int) -> Target:
        return by_name[name].queue(priority)

    table = RoutingTable(variant, resolve)
    held: list[list[int]] = [[] for _ in range(channels)]
    for j in range(k):
        held[j % channels].append(INTERVALS[j])
    for c in range(channels):
        if not held[c]:
            held[c].append(INTERVALS[c % k])
    for vid in range(1, EVENTS_PER_DATAGRAM + 1):
        for c, ivs in enumerate(held):
            for s in ivs:
                table.install(Route(f"c{c}-s{s}", vid, 0, f"c{c}", s, 1), pub_interval_ms=1)
    fw = Forwarder(table, future_tolerance_ms=10**12)
    inbound = EventChannel(name="pub", peer_id=PUB_ID, kind=ChannelKind.PUBLISHER, address=None, sender_id=1)
    fw.by_sender[PUB_ID] = inbound
    return fw, chans


def datagrams() -> list[bytes]:
    out = []
    for t in range(DATAGRAMS):
        evs = [wire.encode_event(wire.Event(T0 + t, vid, (t * 8 + vid).to_bytes(8, "big")))
               for vid in range(1, EVENTS_PER_DATAGRAM + 1)]
        out.append(wire.encode_datagram(PUB_ID, t, evs))
    return out


def _noop(data: bytes, address: tuple[str, int]) -> None:
    return None


def _run_once(fw: Forwarder, chans: list[EventChannel], dgs: list[bytes], flush: bool) -> int:
    process = fw.process
    now = T0
    total = 0
    clock = time.perf_counter_ns
    for i in range(0, len(dgs), CHUNK):
        chunk = dgs[i:i + CHUNK]
        t0 = clock()
        for d in chunk:
            process(d, now)
        if flush:
            for c in chans:
                c.flush(_noop)
        total += clock() - t0
        if not flush:
            for c in chans:
                c.queues[1].events.clear()
    return total


def bench_one(variant: Variant, channels: int, k: int, reps: int, dgs: list[bytes]) -> TableResult:
    fw, chans = build(variant, channels, k)
    n_events = len(dgs) * EVENTS_PER_DATAGRAM
    _run_once(fw, chans, dgs, False)  # warm-up
    fw0, pushed0 = fw.events_forwarded, sum(c.stats.events_sent for c in chans)
    _run_once(fw, chans, dgs, True)
    forwarded = fw.events_forwarded - fw0
    pushes = sum(c.stats.events_sent for c in chans) - pushed0
    t_proc = [_run_once(fw, chans, dgs, False) / n_events for _ in range(reps)]
    t_flush = [_run_once(fw, chans, dgs, True) / n_events for _ in range(reps)]
    return TableResult(variant.value, channels, k, median(t_proc), median(t_flush), pushes / n_events,
                       forwarded / n_events)


def run_tables(*, quick: bool, reps: int, log: Callable[[str], None]) -> list[TableResult]:
    dgs = datagrams()
    chans = (1, 10, 100)
    ks = (1, 2, 5, 10) if quick else tuple(range(1, 11))
    out = []
    for variant in (Variant.CLOSE, Variant.SPARSE):
        for c in chans:
            for k in ks:
                r = bench_one(variant, c, k, reps, dgs)
                out.append(r)
                log(f"  {variant.value:<6} C={c:<3} K={k:<2}: process {r.ns_process:7.0f} ns/ev, +flush "
                    f"{r.ns_flush:7.0f} ns/ev, {r.pushes_per_event:5.2f} copies/ev")
    return out
