"""Child processes of ``gridstat up``: QoS brokers and status routers, and their gRPC connections.

Every child is ``python -m gridstat.cli.main <role> ... --port 0 --exit-with-parent``: we read
its ``READY ...`` line for the ephemeral ports, then talk to it over gRPC (``QoSBroker`` for a
broker, ``RouterControl`` for a router's counters). Its stderr goes to ``<log dir>/<name>.log``.
``stop`` sends SIGTERM (each child stops cleanly on it), waits, SIGKILLs what is left and always
reaps: no orphans, no zombies. ``--exit-with-parent`` covers a ``gridstat up`` killed with SIGKILL.
A child that exits by itself is started again on the same ports by ``demo.supervision`` (its log is
appended to), as the kubelet restarts a pod's container.

SCADA gateways of the topology file (docs/topology.md, "Gateways") are children too
(``GatewayProcess``: ``gridstat iec104-gateway``, ``dnp3-gateway`` or ``goose-gateway`` with the file's
options and ``--edge`` its edge router's control port); we read their JSON stats lines from stdout
instead of calling them over gRPC.

With ``certs`` (the default of ``gridstat up``; docs/security.md, "Certificates (embedded mode)") every
child serves mTLS only with the certificate of its identity (``broker-<cloud>``, ``parent``, ``router``; a
router takes control calls from its own cloud's leaf broker only), the
brokers authenticate datagrams (``--channel-auth all`` at a leaf, ``routers`` at the parent), and our
own gRPC channels to the children use the ``admin`` certificate. Without (``gridstat up --insecure``)
everything is plaintext and unauthenticated.
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import contextlib
import json
import signal
import sys
from pathlib import Path
from typing import IO, Any

import grpc

from gridstat.core.children import parse_ready
from gridstat.demo.localtls import ADMIN, CertDir, leaf_broker_identity
from gridstat.demo.topology import Gateway
from gridstat.errors import GridStatError
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import broker_pb2_grpc as bpb_grpc
from gridstat.v1 import router_pb2 as rpb
from gridstat.v1 import router_pb2_grpc as rpb_grpc

READY_TIMEOUT_S = 30.0
RPC_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
POLL_TIMEOUT_S = 1.0


class StartupError(GridStatError):
    """A child process did not come up, or the management plane refused the topology."""

    reason = "Unavailable"


def parent_role_available() -> bool:
    """Whether ``gridstat broker`` offers ``--role parent`` (the parent QoS broker)."""
    from gridstat.broker import main as broker_main

    parser = argparse.ArgumentParser(add_help=False)
    broker_main.add_arguments(parser)
    for action in parser._actions:
        if "--role" in action.option_strings:
            return action.choices is None or "parent" in action.choices
    return False


def exit_text(code: int) -> str:
    """``exit 0``, ``exit 2`` or ``killed by SIGKILL`` (asyncio reports a signal as a negative code)."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit {code}"


class ChildProcess(abc.ABC):
    """One child process started from ``command()`` that prints a READY line (``core.children.parse_ready``)
    with the ports ``ready_ports`` names. ``start`` again after it exited starts it anew (a restart)."""

    ready_ports: tuple[str, ...] = ("port",)
    what = "process"

    def __init__(self, name: str, log_path: Path, certs: CertDir | None = None) -> None:
        self.name = name
        self.log_path = log_path
        #: Where the certificates are (mTLS and datagram authentication); None = plaintext (--insecure).
        self.certs = certs
        self.proc: asyncio.subprocess.Process | None = None
        self.channel: grpc.aio.Channel | None = None
        self.error = ""
        #: The READY line as printed (``metrics_port=`` is on it when the role serves /metrics).
        self.ready_line = ""
        self._log: IO[bytes] | None = None
        #: Set once we stop it on purpose: its exit is then a stop, not a crash to restart.
        self.stopping = False
        #: Restarts by the supervisor, the exit codes that caused them, and when one is due (monotonic s).
        self.restarts = 0
        self.crash_codes: list[int] = []
        self.restart_at: float | None = None

    @abc.abstractmethod
    def command(self) -> list[str]:
        """The command line of the child (its ports: 0 the first time, the same ones on a restart)."""

    @abc.abstractmethod
    def connect(self) -> None:
        """Open our gRPC channel to it (once; a restarted child is reached on the same ports)."""

    def open_channel(self, address: str) -> grpc.aio.Channel:
        """Our channel to the child: mTLS with the ``admin`` certificate, or plaintext without certs."""
        if self.certs is None:
            return grpc.aio.insecure_channel(address)
        return grpc.aio.secure_channel(address, self.certs.tls(ADMIN).channel_credentials())

    def tls_flags(self, identity: str) -> list[str]:
        """The child serves TLS only with ``identity``'s certificate and requires client certificates."""
        if self.certs is None:
            return []
        c = self.certs
        return ["--tls-cert", str(c.cert(identity)), "--tls-key", str(c.key(identity)), "--tls-client-ca", str(c.ca)]

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def state(self) -> str:
        """``up`` (or the gRPC code of a failed poll), ``restarting`` (crashed, a restart is due),
        ``exited`` (ended by itself), ``stopped`` (by us), or ``not-started``."""
        if self.proc is None:
            return "not-started"
        if self.proc.returncode is not None:
            return "stopped" if self.stopping else "restarting" if self.restart_at is not None else "exited"
        return self.error or "up"

    @property
    def exit(self) -> str:
        """How it ended, ``0``, ``2`` or ``SIGKILL`` (``-`` while it runs)."""
        code = self.proc.returncode if self.proc is not None else None
        if code is None:
            return "-"
        return exit_text(code).removeprefix("exit ").removeprefix("killed by ")

    async def start(self) -> dict[str, str]:
        if self._log is not None:
            self._log.close()
        self._log = self.log_path.open("ab" if self.proc is not None else "wb")
        self.proc = await asyncio.create_subprocess_exec(
            *self.command(), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=self._log)
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), READY_TIMEOUT_S)
        except TimeoutError:
            raise StartupError(f"{self.what} {self.name} did not print READY within {READY_TIMEOUT_S:.0f} s "
                               f"(log: {self.log_path})") from None
        self.ready_line = line.decode(errors="replace").strip()
        fields = parse_ready(self.ready_line)
        if fields is None or not all(fields.get(k, "").isdigit() for k in self.ready_ports):
            raise StartupError(f"{self.what} {self.name} exited or printed {line!r} instead of READY "
                               f"(log: {self.log_path})")
        return fields

    async def stop(self, grace: float = 0.0) -> int | None:
        """Reap the process: wait ``grace`` seconds for it to exit by itself, then SIGTERM, then
        SIGKILL after STOP_TIMEOUT_S. Returns the exit code."""
        proc = self.proc
        self.restart_at = None
        self.stopping = proc is not None and proc.returncode is None
        if self.channel is not None:
            with contextlib.suppress(Exception):
                await self.channel.close(grace=None)
            self.channel = None
        if proc is not None:
            if proc.returncode is None and grace > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), grace)
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
                except TimeoutError:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    await proc.wait()
            else:
                await proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        return proc.returncode if proc is not None else None


class BrokerProcess(ChildProcess):
    """A QoS broker: a cloud's leaf (``--variable-id-base``, optional ``--parent``) or a parent (``--parent``
    unless it is the root)."""

    what = "broker"

    def __init__(self, name: str, role: str, state_path: Path, log_path: Path, *, variable_id_base: int = 1,
                 parent: str = "", clouds: tuple[str, ...] = (), certs: CertDir | None = None) -> None:
        super().__init__(name, log_path, certs)
        self.role = role
        self.state_path = state_path
        self.variable_id_base = variable_id_base
        self.parent = parent
        self.clouds = clouds
        self.port = 0
        self.stub: bpb_grpc.QoSBrokerStub | None = None
        self.health: bpb.BrokerHealthReply | None = None
        #: Admitted subscriptions the broker reports (ListSubscriptions), by subscriber name.
        self.held: dict[str, bpb.SubscribeReply] = {}

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "gridstat.cli.main", "broker", "--name", self.name, "--host", "127.0.0.1",
               "--port", str(self.port), "--state", str(self.state_path), "--exit-with-parent"]
        ca = str(self.certs.ca) if self.certs is not None else ""
        if self.role == "parent":
            cmd += ["--role", "parent"]
            if self.parent:  # a parent broker under another one (a hierarchy of any depth)
                cmd += ["--parent", self.parent]
            if ca:  # its certificate is "parent"; it calls its children and its own parent with it
                cmd += [*self.tls_flags("parent"), "--peer-tls-ca", ca, "--channel-auth", "routers"]
        else:
            cmd += ["--variable-id-base", str(self.variable_id_base)]
            if self.parent:
                cmd += ["--parent", self.parent]
            if ca:  # "broker-<cloud>": served, and used towards its routers and its parent
                cmd += [*self.tls_flags(leaf_broker_identity(self.name)), "--router-tls-ca", ca,
                        "--channel-auth", "all"]
                if self.parent:
                    cmd += ["--peer-tls-ca", ca]
        return cmd

    async def start(self) -> dict[str, str]:
        fields = await super().start()
        self.port = int(fields["port"])
        return fields

    def connect(self) -> None:
        """Open the gRPC channel (after every child is forked: gRPC's fork handlers only complain)."""
        self.channel = self.open_channel(self.address)
        self.stub = bpb_grpc.QoSBrokerStub(self.channel)  # type: ignore[no-untyped-call]

    async def call(self, what: str, method: str, request: Any, *, ok_codes: tuple[grpc.StatusCode, ...] = ()) -> Any:
        """One QoSBroker call; a refusal is a StartupError naming the broker, the call and the reason."""
        assert self.stub is not None
        try:
            return await getattr(self.stub, method)(request, timeout=RPC_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in ok_codes:
                return None
            reason = dict((str(k), v) for k, v in (exc.trailing_metadata() or ())).get("gridstat-reason", "")
            raise StartupError(f"broker {self.name}: {what} failed: {exc.code().name}"
                               f"{' ' + str(reason) if reason else ''}: {exc.details()}") from None

    async def poll(self) -> None:
        """Health and ListSubscriptions; on failure keeps the last answers and records the error."""
        if self.stub is None or not self.running:
            self.error = "not running"
            return
        try:
            self.health = await self.stub.Health(bpb.BrokerHealthRequest(), timeout=POLL_TIMEOUT_S)
            reply = await self.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=POLL_TIMEOUT_S)
            self.held = {s.subscription.subscriber: s for s in reply.subscriptions if s.admitted}
            self.error = ""
        except grpc.aio.AioRpcError as exc:
            self.error = exc.code().name


class RouterProcess(ChildProcess):
    """A status router; ``--broker`` (its cloud's leaf) to announce its start to, and for an edge router
    to relay its clients' calls to."""

    ready_ports = ("port", "control_port")
    what = "router"

    def __init__(self, name: str, router_id: int, role: str, cloud: str, variant: str, log_path: Path, *,
                 broker: str = "", certs: CertDir | None = None) -> None:
        super().__init__(name, log_path, certs)
        self.router_id = router_id
        self.role = role
        self.cloud = cloud
        self.variant = variant
        self.broker = broker
        self.port = 0
        self.control_port = 0
        self.stub: rpb_grpc.RouterControlStub | None = None
        self.last_stats: rpb.RouterStats | None = None

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    @property
    def event_address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def control_address(self) -> str:
        return f"127.0.0.1:{self.control_port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "gridstat.cli.main", "router", "--name", self.name,
               "--id", str(self.router_id), "--port", str(self.port), "--control-port", str(self.control_port),
               "--role", self.role, "--variant", self.variant, "--exit-with-parent"]
        cmd += self.tls_flags("router")
        if self.certs is not None:  # only its own cloud's leaf broker may change it
            cmd += ["--broker-identity", leaf_broker_identity(self.cloud)]
        if self.broker:
            cmd += ["--broker", self.broker]
            if self.certs is not None:  # the announcement and the edge proxy call the leaf broker as "router"
                c = self.certs
                cmd += ["--broker-tls-ca", str(c.ca), "--broker-tls-cert", str(c.cert("router")),
                        "--broker-tls-key", str(c.key("router"))]
        return cmd

    async def start(self) -> dict[str, str]:
        fields = await super().start()
        self.port, self.control_port = int(fields["port"]), int(fields["control_port"])
        return fields

    def connect(self) -> None:
        self.channel = self.open_channel(self.control_address)
        self.stub = rpb_grpc.RouterControlStub(self.channel)  # type: ignore[no-untyped-call]

    async def poll_stats(self) -> rpb.RouterStats | None:
        """GetStats; on failure keeps the last answer and records the error."""
        if self.stub is None or not self.running:
            self.error = "not running"
            return self.last_stats
        try:
            self.last_stats = await self.stub.GetStats(rpb.GetStatsRequest(), timeout=POLL_TIMEOUT_S)
            self.error = ""
        except grpc.aio.AioRpcError as exc:
            self.error = exc.code().name
        return self.last_stats


def gateway_command(g: Gateway, edge: str, certs: CertDir | None = None) -> list[str]:
    """The command line of a topology file's gateway (docs/topology.md, "Gateways"): its own options,
    ``--edge`` the edge router's control port, JSON stats every second on stdout, mTLS to the edge router
    with the gateway's certificate (its name; it carries the publisher names it uses)."""
    cmd = [sys.executable, "-m", "gridstat.cli.main", g.command, "--name", g.name, "--edge", edge,
           "-o", "json", "--stats-every-s", "1", "--exit-with-parent"]
    if g.kind == "goose":
        cmd += ["--interface", g.interface]
    else:
        cmd += ["--outstation", g.outstation]
        if g.allow_remote:
            cmd += ["--allow-remote"]
    for ca in g.common_addresses:
        cmd += ["--common-address", str(ca)]
    options: tuple[tuple[str, object], ...] = (
        ("--address", g.address), ("--master-address", g.master_address), ("--map", g.map_path),
        ("--priority", g.priority), ("--interval-ms", g.interval_ms), ("--min-interval-ms", g.min_interval_ms),
        ("--event-poll-s", g.event_poll_s), ("--integrity-poll-s", g.integrity_poll_s))
    for flag, value in options:
        if value is not None:
            cmd += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if g.unsolicited:
        cmd += ["--unsolicited"]
    if certs is not None:
        cmd += ["--tls-ca", str(certs.ca), "--tls-cert", str(certs.cert(g.name)), "--tls-key", str(certs.key(g.name))]
    return cmd


class GatewayProcess(ChildProcess):
    """A SCADA gateway of the topology file; ``stats`` is its last JSON stats line (``-o json``)."""

    ready_ports = ()
    what = "gateway"

    def __init__(self, spec: Gateway, edge: str, log_path: Path, *, certs: CertDir | None = None) -> None:
        super().__init__(spec.name, log_path, certs)
        self.spec = spec
        self.edge = edge
        self.stats: dict[str, Any] = {}
        self._reader: asyncio.Task[None] | None = None

    def command(self) -> list[str]:
        return gateway_command(self.spec, self.edge, self.certs)

    def connect(self) -> None:
        """Nothing to open: its state is read from its stats lines."""

    async def start(self) -> dict[str, str]:
        fields = await super().start()
        if self._reader is not None:
            self._reader.cancel()
        self._reader = asyncio.create_task(self._read_stats())
        return fields

    async def _read_stats(self) -> None:
        """Keep the last stats line (and keep the pipe drained, or the gateway would block on it)."""
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        while line := await proc.stdout.readline():
            with contextlib.suppress(ValueError):
                data = json.loads(line)
                if isinstance(data, dict):
                    self.stats = data

    def published(self) -> int:
        """Values it handed to its publishers (``events_published``; GOOSE: ``points_published``)."""
        return int(self.stats.get("events_published", self.stats.get("points_published", 0)))

    async def stop(self, grace: float = 0.0) -> int | None:
        code = await super().stop(grace)
        if self._reader is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._reader, STOP_TIMEOUT_S)  # the final stats line
            self._reader = None
        return code
