"""Real Apache Kafka (KRaft, one node) on 127.0.0.1 for the tests, through scripts/kafka.sh.

``scripts/kafka.sh run DIR PORT CPORT`` resolves the jars from Maven Central once (cached under
~/.cache/gridstat), formats DIR on first use and execs the broker, so the process we start is
the JVM itself and ``stop`` / ``kill`` reach it directly. A stopped broker restarted on the same
DIR and ports keeps its topics and offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "kafka.sh"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class KafkaProc:
    dir: Path
    port: int
    controller_port: int
    proc: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 90.0) -> None:
        self.log = open(self.dir / "kafka.out", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([str(SCRIPT), "run", str(self.dir), str(self.port), str(self.controller_port)],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Kafka exited with {self.proc.returncode}; see {self.dir / 'kafka.out'}")
            if port_open(self.port):
                wait_ready(self.bootstrap, timeout_s=max(5.0, deadline - time.monotonic()))
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"Kafka did not answer on {self.bootstrap} within {timeout_s:.0f} s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the broker (SIGKILL with ``sig=signal.SIGKILL``) and wait until its port is closed."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if self.log is not None:
            self.log.close()
            self.log = None
        for _ in range(100):
            if not port_open(self.port):
                break
            time.sleep(0.1)


def start_kafka(directory: Path) -> KafkaProc:
    directory.mkdir(parents=True, exist_ok=True)
    k = KafkaProc(directory, free_port(), free_port())
    k.start()
    return k


def wait_ready(bootstrap: str, timeout_s: float = 30.0) -> None:
    """Until the broker answers metadata requests (the controller has elected itself)."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def probe() -> None:
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
            try:
                await admin.start()
                await admin.list_topics()
                return
            except Exception as exc:
                last = exc
                await asyncio.sleep(0.3)
            finally:
                with contextlib.suppress(Exception):
                    await admin.close()
        raise RuntimeError(f"Kafka at {bootstrap} not ready: {last}")

    asyncio.run(probe())


async def consume(bootstrap: str, topic: str, *, timeout_s: float = 20.0,
                  min_records: int = 0) -> list[tuple[bytes | None, bytes]]:
    """Every record now in ``topic``, from the beginning to its current end (key, value pairs).

    Waits up to ``timeout_s`` for at least ``min_records`` (the topic may not exist yet)."""
    from aiokafka import AIOKafkaConsumer

    deadline = time.monotonic() + timeout_s
    out: list[tuple[bytes | None, bytes]] = []
    while True:
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest")
        await c.start()
        try:
            # Without a group the consumer takes every partition once it has the topic's metadata.
            while not c.assignment() and time.monotonic() < deadline:
                await c.getmany(timeout_ms=100)
            tps = sorted(c.assignment())
            if tps:
                await c.seek_to_beginning(*tps)
                end = await c.end_offsets(tps)
                out = []
                while time.monotonic() < deadline:
                    if all([await c.position(tp) >= end[tp] for tp in tps]):
                        break
                    batch = await c.getmany(*tps, timeout_ms=300)
                    for msgs in batch.values():
                        out.extend((m.key, m.value) for m in msgs if m.value is not None)
        finally:
            await c.stop()
        if len(out) >= min_records or time.monotonic() >= deadline:
            return out
        await asyncio.sleep(0.3)
