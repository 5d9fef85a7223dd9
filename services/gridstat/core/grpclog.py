"""Refused TLS handshakes made countable (docs/security.md: calls without a valid client certificate
are refused and counted, with a clear log line and metric).

gRPC refuses a connection without a valid client certificate inside its C core, during the TLS
handshake: Python never sees a call, so no handler or interceptor can count it. What the C core
does is write one line per failed handshake to the process's stderr ("Handshake failed with error
SSL_ERROR_SSL: ... PEER_DID_NOT_RETURN_A_CERTIFICATE ..."). :func:`tap_stderr` puts a pipe in
front of file descriptor 2 and reads it in a daemon thread that passes every byte on unchanged,
counts those lines by reason, and writes one summary line of its own per reason at most every
``LOG_EVERY_S`` (a scanner cannot flood the log). Role processes call it at start when they serve
TLS; it is never installed in a library user's or a test runner's process.

The reader never logs through :mod:`logging`: that would write to stderr, i.e. into the pipe it is
the only reader of. It writes to the saved original descriptor directly. At exit the original
descriptor is put back and the reader drains the pipe first, so the last lines a process writes
(its error message, say) still reach the real stderr.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading
import time
from collections import Counter

LOG_EVERY_S = 10.0
_HANDSHAKE = re.compile(rb"Handshake failed with (?:fatal )?error ([A-Z_]+)(?::\s*(.*))?")
#: OpenSSL/BoringSSL reason -> the metric's reason label.
_REASONS = (
    (b"PEER_DID_NOT_RETURN_A_CERTIFICATE", "no_client_certificate"),
    (b"CERTIFICATE_VERIFY_FAILED", "certificate_not_trusted"),
    (b"TLSV1_ALERT_UNKNOWN_CA", "certificate_not_trusted"),
    (b"CERTIFICATE_EXPIRED", "certificate_expired"),
    (b"WRONG_VERSION_NUMBER", "not_tls"),
    (b"HTTP_REQUEST", "not_tls"),
)

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_installed = False


def reason_of(line: bytes) -> str | None:
    """The reason label of a C-core handshake-failure line; None for any other line."""
    m = _HANDSHAKE.search(line)
    if m is None:
        return None
    for needle, reason in _REASONS:
        if needle in line:
            return reason
    return "handshake_failed"


def refused() -> dict[str, int]:
    """Failed TLS handshakes since the tap was installed, by reason (empty without the tap)."""
    with _lock:
        return dict(_counts)


def installed() -> bool:
    return _installed


def count_lines(data: bytes, pending: bytes = b"") -> tuple[list[str], bytes]:
    """Split ``pending + data`` into complete lines; the reasons of the handshake failures among them
    and the incomplete tail."""
    buf = pending + data
    *lines, tail = buf.split(b"\n")
    return [r for r in (reason_of(line) for line in lines) if r is not None], tail[-4096:]


def tap_stderr() -> bool:
    """Install the tap (idempotent); False if file descriptor 2 cannot be replaced."""
    global _installed
    with _lock:
        if _installed:
            return True
        try:
            original = os.dup(2)
            r, w = os.pipe()
            os.dup2(w, 2)
            os.close(w)
        except OSError:
            return False
        _installed = True
    reader = threading.Thread(target=_pump, args=(r, original), name="grpc-stderr-tap", daemon=True)
    reader.start()
    atexit.register(_untap, reader, original)
    return True


def _untap(reader: threading.Thread, original: int, timeout_s: float = 2.0) -> None:
    """Put the original stderr back; the pipe's last writer is gone, so the reader drains it and ends."""
    try:
        sys.stderr.flush()
        os.dup2(original, 2)
    except (OSError, ValueError):
        return
    reader.join(timeout_s)


def _pump(r: int, out: int) -> None:
    pending = b""
    last_logged: dict[str, float] = {}
    logged_at: Counter[str] = Counter()
    while True:
        try:
            data = os.read(r, 65536)
        except InterruptedError:  # pragma: no cover - retried by Python already
            continue
        except OSError:
            return
        if not data:
            return
        _write(out, data)
        reasons, pending = count_lines(data, pending)
        if not reasons:
            continue
        now = time.monotonic()
        with _lock:
            _counts.update(reasons)
            snapshot = dict(_counts)
        for reason in set(reasons):
            if now - last_logged.get(reason, -LOG_EVERY_S) >= LOG_EVERY_S:
                last_logged[reason] = now
                new = snapshot[reason] - logged_at[reason]
                logged_at[reason] = snapshot[reason]
                _write(out, (f"{time.strftime('%Y-%m-%d %H:%M:%S')} WARNING gridstat.tls: refused {new} gRPC "
                             f"connection(s): TLS handshake failed ({reason}); {snapshot[reason]} since start "
                             "(metric gridstat_tls_handshakes_refused_total)\n").encode())


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except OSError:  # the original stderr is gone: keep draining the pipe regardless
            return
        view = view[n:]
