"""``gridstat pdc-server``: serve GridStat status variables as one IEEE C37.118.2-2011 stream to PDCs.

    gridstat pdc-server --name pdc1 --edge 127.0.0.1:7802 --frames-per-s 30 \\
        --variables sub1/va:phasor,sub1/freq,sub1/dfreq,sub2/p [--variables @more.txt] \\
        [--latency-ms 50 --redundancy 1] [--listen 127.0.0.1:4712] [--udp-to HOST:PORT] \\
        [--idcode 1] [--wait-ms 100] [--stats-every-s 1] [-o json]

It registers with the leaf broker through its edge router and subscribes to every variable at the
served rate (whole device frames: ``round(1000 / frames_per_s)`` ms) with ``--latency-ms`` and
``--redundancy``. Then it listens for PDC clients on ``--listen`` (loopback unless
``--allow-remote``) and answers their commands; with ``--udp-to`` it also sends data frames over UDP
to that destination from the start (spontaneous). A variable whose publisher has not registered yet
is retried, like ``gridstat subscribe --admit``. Once serving it prints ``READY name=<name>
listen=<host:port> idcode=<n> stations=<n> variables=<n> frames_per_s=<n> udp_port=<n|->`` and,
every ``--stats-every-s``, one line: clients, frames sent, complete and incomplete, events late,
drops by reason (docs/pdc-server.md, "Counters"). SIGTERM or SIGINT (or ``--duration-s``) print a
final line, remove its subscriptions and exit 0.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import time
from pathlib import Path
from typing import Any

from gridstat.cli.subscribe import POD_IP_ENV
from gridstat.cli.traffic import Runner, add_client_arguments, check_common, check_edge, listening, tls_files
from gridstat.core import clock, serving
from gridstat.core.model import BOOL, FLOAT, INT, TypeSpec, split_variable_name
from gridstat.errors import ValidationError
from gridstat.gateways.pdc import PHASOR_TYPE, PdcServer, PdcServerOptions

#: The type suffix of a ``--variables`` entry.
TYPES: dict[str, TypeSpec] = {"float": FLOAT, "int": INT, "bool": BOOL, "phasor": PHASOR_TYPE}
DEFAULT_LISTEN = "127.0.0.1:4712"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variables", action="append", required=True, metavar="LIST",
                   help="PUBLISHER/VARIABLE[:TYPE] entries, comma-separated, or @FILE with one per line (# comments); "
                        "TYPE float (default), int, bool or phasor; repeatable, served in this order")
    p.add_argument("--frames-per-s", type=int, required=True, metavar="R",
                   help="the served rate (DATA_RATE): a divisor of the variables' frame rate")
    p.add_argument("--latency-ms", type=int, default=50, metavar="MS", help="latency bound of the subscriptions "
                                                                           "(default 50)")
    p.add_argument("--redundancy", type=int, default=1, metavar="K", help="node-disjoint paths (default 1)")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"TCP address PDCs connect to (default {DEFAULT_LISTEN}; port 0: any free port)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow --listen and --udp-to addresses beyond loopback (default: loopback only)")
    p.add_argument("--udp-to", default=None, metavar="HOST:PORT",
                   help="also send data frames over UDP to this destination, from the start (spontaneous)")
    p.add_argument("--udp-bind", default="127.0.0.1:0", metavar="HOST:PORT",
                   help="the UDP socket's own address, where UDP commands are answered (default 127.0.0.1:0)")
    p.add_argument("--idcode", type=int, default=1, metavar="N", help="the stream's IDCODE (default 1)")
    p.add_argument("--wait-ms", type=int, default=100, metavar="MS",
                   help="how long after its instant a frame waits for missing samples (default 100)")
    p.add_argument("--time-base", type=int, default=1_000_000, metavar="N",
                   help="TIME_BASE of the stream (default 1000000)")
    p.add_argument("--freq-format", choices=("float", "int16"), default="float",
                   help="FREQ/DFREQ as floats (Hz, Hz/s; default) or 16-bit (mHz off nominal, Hz/s x 100), for "
                        "PDCs that read a float FREQ as a deviation (pypmu)")
    p.add_argument("--max-open-frames", type=int, default=64, metavar="N",
                   help="instants waiting at most; opening one more sends the oldest (default 64)")
    p.add_argument("--max-clients", type=int, default=64, metavar="N", help="PDC clients at once (default 64)")
    add_client_arguments(p)


def parse_variables(values: list[str]) -> list[tuple[str, TypeSpec]]:
    """``--variables`` values: (full name, type) in order, each variable once."""
    entries: list[str] = []
    for value in values:
        if value.startswith("@"):
            path = Path(value[1:])
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise ValidationError(f"--variables {value}: {exc.strerror or exc}", field="variables") from None
            entries += [line.split("#", 1)[0].strip() for line in text.splitlines()]
        else:
            entries += [e.strip() for e in value.split(",")]
    out: list[tuple[str, TypeSpec]] = []
    seen: set[str] = set()
    for entry in filter(None, entries):
        name, _, type_name = entry.partition(":")
        type_ = TYPES.get(type_name.strip().lower() or "float")
        if type_ is None:
            raise ValidationError(f"--variables {entry!r}: type {type_name!r} is not one of {sorted(TYPES)}",
                                  field="variables")
        try:
            split_variable_name(name.strip())
        except ValidationError as exc:
            raise ValidationError(f"--variables {entry!r}: {exc.args[0]}", field="variables") from None
        if name in seen:
            raise ValidationError(f"--variables names {name} twice", field="variables")
        seen.add(name)
        out.append((name.strip(), type_))
    if not out:
        raise ValidationError("--variables names no variable", field="variables")
    return out


def parse_host_port(value: str, flag: str, *, allow_remote: bool) -> tuple[str, int]:
    """``HOST:PORT`` with an IPv4 host; beyond loopback only with ``--allow-remote``."""
    host, sep, port = value.strip().rpartition(":")
    try:
        address = ipaddress.IPv4Address(host)
        port_n = int(port)
    except ValueError:
        raise ValidationError(f"{flag} {value!r} is not IPV4:PORT", field=flag[2:].replace("-", "_")) from None
    if not sep or not 0 <= port_n <= 65535:
        raise ValidationError(f"{flag} {value!r} is not IPV4:PORT", field=flag[2:].replace("-", "_"))
    if not address.is_loopback and not allow_remote:
        raise ValidationError(f"{flag} {value!r} is beyond loopback: add --allow-remote to mean it",
                              field=flag[2:].replace("-", "_"))
    return host, port_n


def options_of(args: argparse.Namespace) -> PdcServerOptions:
    """Every option checked (ValidationError names the flag; main exits 2)."""
    check_common(args, "subscriber")
    for flag, value, lo, hi in (("--frames-per-s", args.frames_per_s, 1, 400),
                                ("--latency-ms", args.latency_ms, 1, None),
                                ("--redundancy", args.redundancy, 1, None), ("--idcode", args.idcode, 1, 0xFFFE),
                                ("--wait-ms", args.wait_ms, 0, None), ("--time-base", args.time_base, 1, 0xFF_FFFF),
                                ("--max-open-frames", args.max_open_frames, 1, None),
                                ("--max-clients", args.max_clients, 1, None)):
        if value < lo or (hi is not None and value > hi):
            bound = f"{lo}..{hi}" if hi is not None else f"at least {lo}"
            raise ValidationError(f"{flag} must be {bound}, not {value}", field=flag[2:].replace("-", "_"))
    udp_to = None
    if args.udp_to is not None:
        check_edge(args.udp_to, "--udp-to")
        udp_to = parse_host_port(args.udp_to, "--udp-to", allow_remote=args.allow_remote)
    return PdcServerOptions(
        name=args.name, edge=args.edge.strip(), variables=parse_variables(args.variables),
        frames_per_s=args.frames_per_s, latency_ms=args.latency_ms, redundancy=args.redundancy,
        listen=parse_host_port(args.listen, "--listen", allow_remote=args.allow_remote), udp_to=udp_to,
        udp_bind=parse_host_port(args.udp_bind, "--udp-bind", allow_remote=args.allow_remote),
        idcode=args.idcode, wait_ms=args.wait_ms, time_base=args.time_base, max_open_frames=args.max_open_frames,
        max_clients=args.max_clients, tls=tls_files(args), also_edges=[e.strip() for e in args.also_edge],
        freq_float=args.freq_format == "float",
        # In a pod the subscriber's socket is on the pod's address, where its edge router sends events
        # (as `gridstat subscribe` does, docs/kubernetes.md).
        subscriber_host=os.environ.get(POD_IP_ENV, "").strip() or "127.0.0.1")


class PdcServerApp:
    """Start the server (retrying while the broker or a publisher is not there yet), report, stop."""

    def __init__(self, args: argparse.Namespace, options: PdcServerOptions) -> None:
        self.args = args
        self.options = options
        self.runner = Runner("pdc-server", args)

    async def _attempt(self) -> PdcServer:
        server = PdcServer(self.options)
        await listening(server.start, self.options.listen)
        return server

    def stats(self, server: PdcServer, final: bool) -> tuple[dict[str, Any], str]:
        s = server.stats()
        data = {"kind": "pdc-server", "name": self.args.name, "final": final, "ts_ms": clock.now_ms(),
                "uptime_s": round(time.monotonic() - self.runner.started, 3), **s}
        drops = " ".join(f"{k}={v}" for k, v in sorted(s.get("drops", {}).items())) or "none"
        text = (f"{'FINAL ' if final else ''}pdc-server {self.args.name}: clients={s.get('clients', 0)} "
                f"frames_sent={s.get('frames_sent', 0)} complete={s.get('frames_complete', 0)} "
                f"incomplete={s.get('frames_incomplete', 0)} events={s.get('events', 0)} "
                f"events_late={s.get('events_late', 0)} drops: {drops}")
        return data, text

    def ready(self, server: PdcServer) -> str:
        stream = server.stream
        assert stream is not None
        host = self.options.listen[0]
        return (f"READY name={self.args.name} listen={host}:{server.port} idcode={self.options.idcode} "
                f"stations={len(stream.config.blocks)} variables={len(stream.config.channels)} "
                f"frames_per_s={self.options.frames_per_s} udp_port={server.udp_port or '-'}")

    async def run(self) -> int:
        return await self.runner.serve(self._attempt, what=f"subscribing through edge router {self.args.edge}",
                                       ready=self.ready, stats=self.stats, stop=PdcServer.stop)


def run(args: argparse.Namespace) -> int:
    options = options_of(args)
    return serving.run(args, PdcServerApp(args, options).run)
