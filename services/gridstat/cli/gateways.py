"""What the device-gateway commands share (``pmu-gateway``, ``iec104-gateway``, ``dnp3-gateway``,
``goose-gateway``, ``sttp-gateway``): their common options, the checks of those options, the head of
their stats lines, and serving a gateway until SIGTERM, SIGINT or ``--duration-s``.

Each command keeps its own options, its checks of them and its stats line's words; these helpers keep
the flags, defaults, help texts and error messages the commands always had.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from gridstat.cli.common import EXIT_OK
from gridstat.cli.traffic import Runner, check_positive, is_loopback_host
from gridstat.core import clock
from gridstat.core.model import PRIORITY_LOW, check_name
from gridstat.errors import ValidationError
from gridstat.telemetry import roles as telemetry

#: A stats line: the JSON object and the text line (``Runner.emit``).
StatsLine = tuple[dict[str, Any], str]


def add_reporting_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--stats-every-s`` and ``--duration-s``."""
    p.add_argument("--stats-every-s", type=float, default=1.0, metavar="S",
                   help="print a stats line every S seconds (0: only the final line; default 1)")
    p.add_argument("--duration-s", type=float, default=None, metavar="S",
                   help="stop after S seconds (default: run until SIGTERM or SIGINT)")


def add_name_arguments(p: argparse.ArgumentParser, default: str) -> None:
    """``--name`` (in the stats lines), then ``--stats-every-s`` and ``--duration-s``."""
    p.add_argument("--name", default=default, metavar="NAME", help="this gateway's name in its stats lines")
    add_reporting_arguments(p)


def add_edge_timeout_argument(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--timeout``: the deadline of each call to the edge router."""
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="deadline of each call to the edge router (default 10)")


def add_reconnect_arguments(t: argparse._ArgumentGroup) -> None:
    """The device link's back-off (``ReconnectPolicy``) and ``--timeout``."""
    t.add_argument("--retry-initial-s", type=float, default=0.5, metavar="S", help="first back-off (default 0.5)")
    t.add_argument("--retry-max-s", type=float, default=30.0, metavar="S", help="longest back-off (default 30)")
    t.add_argument("--healthy-after-s", type=float, default=30.0, metavar="S",
                   help="a connection up this long resets the back-off (default 30)")
    add_edge_timeout_argument(t)


def parse_device_address(value: str, *, allow_remote: bool, default_port: int, flag: str, remote_flag: str,
                         peer: str, bare_ipv6: bool = False) -> tuple[str, int]:
    """``HOST[:PORT]`` of a device (``default_port`` if omitted); a host other than the loopback only with
    ``remote_flag``. ``bare_ipv6``: ``[v6]`` without a port is the address at ``default_port``."""
    text = value.strip()
    host, sep, port = text.rpartition(":")
    if not sep or (bare_ipv6 and "]" in port):
        host, port = text, str(default_port)
    host = host.strip("[]")
    field = flag.lstrip("-").replace("-", "_")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValidationError(f"{flag} {value!r} is not HOST:PORT", field=field)
    if not allow_remote and not is_loopback_host(host):
        raise ValidationError(f"{flag} {value!r} is not on this host: add {remote_flag} to talk to {peer} "
                              f"on the network", field=field)
    return host, int(port)


def check_priority(priority: int, *, lowest: int = 0) -> None:
    """``--priority`` in ``lowest .. PRIORITY_LOW``."""
    if not lowest <= priority <= PRIORITY_LOW:
        raise ValidationError(f"--priority must be {lowest}..{PRIORITY_LOW}, not {priority}", field="priority")


def check_intervals(args: argparse.Namespace, max_ms: int, flags: Iterable[str] = ("interval_ms", "min_interval_ms")
                    ) -> None:
    """``--interval-ms`` and ``--min-interval-ms`` (when given) in ``1 .. max_ms``."""
    for flag in flags:
        value = getattr(args, flag)
        if value is not None and not 1 <= value <= max_ms:
            raise ValidationError(f"--{flag.replace('_', '-')} must be 1..{max_ms}, not {value}", field=flag)


def check_common(args: argparse.Namespace, *, positive: Iterable[str], non_negative: Iterable[str]) -> None:
    """``--name``; the ``positive`` and ``non_negative`` options (attribute names); ``--duration-s``; and,
    with a back-off, ``--retry-initial-s`` not above ``--retry-max-s``."""
    check_name(args.name, what="name")
    for flag in positive:
        check_positive(getattr(args, flag), f"--{flag.replace('_', '-')}")
    for flag in non_negative:
        check_positive(getattr(args, flag), f"--{flag.replace('_', '-')}", allow_zero=True)
    check_positive(args.duration_s, "--duration-s")
    retry_initial_s = getattr(args, "retry_initial_s", None)
    if retry_initial_s is not None and retry_initial_s > args.retry_max_s:
        raise ValidationError("--retry-initial-s is above --retry-max-s", field="retry_initial_s")


def stats_head(kind: str, args: argparse.Namespace, runner: Runner, *, final: bool) -> dict[str, Any]:
    """The first keys of every gateway's stats object."""
    return {"kind": kind, "name": args.name, "final": final, "ts_ms": clock.now_ms(),
            "uptime_s": round(time.monotonic() - runner.started, 3)}


def counts_text(counts: Mapping[str, Any]) -> str:
    """``key:n,key:n`` sorted by key, ``-`` when empty (a stats line's counts by kind)."""
    return ",".join(f"{k}:{v}" for k, v in sorted(counts.items())) or "-"


async def serve(runner: Runner, run: Callable[[asyncio.Event], Awaitable[None]],
                stats: Callable[[bool], StatsLine], *, tel: telemetry.RoleTelemetry | None = None) -> int:
    """Run a gateway (``run(runner.stop)``) with a stats line every ``--stats-every-s`` until stopped;
    then stop it, stop its telemetry and print the final line."""
    task = asyncio.ensure_future(run(runner.stop))
    try:
        await runner.report_until_stopped(lambda: stats(False))
        await task
    finally:
        runner.stop.set()
        if not task.done():
            await task
        if tel is not None:
            await tel.stop()
        runner.emit(*stats(True))
    return EXIT_OK
