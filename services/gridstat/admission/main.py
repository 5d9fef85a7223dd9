"""Run the admission controller: ``gridstat admission --port 7800 [--policy full|percentage] ...``.

Prints ``READY name=admission port=<grpc port>`` once serving; SIGTERM and SIGINT stop it. Its
state (advertisements, declared resources, reservations) is held in memory: leaf brokers notice a
restart by the controller's new ``epoch`` and declare their routers and advertisements again
(docs/admission.md says what is not recovered).
"""

from __future__ import annotations

import argparse
import sys

import grpc

from gridstat.admission import admitting
from gridstat.admission.admitting import AdmissionController, Bound, Policy
from gridstat.admission.service import AdmissionServicer, add_to_server
from gridstat.core import access, grpclog, serving
from gridstat.core.tls import TlsFiles
from gridstat.errors import ValidationError
from gridstat.telemetry import roles as telemetry


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", default="admission", help="name printed in the READY line and logs")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=7800, help="gRPC port (0 = any)")
    p.add_argument("--policy", default="full", choices=[x.value for x in Policy],
                   help="full: reject at the first hop lacking resources; percentage: walk every hop and admit "
                        "the fraction that can be guaranteed")
    p.add_argument("--bound", default="upper", choices=[x.value for x in Bound],
                   help="reserve the upper (conservative) or lower (optimistic) end of the requirement")
    p.add_argument("--upper-bound", default="theorem", choices=("theorem", "overlap"),
                   help="the requirement's upper end: Theorem 1's (the tightest covering advertisements' rate) or "
                        "also no more than the advertisements the filter overlaps, when that is smaller "
                        "(admission.covering)")
    p.add_argument("--min-fraction", type=float, default=0.0,
                   help="percentage policy: the smallest guaranteed fraction admitted (0..1; default: any > 0)")
    p.add_argument("--event-bytes", type=float, default=admitting.DEFAULT_EVENT_BYTES,
                   help="bytes per event on a link, headers' share included")
    p.add_argument("--entry-bytes", type=float, default=admitting.DEFAULT_ENTRY_BYTES,
                   help="router memory per routing entry")
    p.add_argument("--buffer-s", type=float, default=admitting.DEFAULT_BUFFER_S,
                   help="seconds of events a hop may buffer (memory per hop)")
    p.add_argument("--router-memory-mb", type=float, default=admitting.DEFAULT_ROUTER_MEMORY_BYTES / 2**20,
                   help="memory of a router declared without one")
    p.add_argument("--tls-cert", default="")
    p.add_argument("--tls-key", default="")
    p.add_argument("--tls-client-ca", default="", help="require client certificates signed by this CA (mTLS)")
    access.add_arguments(p)
    p.add_argument("--exit-with-parent", action="store_true")
    p.add_argument("--log-level", default="WARNING")
    telemetry.add_arguments(p)


def controller_from_args(args: argparse.Namespace) -> AdmissionController:
    return AdmissionController(policy=Policy.parse(args.policy), bound=Bound.parse(args.bound),
                               min_fraction=args.min_fraction, event_bytes=args.event_bytes,
                               entry_bytes=args.entry_bytes, buffer_s=args.buffer_s,
                               default_memory_bytes=args.router_memory_mb * 2**20,
                               overlap_bound=args.upper_bound == "overlap")


async def serve(controller: AdmissionController, host: str, port: int,
                tls: TlsFiles | None = None, grants: access.Grants | None = None) -> tuple[grpc.aio.Server, int]:
    """With mTLS only brokers consult the controller and administrators read it (core.access)."""
    server = grpc.aio.server(interceptors=access.interceptors(tls.ca if tls else "", grants))
    add_to_server(AdmissionServicer(controller), server)
    return server, await serving.listen(server, host, port, tls)


async def _run(args: argparse.Namespace) -> None:
    controller = controller_from_args(args)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValidationError("--tls-cert and --tls-key go together", field="tls_key")
    tls = TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert else None
    if tls is not None:
        grpclog.tap_stderr()  # refused TLS handshakes -> gridstat_tls_handshakes_refused_total
    server, port = await serve(controller, args.host, args.port, tls, access.Grants.parse(args.grant))
    tel = telemetry.for_admission(controller, args.name, args)  # --metrics-port: /metrics of the resource model
    await tel.start()
    await serving.until_signalled(f"READY name={args.name} port={port}{tel.ready_suffix()}")
    await server.stop(grace=0.5)
    await tel.stop()


def run(args: argparse.Namespace) -> int:
    serving.run(args, lambda: _run(args))
    return 0


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser(prog="gridstat admission")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
