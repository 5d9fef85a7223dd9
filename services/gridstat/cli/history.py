"""``gridstat history VARIABLE --from T --to T [--interval-ms N] --server HOST:PORT [--json]``.

Asks a history server (``gridstat history-server``, docs/history.md) for the archived values of one
variable and prints them, oldest first: text lines ``2026-11-27T10:00:00.017Z  59.98`` (a trailing
``extrapolated`` where the archive's subscription filled a missed instant), or with ``--json``
(``-o json``) one JSON object per event, ``{"timestamp_ms","value","extrapolated"}``, and a last
line ``{"answer": {...}, "events": N}``. What the server applied (the interval rounded like a live
subscription, the archive's interval, notes) goes to stderr in text mode.

Times ``T``: ISO-8601 (``2026-11-27T10:00:00Z``; without an offset: UTC), milliseconds since the
Unix epoch (``1795000000000``), ``now``, or relative to now (``-10m``, ``-2h``, ``-30s``, ``-1d``,
``-500ms``; written ``--from=-10m``, as argparse reads ``-10m`` alone as an option). Exit codes: 0 ok,
2 invalid input or a bound passed, 4 server or Kafka unavailable.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import re
import sys
import time
from typing import Any

from gridstat.cli.common import EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, TLS_ENV, report_error
from gridstat.errors import GridStatError, ValidationError

HISTORY_ENV = "GRIDSTAT_HISTORY"
DEFAULT_SERVER = "127.0.0.1:7950"
_RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_time(text: str, *, field: str, now_ms: int | None = None) -> int:
    """``T`` as milliseconds since the Unix epoch (see the module docstring); ValidationError naming ``field``."""
    value = text.strip()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if value == "now":
        return now
    m = _RELATIVE.match(value)
    if m:
        return now - int(float(m.group(1)) * _UNIT_MS[m.group(2)])
    if value.isdigit():
        ms = int(value)
        if ms < 10**11:
            raise ValidationError(f"--{field} {text!r} looks like seconds, not milliseconds since the Unix epoch",
                                  field=field)
        return ms
    try:
        stamp = dt.datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError:
        raise ValidationError(f"--{field} {text!r} is not ISO-8601 (2026-11-27T10:00:00Z), epoch milliseconds, "
                              "'now' or relative (-10m, -2h, -30s, -1d)", field=field) from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return (stamp - EPOCH) // dt.timedelta(milliseconds=1)


def iso(ms: int) -> str:
    """``ms`` as ISO-8601 in UTC with milliseconds (exact: no float on the way)."""
    return (EPOCH + dt.timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = "exit codes: 0 ok, 2 invalid input or a bound passed, 4 history server or Kafka unavailable"
    p.add_argument("variable", help="publisher/variable")
    p.add_argument("--from", dest="from_", required=True, metavar="T",
                   help="start (inclusive): ISO-8601, epoch ms, 'now' or relative (--from=-10m)")
    p.add_argument("--to", default="now", metavar="T", help="end (inclusive; default now)")
    p.add_argument("--interval-ms", type=int, default=0,
                   help="rate-filter as a live subscription at this interval (default 0: every archived event)")
    p.add_argument("--max-events", type=int, default=0, help="at most this many events (0: the server's bound)")
    p.add_argument("--server", default=None, metavar="HOST:PORT",
                   help=f"the history server (default ${HISTORY_ENV}, else {DEFAULT_SERVER})")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS", help="deadline of the whole answer")
    p.add_argument("--json", action="store_true", help="JSON lines: one per event, then the answer")
    p.add_argument("--output", "-o", choices=("table", "json"), default="table", help="json = --json")
    p.add_argument("--tls-ca", default="", metavar="PEM",
                   help="CA of the server's certificate (default $GRIDSTAT_TLS_CA)")
    p.add_argument("--tls-cert", default="", metavar="PEM",
                   help="client certificate (mTLS; default $GRIDSTAT_TLS_CERT)")
    p.add_argument("--tls-key", default="", metavar="PEM", help="key of --tls-cert (default $GRIDSTAT_TLS_KEY)")


def _tls(args: argparse.Namespace) -> Any:
    from gridstat.core.tls import TlsFiles

    ca, cert, key = args.tls_ca, args.tls_cert, args.tls_key
    if not (ca or cert or key):
        ca, cert, key = (os.environ.get(name, "") for name in TLS_ENV)
    if bool(cert) != bool(key):
        raise ValidationError("--tls-cert and --tls-key go together", field="tls_key" if cert else "tls_cert")
    return TlsFiles(cert, key, ca) if (ca or cert) else None


def _answer_json(answer: Any) -> dict[str, Any]:
    if answer is None:
        return {}
    return {"variable": answer.variable, "from_ms": answer.from_ms, "to_ms": answer.to_ms,
            "interval_ms": answer.interval_ms, "archive_interval_ms": answer.archive_interval_ms,
            "pub_interval_ms": answer.pub_interval_ms, "frames_per_s": answer.frames_per_s,
            "notes": list(answer.notes)}


async def _query(args: argparse.Namespace, server: str, from_ms: int, to_ms: int, as_json: bool) -> int:
    from gridstat.client.history import HistoryClient, events_of

    client = await HistoryClient.connect(server, tls=_tls(args), timeout_s=args.timeout)
    n = 0
    out = sys.stdout
    try:
        async for chunk in client.chunks(args.variable, from_ms=from_ms, to_ms=to_ms, interval_ms=args.interval_ms,
                                         max_events=args.max_events):
            if chunk.HasField("answer") and not as_json:
                a = client.last_answer
                assert a is not None
                applied = f"{a.interval_ms} ms" if a.interval_ms else "every archived event"
                frames = f", {a.frames_per_s} frames/s" if a.frames_per_s else ""
                print(f"# {a.variable} [{iso(a.from_ms)}, {iso(a.to_ms)}]: {applied} (archive "
                      f"{a.archive_interval_ms} ms, publication {a.pub_interval_ms} ms{frames})", file=sys.stderr)
                for note in a.notes:
                    print(f"# note: {note}", file=sys.stderr)
            lines = []
            for ev in events_of(chunk):
                if as_json:
                    lines.append(json.dumps({"timestamp_ms": ev.timestamp_ms, "value": ev.value,
                                             "extrapolated": ev.extrapolated}, separators=(",", ":")))
                else:
                    lines.append(f"{iso(ev.timestamp_ms)}  {ev.value}{'  extrapolated' if ev.extrapolated else ''}")
            n += len(lines)
            if lines:
                out.write("\n".join(lines) + "\n")
    finally:
        await client.close()
    if as_json:
        print(json.dumps({"answer": _answer_json(client.last_answer), "events": n}, separators=(",", ":")))
    else:
        print(f"# {n} events", file=sys.stderr)
    out.flush()
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    as_json = bool(args.json or args.output == "json")
    output = "json" if as_json else None
    try:
        from gridstat.cli.common import parse_address

        server = parse_address(args.server or os.environ.get(HISTORY_ENV) or DEFAULT_SERVER, "server")
        now = int(time.time() * 1000)
        from_ms = parse_time(args.from_, field="from", now_ms=now)
        to_ms = parse_time(args.to, field="to", now_ms=now)
        if not args.timeout > 0:
            raise ValidationError(f"--timeout must be positive, not {args.timeout:g}", field="timeout")
        return asyncio.run(_query(args, server, from_ms, to_ms, as_json))
    except GridStatError as exc:
        code = EXIT_UNAVAILABLE if exc.retriable else EXIT_USAGE
        report_error("history", exc, code, output=output)
        return code
