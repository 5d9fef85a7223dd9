"""Starting and stopping a role as a child process: the one way the demo, chaos, bench and tests do it.

Every role prints one line ``READY name=<name> port=<port> [control_port=<port>] [key=value ...]``
on stdout once it serves (routers, brokers, the admission controller, a condensation host).
:func:`parse_ready` reads such a line into its fields; :func:`spawn` starts a command, waits a
bounded time for that line and returns the process with the fields, or raises :class:`ChildFailed`
naming the child, its exit code and its last output; :func:`stop` ends a child with SIGTERM, then
SIGKILL after a grace period, and always reaps it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from gridstat.errors import GridStatError

READY_PREFIX = "READY "
READY_TIMEOUT_S = 20.0
STOP_GRACE_S = 10.0


class ChildFailed(GridStatError):
    """A child process did not start: it exited, or printed no READY line in time."""

    reason = "Unavailable"


def parse_ready(line: str) -> dict[str, str] | None:
    """``READY name=e1 port=7801 control_port=7901`` -> its fields; None for any other line."""
    text = line.strip()
    if not text.startswith(READY_PREFIX):
        return None
    fields: dict[str, str] = {}
    for part in text[len(READY_PREFIX):].split():
        key, sep, value = part.partition("=")
        if sep and key:
            fields[key] = value
    return fields if "name" in fields else None


def ready_port(fields: Mapping[str, str], key: str = "port") -> int:
    """A port of a READY line's fields, as an int (ChildFailed if it is missing or not a port)."""
    value = fields.get(key, "")
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise ChildFailed(f"READY line of {fields.get('name', '?')!r} has no {key}: {dict(fields)}", field=key)
    return int(value)


def spawn(cmd: Sequence[str], *, what: str, timeout_s: float = READY_TIMEOUT_S,
          env: Mapping[str, str] | None = None, stderr: int | IO[Any] | None = subprocess.DEVNULL,
          stdin: int | IO[Any] | None = subprocess.DEVNULL) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """Start ``cmd`` and wait up to ``timeout_s`` for its READY line (:func:`wait_ready`); the process
    and the line's fields. On failure the child is killed and reaped and :class:`ChildFailed` names ``what``."""
    proc = subprocess.Popen(list(cmd), stdin=stdin, stdout=subprocess.PIPE, stderr=stderr, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    try:
        return proc, wait_ready(proc, what=what, timeout_s=timeout_s)
    except ChildFailed:
        stop(proc, signal.SIGKILL)
        raise


def wait_ready(proc: subprocess.Popen[Any], *, what: str, timeout_s: float = READY_TIMEOUT_S) -> dict[str, str]:
    """The fields of the READY line a started child prints on its stdout pipe within ``timeout_s``
    (children started together are waited for one after the other, each with what is left).

    Lines before READY are skipped (and kept for the error). The pipe is read a byte at a time up to
    the READY line: a buffered readline could take the READY line into its buffer with an earlier
    one and select would then wait on an empty pipe; nothing after it is consumed. A child that
    exits or stays silent is left as it is and :class:`ChildFailed` names ``what`` and its last output.
    """
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    seen: list[str] = []
    pending = b""
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 0.2)[0]:
            chunk = os.read(fd, 1)
            if not chunk:
                break  # stdout closed: the child exited
            if chunk != b"\n":
                pending += chunk
                continue
            line, pending = pending.decode(errors="replace"), b""
            fields = parse_ready(line)
            if fields is not None:
                return fields
            seen = [*seen[-4:], line.rstrip()]
        elif proc.poll() is not None:
            break
    said = f"; its last output: {' | '.join(seen)}" if seen else ""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=0.5)  # stdout closes a moment before the exit code can be had
    raise ChildFailed(f"{what} did not start (exit code {proc.poll()}, no READY line within "
                      f"{timeout_s:g} s){said}", field="process")


def stop(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, grace_s: float = STOP_GRACE_S) -> int | None:
    """Signal a child and reap it; SIGKILL if it has not exited within ``grace_s``. Its exit code."""
    if proc.poll() is None:
        _signal(proc, sig)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL)
            proc.wait(timeout=grace_s)
    return proc.returncode


def _signal(proc: subprocess.Popen[Any], sig: int) -> None:
    """Send ``sig`` unless the child is already gone (it may exit between the check and the signal)."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
