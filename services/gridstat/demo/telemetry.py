"""Telemetry of ``gridstat up --kafka`` / ``--metrics``: a local Kafka, the demo's own exporter and an archive.

With ``--kafka`` (no address) a real Apache Kafka (KRaft) is started on 127.0.0.1 through
scripts/kafka.sh (``telemetry.localkafka``); with ``--kafka HOST:PORT`` that Kafka is used. Every
child role inherits ``GRIDSTAT_KAFKA`` (and ``GRIDSTAT_METRICS_PORT=0`` with ``--metrics``), so
routers and brokers export and serve /metrics exactly as they would in a deployment. This
process exports its subscriptions' delivery samples (``roles.add_subscriber``) and, with Kafka,
archives every published variable at ``ARCHIVE_INTERVAL_MS`` (or its publication interval if
longer) through one archive subscriber per publisher's edge router, into
``gridstat.archive.measurements`` (the historian path ``gridstat archive`` offers as a role).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from gridstat.client import Publisher, Subscriber, SubscriptionRejected
from gridstat.core.children import parse_ready
from gridstat.core.tls import TlsFiles
from gridstat.demo import topology as topo
from gridstat.errors import GridStatError
from gridstat.telemetry import Archiver, RoleTelemetry, roles
from gridstat.telemetry.localkafka import LocalKafka

ARCHIVE_INTERVAL_MS = 100


def archive_name(edge: str) -> str:
    """The client name (and certificate identity) of the archive subscriber at an edge router."""
    return f"archive-{edge}"


def archive_names(publishers: Iterable[topo.Publisher]) -> list[str]:
    return sorted({archive_name(p.edge) for p in publishers})


def metrics_port(ready_line: str) -> int | None:
    fields = parse_ready(ready_line) or {}
    value = fields.get("metrics_port", "")
    return int(value) if value.isdigit() else None


class DemoTelemetry:
    """Owns the local Kafka (if any), this process's exporter and the archive subscribers."""

    def __init__(self, *, kafka: str | None, metrics: bool) -> None:
        self.kafka_arg = kafka
        self.metrics = metrics
        self.local: LocalKafka | None = None
        self.bootstrap = ""
        self.tel: RoleTelemetry | None = None
        self.archive: Archiver | None = None
        self.archivers: list[Subscriber] = []
        self.archived: set[str] = set()
        self.notes: list[str] = []
        self._dir: Path | None = None

    def start_kafka(self) -> str:
        """Before any child starts: start or name Kafka and export the environment the children read."""
        if self.kafka_arg == "local":
            self._dir = Path(tempfile.mkdtemp(prefix="gridstat-up-kafka-"))
            self.local = LocalKafka(self._dir)
            self.local.start()
            self.bootstrap = self.local.bootstrap
        elif self.kafka_arg:
            self.bootstrap = self.kafka_arg
        if self.bootstrap:
            os.environ["GRIDSTAT_KAFKA"] = self.bootstrap
        if self.metrics:
            os.environ["GRIDSTAT_METRICS_PORT"] = "0"
        self.tel = RoleTelemetry("subscriber", "gridstat-up", kafka=self.bootstrap,
                                 metrics_port=0 if self.metrics else roles.METRICS_OFF)
        return self.bootstrap

    async def attach(self, subscribers: Iterable[Subscriber], publishers: Iterable[topo.Publisher],
                     edge_control: dict[str, str],
                     tls_of: Callable[[str], TlsFiles | None] = lambda name: None,
                     sdk_publishers: Iterable[Publisher] = ()) -> None:
        """Export the subscribers' samples and the publishers' metrics; with Kafka, archive every published
        variable (one subscriber ``archive-<edge>`` per edge router, with ``tls_of(name)``: its certificate,
        or None for plaintext)."""
        assert self.tel is not None
        for sub in subscribers:
            roles.add_subscriber(self.tel, sub)
        for pub in sdk_publishers:
            roles.add_publisher(self.tel, pub)
        if self.tel.exporter is not None:
            self.archive = Archiver(self.tel.exporter)
            by_edge: dict[str, list[topo.Variable]] = {}
            for p in publishers:
                by_edge.setdefault(p.edge, []).extend(p.variables)
            for edge, variables in by_edge.items():
                try:
                    name = archive_name(edge)
                    sub = await Subscriber.connect(name, edge_control[edge], tls=tls_of(name))
                except GridStatError as exc:
                    self.notes.append(f"archive at {edge}: {exc}")
                    continue
                self.archivers.append(sub)
                for v in variables:
                    try:
                        await sub.subscribe_remote(v.full_name, v.type_spec,
                                                   interval_ms=max(ARCHIVE_INTERVAL_MS, v.interval_ms),
                                                   latency_ms=1000, on_event=self.archive.on_event)
                    except (SubscriptionRejected, GridStatError) as exc:
                        self.notes.append(f"archive of {v.full_name}: {exc}")
                        continue
                    self.archived.add(v.full_name)
                roles.add_subscriber(self.tel, sub)
        await self.tel.start()

    def lines(self, ready_lines: dict[str, str]) -> list[str]:
        """What to tell the user: Kafka, topics, /metrics endpoints."""
        out = []
        if self.bootstrap:
            where = f"local Apache Kafka (KRaft) in {self._dir}" if self.local is not None else "given"
            out.append(f"  telemetry kafka={self.bootstrap} ({where}); topics gridstat.telemetry.*; "
                       f"archive of {len(self.archived)} variables in gridstat.archive.measurements")
        if self.metrics:
            ports = {n: metrics_port(line) for n, line in ready_lines.items()}
            listed = " ".join(f"{n}={p}" for n, p in ports.items() if p)
            if self.tel is not None and self.tel.metrics_port is not None:
                listed += f" gridstat-up={self.tel.metrics_port}"
            out.append(f"  metrics http://127.0.0.1:PORT/metrics {listed}")
        out += [f"  note {n}" for n in self.notes]
        return out

    async def stop(self) -> None:
        for sub in self.archivers:
            with contextlib.suppress(Exception):
                await sub.stop()
        if self.tel is not None:
            await self.tel.stop()

    def stop_kafka(self) -> None:
        """After every child has stopped."""
        if self.local is not None:
            self.local.stop()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
