"""Ports on 127.0.0.1 for child processes: one nobody holds, and whether one answers.

A port from :func:`free_port` is free when asked, not reserved: a child told to bind it may still
lose it to another process; the tools that use it (the local Kafka, the chaos suite's operator,
the tests) start the child at once and fail loudly if the bind fails.
"""

from __future__ import annotations

import socket

LOCALHOST = "127.0.0.1"


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port of ``kind`` (TCP by default, ``socket.SOCK_DGRAM`` for UDP) nobody holds on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind((LOCALHOST, 0))
        return int(s.getsockname()[1])


def port_answers(port: int, timeout_s: float = 0.2) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port`` (asked once, bounded)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        return s.connect_ex((LOCALHOST, port)) == 0
