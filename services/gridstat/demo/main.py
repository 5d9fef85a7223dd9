"""``gridstat up`` (alias ``gridstat demo``): run an example utility on 127.0.0.1.

With no argument it runs the built-in topology (``default-topology.yaml`` next
to this file, documented in docs/topology.md): two clouds of five routers, three
simulated PMUs, six subscriptions, one of them over two node-disjoint paths.
Given ``TOPOLOGY.yaml`` it runs that instead.

What runs where:

* every status router is a child process (``gridstat router ... --port 0``);
  channels and routes are installed over its gRPC control API, as planned by
  ``gridstat.demo.planner`` (a static stand-in for the QoS brokers);
* publishers and subscribers (client SDK) run inside this process on asyncio.

A live rich view refreshes twice a second on a terminal; otherwise a plain
``key=value`` summary is printed every ``--summary-every`` seconds. A final
summary (``FINAL ...``) is always printed. SIGINT, SIGTERM and SIGHUP stop everything:
routers get SIGTERM, are reaped (SIGKILL after 5 s), and the exit code is 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from rich.live import Live

from gridstat.client import Subscriber
from gridstat.core import clock
from gridstat.core.aio import install_fast_loop
from gridstat.demo.endpoints import PublisherEndpoint, SubscriptionEndpoint
from gridstat.demo.planner import Plan, plan
from gridstat.demo.routers import RouterProcess, StartupError
from gridstat.demo.topology import Topology, load_topology
from gridstat.demo.view import RouterRow, Snapshot, SubRow, plain_lines, rich_view
from gridstat.errors import ValidationError

T = TypeVar("T")

#: Each stops the runner cleanly (SIGHUP: the terminal went away).
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("topology", nargs="?", metavar="TOPOLOGY.yaml",
                   help="topology file (docs/topology.md); default: the built-in example utility")
    p.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                   help="stop after this many seconds of traffic (default: run until Ctrl-C)")
    p.add_argument("--variant", choices=["close", "sparse"], default="close",
                   help="routing-table variant of every router")
    p.add_argument("--plain", action="store_true", help="print plain summaries even on a terminal")
    p.add_argument("--summary-every", type=float, default=3.0, metavar="SECONDS",
                   help="seconds between plain summaries when not on a terminal")
    p.add_argument("--log-dir", default=None, help="where router logs go (default: a new temporary directory)")


def run(args: argparse.Namespace) -> int:
    topology = load_topology(args.topology)   # TopologyError -> the CLI exits 2
    routes = plan(topology)                    # PlanError too
    if args.duration is not None and args.duration <= 0:
        raise ValidationError(f"--duration must be positive, got {args.duration}", field="duration")
    if args.summary_every <= 0:
        raise ValidationError(f"--summary-every must be positive, got {args.summary_every}",
                              field="summary_every")
    install_fast_loop()
    runner = Runner(topology, routes, variant=args.variant, duration=args.duration, plain=args.plain,
                    summary_every=args.summary_every, log_dir=args.log_dir)
    return asyncio.run(runner.run())


class Runner:
    def __init__(self, topology: Topology, routes: Plan, *, variant: str = "close",
                 duration: float | None = None, plain: bool = False, summary_every: float = 3.0,
                 log_dir: str | None = None, console: Console | None = None) -> None:
        self.topology = topology
        self.plan = routes
        self.variant = variant
        self.duration = duration
        self.summary_every = summary_every
        self.console = console or Console()
        self.live = self.console.is_terminal and not plain
        self._own_log_dir = not log_dir
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="gridstat-up-"))
        self.routers: dict[str, RouterProcess] = {}
        self.subscriptions: list[SubscriptionEndpoint] = []
        self.publishers: list[PublisherEndpoint] = []
        self.stop_event = asyncio.Event()
        self.started = time.monotonic()
        self.signal: str | None = None

    def say(self, text: str) -> None:
        print(text, flush=True)

    # -- lifecycle ----------------------------------------------------------------------------------
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in _STOP_SIGNALS:
            loop.add_signal_handler(sig, self._on_signal, sig)
        code = 0
        try:
            await self._start()
            if not self.stop_event.is_set():
                await self._watch()
        except StartupError as exc:
            if not self.stop_event.is_set():  # a router that dies of the same Ctrl-C is not an error
                print(f"gridstat up: error: {exc}", file=sys.stderr, flush=True)
                code = 1
        finally:
            await self._teardown()
            for sig in _STOP_SIGNALS:
                loop.remove_signal_handler(sig)
        return code

    def _on_signal(self, sig: signal.Signals) -> None:
        self.signal = sig.name
        self.stop_event.set()

    async def _start(self) -> None:
        t = self.topology
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.say(f"gridstat up: {t.source}: {len(t.clouds)} clouds, {len(t.routers)} routers, "
                 f"{len(t.publishers)} publishers, {len(t.subscriptions)} subscriptions; "
                 f"variant {self.variant}; router logs in {self.log_dir}")
        for r in t.routers:
            self.routers[r.name] = RouterProcess(r.name, r.router_id, r.role, r.cloud, self.variant,
                                                 self.log_dir / f"{r.name}.log")
        await self._until_stopped(asyncio.gather(*(r.start() for r in self.routers.values())))
        if self.stop_event.is_set():
            return
        for rp in self.routers.values():
            self.say(f"  router name={rp.name} role={rp.role} cloud={rp.cloud} pid={rp.pid} port={rp.port} "
                     f"control_port={rp.control_port}")

        # subscribers first: their addresses go into the edge routers' subscriber channels
        for s in t.subscriptions:
            ep = SubscriptionEndpoint(s, t.variable(s.variable), Subscriber(s.name, s.subscriber_id))
            await ep.start()
            self.subscriptions.append(ep)
        addresses: dict[tuple[str, str], tuple[str, int]] = {}
        for rp in self.routers.values():
            addresses[("router", rp.name)] = rp.address
        for ep in self.subscriptions:
            addresses[("subscriber", ep.spec.name)] = ep.subscriber.address
        await self._until_stopped(asyncio.gather(*(
            rp.add_channels(self.plan.channels_of(rp.name), addresses) for rp in self.routers.values())))
        installed = await self._until_stopped(asyncio.gather(*(
            rp.install_routes(self.plan.routes_of(rp.name)) for rp in self.routers.values())))
        self.say(f"  installed {sum(installed or [])} routes and {len(self.plan.channels)} channels over gRPC")
        for ep in self.subscriptions:
            paths = " | ".join(" -> ".join(p) for p in self.plan.paths[ep.spec.name])
            self.say(f"  subscription name={ep.spec.name} var={ep.spec.variable} paths: {paths}")
        if self.stop_event.is_set():
            return

        wanted = {s.variable for s in t.subscriptions}
        for p in t.publishers:
            variables = [v for v in p.variables if v.full_name in wanted]
            if not variables:
                continue
            ep_pub = PublisherEndpoint(p, variables, self.routers[p.edge].address)
            await ep_pub.start()
            self.publishers.append(ep_pub)
        self.started = time.monotonic()
        self.say(f"  {len(self.publishers)} publishers sending; "
                 + (f"stopping after {self.duration:g} s" if self.duration else "Ctrl-C to stop"))

    async def _until_stopped(self, aw: Awaitable[T]) -> T | None:
        """Await ``aw`` unless a stop signal comes first (then cancel it and return None)."""
        stopper = asyncio.ensure_future(self.stop_event.wait())
        fut = asyncio.ensure_future(aw)
        try:
            await asyncio.wait({fut, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if fut.done():
            return fut.result()
        fut.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await fut
        return None

    def _deadline_reached(self) -> bool:
        return self.duration is not None and time.monotonic() - self.started >= self.duration

    async def _watch(self) -> None:
        refresh = 0.5
        if self.live:
            with Live(rich_view(await self.snapshot()), console=self.console, refresh_per_second=4,
                      transient=False) as live:
                while not await self._sleep(refresh):
                    live.update(rich_view(await self.snapshot()))
                final = await self.snapshot()
                live.update(rich_view(final))
        else:
            next_summary = time.monotonic() + self.summary_every
            while not await self._sleep(refresh):
                if time.monotonic() >= next_summary:
                    next_summary += self.summary_every
                    self.say("\n".join(plain_lines(await self.snapshot())))
            final = await self.snapshot()
        why = f"stopped by {self.signal}" if self.signal else "duration reached"
        self.say("\n".join(plain_lines(final, title=f"FINAL ({why})")))

    async def _sleep(self, seconds: float) -> bool:
        """Sleep; True when it is time to stop (signal or --duration)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop_event.wait(), seconds)
        return self.stop_event.is_set() or self._deadline_reached()

    async def snapshot(self) -> Snapshot:
        await asyncio.gather(*(r.poll_stats() for r in self.routers.values()))
        now_ms = clock.now_ms()
        final = self.stop_event.is_set() or self._deadline_reached()
        subs = []
        for ep in self.subscriptions:
            sub = ep.subscription
            assert sub is not None
            st = sub.stats
            rate = ep.meter.run_rate() if final else ep.meter.live_rate(now_ms)
            subs.append(SubRow(
                ep.spec.name, ep.spec.variable, ep.spec.edge, len(self.plan.paths[ep.spec.name]),
                ep.spec.interval_ms, ep.effective_interval_ms, ep.expected_rate, rate, st.delivered,
                st.latency.percentile(50), st.latency.percentile(99), ep.spec.latency_ms, st.gaps,
                st.duplicates, st.violations))
        rows = []
        for rp in self.routers.values():
            s = rp.last_stats
            if not rp.running:
                state = f"exited {rp.proc.returncode}" if rp.proc is not None else "not started"
            else:
                state = rp.error or "up"
            rows.append(RouterRow(
                rp.name, rp.role, rp.cloud, rp.pid, state,
                s.events_in if s else 0, s.events_forwarded if s else 0, s.events_filtered if s else 0,
                _all_drops(s), sum(1 for c in s.channels if c.up) if s else 0, len(s.channels) if s else 0))
        return Snapshot(time.monotonic() - self.started, self.variant, self.topology.source, tuple(subs),
                        tuple(rows))

    async def _teardown(self) -> None:
        # signals only set stop_event now, so a second Ctrl-C cannot interrupt this and leave orphans
        for pub in self.publishers:
            with contextlib.suppress(Exception):
                await pub.stop()
        # A Ctrl-C on a terminal reaches the routers too (same process group) and they stop on
        # their own; give them a moment before SIGTERM so they finish cleanly.
        grace = 1.5 if self.signal == "SIGINT" else 0.0
        codes = await asyncio.gather(*(r.stop(grace) for r in self.routers.values()), return_exceptions=True)
        for ep in self.subscriptions:
            with contextlib.suppress(Exception):
                await ep.stop()
        bad = [f"{name}={code}" for name, code in zip(self.routers, codes, strict=True)
               if code not in (0, None)]
        logs = f"logs in {self.log_dir}"
        with contextlib.suppress(OSError):
            if self._own_log_dir and all(f.stat().st_size == 0 for f in self.log_dir.iterdir()):
                shutil.rmtree(self.log_dir)
                logs = "router logs were empty (removed)"
        self.say(f"gridstat up: stopped {len(self.routers)} router processes"
                 + (f" (exit codes {', '.join(bad)})" if bad else "") + f"; {logs}")


def _all_drops(s: object) -> dict[str, int]:
    """Router-level drops plus every channel's, by reason."""
    out: dict[str, int] = {}
    if s is None:
        return out
    for k, v in getattr(s, "drops", {}).items():
        out[k] = out.get(k, 0) + int(v)
    for ch in getattr(s, "channels", ()):
        for k, v in ch.drops.items():
            out[k] = out.get(k, 0) + int(v)
    return out
