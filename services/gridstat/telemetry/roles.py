"""Wiring telemetry into a role process in a few lines of its ``main``.

A role's ``add_arguments`` calls ``add_arguments(p)``; after the role has started, its
``_run`` builds a ``RoleTelemetry`` with one of the ``for_*`` helpers, starts it, appends
``ready_suffix()`` to its READY line, and stops it before the role stops::

    tel = roles.for_router(router, args)
    await tel.start()
    print(f"READY ...{tel.ready_suffix()}")
    ...
    await tel.stop()

With neither ``--kafka`` nor ``--metrics-port`` nothing is started and nothing is imported
beyond this package (aiokafka is imported by the exporter's task only).

Stop order: the reporter (one last sampling pass, so the final counts go out), then the
exporter (flushes within its timeout, counts the rest as lost), then the metrics server.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from prometheus_client import CollectorRegistry

from gridstat.core import access, grpclog

from . import kafka_security, metrics
from .exporting import ExporterConfig, TelemetryExporter
from .kafka_security import KafkaSecurity
from .recording import BrokerRecorder
from .sampling import BrokerModeSampler, Reporter, RouterSampler, Sampler, SubscriberLike, SubscriberSampler
from .serving import HealthCheck, MetricsServer

#: --metrics-port value that turns the /metrics endpoint off.
METRICS_OFF = -1
#: The router's /healthz turns 503 when its loop heartbeat is older than this (--healthz-max-age-ms).
DEFAULT_HEALTHZ_MAX_AGE_MS = 5000


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Telemetry options common to every role (defaults from GRIDSTAT_KAFKA / GRIDSTAT_METRICS_PORT)."""
    g = p.add_argument_group("telemetry (Kafka) and metrics (Prometheus)")
    g.add_argument("--kafka", default=os.environ.get("GRIDSTAT_KAFKA", ""), metavar="HOST:PORT[,HOST:PORT]",
                   help="export telemetry records to this Kafka (docs/telemetry.md); default $GRIDSTAT_KAFKA or off")
    g.add_argument("--metrics-port", type=int, default=int(os.environ.get("GRIDSTAT_METRICS_PORT", METRICS_OFF)),
                   help="serve Prometheus /metrics on this port (0 = any free port, -1 = off; "
                        "default $GRIDSTAT_METRICS_PORT or off)")
    g.add_argument("--metrics-host", default="127.0.0.1", help="address of the /metrics endpoint")
    g.add_argument("--telemetry-interval-ms", type=int, default=1000,
                   help="sampling period of the exported counters and delivery samples")
    g.add_argument("--telemetry-buffer", type=int, default=20_000,
                   help="records held while Kafka is slow or away; beyond it the oldest are dropped and counted")
    g.add_argument("--telemetry-compression", default="lz4", choices=["lz4", "zstd", "snappy", "gzip", "none"])
    g.add_argument("--telemetry-exporter", default="", metavar="ID",
                   help="the exporter id stamped on every record (default role/NAME): unique among the running "
                        "processes, the same after a restart (docs/telemetry.md, Exactly once)")
    kafka_security.add_arguments(g)  # --kafka-tls-*, --kafka-sasl-* (docs/telemetry.md, "Kafka security")


class RoleTelemetry:
    """The telemetry of one role process: exporter, sampling reporter and /metrics server, each optional."""

    def __init__(self, role: str, name: str, *, kafka: str = "", metrics_host: str = "127.0.0.1",
                 metrics_port: int = METRICS_OFF, interval_ms: int = 1000, buffer_records: int = 20_000,
                 compression: str = "lz4", exporter_id: str = "",
                 security: KafkaSecurity = kafka_security.PLAINTEXT) -> None:
        self.role, self.name = role, name
        self.exporter: TelemetryExporter | None = None
        self.reporter: Reporter | None = None
        if kafka:
            self.exporter = TelemetryExporter(ExporterConfig(
                bootstrap=kafka, role=role, source=name, buffer_records=buffer_records, compression=compression,
                exporter=exporter_id, security=security))
            self.reporter = Reporter(self.exporter, interval_s=interval_ms / 1000)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(metrics.TlsRefusalsCollector(role, name, grpclog.refused))
        self.registry.register(metrics.RpcDenialsCollector(role, name, access.denied))
        self.server = MetricsServer(self.registry, metrics_host, metrics_port) if metrics_port >= 0 else None
        if self.exporter is not None:
            exp = self.exporter
            self.registry.register(metrics.ExporterCollector(role, name, lambda: exp.stats, lambda: exp.buffered,
                                                             exp.config.buffer_records))
        self._started = self._closed = False

    @classmethod
    def from_args(cls, role: str, name: str, args: argparse.Namespace) -> RoleTelemetry:
        """From ``add_arguments``' options; a ValidationError naming the flag for bad Kafka security options."""
        security = KafkaSecurity.from_args(args) if args.kafka else kafka_security.PLAINTEXT
        return cls(role, name, kafka=args.kafka, metrics_host=args.metrics_host, metrics_port=args.metrics_port,
                   interval_ms=args.telemetry_interval_ms, buffer_records=args.telemetry_buffer,
                   compression=args.telemetry_compression, exporter_id=getattr(args, "telemetry_exporter", ""),
                   security=security)

    @property
    def enabled(self) -> bool:
        return self.exporter is not None or self.server is not None

    def add_sampler(self, sampler: Sampler) -> None:
        if self.reporter is not None:
            self.reporter.add(sampler)

    def add_collector(self, collector: Any) -> None:
        self.registry.register(collector)

    def set_health(self, check: HealthCheck) -> None:
        """What ``/healthz`` on the metrics port answers (serving.MetricsServer); no-op without /metrics."""
        if self.server is not None:
            self.server.health = check

    def set_readiness(self, check: HealthCheck) -> None:
        """What ``/readyz`` on the metrics port answers (serving.MetricsServer); no-op without /metrics."""
        if self.server is not None:
            self.server.readiness = check

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        if self.exporter is not None:
            await self.exporter.start()
        if self.reporter is not None:
            await self.reporter.start()
        if self.server is not None:
            await self.server.start()

    async def stop(self, timeout_s: float = 3.0) -> None:
        if self._closed:
            return
        self._closed = True
        if self.reporter is not None:
            await self.reporter.stop()
        if self.exporter is not None:
            await self.exporter.stop(timeout_s)
        if self.server is not None:
            await self.server.stop()

    @property
    def metrics_port(self) -> int | None:
        return self.server.port if self.server is not None and self._started else None

    def ready_suffix(self) -> str:
        """`` metrics_port=N`` for a role's READY line when /metrics is served, else ``""``."""
        port = self.metrics_port
        return "" if port is None else f" metrics_port={port}"


def for_router(router: Any, args: argparse.Namespace) -> RoleTelemetry:
    """Telemetry of a ``router.process.StatusRouter`` (counters, drops, mode; /metrics)."""
    tel = RoleTelemetry.from_args("router", router.config.name, args)

    def capacities() -> dict[str, int]:
        return {name: int(ch.capacity) for name, ch in router.channels.items()}

    tel.add_sampler(RouterSampler(router.config.name, router.stats, capacities))
    tel.add_collector(metrics.RouterCollector(router.stats, capacities))
    # /healthz: 503 once the router's loop heartbeat is older than --healthz-max-age-ms (a wedged loop)
    max_age_s = getattr(args, "healthz_max_age_ms", DEFAULT_HEALTHZ_MAX_AGE_MS) / 1000
    tel.set_health(lambda: router.health(max_age_s))
    # /readyz: 503 until its broker has installed this boot's tables (a rollout waits for it)
    tel.set_readiness(router.readiness)
    return tel


def for_leaf_broker(broker: Any, args: argparse.Namespace) -> RoleTelemetry:
    """Telemetry of a ``broker.leaf.LeafBroker``: admission decisions and mode changes; /metrics."""
    tel = RoleTelemetry.from_args("broker", broker.name, args)
    modes = BrokerModeSampler(broker.name, lambda: int(broker.current_mode))
    recorder = BrokerRecorder(broker.name, tel.exporter, modes=modes)
    recorder.attach(broker)
    tel.add_sampler(modes)
    tel.add_collector(metrics.LeafBrokerCollector(broker, recorder))
    return tel


def for_parent_broker(broker: Any, args: argparse.Namespace) -> RoleTelemetry:
    """Telemetry of a ``broker.parent_service.ParentBroker`` (/metrics; its mode changes)."""
    tel = RoleTelemetry.from_args("broker", broker.name, args)
    recorder = BrokerRecorder(broker.name, tel.exporter)
    if hasattr(broker, "change_mode"):
        broker.change_mode = recorder._wrap_mode(broker, broker.change_mode)
    tel.add_collector(metrics.ParentBrokerCollector(broker, recorder))
    return tel


def for_admission(controller: Any, name: str, args: argparse.Namespace) -> RoleTelemetry:
    """Telemetry of the admission controller (``admission.admitting.AdmissionController``): /metrics."""
    tel = RoleTelemetry.from_args("admission", name, args)
    tel.add_collector(metrics.AdmissionCollector(name, controller))
    return tel


def for_condensation_host(host: Any, args: argparse.Namespace) -> RoleTelemetry:
    """Telemetry of a condensation host (``cli.condense_host``): its input subscriber's samples and metrics."""
    tel = RoleTelemetry.from_args("condensation", host.name, args)
    if host.subscriber is not None:
        add_subscriber(tel, host.subscriber)
    return tel


def add_publisher(tel: RoleTelemetry, publisher: Any) -> None:
    """Add a ``client.Publisher``'s metrics (sent, dropped, skipped instants) to a process's telemetry."""
    tel.add_collector(metrics.PublisherCollector(publisher))


def add_subscriber(tel: RoleTelemetry, subscriber: SubscriberLike) -> None:
    """Add a ``client.Subscriber``'s delivery samples and metrics to a process's telemetry."""
    tel.add_sampler(SubscriberSampler(subscriber))
    tel.add_collector(metrics.SubscriberCollector(subscriber))
