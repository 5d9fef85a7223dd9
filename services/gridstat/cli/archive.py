"""``gridstat archive``: the measurement archive role (the historian path for analysts).

    gridstat archive --name hist1 --edge 127.0.0.1:7801 --kafka 127.0.0.1:9092 \\
        pmu1/freq:100 pmu1/vmag pmu2/freq:20 --interval-ms 100 --latency-ms 500

An ordinary subscriber: it connects through its edge router (``--edge``: the router's control
port), subscribes to each VARIABLE[:INTERVAL_MS] with that interval (default ``--interval-ms``)
and ``--latency-ms``, and writes every delivered value as a ``measurement`` record to
``gridstat.archive.measurements`` keyed by the variable's full name (docs/telemetry.md;
``telemetry.archiving``). The routers rate-filter for it like for any subscriber, so the topic
holds each variable at its archive interval. Its own delivery samples and /metrics are those of
any subscriber (``--metrics-port``). In a pod (``$POD_IP`` set) its socket listens on 0.0.0.0 and
registers the pod's address, as ``gridstat subscribe`` does; ``--tls-ca/--tls-cert/--tls-key`` reach
an edge router under mTLS (docs/kubernetes.md, "Telemetry, archive and Spark jobs").

Prints ``READY name=<name> variables=<n>`` once every subscription is admitted; a refused
subscription exits 3 with the broker's reason. SIGTERM and SIGINT stop it, flushing what is
buffered to Kafka. Exit codes: 0 ok, 2 invalid input, 3 subscription rejected, 4 unavailable.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from gridstat.cli.common import EXIT_CODES_HELP, EXIT_OK, EXIT_REJECTED, EXIT_UNAVAILABLE
from gridstat.cli.subscribe import POD_IP_ENV, CountingSubscriber, listen_and_advertise
from gridstat.cli.traffic import tls_files
from gridstat.client import Subscriber, SubscriptionRejected
from gridstat.core import serving
from gridstat.core.model import BOOL, FLOAT, INT, TypeSpec, split_variable_name
from gridstat.errors import ChannelUnavailable, GridStatError, ValidationError
from gridstat.telemetry import Archiver, roles
from gridstat.telemetry.kafka_security import KafkaSecurity

TYPES: dict[str, TypeSpec] = {"float": FLOAT, "int": INT, "bool": BOOL}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXIT_CODES_HELP
    p.add_argument("variables", nargs="+", metavar="VARIABLE[:INTERVAL_MS]",
                   help="PUBLISHER/VARIABLE to archive, optionally with its own interval")
    p.add_argument("--name", default="archive", help="the archive's subscriber name")
    p.add_argument("--edge", required=True, metavar="HOST:PORT", help="control port of the archive's edge router")
    p.add_argument("--interval-ms", type=int, default=100, help="archive interval of variables without their own")
    p.add_argument("--latency-ms", type=int, default=1000, help="latency bound of the archive subscriptions")
    p.add_argument("--type", choices=list(TYPES), default="float", dest="value_type",
                   help="value type of the variables (checked by the broker)")
    p.add_argument("--duration", type=float, default=None, metavar="SECONDS", help="stop after this long")
    p.add_argument("--listen-host", default=None, metavar="IP",
                   help=f"address of the UDP socket (default 0.0.0.0 when ${POD_IP_ENV} is set, else 127.0.0.1)")
    p.add_argument("--advertise-host", default=None, metavar="IP",
                   help=f"address the edge router sends events to (default ${POD_IP_ENV}, else the listen host)")
    t = p.add_argument_group("TLS to the edge router")
    t.add_argument("--tls-ca", default="", metavar="PEM", help="CA that signed the edge router's certificate: use TLS")
    t.add_argument("--tls-cert", default="", metavar="PEM", help="client certificate (mutual TLS)")
    t.add_argument("--tls-key", default="", metavar="PEM", help="private key of --tls-cert")
    p.add_argument("--exit-with-parent", action="store_true")
    p.add_argument("--log-level", default="WARNING")
    roles.add_arguments(p)


def parse_variables(specs: list[str], default_interval_ms: int) -> list[tuple[str, int]]:
    """``["pmu1/freq:20", "pmu2/freq"]`` -> ``[("pmu1/freq", 20), ("pmu2/freq", default)]``."""
    out: list[tuple[str, int]] = []
    for spec in specs:
        name, _, interval = spec.partition(":")
        split_variable_name(name)
        try:
            ms = int(interval) if interval else default_interval_ms
        except ValueError:
            raise ValidationError(f"interval of {spec!r} is not a number of milliseconds", field="variables") from None
        if ms <= 0:
            raise ValidationError(f"interval of {spec!r} must be positive", field="variables")
        if any(n == name for n, _ in out):
            raise ValidationError(f"{name!r} is given twice", field="variables")
        out.append((name, ms))
    return out


async def _run(args: argparse.Namespace, variables: list[tuple[str, int]]) -> int:
    tel = roles.RoleTelemetry.from_args("archive", args.name, args)
    assert tel.exporter is not None  # run() checked --kafka
    archiver = Archiver(tel.exporter)
    await tel.start()
    sub: Subscriber | None = None
    listen, advertise = listen_and_advertise(args.listen_host, args.advertise_host)
    try:
        sub = await CountingSubscriber.connect(args.name, args.edge, tls=tls_files(args), host=listen,
                                               advertise_host=advertise)
        for name, interval in variables:
            await sub.subscribe_remote(name, TYPES[args.value_type], interval_ms=interval,
                                       latency_ms=args.latency_ms, on_event=archiver.on_event)
        roles.add_subscriber(tel, sub)
        print(f"READY name={args.name} variables={len(variables)}{tel.ready_suffix()}", flush=True)
        stop = serving.stop_signals()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), args.duration)
    except SubscriptionRejected as exc:
        print(f"gridstat archive: rejected: {exc}", file=sys.stderr, flush=True)
        return EXIT_REJECTED
    except ChannelUnavailable as exc:
        print(f"gridstat archive: unavailable: {exc}", file=sys.stderr, flush=True)
        return EXIT_UNAVAILABLE
    finally:
        if sub is not None:
            for s in sub.subscriptions():
                with contextlib.suppress(GridStatError):
                    await sub.unsubscribe_remote(s)
            await sub.stop()
        await tel.stop()
    archived = sum(archiver.archived.values())
    lost = tel.exporter.stats.lost_total
    print(f"STOPPED name={args.name} archived={archived} lost={lost}", flush=True)
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    variables = parse_variables(args.variables, args.interval_ms)
    if not args.kafka:
        raise ValidationError("gridstat archive needs --kafka (or GRIDSTAT_KAFKA)", field="kafka")
    listen_and_advertise(args.listen_host, args.advertise_host)  # checked before anything starts
    tls_files(args)
    KafkaSecurity.from_args(args)  # --kafka-tls-*, --kafka-sasl-*: a bad one exits 2 before anything starts
    return serving.run(args, lambda: _run(args, variables))
