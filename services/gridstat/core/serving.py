"""A role's process, from its command line to its exit: the steps the broker, the admission
controller and the condensation host share.

:func:`run` sets up the process (logging at ``--log-level`` to stderr, ``--exit-with-parent``, the
fast event loop) and runs the role's coroutine; :func:`listen` binds a started-to-be gRPC server
(TLS only when given certificates) and starts it; :func:`until_signalled` prints the role's
``READY`` line (``core.children`` reads it) and waits for SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import grpc

from gridstat.core.aio import exit_with_parent, install_fast_loop
from gridstat.core.tls import TlsFiles
from gridstat.errors import ValidationError

T = TypeVar("T")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def run(args: argparse.Namespace, main: Callable[[], Coroutine[Any, Any, T]], *, fast_loop: bool = True) -> T:
    """Log at ``args.log_level`` to stderr, die with the parent if ``args.exit_with_parent``, use uvloop
    unless ``fast_loop`` is False, then run ``main()`` to its end: its result."""
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr, format=LOG_FORMAT)
    if args.exit_with_parent:
        exit_with_parent()
    if fast_loop:
        install_fast_loop()
    return asyncio.run(main())


async def listen(server: grpc.aio.Server, host: str, port: int, tls: TlsFiles | None) -> int:
    """Bind ``server`` to ``host:port`` (0 = any free port; TLS only with ``tls``) and start it: the port
    bound. :class:`ValidationError` if it cannot bind."""
    if tls is None:
        bound = int(server.add_insecure_port(f"{host}:{port}"))
    else:
        bound = int(server.add_secure_port(f"{host}:{port}", tls.server_credentials()))
    if bound == 0:
        raise ValidationError(f"cannot bind {host}:{port}", field="port")
    await server.start()
    return bound


def stop_signals() -> asyncio.Event:
    """An event set when the process gets SIGTERM or SIGINT (handlers on the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def until_signalled(ready: str) -> None:
    """Print the role's ``ready`` line (``READY name=... port=...``) and wait for SIGTERM or SIGINT."""
    stop = stop_signals()
    print(ready, flush=True)
    await stop.wait()
