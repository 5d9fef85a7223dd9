"""What ``gridstat publish`` and ``gridstat subscribe`` share: options, validation, retries, delivery stats.

* :class:`DeliveryCounter` -- the pure per-variable accounting of a subscriber: received events,
  distinct timestamps, duplicates, missing timestamps, latency percentiles, delivered interval;
* :class:`Backoff` -- bounded exponential backoff with jitter for (re)connecting;
* :func:`classify` -- which failure of the edge router or the broker is worth retrying;
* :class:`Runner` -- SIGTERM/SIGINT, ``--duration-s``, the retry loop around connecting, and the
  client's own telemetry (``--kafka``, ``--metrics-port``: its SDK subscriber's delivery samples and
  ``/metrics``, docs/telemetry.md "Subscribers").

Both commands print ``READY name=... `` once registered, then one line per stats period
(``-o json``: one JSON object per line) and a final line when stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import math
import os
import random
import signal
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from gridstat.cli.common import EXIT_CODES_HELP, EXIT_OK, EXIT_REJECTED, EXIT_UNAVAILABLE, EXIT_USAGE
from gridstat.client import Publisher, Subscriber
from gridstat.client.session import SubscriptionRejected
from gridstat.core.model import BOOL, FLOAT, INT, TypeSpec, check_name, split_variable_name
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError, ValidationError
from gridstat.telemetry import roles as telemetry

T = TypeVar("T")

TYPES: dict[str, TypeSpec] = {"float": FLOAT, "int": INT, "bool": BOOL}

#: Distinct timestamps remembered per variable to recognise duplicates (4096 x 20 ms = 82 s);
#: a copy older than every remembered timestamp is counted as ``stale``, not classified.
DEDUP_WINDOW = 4096

#: Failure reasons that retrying cannot fix: the request itself is wrong or not allowed.
PERMANENT_REASONS = frozenset({"InvalidArgument", "TypeMismatch", "Unauthorized", "PermissionDenied",
                               "Unauthenticated"})


# -- options and validation ---------------------------------------------------------------------------
def add_client_arguments(p: argparse.ArgumentParser) -> None:
    """The options both commands share: edge, stats, duration, retries, output, TLS and telemetry."""
    p.epilog = EXIT_CODES_HELP
    p.add_argument("--name", required=True, metavar="NAME", help="the client's name at the broker")
    p.add_argument("--edge", required=True, metavar="HOST:PORT", help="control port of the client's edge router")
    p.add_argument("--also-edge", action="append", default=[], metavar="HOST:PORT",
                   help="control port of one more edge router (of the same cloud) to attach at: a multi-homed "
                        "client, whose redundant paths then start or end at different edge routers, so one "
                        "edge router's restart loses nothing (repeatable; docs/redundancy.md)")
    p.add_argument("--stats-every-s", type=float, default=1.0, metavar="S",
                   help="print a stats line every S seconds (0: only the final line; default 1)")
    p.add_argument("--duration-s", type=float, default=None, metavar="S",
                   help="stop after S seconds (default: run until SIGTERM or SIGINT)")
    g = p.add_argument_group("retries")
    g.add_argument("--once", action="store_true",
                   help="try to register once: exit 4 if the edge router or broker is unavailable")
    g.add_argument("--connect-timeout-s", type=float, default=None, metavar="S",
                   help="give up (exit 4) if not registered within S seconds (default: retry forever)")
    g.add_argument("--retry-rejected", action="store_true",
                   help="retry a subscription the broker refused (no path yet, capacity) instead of exiting 3: "
                        "for a pod started with the routers it needs, whose paths appear as they start "
                        "(the chart sets it; docs/kubernetes.md)")
    g.add_argument("--retry-max-s", type=float, default=5.0, metavar="S",
                   help="longest wait between two attempts (default 5)")
    g.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="deadline of each call to the edge router (default 10)")
    add_edge_client_arguments(p)
    # --kafka, --metrics-port, ...: the client's own delivery samples and /metrics, as every role's
    # (docs/telemetry.md, "Subscribers"); off unless given (or $GRIDSTAT_KAFKA, $GRIDSTAT_METRICS_PORT)
    telemetry.add_arguments(p)


def add_edge_client_arguments(p: argparse.ArgumentParser, *,
                              log_level_help: str = "log level of the SDK on stderr (default WARNING)") -> None:
    """TLS to the edge router, ``-o text|json`` stats lines, ``--log-level``: what every long-running
    client of an edge router has (publish, subscribe, the gateways and servers)."""
    t = p.add_argument_group("TLS to the edge router")
    t.add_argument("--tls-ca", default="", metavar="PEM", help="CA that signed the edge router's certificate: use TLS")
    t.add_argument("--tls-cert", default="", metavar="PEM", help="client certificate (mutual TLS)")
    t.add_argument("--tls-key", default="", metavar="PEM", help="private key of --tls-cert")
    p.add_argument("--output", "-o", choices=("text", "json"), default="text",
                   help="stats lines as text or one JSON object per line")
    p.add_argument("--exit-with-parent", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--log-level", default="WARNING", help=log_level_help)


def is_loopback_host(host: str) -> bool:
    """A loopback address or ``localhost``: what a client may talk to without ``--allow-remote...``."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def check_edge(value: str, flag: str = "--edge") -> str:
    """``HOST:PORT`` (``[v6]:PORT`` too), else a ValidationError naming ``--edge`` (or ``flag``)."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValidationError(f"{flag} {value!r} is not HOST:PORT (the edge router's control port)",
                              field=flag.lstrip("-").replace("-", "_"))
    return value.strip()


def check_positive(value: float | None, flag: str, *, allow_zero: bool = False) -> None:
    if value is None:
        return
    if math.isnan(value) or value < 0 or (value == 0 and not allow_zero):
        need = "zero or positive" if allow_zero else "positive"
        raise ValidationError(f"{flag} must be {need}, not {value:g}", field=flag.lstrip("-").replace("-", "_"))


def check_client_name(value: str, what: str) -> str:
    try:
        check_name(value, what=what)
    except ValidationError as exc:
        raise ValidationError(f"--name: {exc.args[0]}", field="name") from None
    return value


def check_ipv4(value: str, flag: str) -> str:
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        raise ValidationError(f"{flag} {value!r} is not an IPv4 address", field=flag.lstrip("-").replace("-", "_")) \
            from None
    return value


def check_common(args: argparse.Namespace, what: str) -> None:
    """Validate the shared options (ValidationError names the flag; main exits 2)."""
    check_client_name(args.name, what)
    check_edge(args.edge)
    for also in args.also_edge:
        if check_edge(also, "--also-edge") == args.edge.strip():
            raise ValidationError(f"--also-edge {also!r} is the --edge itself: name another edge router",
                                  field="also_edge")
    check_positive(args.stats_every_s, "--stats-every-s", allow_zero=True)
    check_positive(args.duration_s, "--duration-s")
    check_positive(args.connect_timeout_s, "--connect-timeout-s")
    check_positive(args.retry_max_s, "--retry-max-s")
    check_positive(args.timeout, "--timeout")


def tls_files(args: argparse.Namespace) -> TlsFiles | None:
    """``--tls-ca/--tls-cert/--tls-key`` as TlsFiles (None: plaintext); each named file must exist."""
    if bool(args.tls_cert) != bool(args.tls_key):
        flag = "--tls-key" if args.tls_cert else "--tls-cert"
        raise ValidationError(f"--tls-cert and --tls-key go together: {flag} is missing",
                              field=flag[2:].replace("-", "_"))
    for flag, path in (("--tls-ca", args.tls_ca), ("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if path and not os.path.isfile(path):
            raise ValidationError(f"{flag} {path!r}: no such file", field=flag[2:].replace("-", "_"))
    if not (args.tls_ca or args.tls_cert):
        return None
    files = TlsFiles(args.tls_cert, args.tls_key, args.tls_ca)
    files.check_files()
    return files


# -- retries ------------------------------------------------------------------------------------------
class Backoff:
    """Exponential backoff from ``base_s`` doubling up to ``max_s``, with +/-20 % jitter."""

    def __init__(self, base_s: float = 0.5, max_s: float = 5.0, *, rng: random.Random | None = None) -> None:
        self.base_s, self.max_s = base_s, max(max_s, 0.01)
        self.attempt = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        delay = min(self.max_s, self.base_s * float(2 ** min(self.attempt, 30)))
        self.attempt += 1
        return min(self.max_s, delay * (0.8 + 0.4 * self._rng.random()))

    def reset(self) -> None:
        self.attempt = 0


RETRY, USAGE, REJECTED = "retry", "usage", "rejected"


def classify(exc: BaseException, *, retry_unknown_variable: bool = True) -> str:
    """``retry`` (unavailable, timeouts, a broker that does not know our edge router yet, ...),
    ``usage`` (the request is wrong or not allowed: exit 2) or ``rejected`` (a subscription the
    broker refused: exit 3). ``UnknownVariable`` is retried while waiting for a publisher that has
    not registered yet (unless ``retry_unknown_variable`` is False: then it is a rejection)."""
    if not isinstance(exc, GridStatError):
        return RETRY
    reason = exc.reason
    if reason == "UnknownVariable":
        return RETRY if retry_unknown_variable else REJECTED
    if isinstance(exc, SubscriptionRejected):
        return REJECTED
    return USAGE if reason in PERMANENT_REASONS else RETRY


def describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, GridStatError) else f"{type(exc).__name__}: {exc}"


class GiveUp(Exception):
    """Connecting stopped for good: ``exit_code`` says why (2, 3 or 4); the message was printed."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(exit_code)
        self.exit_code = exit_code


def sdk_clients(connected: object) -> tuple[list[Subscriber], list[Publisher]]:
    """The SDK subscribers and publishers in what a command's connect attempt returned: the object
    itself, the items of a tuple, or its ``subscriber`` / ``publisher`` attribute (a server's)."""
    candidates: list[object] = [connected]
    if isinstance(connected, tuple):
        candidates += list(connected)
    candidates += [getattr(connected, "subscriber", None), getattr(connected, "publisher", None)]
    subscribers: list[Subscriber] = []
    publishers: list[Publisher] = []
    for c in candidates:
        if isinstance(c, Subscriber) and not any(c is s for s in subscribers):
            subscribers.append(c)
        elif isinstance(c, Publisher) and not any(c is s for s in publishers):
            publishers.append(c)
    return subscribers, publishers


class Runner:
    """A long-running client command's frame: the stop event (SIGTERM, SIGINT, ``--duration-s``),
    stdout lines, the retry loop around connecting, and the client's telemetry once connected."""

    def __init__(self, command: str, args: argparse.Namespace) -> None:
        self.command = command
        self.args = args
        self.stop = asyncio.Event()
        self.started = time.monotonic()
        self.signal: str | None = None
        self.telemetry: telemetry.RoleTelemetry | None = None

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        if self.args.duration_s is not None:
            loop.call_later(self.args.duration_s, self.stop.set)

    def _on_signal(self, sig: int) -> None:
        self.signal = signal.Signals(sig).name
        self.stop.set()

    def warn(self, message: str) -> None:
        print(f"gridstat {self.command}: {self.args.name}: {message}", file=sys.stderr, flush=True)

    def line(self, text: str) -> None:
        if self.telemetry is not None and text.startswith("READY "):
            text += self.telemetry.ready_suffix()  # " metrics_port=N", as every role's READY line
        print(text, flush=True)

    async def start_telemetry(self, connected: object) -> None:
        """With ``--kafka`` or ``--metrics-port``: export the delivery samples of the SDK subscribers in
        ``connected`` (:func:`sdk_clients`) and serve their ``/metrics`` (and the publishers'), with the
        telemetry package's exporter and server (``telemetry.roles``). Role ``subscriber`` (``publisher``
        when it has only publishers), source ``--name``."""
        args = self.args
        if self.telemetry is not None or (not getattr(args, "kafka", "")
                                          and getattr(args, "metrics_port", telemetry.METRICS_OFF) < 0):
            return
        subscribers, publishers = sdk_clients(connected)
        tel = telemetry.RoleTelemetry.from_args("publisher" if publishers and not subscribers else "subscriber",
                                                args.name, args)
        for sub in subscribers:
            telemetry.add_subscriber(tel, sub)
        for pub in publishers:
            telemetry.add_publisher(tel, pub)
        try:
            await tel.start()
        except BaseException:
            await tel.stop()
            raise
        self.telemetry = tel

    async def stop_telemetry(self) -> None:
        """Stop the telemetry (a last sample exported, Kafka flushed, /metrics closed); idempotent."""
        tel, self.telemetry = self.telemetry, None
        if tel is not None:
            await tel.stop()

    def json_error(self, exc: BaseException, exit_code: int) -> None:
        """With ``-o json``, the failure as one JSON object on stdout too (cli.common.report_error's shape)."""
        if self.args.output == "json":
            reason = getattr(exc, "reason", None) or type(exc).__name__
            self.line(json.dumps({"error": {"command": self.command, "exit_code": exit_code, "reason": reason,
                                            "field": getattr(exc, "field", None) or None,
                                            "message": describe(exc)}}, separators=(",", ":")))

    def emit(self, data: dict[str, Any], text: str) -> None:
        self.line(json.dumps(data, separators=(",", ":")) if self.args.output == "json" else text)

    async def sleep(self, seconds: float) -> bool:
        """Sleep unless stopped first; True when stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), max(0.0, seconds))
        return self.stop.is_set()

    async def until_stopped(self, aw: Awaitable[T]) -> T | None:
        """Await ``aw`` unless the stop event comes first (then it is cancelled and None returned)."""
        task = asyncio.ensure_future(aw)
        stopper = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        return None

    async def connect(self, attempt: Callable[[], Awaitable[T]], *, what: str,
                      retry_unknown_variable: bool = True) -> T | None:
        """Run ``attempt`` until it succeeds, retrying what :func:`classify` calls retriable with a
        bounded backoff and a line on stderr per failure. Returns None if stopped meanwhile; raises
        :class:`GiveUp` on a permanent failure, or (exit 4) with ``--once`` or past ``--connect-timeout-s``."""
        args = self.args
        backoff = Backoff(0.5, args.retry_max_s)
        deadline = None if args.connect_timeout_s is None else time.monotonic() + args.connect_timeout_s
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                connected = await self.until_stopped(attempt())
            except Exception as exc:
                kind = classify(exc, retry_unknown_variable=retry_unknown_variable and not args.once)
                if kind == USAGE:
                    self.warn(f"error: {describe(exc)}")
                    self.json_error(exc, EXIT_USAGE)
                    raise GiveUp(EXIT_USAGE) from None
                if kind == REJECTED and not (getattr(args, "retry_rejected", False) and not args.once):
                    offer = getattr(exc, "offer", None)
                    self.warn(f"rejected: {describe(exc)}" + (f" (offer: {offer})" if offer else ""))
                    self.json_error(exc, EXIT_REJECTED)
                    raise GiveUp(EXIT_REJECTED) from None
                delay = backoff.next_delay()
                if args.once or (deadline is not None and time.monotonic() + delay > deadline):
                    self.warn(f"{what} failed (attempt {n}): {describe(exc)}; giving up")
                    self.json_error(exc, EXIT_UNAVAILABLE)
                    raise GiveUp(EXIT_UNAVAILABLE) from None
                self.warn(f"{what} failed (attempt {n}): {describe(exc)}; retrying in {delay:.1f} s")
                if await self.sleep(delay):
                    return None
                continue
            if connected is not None:
                try:
                    await self.start_telemetry(connected)
                except GridStatError as exc:  # e.g. --metrics-port already in use
                    self.warn(f"error: {describe(exc)}")
                    self.json_error(exc, EXIT_USAGE)
                    raise GiveUp(EXIT_USAGE) from None
            return connected
        return None


    async def report_until_stopped(self, stats: Callable[[], tuple[dict[str, Any], str]]) -> None:
        """A stats line (``stats()``) every ``--stats-every-s`` until the stop event; 0: none."""
        period = self.args.stats_every_s
        try:
            while not self.stop.is_set():
                if await self.sleep(period if period > 0 else 3600.0):
                    break
                if period > 0:
                    self.emit(*stats())
        finally:
            await self.stop_telemetry()

    async def serve(self, attempt: Callable[[], Awaitable[T]], *, what: str, ready: Callable[[T], str],
                    stats: Callable[[T, bool], tuple[dict[str, Any], str]],
                    stop: Callable[[T], Awaitable[None]]) -> int:
        """The frame of a server command (``pdc-server``, ``sttp-server``): start it with :meth:`connect`'s
        retries, print ``ready(server)``, a stats line every ``--stats-every-s`` (``stats(server, final)``), and
        on SIGTERM, SIGINT or ``--duration-s`` a final one before ``stop(server)``. Returns the exit code."""
        self.install()
        try:
            server = await self.connect(attempt, what=what)
        except GiveUp as exc:
            return exc.exit_code
        if server is None:
            return EXIT_OK
        self.line(ready(server))
        try:
            await self.report_until_stopped(lambda: stats(server, False))
        finally:
            self.emit(*stats(server, True))
            await stop(server)
        return EXIT_OK


async def listening(start: Callable[[], Awaitable[T]], listen: tuple[str, int]) -> T:
    """``start()`` a server; an ``OSError`` (binding ``listen``) becomes a ValidationError naming ``--listen``."""
    try:
        return await start()
    except OSError as exc:
        host, port = listen
        raise ValidationError(f"--listen {host}:{port}: cannot listen: {exc.strerror or exc}", field="listen") from None

# -- delivery accounting (pure) -----------------------------------------------------------------------
def percentile(histogram: dict[int, int], total: int, q: float) -> int | None:
    """Nearest-rank percentile (``q`` in 0..100) of integer samples counted in ``histogram``."""
    if total <= 0:
        return None
    rank = max(1, math.ceil(q / 100 * total))
    seen = 0
    for value in sorted(histogram):
        seen += histogram[value]
        if seen >= rank:
            return value
    return max(histogram)


def latency_summary(histogram: dict[int, int], total: int) -> dict[str, int | None]:
    return {"p50": percentile(histogram, total, 50), "p99": percentile(histogram, total, 99),
            "max": max(histogram) if histogram else None}


#: How many of the newest gaps a subscriber's stats list.
GAPS_KEPT = 32


class DeliveryCounter:
    """What one subscriber received of one variable, from (event timestamp, arrival time) pairs.

    * ``received``: every event copy; ``distinct``: different timestamps; ``duplicates``: copies of
      a timestamp already received (redundant paths deliver each event k times); ``stale``: events
      no newer than a timestamp forgotten from the window of the :data:`DEDUP_WINDOW` newest
      distinct ones, which cannot be classified (not counted as distinct);
    * ``missing``: expected timestamps absent between the first and the last received one, with
      one expected every ``expected_interval_ms`` (``(last - first) / interval + 1 - distinct``);
    * latency: arrival minus timestamp (ms, one clock) of the *first* copy of each timestamp;
    * ``interval_ms``: the delivered interval, ``(last - first) / (distinct - 1)``;
    * ``gaps``: the newest :data:`GAPS_KEPT` runs of timestamps missing when a newer one arrived.

    ``take_period()`` returns the same counts since its previous call (latency over that period's
    events; ``missing`` as the change of the cumulative count, negative when a late event filled
    an earlier gap).
    """

    __slots__ = ("_floor", "_hist", "_lat_n", "_order", "_p_hist", "_p_lat_n", "_prev", "_seen", "distinct",
                 "duplicates", "expected_interval_ms", "first_ts", "gaps", "last_ts", "received", "stale")

    def __init__(self, expected_interval_ms: int, *, window: int = DEDUP_WINDOW) -> None:
        if expected_interval_ms <= 0:
            raise ValidationError(f"expected interval must be positive, not {expected_interval_ms}",
                                  field="interval_ms")
        self.expected_interval_ms = expected_interval_ms
        self.received = self.distinct = self.duplicates = self.stale = 0
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self._seen: set[int] = set()
        self._order: deque[int] = deque(maxlen=window)
        #: The newest timestamp forgotten from the window: older ones cannot be classified.
        self._floor: int | None = None
        self._hist: dict[int, int] = {}
        self._lat_n = 0
        self._p_hist: dict[int, int] = {}
        self._p_lat_n = 0
        self._prev = (0, 0, 0, 0)  # received, distinct, duplicates, missing at the last take_period()
        #: The newest gaps as they were seen: (first missing timestamp, last missing timestamp), so a
        #: reader can tell when events were lost (a late copy filling one later is not taken out).
        self.gaps: deque[tuple[int, int]] = deque(maxlen=GAPS_KEPT)

    def observe(self, ts_ms: int, now_ms: int) -> bool:
        """Count one received event copy; True if its timestamp is new."""
        self.received += 1
        seen = self._seen
        if ts_ms in seen:
            self.duplicates += 1
            return False
        floor = self._floor
        if floor is not None and ts_ms <= floor:  # may be a copy of a forgotten timestamp
            self.stale += 1
            return False
        order = self._order
        if len(order) == order.maxlen:
            oldest = order[0]
            seen.discard(oldest)
            self._floor = oldest if floor is None else max(floor, oldest)
        order.append(ts_ms)
        seen.add(ts_ms)
        self.distinct += 1
        if self.first_ts is None or ts_ms < self.first_ts:
            self.first_ts = ts_ms
        if self.last_ts is None or ts_ms > self.last_ts:
            if self.last_ts is not None and ts_ms - self.last_ts > self.expected_interval_ms:
                self.gaps.append((self.last_ts + self.expected_interval_ms, ts_ms - self.expected_interval_ms))
            self.last_ts = ts_ms
        latency = now_ms - ts_ms
        hist = self._hist
        hist[latency] = hist.get(latency, 0) + 1
        self._lat_n += 1
        p = self._p_hist
        p[latency] = p.get(latency, 0) + 1
        self._p_lat_n += 1
        return True

    @property
    def missing(self) -> int:
        if self.first_ts is None or self.last_ts is None:
            return 0
        expected = (self.last_ts - self.first_ts) // self.expected_interval_ms + 1
        return max(0, expected - self.distinct)

    @property
    def interval_ms(self) -> float | None:
        if self.distinct < 2 or self.first_ts is None or self.last_ts is None:
            return None
        return round((self.last_ts - self.first_ts) / (self.distinct - 1), 3)

    def latency(self) -> dict[str, int | None]:
        return latency_summary(self._hist, self._lat_n)

    def snapshot(self) -> dict[str, Any]:
        """The cumulative counts as a JSON-ready dict."""
        return {"received": self.received, "distinct": self.distinct, "duplicates": self.duplicates,
                "stale": self.stale, "missing": self.missing, "first_ts_ms": self.first_ts,
                "last_ts_ms": self.last_ts, "latency_ms": self.latency(), "interval_ms": self.interval_ms,
                "expected_interval_ms": self.expected_interval_ms,
                "gaps": [{"from_ts_ms": a, "to_ts_ms": b} for a, b in self.gaps]}

    def take_period(self) -> dict[str, Any]:
        """The counts since the previous call, and start a new period."""
        now = (self.received, self.distinct, self.duplicates, self.missing)
        prev = self._prev
        out = {"received": now[0] - prev[0], "distinct": now[1] - prev[1], "duplicates": now[2] - prev[2],
               "missing": now[3] - prev[3], "latency_ms": latency_summary(self._p_hist, self._p_lat_n)}
        self._prev = now
        self._p_hist = {}
        self._p_lat_n = 0
        return out


def _variables(values: list[str], check: Callable[[str], object]) -> list[str]:
    """``--variable`` values: each passing ``check`` (its error named with the value) and given once."""
    out: list[str] = []
    for v in values:
        try:
            check(v)
        except ValidationError as exc:
            raise ValidationError(f"--variable {v!r}: {exc.args[0]}", field="variable") from None
        if v in out:
            raise ValidationError(f"--variable {v!r} is given twice", field="variable")
        out.append(v)
    return out


def parse_subscribed_variables(values: list[str]) -> list[str]:
    """``--variable PUBLISHER/VARIABLE`` values: each well formed and given once."""
    return _variables(values, split_variable_name)


def _own_variable_name(v: str) -> None:
    if "/" in v:
        raise ValidationError("give the variable's own name; the publisher is --name", field="variable")
    check_name(v, what="variable")


def parse_published_variables(values: list[str]) -> list[str]:
    """``--variable NAME`` values of a publisher (no ``/``): each well formed and given once."""
    return _variables(values, _own_variable_name)
