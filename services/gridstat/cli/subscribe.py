"""``gridstat subscribe``: a long-running subscriber application that counts what it is delivered.

    gridstat subscribe --name ems --edge 127.0.0.1:7802 --variable pmu1/freq [--variable ...] \\
        [--interval-ms 20 --latency-ms 30 --redundancy 2 --admit] \\
        [--listen-host 0.0.0.0 --advertise-host IP --port 0] [--history HOST:PORT] [--stats-every-s 1] [-o json]

It opens its UDP socket on ``--listen-host:--port`` and registers with the leaf broker through
its edge router (``Subscriber.connect``; ``--edge`` is the router's control port), advertising
``--advertise-host`` as the address its events go to: by default ``$POD_IP`` when set (a pod is
reached on its pod address), else the listen host; a wildcard listen host without either leaves
the address to the edge router, which takes the address the registration came from.
``--listen-host`` defaults to 0.0.0.0 when ``$POD_IP`` is set, else 127.0.0.1.

* Without ``--admit`` it only registers (keeping what the broker holds for it: a Kubernetes
  operator admits its ``Subscription`` resources) and receives what is routed to it; it learns the
  variable id of each ``--variable`` from the broker's list of its subscriptions (polled through the
  edge router) and takes ``--interval-ms`` as the expected interval of every variable.
* With ``--admit`` it registers afresh (``first_time``) and subscribes to every ``--variable``
  through the edge router (``subscribe_remote``) with ``--interval-ms``, ``--latency-ms``,
  ``--redundancy`` and ``--priority``; the expected interval is the admitted one. A variable whose
  publisher has not registered yet (``UnknownVariable``) is retried; any other refusal exits 3. A
  subscription the broker later drops (its publisher restarted) is admitted again.
* With ``--history`` (a ``gridstat history-server``) every subscription fills its gaps from the
  archive (docs/gap-recovery.md), after ``--recover-after-ms``; ``recovered`` and ``unrecoverable``
  say how many of the lost instants came back (``missing`` counts what did not arrive live).

Until registered it retries with a bounded backoff, one line on stderr per failure (``--once`` or
``--connect-timeout-s``: exit 4 instead). Then it prints ``READY name=<name> port=<udp port>
advertise=<host> variables=<n> mode=<admit|registered>`` and, every ``--stats-every-s``, one line;
with ``-o json`` one JSON object per line, cumulative since the start::

    {"kind":"subscribe","name":"ems","final":false,"ts_ms":..,"uptime_s":..,"mode":"admit",
     "variables":{"pmu1/freq":{"variable_id":1,"bound":true,"received":..,"distinct":..,
       "duplicates":..,"stale":0,"missing":0,"first_ts_ms":..,"last_ts_ms":..,
       "latency_ms":{"p50":..,"p99":..,"max":..},"interval_ms":20.0,"expected_interval_ms":20,
       "violations":0,"recovered":0,"unrecoverable":0,"period":{"received":..,"distinct":..,"duplicates":..,"missing":..,
       "latency_ms":{...}}}},"drops":{}}

(``gridstat.cli.traffic.DeliveryCounter`` defines every count; ``interval_ms`` is the delivered
interval, ``expected_interval_ms`` the one ``missing`` is counted against, ``period`` the counts
since the previous line, ``drops`` the socket's undeliverable datagrams by reason.) SIGTERM or
SIGINT (or ``--duration-s``) print a final line (``"final":true``), remove the subscriptions it
admitted itself and exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

from gridstat.cli.common import EXIT_OK
from gridstat.cli.traffic import (
    TYPES,
    DeliveryCounter,
    GiveUp,
    Runner,
    add_client_arguments,
    check_common,
    check_ipv4,
    describe,
    parse_subscribed_variables,
    tls_files,
)
from gridstat.client import EdgeSession, Subscriber, SubscribeResult, Subscription
from gridstat.client.extrapolation import ExtrapolationLike
from gridstat.client.gapfill import RECOVER_AFTER_MS
from gridstat.client.subscription import EventCallback, ViolationCallback
from gridstat.core import clock, serving, wire
from gridstat.core.aio import cancelled, create_guarded_task
from gridstat.core.model import PRIORITY_LOW, StatusVariable, split_variable_name
from gridstat.core.tls import TlsFiles
from gridstat.errors import DuplicateName, GridStatError, ValidationError

POD_IP_ENV = "POD_IP"
#: Polls of the broker's list of our subscriptions: until every variable is bound, then slower.
REFRESH_UNBOUND_S = 1.0
REFRESH_BOUND_S = 5.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variable", action="append", required=True, metavar="PUBLISHER/VARIABLE",
                   help="a status variable to receive (repeat for more)")
    p.add_argument("--type", choices=list(TYPES), default="float", dest="value_type",
                   help="value type of every variable (default float)")
    p.add_argument("--interval-ms", type=int, default=20, metavar="MS",
                   help="subscription interval with --admit; without it, the interval expected (default 20)")
    p.add_argument("--latency-ms", type=int, default=50, metavar="MS",
                   help="latency bound of the subscriptions (default 50)")
    p.add_argument("--redundancy", type=int, default=1, metavar="K", help="node-disjoint paths with --admit "
                                                                          "(default 1)")
    p.add_argument("--priority", type=int, default=1, metavar="P", help="0 alert .. 6 low with --admit (default 1)")
    p.add_argument("--admit", action="store_true",
                   help="subscribe through the edge router (default: only register and receive what is routed here)")
    p.add_argument("--listen-host", default=None, metavar="IP",
                   help=f"address of the UDP socket (default 0.0.0.0 when ${POD_IP_ENV} is set, else 127.0.0.1)")
    p.add_argument("--advertise-host", default=None, metavar="IP",
                   help=f"address the edge router sends events to (default ${POD_IP_ENV}, else the listen host)")
    p.add_argument("--port", type=int, default=0, metavar="N", help="UDP port (default 0: any free port)")
    p.add_argument("--history", default=None, metavar="HOST:PORT",
                   help="a history service to fill gaps from (docs/gap-recovery.md; default: none)")
    p.add_argument("--recover-after-ms", type=int, default=RECOVER_AFTER_MS, metavar="MS",
                   help=f"with --history, wait this long after a gap before asking (default {RECOVER_AFTER_MS})")
    add_client_arguments(p)


def listen_and_advertise(listen: str | None, advertise: str | None,
                         environ: dict[str, str] | os._Environ[str] | None = None) -> tuple[str, str]:
    """The socket's address and the host advertised to the broker (``""``: the edge router takes
    the registration's peer address)."""
    env = os.environ if environ is None else environ
    pod_ip = env.get(POD_IP_ENV, "").strip()
    host = listen if listen is not None else ("0.0.0.0" if pod_ip else "127.0.0.1")
    check_ipv4(host, "--listen-host")
    if advertise is not None:
        if not advertise.strip() or any(c.isspace() for c in advertise):
            raise ValidationError(f"--advertise-host {advertise!r} is not a host address", field="advertise_host")
        return host, advertise.strip()
    if pod_ip:
        return host, pod_ip
    return host, "" if host == "0.0.0.0" else host


class CountingSubscription(Subscription):
    """A subscription that also counts every event copy it is handed, before de-duplication."""

    def __init__(self, variable: StatusVariable, *, counter: DeliveryCounter, **kwargs: Any) -> None:
        super().__init__(variable, **kwargs)
        self.counter = counter

    def handle_event(self, event: wire.Event, now_ms: int) -> bool:
        self.counter.observe(event.timestamp_ms, now_ms)
        return super().handle_event(event, now_ms)


class CountingSubscriber(Subscriber):
    """The SDK's subscriber, advertising ``advertise_host`` and counting each variable of ``counters``."""

    def __init__(self, name: str, subscriber_id: int, host: str = "127.0.0.1", port: int = 0, *,
                 advertise_host: str | None = None, counters: dict[str, DeliveryCounter] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(name, subscriber_id, host, port, **kwargs)
        self.advertise_host = advertise_host
        self.counters = counters if counters is not None else {}

    @property
    def address(self) -> tuple[str, int]:
        host, port = super().address
        return (host if self.advertise_host is None else self.advertise_host), port

    @property
    def udp_port(self) -> int:
        return super().address[1]

    def subscribe(self, var: StatusVariable, *, interval_ms: int, latency_ms: int,
                  on_event: EventCallback | None = None, on_violation: ViolationCallback | None = None,
                  extrapolate: Callable[..., Any] | None = None,
                  extrapolation: ExtrapolationLike | None = None) -> Subscription:
        counter = self.counters.get(var.full_name)
        if counter is None:
            return super().subscribe(var, interval_ms=interval_ms, latency_ms=latency_ms, on_event=on_event,
                                     on_violation=on_violation, extrapolate=extrapolate, extrapolation=extrapolation)
        if var.variable_id in self._subs:
            raise DuplicateName(f"subscriber {self.name} already subscribes to {var.full_name!r}", field="variable")
        sub = CountingSubscription(var, counter=counter, interval_ms=interval_ms, latency_ms=latency_ms,
                                   on_event=on_event, on_violation=on_violation, extrapolate=extrapolate,
                                   subscriber=self, extrapolation=extrapolation)
        self._subs[var.variable_id] = sub
        return sub


class SubscribeApp:
    """Connects, keeps every ``--variable`` bound to a local subscription, and reports."""

    def __init__(self, args: argparse.Namespace, variables: list[str], tls: TlsFiles | None,
                 listen: str, advertise: str) -> None:
        self.args = args
        self.variables = variables
        self.tls = tls
        self.listen, self.advertise = listen, advertise
        self.type = TYPES[args.value_type]
        self.counters = {v: DeliveryCounter(args.interval_ms) for v in variables}
        self.bound: dict[str, Subscription] = {}
        self.runner = Runner("subscribe", args)
        self.session: EdgeSession | None = None
        self.subscriber: CountingSubscriber | None = None
        self._failing: set[str] = set()

    # -- connecting ---------------------------------------------------------------------------------
    async def _attempt(self) -> tuple[EdgeSession, CountingSubscriber]:
        args = self.args
        session = EdgeSession(args.edge, tls=self.tls, timeout_s=args.timeout, attempts=1)
        sub: CountingSubscriber | None = None
        try:
            try:
                made = await CountingSubscriber.connect(
                    args.name, args.edge, session=session, first_time=args.admit, host=self.listen, port=args.port,
                    advertise_host=self.advertise, counters=self.counters, tls=self.tls,
                    also_edges=[e.strip() for e in args.also_edge], history=args.history,
                    recover_after_ms=args.recover_after_ms)
                assert isinstance(made, CountingSubscriber)
                sub = made
            except OSError as exc:  # binding the socket
                raise ValidationError(f"--listen-host {self.listen} --port {args.port}: cannot bind the UDP "
                                      f"socket: {exc.strerror or exc}", field="port") from None
            if args.admit:
                for v in self.variables:
                    await self._admit(sub, v)
        except BaseException:
            if sub is not None:
                await sub.stop()
            await session.close()
            raise
        return session, sub

    async def _admit(self, sub: CountingSubscriber, variable: str) -> None:
        args = self.args
        old = self.bound.pop(variable, None)
        if old is not None:
            old.unsubscribe()
        s = await sub.subscribe_remote(variable, self.type, interval_ms=args.interval_ms, latency_ms=args.latency_ms,
                                       redundancy=args.redundancy, priority=args.priority,
                                       recover=args.history is not None, recovered="in_order")
        self.counters[variable].expected_interval_ms = s.interval_ms
        self.bound[variable] = s

    # -- keeping the variables bound ----------------------------------------------------------------
    def _bind(self, sub: CountingSubscriber, variable: str, r: SubscribeResult) -> None:
        """Subscribe locally to ``variable`` with the id the broker gave it (a subscription admitted
        by someone else, e.g. the operator, or ours with a new id)."""
        old = self.bound.pop(variable, None)
        if old is not None:
            old.unsubscribe()
        publisher, name = split_variable_name(variable)
        expected = self.counters[variable].expected_interval_ms
        if r.pub_interval_ms:
            var = StatusVariable(publisher, name, self.type, r.pub_interval_ms, variable_id=r.variable_id)
        else:  # an alert variable: aperiodic
            var = StatusVariable(publisher, name, self.type, 0, alert=True, min_interval_ms=max(1, expected),
                                 variable_id=r.variable_id)
        local = self.bound[variable] = sub.subscribe(var, interval_ms=expected, latency_ms=self.args.latency_ms)
        if self.args.history is not None and not var.alert:
            sub.recover(local, recovered="in_order")

    async def refresh(self) -> None:
        """One look at the broker's list of our subscriptions: bind what is new, re-admit what is gone."""
        sub, session = self.subscriber, self.session
        assert sub is not None and session is not None
        try:
            listed = await session.list_subscriptions(self.args.name)
        except GridStatError as exc:
            self._note("list", f"listing its subscriptions failed: {describe(exc)}")
            return
        self._clear("list", "listing its subscriptions works again")
        by_variable = {r.variable: r for r in listed}
        for v in self.variables:
            r = by_variable.get(v)
            local = self.bound.get(v)
            if r is not None:
                if local is None or local.variable.variable_id != r.variable_id:
                    with contextlib.suppress(GridStatError):
                        self._bind(sub, v, r)
            elif self.args.admit:
                try:
                    await self._admit(sub, v)
                except GridStatError as exc:
                    self._note(v, f"admitting {v} again failed: {describe(exc)}")
                else:
                    self._clear(v, f"{v} admitted again")

    def _note(self, key: str, message: str) -> None:
        if key not in self._failing:  # once per failure streak, not once per poll
            self._failing.add(key)
            self.runner.warn(message)

    def _clear(self, key: str, message: str) -> None:
        if key in self._failing:
            self._failing.discard(key)
            self.runner.warn(message)

    async def _refresher(self) -> None:
        while not self.runner.stop.is_set():
            await self.refresh()
            unbound = len(self.bound) < len(self.variables)
            if await self.runner.sleep(REFRESH_UNBOUND_S if unbound else REFRESH_BOUND_S):
                return

    # -- reporting ----------------------------------------------------------------------------------
    def stats(self, *, final: bool) -> tuple[dict[str, Any], str]:
        sub = self.subscriber
        out: dict[str, Any] = {}
        lines = []
        for v in self.variables:
            c = self.counters[v]
            local = self.bound.get(v)
            d = {"variable_id": local.variable.variable_id if local is not None else None,
                 "bound": local is not None, **c.snapshot(),
                 "violations": local.stats.violations if local is not None else 0,
                 "recovered": local.stats.recovered if local is not None else 0,
                 "unrecoverable": local.stats.unrecoverable if local is not None else 0, "period": c.take_period()}
            out[v] = d
            lat = d["latency_ms"]
            lines.append(f"  {v}: received={c.received} distinct={c.distinct} duplicates={c.duplicates} "
                         f"missing={d['missing']} latency_ms p50={lat['p50']} p99={lat['p99']} max={lat['max']} "
                         f"interval_ms={d['interval_ms']}"
                         + (f" recovered={d['recovered']} unrecoverable={d['unrecoverable']}"
                            if self.args.history else "")
                         + ("" if local is not None else " (not bound yet)"))
        data = {"kind": "subscribe", "name": self.args.name, "final": final, "ts_ms": clock.now_ms(),
                "uptime_s": round(time.monotonic() - self.runner.started, 3),
                "mode": "admit" if self.args.admit else "registered", "variables": out,
                "drops": dict(sub.stats.drops) if sub is not None else {}}
        text = f"{'FINAL ' if final else ''}subscribe {self.args.name}:\n" + "\n".join(lines)
        return data, text

    # -- the run ------------------------------------------------------------------------------------
    async def run(self) -> int:
        runner = self.runner
        runner.install()
        try:
            connected = await runner.connect(self._attempt, what=f"registering with edge router {self.args.edge}")
        except GiveUp as exc:
            return exc.exit_code
        if connected is None:
            return EXIT_OK
        self.session, self.subscriber = connected
        sub = self.subscriber
        advertised = self.advertise or "(the edge router's view of this host)"
        runner.line(f"READY name={self.args.name} port={sub.udp_port} advertise={advertised} "
                    f"variables={len(self.variables)} mode={'admit' if self.args.admit else 'registered'}")
        refresher = create_guarded_task(self._refresher(), name="subscribe-refresh")
        try:
            await runner.report_until_stopped(lambda: self.stats(final=False))
        finally:
            await cancelled(refresher)
            runner.emit(*self.stats(final=True))
            await self._close()
        return EXIT_OK

    async def _close(self) -> None:
        sub, session = self.subscriber, self.session
        if sub is not None:
            if self.args.admit:  # what it admitted itself; the operator's stay
                for s in list(self.bound.values()):
                    with contextlib.suppress(GridStatError, asyncio.TimeoutError):
                        await asyncio.wait_for(sub.unsubscribe_remote(s), 3.0)
            await sub.stop()
        if session is not None:
            await session.close()


def run(args: argparse.Namespace) -> int:
    check_common(args, "subscriber")
    variables = parse_subscribed_variables(args.variable)
    for flag, value in (("--interval-ms", args.interval_ms), ("--latency-ms", args.latency_ms)):
        if value <= 0:
            raise ValidationError(f"{flag} must be positive, not {value}", field=flag[2:].replace("-", "_"))
    if args.redundancy < 1:
        raise ValidationError(f"--redundancy must be at least 1, not {args.redundancy}", field="redundancy")
    if not 0 <= args.priority <= PRIORITY_LOW:
        raise ValidationError(f"--priority must be 0..{PRIORITY_LOW}, not {args.priority}", field="priority")
    if not 0 <= args.port <= 65535:
        raise ValidationError(f"--port must be 0..65535, not {args.port}", field="port")
    if args.history is not None:
        host, sep, port = args.history.strip().rpartition(":")
        if not sep or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValidationError(f"--history {args.history!r} is not HOST:PORT (a history service)", field="history")
        args.history = args.history.strip()
    if args.recover_after_ms < 0:
        raise ValidationError(f"--recover-after-ms must not be negative, not {args.recover_after_ms}",
                              field="recover_after_ms")
    listen, advertise = listen_and_advertise(args.listen_host, args.advertise_host)
    tls = tls_files(args)
    return serving.run(args, SubscribeApp(args, variables, tls, listen, advertise).run)
