"""Run one status router process: ``gridstat router --name r1 --id 1 ...``.

Prints one line ``READY name=<name> port=<udp port> control_port=<grpc port>``
on stdout once both sockets are bound, so a supervisor (the embedded runner,
the tests, the benchmark) can use ephemeral ports. SIGTERM and SIGINT stop it
cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import ipaddress
import logging
import signal
import sys
import tracemalloc

from gridstat.core import access, grpclog
from gridstat.core.aio import create_guarded_task, exit_with_parent, install_fast_loop
from gridstat.core.tls import TlsFiles
from gridstat.errors import ValidationError
from gridstat.router.announce import announce_in_background
from gridstat.router.control import serve
from gridstat.router.process import Role, RouterConfig, StatusRouter
from gridstat.router.proxy import DEFAULT_DEADLINE_S, EdgeProxyServicer, add_to_server
from gridstat.router.shaping import DropPolicy, MessageStrategy, ShapingConfig
from gridstat.router.shedding import OverloadConfig, Strategy, Trigger
from gridstat.router.tables import Variant
from gridstat.telemetry import roles as telemetry


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", required=True, help="router name, unique in its cloud")
    p.add_argument("--id", type=int, required=True, dest="router_id", help="numeric sender id (1..2^32-1)")
    p.add_argument("--role", default="internal", choices=[r.value for r in Role])
    p.add_argument("--variant", default="close", choices=[v.value for v in Variant],
                   help="routing-table variant (dissertation 4.3)")
    p.add_argument("--host", default="127.0.0.1", help="address of the event channels and the control API")
    p.add_argument("--port", type=int, default=0, help="UDP port of the event channels (0 = any)")
    p.add_argument("--control-port", type=int, default=0, help="gRPC control port (0 = any)")
    p.add_argument("--mtu", type=int, default=1472, help="largest packed datagram in bytes")
    p.add_argument("--queue-capacity", type=int, default=4096, help="queued events per channel before drops")
    p.add_argument("--drain-batch", type=int, default=256,
                   help="most datagrams read per wake-up before the event loop runs other work")
    p.add_argument("--busy-poll-us", type=int, default=0,
                   help="poll the socket this long after it runs dry before sleeping (0: off)")
    p.add_argument("--ping-interval-ms", type=int, default=100)
    p.add_argument("--failure-timeout-ms", type=int, default=500)
    p.add_argument("--future-tolerance-ms", type=int, default=5000,
                   help="drop events stamped further than this ahead of the router's clock")
    p.add_argument("--flood-tolerance-ms", type=int, default=500,
                   help="limited flooding: drop a flooded event stamped further than this ahead of the router's "
                        "clock (flood_clock), so a forged timestamp cannot block the variable")
    p.add_argument("--flood-reset-ms", type=int, default=1000,
                   help="limited flooding: how often last-flooded timestamps ahead of the clock are reset")
    o = p.add_argument_group("overload handling (HAPS; docs/overload.md)")
    o.add_argument("--shape", action="append", default=[], metavar="CHANNEL=BPS[:POLICY[:STRATEGY]]",
                   help="shape this outgoing channel (as soon as it exists) to BPS bit/s with a token bucket and "
                        "value-based shedding; POLICY red (default), value, tail or none; STRATEGY as "
                        "--message-strategy (default: that flag); repeatable")
    o.add_argument("--message-strategy", default="cheapest", choices=[x.value for x in MessageStrategy],
                   help="shaped channels (policies red and value): the victim is the queued event with the lowest "
                        "price sum (cheapest), gain (lowest) or route count (count), or a random one (HAPS Fig. 7)")
    o.add_argument("--drop-start-ms", type=float, default=500.0, help="shaped channels: RED starts dropping here")
    o.add_argument("--drop-all-ms", type=float, default=1000.0,
                   help="shaped channels: queueing delay at which every arrival sheds the lowest-valued event")
    o.add_argument("--overload-shedding", action="store_true",
                   help="shed links (a channel's best-effort, then guaranteed routes, cheapest first) when the "
                        "trigger says the router is overloaded")
    o.add_argument("--overload-trigger", default="delay", choices=[x.value for x in Trigger],
                   help="delay (HAPS): the weighted processing delay per event (Eq. 2) against "
                        "--overload-drop-delay-us; load: that delay over the inter-arrival time (the share of the "
                        "CPU needed) against --overload-drop-load")
    o.add_argument("--overload-drop-delay-us", type=float, default=200.0,
                   help="trigger delay: shed above this weighted processing delay per event (HAPS Fig. 3: 200)")
    o.add_argument("--overload-reintegrate-delay-us", type=float, default=150.0,
                   help="trigger delay: reintegrate below this one")
    o.add_argument("--overload-drop-load", type=float, default=0.9,
                   help="trigger load: shed above this load (0..1 of the CPU)")
    o.add_argument("--overload-reintegrate-load", type=float, default=0.6,
                   help="trigger load: reintegrate below this load")
    o.add_argument("--overload-weight", type=float, default=0.2, help="moving-average weight w (Eq. 2)")
    o.add_argument("--overload-min-timeout-s", type=float, default=1.0,
                   help="least time between two shed/reintegrate actions (Eq. 3's timeout, floored)")
    o.add_argument("--overload-strategy", default="cheapest", choices=[x.value for x in Strategy])
    o.add_argument("--overload-cost-per-copy-us", type=float, default=0.0,
                   help="synthetic load model (Eq. 1): microseconds per event and per copy instead of measured time")
    o.add_argument("--notice-interval-ms", type=int, default=1000,
                   help="how often a shaped channel tells downstream subscribers what it shed")
    p.add_argument("--advertise-host", default="", metavar="IP",
                   help="the address other routers send this router's events to (a pod's IP; the chart passes "
                        "status.podIP): reported to its broker, which points its neighbours there before "
                        "rebuilding a restarted router at a new address (docs/kubernetes.md#upgrades)")
    p.add_argument("--tls-cert", default="", help="PEM certificate: serve the control API over TLS only")
    p.add_argument("--tls-key", default="", help="PEM private key of --tls-cert")
    p.add_argument("--tls-client-ca", default="", help="PEM CA: require client certificates it signed (mTLS); "
                                                        "then only the leaf broker changes this router and "
                                                        "administrators and observers read it (docs/security.md)")
    access.add_arguments(p)
    p.add_argument("--broker-identity", action="append", default=[], metavar="PATTERN",
                   help="with --tls-client-ca: only certificate identities matching PATTERN (fnmatch on CN or DNS "
                        "SAN; repeatable) have the broker role here, i.e. may change this router -- its own "
                        "leaf broker, e.g. gridstat-broker-east -- instead of every broker of the deployment "
                        "(docs/security.md, 'Control by role')")
    p.add_argument("--broker", default="", metavar="HOST:PORT",
                   help="the leaf QoS broker: the router announces its start to it, so that it is rebuilt at once "
                        "(docs/redundancy.md); an edge router also serves the EdgeProxy for publishers and "
                        "subscribers on the control port")
    p.add_argument("--broker-deadline-ms", type=int, default=int(DEFAULT_DEADLINE_S * 1000),
                   help="deadline of each call relayed to the broker")
    p.add_argument("--broker-tls-ca", default="", help="PEM CA of the broker's certificate: TLS to the broker")
    p.add_argument("--broker-tls-cert", default="", help="PEM client certificate towards the broker (mTLS)")
    p.add_argument("--broker-tls-key", default="", help="PEM private key of --broker-tls-cert")
    p.add_argument("--exit-with-parent", action="store_true",
                   help="stop when the parent process dies (for supervisors such as 'gridstat up')")
    p.add_argument("--no-uvloop", action="store_true", help="use the default asyncio loop")
    p.add_argument("--tracemalloc", action="store_true",
                   help="trace the Python heap (tracemalloc) and report it in GetStats; for soaks only: "
                        "every allocation gets slower")
    p.add_argument("--healthz-max-age-ms", type=int, default=telemetry.DEFAULT_HEALTHZ_MAX_AGE_MS,
                   help="/healthz on the metrics port answers 503 once the router's loop heartbeat is older "
                        "than this (at least three ping intervals); a livenessProbe restarts a wedged router")
    p.add_argument("--log-level", default="WARNING")
    telemetry.add_arguments(p)


def _advertised(host: str) -> str:
    """``--advertise-host``: an IP address (what the broker registers routers' event addresses by)."""
    host = host.strip()
    if host:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValidationError(f"--advertise-host {host!r} is not an IP address", field="advertise_host") from None
    return host


def _broker_grants(broker_identity: list[str]) -> access.Grants:
    """The default grants, the broker role narrowed to ``--broker-identity`` when given."""
    if not broker_identity:
        return access.Grants()
    if any(not p.strip() for p in broker_identity):
        raise ValidationError("--broker-identity: an empty pattern would name no broker", field="broker_identity")
    return access.Grants().replacing(access.BROKER, (p.strip() for p in broker_identity))


async def _run(args: argparse.Namespace) -> None:
    config = RouterConfig(
        name=args.name, router_id=args.router_id, role=Role.parse(args.role), variant=Variant.parse(args.variant),
        host=args.host, port=args.port, advertise_host=_advertised(args.advertise_host), mtu=args.mtu,
        queue_capacity=args.queue_capacity,
        ping_interval_ms=args.ping_interval_ms, failure_timeout_ms=args.failure_timeout_ms,
        future_tolerance_ms=args.future_tolerance_ms, drain_batch=args.drain_batch, busy_poll_us=args.busy_poll_us,
        flood_tolerance_ms=args.flood_tolerance_ms, flood_reset_ms=args.flood_reset_ms,
        overload=OverloadConfig(enabled=args.overload_shedding, weight=args.overload_weight,
                                drop_load=args.overload_drop_load, reintegrate_load=args.overload_reintegrate_load,
                                min_timeout_s=args.overload_min_timeout_s,
                                strategy=Strategy.parse(args.overload_strategy),
                                cost_per_copy_s=args.overload_cost_per_copy_us / 1e6,
                                trigger=Trigger.parse(args.overload_trigger),
                                drop_delay_s=args.overload_drop_delay_us / 1e6,
                                reintegrate_delay_s=args.overload_reintegrate_delay_us / 1e6),
        shaping=tuple(parse_shape(text, args.drop_start_ms, args.drop_all_ms,
                                  MessageStrategy.parse(args.message_strategy)) for text in args.shape),
        notice_interval_ms=args.notice_interval_ms,
    )
    tls = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise ValidationError("--tls-cert and --tls-key go together", field="tls_key")
        tls = TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca)
        grpclog.tap_stderr()  # refused TLS handshakes -> gridstat_tls_handshakes_refused_total
    elif args.tls_client_ca:
        raise ValidationError("--tls-client-ca needs --tls-cert and --tls-key", field="tls_cert")
    if args.broker_identity and not args.tls_client_ca:
        raise ValidationError("--broker-identity needs --tls-client-ca: without client certificates there is no "
                              "identity to check", field="broker_identity")
    if args.healthz_max_age_ms <= 0:
        raise ValidationError("--healthz-max-age-ms must be positive", field="healthz_max_age_ms")
    grants = access.Grants.parse(args.grant, base=_broker_grants(args.broker_identity))
    broker_tls = _broker_tls(args)
    router = StatusRouter(config)
    proxy = _proxy(args, config, broker_tls, router)
    await router.start()
    tel = telemetry.for_router(router, args)  # --kafka / --metrics-port: samples router.stats(), off the data path
    await tel.start()
    add_services = None if proxy is None else (lambda server: add_to_server(proxy, server))
    server, control_port = await serve(router, args.host, args.control_port, tls, add_services, grants)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Everything allocated so far lives as long as the router: keep it out of the collector's
    # generations so that a full collection does not stall forwarding for milliseconds.
    gc.freeze()
    print(f"READY name={config.name} port={router.address[1]} control_port={control_port}"
          f"{tel.ready_suffix()}", flush=True)
    # Serving now: its leaf broker may rebuild it at once (router.announce, docs/redundancy.md "Healing").
    announcing = create_guarded_task(announce_in_background(args.broker, config.name, router.boot_id, broker_tls),
                                     name=f"router-{config.name}-announce") if args.broker else None
    await stop.wait()
    if announcing is not None:
        announcing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await announcing
    await server.stop(grace=0.5)
    if proxy is not None:
        await proxy.close()
    await tel.stop()
    await router.stop()


def parse_shape(text: str, drop_start_ms: float, drop_all_ms: float,
                strategy: MessageStrategy = MessageStrategy.CHEAPEST) -> tuple[str, ShapingConfig]:
    """``CHANNEL=BPS[:POLICY[:STRATEGY]]`` -> (channel, its shaping); ``strategy`` unless the text names one.
    ``tail`` and ``none`` choose no victim, so they keep the default strategy unless one is named."""
    name, sep, rest = text.partition("=")
    bps, _, tail = rest.partition(":")
    policy_text, _, strategy_text = tail.partition(":")
    try:
        bandwidth = float(bps)
    except ValueError:
        bandwidth = -1.0
    if not sep or not name or bandwidth <= 0 or ":" in strategy_text:
        raise ValidationError(f"--shape {text!r} is not CHANNEL=BPS[:POLICY[:STRATEGY]] with BPS > 0", field="shape")
    policy = DropPolicy.parse(policy_text)
    if strategy_text:
        strategy = MessageStrategy.parse(strategy_text)
    elif policy not in (DropPolicy.RED, DropPolicy.VALUE):
        strategy = MessageStrategy.CHEAPEST
    return name, ShapingConfig(bandwidth, policy, drop_start_ms, drop_all_ms, strategy=strategy)


def _broker_tls(args: argparse.Namespace) -> TlsFiles | None:
    """The TLS files towards ``--broker`` (checked), or None for plaintext."""
    broker_tls = (args.broker_tls_ca, args.broker_tls_cert, args.broker_tls_key)
    if not args.broker:
        if any(broker_tls):
            raise ValidationError("--broker-tls-* need --broker", field="broker")
        return None
    if bool(args.broker_tls_cert) != bool(args.broker_tls_key):
        raise ValidationError("--broker-tls-cert and --broker-tls-key go together", field="broker_tls_key")
    return TlsFiles(args.broker_tls_cert, args.broker_tls_key, args.broker_tls_ca) if any(broker_tls) else None


def _proxy(args: argparse.Namespace, config: RouterConfig, tls: TlsFiles | None,
           router: StatusRouter) -> EdgeProxyServicer | None:
    """The EdgeProxy of an edge router started with ``--broker``; None for the other roles (they only
    announce themselves to it) and without it."""
    if not args.broker or not config.role.hosts_clients:
        return None
    if args.broker_deadline_ms <= 0:
        raise ValidationError("--broker-deadline-ms must be positive", field="broker_deadline_ms")
    return EdgeProxyServicer(config.name, args.broker, tls=tls, deadline_s=args.broker_deadline_ms / 1000,
                             readiness=router.readiness)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.exit_with_parent:
        exit_with_parent()
    if args.tracemalloc:
        tracemalloc.start()
    if not args.no_uvloop:
        install_fast_loop()
    asyncio.run(_run(args))
    return 0
