"""``gridstat publish``: a long-running publisher (a PMU) that publishes synthetic periodic values.

    gridstat publish --name pmu1 --edge 127.0.0.1:7801 --variable freq [--variable angle ...] \\
        --type float --interval-ms 20 [--priority 1] [--duration-s S] [--stats-every-s 1] [-o json]

It registers with the leaf broker through its edge router's control API (``Publisher.connect``,
``--edge``: the router's control port; ``first_time`` after a crash, dissertation 3.7, so a restart
drops what the broker held for this publisher and its subscriptions, which are then admitted again),
registers every ``--variable`` with ``--type`` and ``--interval-ms``, prints
``READY name=<name> variables=<publisher/variable:id,...> interval_ms=<ms> edge=<host:port>`` and
then publishes all variables at every aligned instant (one datagram per instant): a float is a
synthetic grid frequency around 60.0 Hz (a slow sine plus a little noise), an int the same in mHz,
a bool alternates. While the edge router or its broker is unavailable it retries with a bounded
backoff, one line on stderr per failure (``--once`` or ``--connect-timeout-s``: exit 4 instead).

If the loop wakes late it publishes the instants it missed, up to one second of them (``late``);
older ones are skipped and counted (``skipped``). A stats line every ``--stats-every-s``, with
``-o json`` one object per line::

    {"kind":"publish","name":"pmu1","final":false,"ts_ms":..,"uptime_s":..,"interval_ms":20,
     "variables":["pmu1/freq"],"sent":N,"instants":M,"last_ts_ms":..,"late":0,"skipped":0,"dropped":0}

``sent`` counts events handed to the socket (all variables), ``instants`` the timestamps published,
``dropped`` events lost to a full socket buffer. SIGTERM or SIGINT (or ``--duration-s``) stop it
with a final line (``"final":true``) and exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import time
from typing import Any

from gridstat.cli.common import EXIT_OK
from gridstat.cli.traffic import (
    TYPES,
    GiveUp,
    Runner,
    add_client_arguments,
    check_common,
    describe,
    parse_published_variables,
    tls_files,
)
from gridstat.client import EdgeSession, PublicationHandle, Publisher
from gridstat.core import clock, serving
from gridstat.core.aio import cancelled
from gridstat.core.model import PRIORITY_LOW, StatusVariable
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError, ValidationError

#: Instants the loop publishes late after a stall; older missed ones are skipped.
CATCH_UP_MS = 1000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variable", action="append", required=True, metavar="NAME",
                   help="a status variable to publish (repeat for more); its full name is NAME_OF_PUBLISHER/NAME")
    p.add_argument("--type", choices=list(TYPES), default="float", dest="value_type",
                   help="value type of every variable (default float)")
    p.add_argument("--interval-ms", type=int, default=20, metavar="MS", help="publication interval (default 20)")
    p.add_argument("--priority", type=int, default=1, metavar="P", help="0 alert .. 6 low (default 1)")
    add_client_arguments(p)


def value_function(kind: str, seed: int = 0) -> Any:
    """The synthetic value of an instant: frequency around 60 Hz (float), in mHz (int), or a toggle."""
    rng = random.Random(seed)

    def frequency(ts: int) -> float:
        return round(60.0 + 0.02 * math.sin(2 * math.pi * ts / 10_000) + rng.gauss(0.0, 0.002), 5)

    if kind == "int":
        return lambda ts: round(frequency(ts) * 1000)
    if kind == "bool":
        return lambda ts: (ts // 1000) % 2 == 0
    return frequency


class PublishLoop:
    """Publishes every handle at each aligned instant; counts late and skipped instants."""

    def __init__(self, publisher: Publisher, handles: list[PublicationHandle], interval_ms: int,
                 values: Any) -> None:
        self.publisher = publisher
        self.handles = handles
        self.interval_ms = interval_ms
        self.values = values
        self.instants = 0
        self.late = 0
        self.skipped = 0
        self.last_ts: int | None = None

    def due(self, now_ms: int) -> list[int]:
        """The instants to publish now (pure): every aligned instant after the last one up to
        ``now_ms``, at most :data:`CATCH_UP_MS` back; older missed instants are counted as skipped."""
        interval = self.interval_ms
        newest = now_ms - now_ms % interval
        last = self.last_ts
        if last is None:
            return [newest]
        if newest <= last:
            return []
        first = last + interval
        oldest = newest - (CATCH_UP_MS // interval) * interval
        if first < oldest:
            self.skipped += (oldest - first) // interval
            first = oldest
        return list(range(first, newest + 1, interval))

    def publish_due(self, now_ms: int) -> int:
        instants = self.due(now_ms)
        values = self.values
        for ts in instants:
            self.publisher.publish_many([(h, values(ts)) for h in self.handles], ts)
            self.last_ts = ts
        if len(instants) > 1:
            self.late += len(instants) - 1
        self.instants += len(instants)
        return len(instants)

    async def run(self, stop: asyncio.Event) -> None:
        interval = self.interval_ms
        while not stop.is_set():
            now = clock.now_ms()
            nxt = clock.next_aligned_ms(now if self.last_ts is None else max(now, self.last_ts), interval)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), (nxt - now) / 1000)
            if stop.is_set():
                break
            self.publish_due(max(clock.now_ms(), nxt))


def stats(args: argparse.Namespace, runner: Runner, pub: Publisher, loop: PublishLoop, variables: list[str],
          *, final: bool) -> tuple[dict[str, Any], str]:
    data = {"kind": "publish", "name": args.name, "final": final, "ts_ms": clock.now_ms(),
            "uptime_s": round(time.monotonic() - runner.started, 3), "interval_ms": args.interval_ms,
            "variables": variables, "sent": pub.stats.published, "instants": loop.instants,
            "last_ts_ms": loop.last_ts, "late": loop.late, "skipped": loop.skipped, "dropped": pub.stats.dropped}
    text = (f"{'FINAL ' if final else ''}publish {args.name}: sent={data['sent']} instants={loop.instants} "
            f"last_ts_ms={loop.last_ts} late={loop.late} skipped={loop.skipped} dropped={pub.stats.dropped}")
    return data, text


async def _connect(args: argparse.Namespace, names: list[str], tls: TlsFiles | None
                   ) -> tuple[EdgeSession, Publisher, list[PublicationHandle]]:
    session = EdgeSession(args.edge, tls=tls, timeout_s=args.timeout, attempts=1)
    pub: Publisher | None = None
    try:
        pub = await Publisher.connect(args.name, args.edge, session=session, tls=tls,
                                      also_edges=[e.strip() for e in args.also_edge])
        handles = [await pub.register(n, TYPES[args.value_type], args.interval_ms, priority=args.priority)
                   for n in names]
    except BaseException:
        if pub is not None:
            await pub.stop()
        await session.close()
        raise
    return session, pub, handles


#: How often a running publisher asks its edge router where events go (a restarted edge router pod
#: is back at a new address, docs/kubernetes.md#upgrades). An unchanged answer is a read at the broker.
FOLLOW_EDGE_S = 1.0


async def follow_edge(runner: Runner, pub: Publisher, edge: str) -> None:
    """Re-ask the edge router for its event address every FOLLOW_EDGE_S; say when it moved."""
    while not await runner.sleep(FOLLOW_EDGE_S):
        before = [pub.edge, *(leg.address for leg in pub.legs)]
        try:
            if await pub.refresh_edge(timeout_s=2 * FOLLOW_EDGE_S):
                now = [pub.edge, *(leg.address for leg in pub.legs)]
                for control, (old, new) in zip([edge, *(leg.session.edge_control for leg in pub.legs)],
                                               zip(before, now, strict=True), strict=True):
                    if old != new:
                        runner.warn(f"edge router {control} moved: events now go to {new[0]}:{new[1]}")
        except GridStatError as exc:  # unavailable for now (restarting): keep the last address, ask again
            runner.warn(f"asking edge router {edge} for its event address failed: {describe(exc)}")
        for control, why in pub.refresh_errors.items():
            runner.warn(f"asking edge router {control} for its event address failed: {why}")


async def _run(args: argparse.Namespace, names: list[str], tls: TlsFiles | None) -> int:
    runner = Runner("publish", args)
    runner.install()
    try:
        connected = await runner.connect(lambda: _connect(args, names, tls),
                                         what=f"registering with edge router {args.edge}")
    except GiveUp as exc:
        return exc.exit_code
    if connected is None:
        return EXIT_OK  # stopped before it was registered
    session, pub, handles = connected
    variables: list[StatusVariable] = [h.variable for h in handles]
    loop = PublishLoop(pub, handles, args.interval_ms, value_function(args.value_type))
    full = [v.full_name for v in variables]
    ids = ",".join(f"{v.full_name}:{v.variable_id}" for v in variables)
    also = f" also_edges={','.join(args.also_edge)}" if args.also_edge else ""
    runner.line(f"READY name={args.name} variables={ids} interval_ms={args.interval_ms} edge={args.edge}{also}")
    task = asyncio.ensure_future(loop.run(runner.stop))
    follow = asyncio.ensure_future(follow_edge(runner, pub, args.edge))
    try:
        await runner.report_until_stopped(lambda: stats(args, runner, pub, loop, full, final=False))
        await task
    finally:
        await cancelled(follow)
        if not task.done():
            await cancelled(task)
        runner.emit(*stats(args, runner, pub, loop, full, final=True))
        await pub.stop()
        await session.close()
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    check_common(args, "publisher")
    names = parse_published_variables(args.variable)
    if args.interval_ms <= 0:
        raise ValidationError(f"--interval-ms must be positive, not {args.interval_ms}", field="interval_ms")
    if not 0 <= args.priority <= PRIORITY_LOW:
        raise ValidationError(f"--priority must be 0..{PRIORITY_LOW}, not {args.priority}", field="priority")
    tls = tls_files(args)
    return serving.run(args, lambda: _run(args, names, tls))
