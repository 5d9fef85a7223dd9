"""``gridstat alerts-exporter``: the streaming job's QoS alerts as Prometheus metrics.

    gridstat alerts-exporter --kafka 127.0.0.1:9092 --metrics-port 9110

Consumes ``gridstat.alerts.qos`` (the records spark/qos_alerts.py writes) in the consumer group
``--group``, from the latest offset unless ``--from-beginning`` (a new group only: a group that has
committed resumes where it was), and serves ``gridstat_qos_alerts_total``, ``gridstat_qos_alert_ratio``,
``gridstat_qos_alert_last_timestamp_seconds`` and its own health (``gridstat_qos_alerts_exporter_*``)
on ``/metrics`` (docs/telemetry.md, "The QoS alerts on a dashboard"; ``telemetry.qos_alerts``). While
Kafka is away it keeps serving and tries again; ``/readyz`` is 503 until Kafka answers.

Prints ``READY name=alerts-exporter metrics_port=<port> ...`` once serving; SIGTERM and SIGINT stop
it. Exit codes: 0 ok, 2 invalid input.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os

from gridstat.cli.common import EXIT_OK
from gridstat.core import serving
from gridstat.errors import ValidationError
from gridstat.telemetry import kafka_security
from gridstat.telemetry.kafka_security import KafkaSecurity
from gridstat.telemetry.qos_alerts import (
    DEFAULT_FORGET_AFTER_S,
    DEFAULT_GROUP,
    DEFAULT_MAX_SERIES,
    AlertsConsumer,
    AlertSeries,
    ConsumerConfig,
    registry,
)
from gridstat.telemetry.records import TOPICS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = "exit codes: 0 ok, 2 usage/validation"
    p.add_argument("--kafka", default=os.environ.get("GRIDSTAT_KAFKA", ""), metavar="HOST:PORT[,HOST:PORT]",
                   help="the Kafka the alerts job writes to (default $GRIDSTAT_KAFKA); required")
    p.add_argument("--topic", default=TOPICS.alerts, help="the alerts topic (spark/qos_alerts.py's output)")
    p.add_argument("--group", default=DEFAULT_GROUP, help="consumer group (replicas of one group share partitions)")
    p.add_argument("--from-beginning", action="store_true",
                   help="a new group starts at the oldest alert kept (default: the newest, alerts from now on)")
    p.add_argument("--metrics-port", type=int, default=int(os.environ.get("GRIDSTAT_METRICS_PORT", "9110")),
                   help="serve Prometheus /metrics on this port (0 = any free port; default $GRIDSTAT_METRICS_PORT "
                        "or 9110)")
    p.add_argument("--metrics-host", default="127.0.0.1", help="address of the /metrics endpoint")
    p.add_argument("--forget-after-s", type=float, default=DEFAULT_FORGET_AFTER_S,
                   help="forget a (subscriber, variable, mode, kind) series with no alert for this long")
    p.add_argument("--max-series", type=int, default=DEFAULT_MAX_SERIES,
                   help="most series held; past it the least recently updated is forgotten")
    p.add_argument("--duration", type=float, default=None, metavar="SECONDS", help="stop after this long")
    p.add_argument("--exit-with-parent", action="store_true")
    p.add_argument("--log-level", default="WARNING")
    kafka_security.add_arguments(p.add_argument_group("TLS and SASL to Kafka (docs/telemetry.md, Kafka security)"))


def _check(args: argparse.Namespace) -> KafkaSecurity:
    if not args.kafka:
        raise ValidationError("gridstat alerts-exporter needs --kafka (or GRIDSTAT_KAFKA)", field="kafka")
    if not args.topic:
        raise ValidationError("--topic is empty", field="topic")
    if not 0 <= args.metrics_port <= 65535:
        raise ValidationError(f"--metrics-port {args.metrics_port} is not 0..65535", field="metrics_port")
    if not args.forget_after_s > 0:
        raise ValidationError(f"--forget-after-s {args.forget_after_s:g} must be positive", field="forget_after_s")
    if args.max_series < 1:
        raise ValidationError(f"--max-series {args.max_series} must be at least 1", field="max_series")
    return KafkaSecurity.from_args(args)


async def _run(args: argparse.Namespace, security: KafkaSecurity) -> int:
    from gridstat.telemetry.serving import MetricsServer

    series = AlertSeries(forget_after_s=args.forget_after_s, max_series=args.max_series)
    consumer = AlertsConsumer(ConsumerConfig(bootstrap=args.kafka, topic=args.topic, group=args.group,
                                             from_beginning=args.from_beginning, security=security), series)
    server = MetricsServer(registry(series), host=args.metrics_host, port=args.metrics_port,
                           readiness=lambda: (series.health.kafka_connected, consumer.problem or "Kafka answers"))
    await server.start()
    task = asyncio.create_task(consumer.run())
    print(f"READY name=alerts-exporter metrics_port={server.port} topic={args.topic} group={args.group}", flush=True)
    try:
        stop = asyncio.ensure_future(serving.stop_signals().wait())
        await asyncio.wait([stop, task], timeout=args.duration, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if task.done():  # the consumer ended by itself: a bug, not Kafka being away (that is retried)
            task.result()
    finally:
        consumer.stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, 10)
        await server.stop()
    h = series.health
    print(f"STOPPED records={h.records} bad={sum(h.bad.values())} duplicates={h.duplicates}", flush=True)
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    security = _check(args)  # a bad flag exits 2 before anything starts
    return serving.run(args, lambda: _run(args, security))
