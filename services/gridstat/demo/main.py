"""``gridstat up`` (alias ``gridstat demo``): run an example utility on 127.0.0.1 on the real management plane.

With no argument it runs the built-in topology (``default-topology.yaml`` next
to this file, documented in docs/topology.md): two clouds of five routers, three
simulated PMUs, six subscriptions, one of them over two node-disjoint paths.
Given ``TOPOLOGY.yaml`` it runs that instead.

What runs where (every child with ``--exit-with-parent``):

* one leaf QoS broker per cloud (``gridstat broker``, its own SQLite state, its
  own variable-id block) and, when this build has the role, the parent brokers
  above them (``--role parent``): the file's ``brokers`` tree of any depth,
  started level by level from the root with ``--parent`` pointing up, or one
  parent over every leaf (docs/topology.md, "brokers"); the leaves get
  ``--parent`` (their cloud's ``broker``);
* every status router (``gridstat router ... --port 0``); edge routers get
  ``--broker`` (their cloud's leaf) and proxy their clients' commands to it;
* the topology is registered over gRPC: ``AddRouter`` and ``AddChannel`` at each
  leaf, ``AddChildBroker`` at each parent broker (bottom up) and
  ``AddInterCloudChannel`` at the root (it hands a channel down to its clouds'
  lowest common ancestor);
* publishers and subscribers (client SDK) run inside this process on asyncio and
  talk only to their edge router (``Publisher.connect`` / ``register``,
  ``Subscriber.connect`` / ``subscribe_remote``): the brokers admit, plan paths
  and install routes. A refused subscription is shown with the broker's reason
  and offer, and the rest keeps running;
* the file's SCADA gateways (``gateways``, docs/topology.md "Gateways": ``gridstat iec104-gateway``,
  ``dnp3-gateway``, ``goose-gateway`` in front of the user's devices) as supervised children once the
  routers are registered, each with its edge router's control port and a certificate of its name that
  carries the publisher names it uses; a subscription to a variable a gateway declares waits until the
  gateway registered it.

Secure by default (docs/security.md, "Certificates (embedded mode)"): every gRPC channel is mutual
TLS and every event datagram is authenticated (``--channel-auth all`` at the leaves, ``routers`` at the
parent). The certificates (a local CA; ``broker``, ``parent``, ``router``, ``admission``, ``admin``,
``condense`` and one per publisher and subscriber, named as the client) are made on the first start in
``<--state-dir>/certs`` or ``~/.local/state/gridstat/up/certs`` (``gridstat.demo.certs``) and reused
afterwards. ``--insecure`` runs everything in plaintext without datagram authentication, for raw-speed
measurements only, under a warning banner.

A live rich view refreshes twice a second on a terminal; otherwise a plain
``key=value`` summary is printed every ``--summary-every`` seconds. A final
summary (``FINAL ...``) is always printed. SIGINT, SIGTERM and SIGHUP stop
everything: publishers and subscribers, then brokers, then routers get SIGTERM
and are reaped (SIGKILL after 5 s), and the exit code is 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import grpc
from rich.console import Console
from rich.live import Live

from gridstat.core import access, clock
from gridstat.core.aio import install_fast_loop
from gridstat.core.tls import TlsFiles
from gridstat.demo import localtls
from gridstat.demo.devices import DeviceEndpoint
from gridstat.demo.endpoints import PublisherEndpoint, SubscriptionEndpoint, format_offer
from gridstat.demo.localtls import leaf_broker_identity
from gridstat.demo.processes import (
    BrokerProcess,
    ChildProcess,
    GatewayProcess,
    RouterProcess,
    StartupError,
    parent_role_available,
)
from gridstat.demo.supervision import Supervisor
from gridstat.demo.telemetry import DemoTelemetry, archive_names
from gridstat.demo.topology import Broker, Topology, load_topology
from gridstat.demo.view import BrokerRow, GatewayRow, RouterRow, Snapshot, SubRow, plain_lines, rich_view
from gridstat.errors import GridStatError, ValidationError
from gridstat.v1 import broker_pb2 as bpb

T = TypeVar("T")

#: Each stops the runner cleanly (SIGHUP: the terminal went away).
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Name of the parent broker; variable ids of cloud k (file order) start at VARIABLE_BLOCK * (k + 1).
PARENT_NAME = "parent"
VARIABLE_BLOCK = 1_000_000
#: How long the brokers get to reach every router after the topology is registered.
ROUTERS_UP_TIMEOUT_S = 20.0
#: How long a subscription to a gateway's variable waits for the gateway to register it (it does at the
#: first value it reads from the device).
GATEWAY_VARIABLE_WAIT_S = 120.0
#: Printed at the start and after the final summary of ``gridstat up --insecure``.
INSECURE_BANNER = """\
WARNING: gridstat up --insecure: mTLS and datagram authentication are OFF.
WARNING:   Every gRPC channel (brokers, routers, edge proxies, clients) is plaintext and takes any caller:
WARNING:   whoever reaches these ports can add routers, install routes, change modes and subscribe
WARNING:   under any client's name. Event datagrams carry no authentication tag: whoever can send UDP
WARNING:   to a router can inject forged events under a publisher's id, and subscribers deliver them.
WARNING:   Use --insecure only to measure raw speed on a trusted host; the default is secure
WARNING:   (docs/security.md, "Certificates (embedded mode)")."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("topology", nargs="?", metavar="TOPOLOGY.yaml",
                   help="topology file (docs/topology.md); default: the built-in example utility")
    p.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                   help="stop after this many seconds of traffic (default: run until Ctrl-C)")
    p.add_argument("--variant", choices=["close", "sparse"], default="close",
                   help="routing-table variant of every router")
    p.add_argument("--plain", action="store_true", help="print plain summaries even on a terminal")
    p.add_argument("--summary-every", type=float, default=3.0, metavar="SECONDS",
                   help="seconds between plain summaries when not on a terminal")
    p.add_argument("--log-dir", default=None,
                   help="where router and broker logs go (default: a new temporary directory)")
    p.add_argument("--no-parent", action="store_true",
                   help="run the leaf brokers only, without the parent broker (inter-cloud subscriptions are "
                        "then refused)")
    p.add_argument("--state-dir", default=None,
                   help="where the brokers' SQLite state goes, <broker>.sqlite, overwritten at start "
                        "(default: a new temporary directory, removed at exit)")
    p.add_argument("--kafka", nargs="?", const="local", default=None, metavar="HOST:PORT",
                   help="export telemetry from every role to Kafka and archive every variable "
                        "(docs/telemetry.md); without HOST:PORT a local Apache Kafka is started")
    p.add_argument("--metrics", action="store_true", help="every role serves Prometheus /metrics on a free port")
    p.add_argument("--certs-dir", default=None, metavar="DIR",
                   help="certificates of every role and client, made on the first start and reused "
                        "(default: STATE_DIR/certs with --state-dir, else ~/.local/state/gridstat/up/certs)")
    p.add_argument("--insecure", action="store_true",
                   help="UNSAFE, for raw-speed benchmarks only: plaintext gRPC without client certificates and "
                        "unauthenticated event datagrams (anyone on the host can forge commands and events)")


def run(args: argparse.Namespace) -> int:
    topology = load_topology(args.topology)   # TopologyError -> the CLI exits 2
    if args.duration is not None and args.duration <= 0:
        raise ValidationError(f"--duration must be positive, got {args.duration}", field="duration")
    if args.summary_every <= 0:
        raise ValidationError(f"--summary-every must be positive, got {args.summary_every}",
                              field="summary_every")
    install_fast_loop()
    telemetry = DemoTelemetry(kafka=args.kafka, metrics=args.metrics) if args.kafka or args.metrics else None
    try:
        if telemetry is not None:
            telemetry.start_kafka()  # before any child starts: they inherit GRIDSTAT_KAFKA
        runner = Runner(topology, variant=args.variant, duration=args.duration, plain=args.plain,
                        summary_every=args.summary_every, log_dir=args.log_dir, state_dir=args.state_dir,
                        with_parent=False if args.no_parent else None, telemetry=telemetry,
                        insecure=args.insecure, certs_dir=args.certs_dir)
        return asyncio.run(runner.run())
    finally:
        if telemetry is not None:
            telemetry.stop_kafka()


def station_lines(t: Topology) -> list[str]:
    """The stations of the file in a few lines: how many by region, voltage level and owner
    (``gridstat topology stations FILE`` lists each one)."""
    if not t.stations:
        return []

    def tally(values: list[str]) -> str:
        counts: dict[str, int] = {}
        for v in values:
            counts[v or "-"] = counts.get(v or "-", 0) + 1
        return ",".join(f"{k}={n}" for k, n in sorted(counts.items()))

    routers = len({s.router for s in t.stations})
    kv = [s.attributes.get("voltage_kv", "") for s in t.stations]
    return [f"  stations count={len(t.stations)} routers={routers} regions={tally([s.region for s in t.stations])} "
            f"voltage_kv={tally(kv)} owners={tally([s.owner for s in t.stations])} "
            f"(each one: gridstat topology stations {t.source})"]


def check_client_names(names: list[str]) -> None:
    """A client's name is its certificate's identity (the broker binds the two), so it must hold no
    role: a publisher called ``broker-A`` would get a certificate that changes cloud A's routers."""
    grants = access.Grants()
    for name in names:
        roles = grants.roles_of([name])
        if roles != {access.CLIENT}:
            raise ValidationError(f"client name {name!r} is an identity of the {'/'.join(sorted(roles))} role "
                                  "(docs/security.md, 'Control by role'): its certificate could control the "
                                  "system; rename it", field="name")

class Runner:
    def __init__(self, topology: Topology, *, variant: str = "close", duration: float | None = None,
                 plain: bool = False, summary_every: float = 3.0, log_dir: str | None = None,
                 state_dir: str | None = None, console: Console | None = None,
                 with_parent: bool | None = None, telemetry: DemoTelemetry | None = None,
                 insecure: bool = False, certs_dir: str | None = None) -> None:
        self.topology = topology
        self.insecure = insecure
        #: The certificates of every role and client (None with --insecure: plaintext, no datagram keys).
        self.certs: localtls.CertDir | None = None
        self.certs_path = Path(certs_dir) if certs_dir else localtls.default_certs_dir(state_dir)
        self._running_file: Path | None = None
        self.telemetry = telemetry
        self.variant = variant
        self.duration = duration
        self.summary_every = summary_every
        self.console = console or Console()
        self.live = self.console.is_terminal and not plain
        self._own_log_dir = not log_dir
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="gridstat-up-"))
        self._own_state_dir = not state_dir
        self.state_dir = Path(state_dir) if state_dir else Path(tempfile.mkdtemp(prefix="gridstat-up-state-"))
        self.with_parent = parent_role_available() if with_parent is None else with_parent
        #: The root parent broker (None: leaves only) and every parent broker, parents before children.
        self.parent: BrokerProcess | None = None
        self.parents: dict[str, BrokerProcess] = {}
        self.leaves: dict[str, BrokerProcess] = {}
        self.routers: dict[str, RouterProcess] = {}
        self.gateways: dict[str, GatewayProcess] = {}
        #: Subscriptions to gateways' variables, waiting for the gateway to register them.
        self._waiting: list[asyncio.Task[None]] = []
        self.subscriptions: list[SubscriptionEndpoint] = []
        self.publishers: list[PublisherEndpoint | DeviceEndpoint] = []
        self.notes: list[str] = []
        self._unregistered_links = 0
        self.stop_event = asyncio.Event()
        self.started = time.monotonic()
        self.signal: str | None = None

    @property
    def brokers(self) -> list[BrokerProcess]:
        return list(self.parents.values()) + list(self.leaves.values())

    @property
    def children(self) -> list[ChildProcess]:
        """Every child process: brokers, routers and gateways (the supervisor restarts each)."""
        return [*self.brokers, *self.routers.values(), *self.gateways.values()]

    def say(self, text: str) -> None:
        print(text, flush=True)

    # -- lifecycle ----------------------------------------------------------------------------------
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in _STOP_SIGNALS:
            loop.add_signal_handler(sig, self._on_signal, sig)
        code = 0
        final: Snapshot | None = None
        supervisor: asyncio.Task[None] | None = None
        try:
            await self._start()
            if not self.stop_event.is_set():
                # From here a crashed router or broker is restarted (docs/topology.md, "Restarts").
                supervisor = asyncio.create_task(Supervisor(self.children, self.stop_event, self.say).run())
                final = await self._watch()
        except StartupError as exc:
            if not self.stop_event.is_set():  # a child that dies of the same Ctrl-C is not an error
                print(f"gridstat up: error: {exc}", file=sys.stderr, flush=True)
                code = 1
        finally:
            if supervisor is not None:
                supervisor.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await supervisor
            await self._teardown()
            for sig in _STOP_SIGNALS:
                loop.remove_signal_handler(sig)
        if final is not None:
            # Printed after the teardown, so each role's state is how it really ended.
            why = f"stopped by {self.signal}" if self.signal else "duration reached"
            self.say("\n".join(plain_lines(self._as_ended(final), title=f"FINAL ({why})")))
            if self.insecure:
                self.say(INSECURE_BANNER)
        return code

    def _as_ended(self, snap: Snapshot) -> Snapshot:
        """The final snapshot with every router's and broker's state as it ended (``stopped``, exit ``0``,
        or ``exited`` ``SIGKILL`` ...) instead of the last poll's answer."""
        routers = tuple(dataclasses.replace(r, state=self.routers[r.name].state(), exit=self.routers[r.name].exit)
                        for r in snap.routers)
        ended = {b.name: b for b in self.brokers}
        brokers = tuple(dataclasses.replace(b, state=ended[b.name].state(), exit=ended[b.name].exit)
                        for b in snap.brokers)
        gateways = tuple(self._gateway_row(self.gateways[g.name]) for g in snap.gateways)
        return dataclasses.replace(snap, routers=routers, brokers=brokers, gateways=gateways)

    def _on_signal(self, sig: signal.Signals) -> None:
        self.signal = sig.name
        self.stop_event.set()

    async def _start(self) -> None:
        t = self.topology
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.insecure:
            self.say(INSECURE_BANNER)
            self.notes.append("INSECURE (--insecure): mTLS and datagram authentication are off")
        self.say(f"gridstat up: {t.source}: {len(t.clouds)} clouds, {len(t.routers)} routers, "
                 f"{len(t.publishers)} publishers, {len(t.subscriptions)} subscriptions"
                 + (f", {len(t.gateways)} gateways" if t.gateways else "") + "; "
                 f"variant {self.variant}; logs in {self.log_dir}; broker state in {self.state_dir}")
        for line in station_lines(t):
            self.say(line)
        if not self.insecure:
            self._prepare_certs()
        if not await self._start_brokers() or not await self._start_routers():
            return
        # Every child is forked before the first gRPC channel opens (gRPC's fork handlers only warn).
        for child in [*self.brokers, *self.routers.values()]:
            child.connect()
        if self.certs is not None:
            self._announce_certs()
        await self._until_stopped(self._register_topology())
        if self.stop_event.is_set():
            return
        await self._until_stopped(self._wait_routers_up())
        if self.stop_event.is_set():
            return
        if t.gateways and not await self._start_gateways():
            return
        # Publishers first: a subscription names a variable the broker must already know.
        self.publishers = [(DeviceEndpoint if p.device is not None else PublisherEndpoint)(
            p, self.routers[p.edge].control_address, self._client_tls(p.name)) for p in t.publishers]
        try:
            await self._until_stopped(asyncio.gather(*(p.connect() for p in self.publishers)))
        except GridStatError as exc:
            raise StartupError(f"a publisher could not register through its edge router: {exc}") from None
        if self.stop_event.is_set():
            return
        for pe in self.publishers:
            if pe.publisher is not None:
                variables = ",".join(f"{name}={h.variable.variable_id}" for name, h in pe.handles.items())
                feed = ""
                if isinstance(pe, DeviceEndpoint) and pe.spec.device is not None:
                    feed = (f" fed=c37118 device=127.0.0.1:{pe.server.port} idcode={pe.idcode} "
                            f"frames_per_s={pe.spec.device.frames_per_s}")
                at = f" station={pe.spec.station.name}" if pe.spec.station is not None else ""
                self.say(f"  publisher name={pe.spec.name} edge={pe.spec.edge}{at} id={pe.publisher.publisher_id} "
                         f"signed={'yes' if pe.publisher.key else 'no'}{feed} variables={variables}")
        for s in t.subscriptions:
            ep = SubscriptionEndpoint(s, t.variable(s.variable), self.routers[s.edge].control_address,
                                      tls=self._client_tls(s.name))
            self.subscriptions.append(ep)
            if t.gateway_of(s.variable) is not None:  # registered by the gateway at its first value
                self._waiting.append(asyncio.create_task(self._subscribe_when_registered(ep)))
                continue
            # Without a parent broker no leaf knows the other cloud's variables; ask anyway, so that
            # the refusal shown is the broker's own.
            await self._until_stopped(ep.start())
            if self.stop_event.is_set():
                return
        await asyncio.gather(*(b.poll() for b in self.brokers))
        for ep in self.subscriptions:
            s = ep.spec
            gateway = t.gateway_of(s.variable)
            if gateway is not None and not ep.admitted:
                self.say(f"  subscription name={s.name} var={s.variable} waits for gateway {gateway.name} to "
                         "register the variable")
            elif ep.admitted:
                paths = " | ".join(p.replace(">", " -> ") for p in self._paths(s.name)) or "-"
                self.say(f"  subscription name={s.name} var={s.variable} admitted paths: {paths}")
            else:
                self.say(f"  subscription name={s.name} var={s.variable} {ep.status.upper()} reason={ep.reason} "
                         f"offer={format_offer(ep.offer)}: {ep.message}")
        refused_across = [ep.spec.name for ep in self.subscriptions
                          if not ep.admitted and t.crosses_clouds(ep.spec)]
        if self.parent is None and (refused_across or self._unregistered_links):
            why = "--no-parent" if parent_role_available() else "this build has no 'gridstat broker --role parent'"
            self.notes.append(
                f"no parent broker ({why}): "
                f"{self._unregistered_links} inter-cloud link(s) not registered; inter-cloud subscriptions "
                f"{', '.join(refused_across) or '(none)'} cannot be set up (their leaf does not know the variable)")
        if self.telemetry is not None:  # --kafka / --metrics: samples of every subscription; the archive
            await self._until_stopped(self.telemetry.attach(
                [ep.subscriber for ep in self.subscriptions if ep.subscriber is not None], t.publishers,
                {name: rp.control_address for name, rp in self.routers.items()}, self._client_tls,
                [pe.publisher for pe in self.publishers if pe.publisher is not None]))
        wanted = {ep.spec.variable for ep in self.subscriptions if ep.admitted}
        wanted |= self.telemetry.archived if self.telemetry is not None else set()
        sending = sum(p.start_sending(wanted) for p in self.publishers)
        self.started = time.monotonic()
        admitted = sum(1 for ep in self.subscriptions if ep.admitted)
        self.say(f"  {admitted} of {len(self.subscriptions)} subscriptions admitted; {len(self.publishers)} "
                 f"publishers sending {sending} variables; "
                 + (f"stopping after {self.duration:g} s" if self.duration else "Ctrl-C to stop"))
        for n in self.notes:
            self.say(f"  note {n}")
        if self.telemetry is not None:
            children = {c.name: c.ready_line for c in [*self.brokers, *self.routers.values()]}
            for line in self.telemetry.lines(children):
                self.say(line)

    # -- certificates (docs/security.md, "Certificates (embedded mode)") ---------------------------------
    def _prepare_certs(self) -> None:
        """Make (first start) or reuse the CA and a certificate per role and per client."""
        from gridstat.demo import certs  # cryptography: only when certificates are needed

        t = self.topology
        clients = [*(p.name for p in t.publishers), *(s.name for s in t.subscriptions), *(g.name for g in t.gateways)]
        if self.telemetry is not None:
            clients += archive_names(t.publishers)
        # A gateway's certificate carries the publisher names it publishes under (docs/topology.md, "Gateways").
        check_client_names([*clients, *(pub for g in t.gateways for pub in g.publishers)])
        names = [*certs.ROLE_IDENTITIES, *(leaf_broker_identity(c) for c in t.clouds), *clients]
        result = certs.ensure(self.certs_path, names, sans={g.name: g.publishers for g in t.gateways})
        self.certs = result.certs
        made = (f"generated {len(result.created)} certificates" + (" and a new CA" if result.new_ca else "")
                if result.created else "")
        kept = f"reused {len(result.reused)}" if result.reused else ""
        self.say(f"gridstat up: mTLS on every gRPC channel and datagram authentication are on; certificates in "
                 f"{self.certs.path} ({', '.join(x for x in (made, kept) if x)}; opt out: --insecure)")

    def _client_tls(self, name: str) -> TlsFiles | None:
        """A client's certificate (its name is its identity: the broker binds the two), or None."""
        return self.certs.tls(name) if self.certs is not None else None

    def _announce_certs(self) -> None:
        """Tell the CLI (``gridstat.cli.common``) which addresses are ours, and the user how to use them."""
        assert self.certs is not None
        addresses = [b.address for b in self.brokers] + [r.control_address for r in self.routers.values()]
        with contextlib.suppress(OSError):
            self._running_file = localtls.register(self.certs, addresses)
        leaf = next(iter(self.leaves.values()), None)
        example = f"gridstat topology show --broker {leaf.address}" if leaf is not None else "gridstat topology show"
        self.say(f"  tls: the CLI uses {self.certs.cert(localtls.ADMIN)} (identity admin) by itself for this demo's "
                 f"brokers and routers while it runs, e.g. {example}; elsewhere pass "
                 f"{self.certs.cli_flags()} (or set GRIDSTAT_TLS_CA, GRIDSTAT_TLS_CERT, GRIDSTAT_TLS_KEY); "
                 f"a client of your own needs a certificate named as it: scripts/gen-certs.sh {self.certs.path} NAME")

    async def _start_brokers(self) -> bool:
        t = self.topology
        if self.with_parent:
            # The file's tree (docs/topology.md, "Broker hierarchy"), else one parent over every leaf;
            # level by level from the root, each started with --parent pointing at its own parent.
            tree = t.brokers or (Broker(PARENT_NAME, None),)
            for depth in sorted({t.broker_depth(b.name) for b in tree}):
                level = [spec for spec in tree if t.broker_depth(spec.name) == depth]
                for spec in level:
                    up = self.parents[spec.parent].address if spec.parent is not None else ""
                    self.parents[spec.name] = BrokerProcess(
                        spec.name, "parent", self._state_file(spec.name), self.log_dir / f"broker-{spec.name}.log",
                        parent=up, clouds=t.clouds if spec.parent is None else (), certs=self.certs)
                await self._until_stopped(asyncio.gather(*(self.parents[spec.name].start() for spec in level)))
                if self.stop_event.is_set():
                    return False
            self.parent = self.parents[tree[0].name]
        for k, cloud in enumerate(t.clouds):
            above = self.parents.get(t.cloud_brokers.get(cloud, "")) or self.parent
            self.leaves[cloud] = BrokerProcess(cloud, "leaf", self._state_file(cloud),
                                               self.log_dir / f"broker-{cloud}.log",
                                               variable_id_base=VARIABLE_BLOCK * (k + 1),
                                               parent=above.address if above is not None else "", certs=self.certs)
        await self._until_stopped(asyncio.gather(*(b.start() for b in self.leaves.values())))
        if self.stop_event.is_set():
            return False
        for b in self.brokers:
            self.say(f"  broker name={b.name} role={b.role} pid={b.pid} port={b.port}")
        if self.parent is not None:
            self.say(f"  hierarchy {self._tree(self.parent.name)}")
        return True

    async def _start_gateways(self) -> bool:
        """The file's SCADA gateways (docs/topology.md, "Gateways"), each against its edge router."""
        for g in self.topology.gateways:
            self.gateways[g.name] = GatewayProcess(g, self.routers[g.edge].control_address,
                                                   self.log_dir / f"gateway-{g.name}.log", certs=self.certs)
        await self._until_stopped(asyncio.gather(*(gp.start() for gp in self.gateways.values())))
        if self.stop_event.is_set():
            return False
        for gp in self.gateways.values():
            g = gp.spec
            self.say(f"  gateway name={g.name} kind={g.kind} edge={g.edge} {'interface' if g.interface else 'device'}"
                     f"={g.target} pid={gp.pid} publishers={','.join(g.publishers) or '-'}"
                     + (f" map={g.map_path}" if g.map_path else ""))
        return True

    async def _subscribe_when_registered(self, ep: SubscriptionEndpoint) -> None:
        """Subscribe to a gateway's variable once the gateway registered it (UnknownVariable until then)."""
        deadline = time.monotonic() + GATEWAY_VARIABLE_WAIT_S
        while True:
            await ep.start()
            if ep.admitted or ep.reason != "UnknownVariable" or time.monotonic() >= deadline:
                break
            if ep.subscriber is not None:
                with contextlib.suppress(Exception):
                    await ep.subscriber.stop()
            ep.subscriber, ep.subscription, ep.status, ep.reason, ep.message = None, None, "pending", "", ""
            if await self._sleep(0.5):
                return
        if ep.admitted:
            with contextlib.suppress(Exception):  # the broker's paths for the line below
                await asyncio.gather(*(b.poll() for b in self.brokers))
            self.say(f"  subscription name={ep.spec.name} var={ep.spec.variable} admitted paths: "
                     f"{' | '.join(p.replace('>', ' -> ') for p in self._paths(ep.spec.name)) or '-'}")
        else:
            self.say(f"  subscription name={ep.spec.name} var={ep.spec.variable} {ep.status.upper()} "
                     f"reason={ep.reason}: {ep.message}")

    def _gateway_row(self, gp: GatewayProcess) -> GatewayRow:
        g, s = gp.spec, gp.stats
        drops = s.get("drops", {})
        return GatewayRow(g.name, g.kind, g.edge, g.target, gp.pid, gp.state(), str(s.get("state", "-")),
                          gp.published(), int(s.get("registrations", 0)),
                          sum(int(v) for v in drops.values()) if isinstance(drops, dict) else 0, gp.exit, gp.restarts)

    def _tree(self, name: str) -> str:
        """The broker tree below ``name``: ``root(west(A,B),east(C))``."""
        t = self.topology
        kids = [b.name for b in t.brokers if b.parent == name]
        kids += [c for c in t.clouds if t.cloud_brokers.get(c, self.parent.name if self.parent else "") == name]
        return f"{name}({','.join(self._tree(k) for k in kids)})" if kids else name

    def _state_file(self, name: str) -> Path:
        path = self.state_dir / f"{name}.sqlite"
        for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            p.unlink(missing_ok=True)  # gridstat up starts from an empty management plane
        return path

    async def _start_routers(self) -> bool:
        for r in self.topology.routers:
            # Every router announces its start to its leaf (rebuilt at once after a restart); an edge
            # router also relays its clients' calls there.
            broker = self.leaves[r.cloud].address
            self.routers[r.name] = RouterProcess(r.name, r.router_id, r.role, r.cloud, self.variant,
                                                 self.log_dir / f"{r.name}.log", broker=broker, certs=self.certs)
        await self._until_stopped(asyncio.gather(*(r.start() for r in self.routers.values())))
        if self.stop_event.is_set():
            return False
        for rp in self.routers.values():
            self.say(f"  router name={rp.name} role={rp.role} cloud={rp.cloud} pid={rp.pid} port={rp.port} "
                     f"control_port={rp.control_port}")
        return True

    async def _register_topology(self) -> None:
        t = self.topology
        if self.parent is not None:
            await self._register_children()
        for r in t.routers:
            rp = self.routers[r.name]
            await self.leaves[r.cloud].call(f"AddRouter {r.name}", "AddRouter", bpb.AddRouterRequest(
                router=bpb.RouterInfo(name=r.name, role=r.role, capacity_eps=r.capacity_eps,
                                      control_address=rp.control_address, event_address=rp.event_address,
                                      router_id=r.router_id, attributes=dict(r.metadata))))
        inter = 0
        for link in t.links:
            ca, cb = t.router(link.a).cloud, t.router(link.b).cloud
            bandwidth = link.bandwidth_kbps * 1000
            if ca == cb:
                await self.leaves[ca].call(f"AddChannel {link.a}-{link.b}", "AddChannel", bpb.AddTopologyChannelRequest(
                    channel=bpb.TopologyChannel(a=link.a, b=link.b, bandwidth_bps=bandwidth,
                                                latency_ms=link.latency_ms, both_directions=True)))
                continue
            inter += 1
            if self.parent is None:
                continue
            rb = self.routers[link.b]
            await self.parent.call(f"AddInterCloudChannel {link.a}-{link.b}", "AddInterCloudChannel",
                                   bpb.AddInterCloudChannelRequest(channel=bpb.InterCloudChannel(
                                       cloud_a=ca, router_a=link.a, cloud_b=cb, router_b=link.b,
                                       bandwidth_bps=bandwidth, latency_ms=link.latency_ms,
                                       router_b_event_address=rb.event_address, router_b_id=rb.router_id)))
        self._unregistered_links = inter if self.parent is None else 0
        total = len(t.links) - (inter if self.parent is None else 0)
        self.say(f"  registered {len(t.routers)} routers and {total} links with the brokers over gRPC")

    async def _register_children(self) -> None:
        """``AddChildBroker`` from the bottom up: each leaf at its parent, then each parent broker at its
        own, deepest first, so that a parent reads its children's clouds when it is added above."""
        t = self.topology
        assert self.parent is not None
        for cloud, leaf in self.leaves.items():
            above = self.parents.get(t.cloud_brokers.get(cloud, "")) or self.parent
            await above.call(f"AddChildBroker {cloud}", "AddChildBroker", bpb.AddChildBrokerRequest(
                child=bpb.ChildBroker(name=cloud, address=leaf.address, leaf=True)),
                ok_codes=(grpc.StatusCode.ALREADY_EXISTS,))
        for spec in sorted(t.brokers, key=lambda x: -t.broker_depth(x.name)):
            if spec.parent is None:
                continue
            await self.parents[spec.parent].call(
                f"AddChildBroker {spec.name}", "AddChildBroker", bpb.AddChildBrokerRequest(child=bpb.ChildBroker(
                    name=spec.name, address=self.parents[spec.name].address, leaf=False)),
                ok_codes=(grpc.StatusCode.ALREADY_EXISTS,))

    async def _wait_routers_up(self) -> None:
        """Until every leaf has reached all its routers (they take no paths before)."""
        deadline = time.monotonic() + ROUTERS_UP_TIMEOUT_S
        while True:
            await asyncio.gather(*(b.poll() for b in self.leaves.values()))
            down = {b.name: b.health.routers_down if b.health else -1 for b in self.leaves.values()}
            if all(d == 0 for d in down.values()):
                return
            if time.monotonic() >= deadline:
                raise StartupError(f"the brokers did not reach every router within {ROUTERS_UP_TIMEOUT_S:.0f} s "
                                   f"(routers down by broker: {down}; logs in {self.log_dir})")
            await asyncio.sleep(0.1)

    def _paths(self, subscriber: str) -> tuple[str, ...]:
        """The broker's paths of a subscription (mode 0), ``r1>r2>r3``."""
        for b in self.brokers:
            reply = b.held.get(subscriber)
            if reply is not None:
                return tuple(">".join(p.routers) for a in reply.allocations if a.mode == 0 for p in a.paths)
        return ()

    async def _until_stopped(self, aw: Awaitable[T]) -> T | None:
        """Await ``aw`` unless a stop signal comes first (then cancel it and return None)."""
        stopper = asyncio.ensure_future(self.stop_event.wait())
        fut = asyncio.ensure_future(aw)
        try:
            await asyncio.wait({fut, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if fut.done():
            return fut.result()
        fut.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await fut
        return None

    def _deadline_reached(self) -> bool:
        return self.duration is not None and time.monotonic() - self.started >= self.duration

    async def _watch(self) -> Snapshot:
        """The live view or the plain summaries until it is time to stop; the last snapshot."""
        refresh = 0.5
        if self.live:
            with Live(rich_view(await self.snapshot()), console=self.console, refresh_per_second=4,
                      transient=False) as live:
                while not await self._sleep(refresh):
                    live.update(rich_view(await self.snapshot()))
                final = await self.snapshot()
                live.update(rich_view(final))
        else:
            next_summary = time.monotonic() + self.summary_every
            while not await self._sleep(refresh):
                if time.monotonic() >= next_summary:
                    next_summary += self.summary_every
                    self.say("\n".join(plain_lines(await self.snapshot())))
            final = await self.snapshot()
        return final

    async def _sleep(self, seconds: float) -> bool:
        """Sleep; True when it is time to stop (signal or --duration)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop_event.wait(), seconds)
        return self.stop_event.is_set() or self._deadline_reached()

    async def snapshot(self) -> Snapshot:
        await asyncio.gather(*(r.poll_stats() for r in self.routers.values()), *(b.poll() for b in self.brokers))
        now_ms = clock.now_ms()
        final = self.stop_event.is_set() or self._deadline_reached()
        subs = []
        for ep in self.subscriptions:
            s = ep.spec
            held_by = ",".join(b.name for b in self.brokers if s.name in b.held) or "-"
            sub = ep.subscription
            if sub is None:
                subs.append(SubRow(s.name, s.variable, s.edge, ep.status, (), s.interval_ms,
                                   ep.effective_interval_ms, ep.expected_rate, None, 0, None, None, s.latency_ms,
                                   0, 0, ep.drops(), 0, held_by, ep.reason, format_offer(ep.offer)))
                continue
            st = sub.stats
            rate = ep.meter.run_rate() if final else ep.meter.live_rate(now_ms)
            subs.append(SubRow(
                s.name, s.variable, s.edge, ep.status, self._paths(s.name), s.interval_ms, ep.effective_interval_ms,
                ep.expected_rate, rate, st.delivered, st.latency.percentile(50), st.latency.percentile(99),
                s.latency_ms, st.gaps, st.duplicates, ep.drops(), st.violations, held_by,
                lost=st.lost, unpublished=st.unpublished))
        rows = []
        for rp in self.routers.values():
            rs = rp.last_stats
            rows.append(RouterRow(
                rp.name, rp.role, rp.cloud, rp.pid, rp.state(),
                rs.events_in if rs else 0, rs.events_forwarded if rs else 0, rs.events_filtered if rs else 0,
                _all_drops(rs), sum(1 for c in rs.channels if c.up) if rs else 0, len(rs.channels) if rs else 0,
                rp.exit, rp.restarts))
        brokers = []
        ours = {s.name for s in self.topology.subscriptions}
        for b in self.brokers:
            h = b.health
            brokers.append(BrokerRow(b.name, b.role, b.pid, b.state(), h.subscriptions if h else 0,
                                     h.routers_up if h else 0, h.routers_down if h else 0,
                                     tuple(sorted(ours & set(b.held))), len(set(b.held) - ours), b.exit, b.restarts))
        return Snapshot(time.monotonic() - self.started, self.variant, self.topology.source, tuple(subs),
                        tuple(rows), tuple(brokers), tuple(self.notes),
                        tuple(self._gateway_row(gp) for gp in self.gateways.values()))

    async def _teardown(self) -> None:
        # signals only set stop_event now, so a second Ctrl-C cannot interrupt this and leave orphans
        if self._running_file is not None:
            self._running_file.unlink(missing_ok=True)
        for task in self._waiting:
            task.cancel()
        await asyncio.gather(*self._waiting, return_exceptions=True)
        for pub in self.publishers:
            with contextlib.suppress(Exception):
                await pub.stop()
        for ep in self.subscriptions:
            with contextlib.suppress(Exception):
                await ep.stop()
        if self.telemetry is not None:
            with contextlib.suppress(Exception):
                await self.telemetry.stop()
        # A Ctrl-C on a terminal reaches the children too (same process group) and they stop on
        # their own; give them a moment before SIGTERM so they finish cleanly.
        grace = 1.5 if self.signal == "SIGINT" else 0.0
        # The gateways first (their final stats lines), then the management plane.
        gateway_codes = await asyncio.gather(*(g.stop(grace) for g in self.gateways.values()), return_exceptions=True)
        # The management plane first: a broker outliving its routers would only report them dead.
        broker_codes = await asyncio.gather(*(b.stop(grace) for b in self.brokers), return_exceptions=True)
        router_codes = await asyncio.gather(*(r.stop(grace) for r in self.routers.values()),
                                            return_exceptions=True)
        names = [*self.routers, *(b.name for b in self.brokers), *self.gateways]
        bad = [f"{name}={code}" for name, code in zip(names, [*router_codes, *broker_codes, *gateway_codes],
                                                      strict=True)
               if code not in (0, None)]
        logs = f"logs in {self.log_dir}"
        with contextlib.suppress(OSError):
            if self._own_log_dir and all(f.stat().st_size == 0 for f in self.log_dir.iterdir()):
                shutil.rmtree(self.log_dir)
                logs = "logs were empty (removed)"
        if self._own_state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        self.say(f"gridstat up: stopped {len(self.routers)} router and {len(self.brokers)} broker processes"
                 + (f" and {len(self.gateways)} gateways" if self.gateways else "")
                 + (f" (exit codes {', '.join(bad)})" if bad else "") + f"; {logs}")


def _all_drops(s: object) -> dict[str, int]:
    """Router-level drops plus every channel's, by reason."""
    out: dict[str, int] = {}
    if s is None:
        return out
    for k, v in getattr(s, "drops", {}).items():
        out[k] = out.get(k, 0) + int(v)
    for ch in getattr(s, "channels", ()):
        for k, v in ch.drops.items():
            out[k] = out.get(k, 0) + int(v)
    return out
