"""Run a QoS broker: ``gridstat broker [--role leaf|parent] --name A --port 7700 --state A.sqlite [--parent H:P]``.

A leaf with ``--parent`` delegates inter-cloud subscriptions up; a parent (``--role parent``,
``parent_service``) serves the hierarchy and the inter-cloud segments of its subtree.

Prints ``READY name=<name> port=<grpc port>`` once serving. The state file keeps
everything the broker accepted; a broker restarted on the same file recovers its
topology, clients, publications and subscriptions and reconciles its routers.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys

import grpc

from gridstat.broker import gate
from gridstat.broker.leaf import LeafBroker
from gridstat.broker.service import QoSBrokerServicer, SegmentsServicer
from gridstat.broker.store import BrokerStore
from gridstat.core import access, grpclog, serving
from gridstat.core.tls import TlsFiles
from gridstat.errors import ValidationError
from gridstat.telemetry import roles as telemetry
from gridstat.v1 import broker_pb2_grpc as pb_grpc


def default_state_path(name: str) -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "gridstat", f"broker-{name}.sqlite")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", required=True, help="the cloud's name (this broker's name)")
    p.add_argument("--role", choices=("leaf", "parent"), default="leaf",
                   help="leaf: owns a cloud of routers; parent: an interior QoS broker of the hierarchy")
    p.add_argument("--parent", default="", help="HOST:PORT of the parent QoS broker (inter-cloud subscriptions)")
    p.add_argument("--admission", default="", metavar="HOST:PORT",
                   help="leaf: the admission controller consulted before a reservation is kept; when it cannot be "
                        "reached the broker's own reservation check decides and the reply says so")
    p.add_argument("--admission-deadline-ms", type=int, default=2000, help="deadline of each call to the controller")
    p.add_argument("--admission-tls-ca", default="", help="PEM CA of the controller's certificate: TLS to it")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=7700, help="gRPC port (0 = any)")
    p.add_argument("--state", default="", help="SQLite file of the durable state "
                                                "(default ~/.local/state/gridstat/broker-NAME.sqlite)")
    p.add_argument("--variable-id-base", type=int, default=1,
                   help="first variable id this cloud assigns; give each cloud its own block (e.g. 1000000 * k)")
    p.add_argument("--supervise-interval-ms", type=int, default=500, help="router health check period")
    p.add_argument("--query-refresh-s", type=float, default=10.0, metavar="S",
                   help="with --parent: list the other clouds' variables for the standing query subscriptions "
                        "every S seconds (default 10; docs/queries.md, \"Across clouds\")")
    p.add_argument("--tls-cert", default="")
    p.add_argument("--tls-key", default="")
    p.add_argument("--tls-client-ca", default="", help="require client certificates signed by this CA (mTLS)")
    p.add_argument("--router-tls-ca", default="", help="CA of the routers' control API certificates")
    p.add_argument("--peer-tls-ca", default="",
                   help="CA of the other brokers' certificates (parent, children): (m)TLS to them with --tls-cert")
    p.add_argument("--channel-auth", choices=("off", "routers", "all"), default="off",
                   help="leaf: authenticate event datagrams (HMAC tag, replay window; docs/security.md): 'routers' "
                        "keys the cloud's router-router channels, 'all' also publishers' and subscribers' channels; "
                        "parent: key the inter-cloud channels it registers (a random key each, sent to both leaves)")
    p.add_argument("--policy", default="", metavar="FILE",
                   help="leaf: YAML/JSON policy of who may publish and subscribe to which variables (broker.authz); "
                        "re-read when it changes. Needs mTLS (--tls-cert, --tls-key, --tls-client-ca) so that "
                        "client names are certificate identities; the broker refuses to start without it unless "
                        "--insecure-client-names is given (docs/security.md)")
    p.add_argument("--insecure-client-names", action="store_true",
                   help="leaf: allow --policy without mTLS: the policy then trusts the client name each request "
                        "declares (anyone can claim any name); only for a trusted control network or tests; "
                        "logged at startup (docs/security.md)")
    p.add_argument("--trusted-proxy", action="append", default=[], metavar="PATTERN",
                   help="leaf with --tls-client-ca: certificate identities (fnmatch) of edge proxies whose relayed "
                        "client identities are believed (default: router; registered routers' names always)")
    p.add_argument("--channel-key-file", default="",
                   help="hex master secret the channel keys derive from (default STATE.channel-key, created 0600)")
    access.add_arguments(p)
    p.add_argument("--max-admissions", type=int, default=gate.DEFAULT_LIMIT, metavar="N",
                   help="leaf: admissions (Subscribe, ChangeSubscription, ReserveSegment, CreateCondensation) the "
                        "broker works on at once; more are refused at once with RESOURCE_EXHAUSTED and a retry hint "
                        "(docs/security.md, 'Admission bound'; default %(default)s)")
    p.add_argument("--max-admissions-per-caller", type=int, default=gate.DEFAULT_PER_CALLER, metavar="N",
                   help="leaf: of those, at most N for one caller (its certificate identity with mTLS, else its "
                        "declared client name), so that one flooding client cannot starve the others "
                        "(default %(default)s)")
    p.add_argument("--busy-retry-after-ms", type=int, default=gate.DEFAULT_RETRY_AFTER_MS, metavar="MS",
                   help="leaf: the least retry hint of a refused admission (it grows with the admissions' "
                        "duration; default %(default)s)")
    p.add_argument("--exit-with-parent", action="store_true")
    p.add_argument("--log-level", default="WARNING")
    telemetry.add_arguments(p)


async def serve(broker: LeafBroker, host: str, port: int, tls: TlsFiles | None = None,
                grants: access.Grants | None = None) -> tuple[grpc.aio.Server, int]:
    """With mTLS every call is checked against the caller's role (core.access): ``grants`` plus the
    ``roles:`` of the broker's policy file, read again when it changes."""
    def current() -> access.Grants:
        base = broker.policy.current().roles if broker.policy is not None else access.Grants()
        return base.plus(grants.patterns) if grants is not None else base

    broker.grants = current
    # Calls past gRPC core's pending-call queue would be CANCELLED before the admission gate sees them.
    server = grpc.aio.server(options=gate.server_options(),
                             interceptors=access.interceptors(tls.ca if tls else "", current))
    pb_grpc.add_QoSBrokerServicer_to_server(QoSBrokerServicer(broker), server)  # type: ignore[no-untyped-call]
    pb_grpc.add_SegmentsServicer_to_server(SegmentsServicer(broker), server)  # type: ignore[no-untyped-call]
    return server, await serving.listen(server, host, port, tls)


async def _run_parent(args: argparse.Namespace) -> None:
    from gridstat.broker.parent_service import ParentBroker, ParentSegmentsServicer, ParentServicer
    from gridstat.broker.parent_store import ParentStore

    tls = TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert else None
    peer_tls = TlsFiles(args.tls_cert, args.tls_key, args.peer_tls_ca) if args.peer_tls_ca else None
    broker = ParentBroker(args.name, ParentStore(args.state or default_state_path(args.name)), parent=args.parent,
                          tls=peer_tls)
    broker.channel_auth = args.channel_auth != "off"
    server = grpc.aio.server(options=gate.server_options(),
                             interceptors=access.interceptors(args.tls_client_ca if tls else "",
                                                              access.Grants.parse(args.grant)))
    pb_grpc.add_QoSBrokerServicer_to_server(ParentServicer(broker), server)  # type: ignore[no-untyped-call]
    pb_grpc.add_SegmentsServicer_to_server(ParentSegmentsServicer(broker), server)  # type: ignore[no-untyped-call]
    port = await serving.listen(server, args.host, args.port, tls)
    tel = telemetry.for_parent_broker(broker, args)
    await tel.start()
    await serving.until_signalled(f"READY name={args.name} port={port}{tel.ready_suffix()}")
    await server.stop(grace=1.0)
    await tel.stop()
    await broker.stop()


async def _run(args: argparse.Namespace) -> None:
    if args.role == "parent" and args.admission:
        raise ValidationError("--admission is for leaf brokers: they reserve in their routers", field="admission")
    # Refused before the stderr tap below, so that the error reaches the terminal.
    mtls = bool(args.tls_cert and args.tls_client_ca)
    if args.role == "leaf" and args.policy and not mtls and not args.insecure_client_names:
        raise ValidationError(
            "--policy needs mTLS: without --tls-client-ca the broker cannot tell who a client is and the policy "
            "would trust the name each request declares (a client calling itself 'ems' would get ems's rights). "
            "Fix: add --tls-cert, --tls-key and --tls-client-ca (scripts/gen-certs.sh; docs/security.md), or, on "
            "a trusted control network only, pass --insecure-client-names", field="policy")
    if args.role == "leaf" and args.policy and not mtls:
        logging.getLogger(__name__).warning(
            "broker %s: INSECURE: --policy with --insecure-client-names and no mTLS: the policy is evaluated "
            "against client names as each request declares them; any client can claim any name "
            "(docs/security.md)", args.name)
    if args.tls_cert:
        grpclog.tap_stderr()  # refused TLS handshakes -> gridstat_tls_handshakes_refused_total
    if args.role == "parent":
        await _run_parent(args)
        return
    tls = TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert else None
    router_tls = TlsFiles(args.tls_cert, args.tls_key, args.router_tls_ca) if args.router_tls_ca else None
    store = BrokerStore(args.state or default_state_path(args.name))
    broker = LeafBroker(args.name, store, tls=router_tls, supervise_interval_s=args.supervise_interval_ms / 1000,
                        variable_id_base=args.variable_id_base)
    if not args.query_refresh_s > 0:
        raise ValidationError(f"--query-refresh-s must be positive, not {args.query_refresh_s:g}",
                              field="query_refresh_s")
    broker.queries.refresh_s = args.query_refresh_s
    try:
        broker.gate = gate.AdmissionGate(limit=args.max_admissions, per_caller=args.max_admissions_per_caller,
                                         retry_after_ms=args.busy_retry_after_ms)
    except ValueError as exc:
        raise ValidationError(f"--max-admissions*, --busy-retry-after-ms: {exc}", field="max_admissions") from None
    if args.policy:
        from gridstat.broker.authz import PolicyFile

        broker.policy = PolicyFile(args.policy)
    if tls is not None and args.tls_client_ca:
        from gridstat.broker.authz import DEFAULT_PROXIES, IdentityBinding

        broker.identity = IdentityBinding(args.trusted_proxy or DEFAULT_PROXIES,
                                          routers=lambda: broker.state.endpoints.keys())
    else:
        logging.getLogger(__name__).warning(
            "broker %s: no --tls-client-ca: client names are self-declared (insecure mode): the policy and "
            "registrations trust the name in each request (docs/security.md)", args.name)
    if args.channel_auth != "off":
        from pathlib import Path

        from gridstat.broker.channelkeys import ChannelKeys

        if router_tls is None:
            logging.getLogger(__name__).warning(
                "--channel-auth without --router-tls-ca: channel keys go to the routers in clear text")
        key_file = Path(args.channel_key_file or f"{args.state or default_state_path(args.name)}.channel-key")
        broker.channel_keys = ChannelKeys.load_or_create(key_file, clients=args.channel_auth == "all")
    if args.parent:
        from gridstat.broker.delegation import UpLink

        broker.uplink = UpLink(args.parent, tls=TlsFiles(args.tls_cert, args.tls_key, args.peer_tls_ca)
                               if args.peer_tls_ca else None)
    if args.admission:
        from gridstat.broker.consulting import AdmissionLink

        admission_tls = TlsFiles(args.tls_cert, args.tls_key, args.admission_tls_ca) if args.admission_tls_ca else None
        broker.subscriptions.admission = AdmissionLink(args.admission, tls=admission_tls,
                                                       deadline_s=args.admission_deadline_ms / 1000)
    await broker.start()
    tel = telemetry.for_leaf_broker(broker, args)  # records decisions and mode changes; /metrics
    await tel.start()
    # Long-lived objects (topology, reservations) would be rescanned by every full collection:
    # freeze them so admission latency has no 100 ms GC pauses (measured in docs/benchmarks.md).
    gc.freeze()
    grants = access.Grants.parse(args.grant, base=access.Grants({}))  # added to the policy's roles
    server, port = await serve(broker, args.host, args.port, tls, grants)
    await serving.until_signalled(f"READY name={args.name} port={port}{tel.ready_suffix()}")
    await server.stop(grace=1.0)
    await tel.stop()
    await broker.stop()


def run(args: argparse.Namespace) -> int:
    serving.run(args, lambda: _run(args))
    return 0


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser(prog="gridstat broker")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
