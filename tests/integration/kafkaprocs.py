"""Real Apache Kafka (KRaft, one node) on 127.0.0.1 for the tests, through scripts/kafka.sh
(``gridstat.telemetry.localkafka``, the one ``gridstat up --kafka`` starts).

``scripts/kafka.sh run DIR PORT CPORT`` resolves the jars from Maven Central once (cached under
~/.cache/gridstat), formats DIR on first use and execs the broker, so the process we start is
the JVM itself and ``stop`` / ``kill`` reach it directly. A stopped broker restarted on the same
DIR and ports keeps its topics and offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from pathlib import Path

from gridstat.core.ports import port_answers
from gridstat.core.waiting import wait_for
from gridstat.telemetry.localkafka import LocalKafka

ROOT = Path(__file__).resolve().parents[2]


class KafkaProc(LocalKafka):
    """``gridstat.telemetry.localkafka.LocalKafka`` for the tests: ``start`` also waits until the broker
    answers metadata requests, ``stop`` until its port is closed (so a restart binds it again)."""

    def start(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        super().start(timeout_s)
        wait_ready(self.bootstrap, timeout_s=max(5.0, deadline - time.monotonic()))

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> None:
        """Stop the broker (SIGKILL with ``sig=signal.SIGKILL``) and wait until its port is closed."""
        super().stop(sig, timeout_s)
        wait_for(lambda: not port_answers(self.port), timeout_s=10, step_s=0.1)


def start_kafka(directory: Path) -> KafkaProc:
    k = KafkaProc(directory)
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
