"""Run the history service: ``gridstat history-server --kafka HOST:PORT [--listen 127.0.0.1:7950] ...``.

Prints ``READY name=history port=<grpc port>`` (and `` metrics_port=N`` with ``--metrics-port``: its
queries, failures by reason and events sent on Prometheus ``/metrics``) once serving (after a warning
on stderr if Kafka does not answer within 3 s: it serves anyway, and each query then fails with ``KafkaUnavailable``);
SIGTERM and SIGINT stop it (exit 0). Invalid options exit 2. It holds no state: every query reads
Kafka (docs/history.md).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

import grpc

from gridstat.core import access, grpclog, serving
from gridstat.core.tls import TlsFiles
from gridstat.errors import ValidationError
from gridstat.history import querying
from gridstat.history.service import HistoryServicer, add_to_server
from gridstat.telemetry import kafka_security, metrics
from gridstat.telemetry.archive_reading import ArchiveReader
from gridstat.telemetry.errors import KafkaUnavailable
from gridstat.telemetry.kafka_security import KafkaAuthenticationFailed, KafkaSecurity
from gridstat.telemetry.records import TOPICS
from gridstat.telemetry.roles import METRICS_OFF, RoleTelemetry

DEFAULT_LISTEN = "127.0.0.1:7950"
#: How long the start waits to see Kafka answer before it warns (and serves anyway).
KAFKA_CHECK_S = 3.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", default="history", help="name printed in the READY line and logs")
    p.add_argument("--kafka", default=os.environ.get("GRIDSTAT_KAFKA", ""), metavar="HOST:PORT[,HOST:PORT]",
                   help="the Kafka holding the archive topic (default $GRIDSTAT_KAFKA)")
    p.add_argument("--topic", default=TOPICS.measurements, help="the archive topic gridstat archive writes")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"gRPC address (default {DEFAULT_LISTEN}; port 0 = any free port)")
    p.add_argument("--max-span-s", type=float, default=querying.DEFAULT_MAX_SPAN_MS / 1000,
                   help="the longest time range one query may ask for (default 24 h)")
    p.add_argument("--max-events", type=int, default=querying.DEFAULT_MAX_EVENTS,
                   help="the most events one answer may hold; past it the answer is an error (TooManyEvents)")
    p.add_argument("--kafka-timeout-ms", type=int, default=10_000, help="Kafka's requests' timeout")
    # --kafka-tls-*, --kafka-sasl-*: the same as every role's (docs/history.md, docs/telemetry.md "Kafka security")
    kafka_security.add_arguments(p.add_argument_group("TLS and SASL to Kafka"))
    p.add_argument("--metrics-port", type=int, default=int(os.environ.get("GRIDSTAT_METRICS_PORT", METRICS_OFF)),
                   help="serve Prometheus /metrics on this port (0 = any free port, -1 = off; "
                        "default $GRIDSTAT_METRICS_PORT or off)")
    p.add_argument("--metrics-host", default="127.0.0.1", help="address of the /metrics endpoint")
    p.add_argument("--tls-cert", default="")
    p.add_argument("--tls-key", default="")
    p.add_argument("--tls-client-ca", default="", help="require client certificates signed by this CA (mTLS)")
    access.add_arguments(p)
    p.add_argument("--exit-with-parent", action="store_true")
    p.add_argument("--log-level", default="WARNING")


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValidationError(f"--listen {value!r} is not HOST:PORT", field="listen")
    return host.strip("[]"), int(port)


def bounds_from_args(args: argparse.Namespace) -> querying.Bounds:
    span_s = args.max_span_s
    if not span_s > 0 or span_s * 1000 > 366 * 24 * 3600 * 1000:
        raise ValidationError(f"--max-span-s must be positive and at most a year, got {span_s:g}", field="max_span_s")
    if args.max_events < 1:
        raise ValidationError(f"--max-events must be positive, got {args.max_events}", field="max_events")
    return querying.Bounds(max_span_ms=int(span_s * 1000), max_events=args.max_events)


async def serve(servicer: HistoryServicer, host: str, port: int, tls: TlsFiles | None = None,
                grants: access.Grants | None = None) -> tuple[grpc.aio.Server, int]:
    """With mTLS, clients, observers and administrators query; readers ask for health (core.access)."""
    server = grpc.aio.server(interceptors=access.interceptors(tls.ca if tls else "", grants))
    add_to_server(servicer, server)
    return server, await serving.listen(server, host, port, tls)


async def _run(args: argparse.Namespace, host: str, port: int, bounds: querying.Bounds,
               security: KafkaSecurity) -> None:
    tls = TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert else None
    if tls is not None:
        grpclog.tap_stderr()  # refused TLS handshakes -> gridstat_tls_handshakes_refused_total
    else:  # as the other roles say it (docs/security.md): the chart and `gridstat up` give certificates
        print(f"gridstat history-server: warning: no --tls-cert: serving without TLS; whoever reaches "
              f"{host}:{port} can read the archive (docs/security.md)", file=sys.stderr, flush=True)
    reader = ArchiveReader(args.kafka, topic=args.topic, request_timeout_ms=args.kafka_timeout_ms,
                           client_id=f"gridstat-history-{args.name}", security=security)
    servicer = HistoryServicer(reader, bounds)
    server, bound = await serve(servicer, host, port, tls, access.Grants.parse(args.grant))
    tel = RoleTelemetry("history", args.name, metrics_host=args.metrics_host, metrics_port=args.metrics_port)
    tel.add_collector(metrics.HistoryCollector(args.name, lambda: servicer.stats))
    await tel.start()
    problem: KafkaUnavailable | None = None
    try:
        problem = await asyncio.wait_for(reader.problem(), KAFKA_CHECK_S)
    except TimeoutError:
        problem = KafkaUnavailable("no answer")
    if isinstance(problem, KafkaAuthenticationFailed):  # served anyway: a rotated Secret may mend it
        print(f"gridstat history-server: warning: {problem.message}; queries fail with {problem.reason} until "
              "Kafka accepts it", file=sys.stderr, flush=True)
    elif problem is not None:  # served anyway: Kafka may come up later (a pod started before it); each query says so
        print(f"gridstat history-server: warning: Kafka at {args.kafka} does not answer (yet); queries fail with "
              "KafkaUnavailable until it does", file=sys.stderr, flush=True)
    await serving.until_signalled(f"READY name={args.name} port={bound}{tel.ready_suffix()}")
    await server.stop(grace=0.5)
    await tel.stop()


def run(args: argparse.Namespace) -> int:
    if not args.kafka.strip():
        raise ValidationError("gridstat history-server needs --kafka (or GRIDSTAT_KAFKA)", field="kafka")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValidationError("--tls-cert and --tls-key go together", field="tls_key")
    if args.kafka_timeout_ms < 100:
        raise ValidationError(f"--kafka-timeout-ms must be at least 100, got {args.kafka_timeout_ms}",
                              field="kafka_timeout_ms")
    host, port = parse_listen(args.listen)
    bounds = bounds_from_args(args)
    security = KafkaSecurity.from_args(args)
    serving.run(args, lambda: _run(args, host, port, bounds, security))
    return 0


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser(prog="gridstat history-server")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
