"""Telemetry of every role: records to Kafka, metrics for Prometheus, the measurement archive.

Public surface (docs/telemetry.md):

* ``TelemetryExporter`` / ``ExporterConfig`` -- bounded, non-blocking export of JSON records
  to Kafka with aiokafka (batched, compressed; loss counted, never blocking the data plane);
* ``records`` -- topics, schema names, record builders; JSON Schemas in ``schemas/v2`` (``schemas/v1``: older records);
* ``Reporter`` and the samplers -- a role's own counters turned into records, once a period;
* ``BrokerRecorder`` -- admission decisions and mode changes of a broker;
* ``metrics`` collectors and ``MetricsServer`` -- ``/metrics`` of every role;
* ``Archiver`` -- delivered values to ``gridstat.archive.measurements``;
* ``roles`` -- ``add_arguments`` and ``for_router`` / ``for_leaf_broker`` / ... for the mains.

The package sits below the roles (.importlinter): it knows them only through Protocols, and
it is the only package that imports aiokafka and prometheus_client.

Layer: runtime (the README's layout table; ``.importlinter`` keeps it from importing any tool).
"""

from __future__ import annotations

from . import records, roles
from .archiving import Archiver
from .errors import FlushTimeout, KafkaUnavailable, TelemetryClosed, TelemetryError
from .exporting import ExporterConfig, ExporterStats, LossReason, TelemetryExporter
from .recording import BrokerRecorder
from .records import TOPICS
from .roles import RoleTelemetry
from .sampling import BrokerModeSampler, Reporter, RouterSampler, SubscriberSampler
from .serving import MetricsServer

__all__ = [
    "TOPICS",
    "Archiver",
    "BrokerModeSampler",
    "BrokerRecorder",
    "ExporterConfig",
    "ExporterStats",
    "FlushTimeout",
    "KafkaUnavailable",
    "LossReason",
    "MetricsServer",
    "Reporter",
    "RoleTelemetry",
    "RouterSampler",
    "SubscriberSampler",
    "TelemetryClosed",
    "TelemetryError",
    "TelemetryExporter",
    "records",
    "roles",
]
