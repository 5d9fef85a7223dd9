"""Child processes for the chaos suite: start, kill -9, stop/continue, restart at the same ports.

Each child is ``python -m gridstat.cli.main <role> ... --exit-with-parent``; we read its READY line
for the ports, then talk to it over (insecure, loopback-only) gRPC. Synchronous on purpose: the
suite's fault injection and invariant checks are sequential, with traffic in threads.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from gridstat.core import children, waiting
from gridstat.core.children import ready_port
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError
from gridstat.v1 import broker_pb2_grpc as bpb_grpc
from gridstat.v1 import router_pb2 as rpb
from gridstat.v1 import router_pb2_grpc as rpb_grpc

READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0


class ChaosError(GridStatError):
    """A child did not start, or the scenario's set-up was refused."""

    reason = "Unavailable"


def wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0, step_s: float = 0.02) -> bool:
    """Poll ``predicate`` until true or ``timeout_s`` (core.waiting); a refused gRPC call counts as false."""
    return waiting.wait_for(predicate, timeout_s=timeout_s, step_s=step_s, tolerate=(grpc.RpcError,))


def _spawn(cmd: list[str], what: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """A role started and READY (core.children.spawn), or ChaosError naming it."""
    try:
        return children.spawn(cmd, what=what, timeout_s=READY_TIMEOUT_S)
    except children.ChildFailed as exc:
        raise ChaosError(str(exc), field="process") from None


class Signals:
    """``running``, ``kill`` (-9), ``pause``/``resume`` (SIGSTOP/SIGCONT) and ``stop`` (SIGTERM, then -9
    after STOP_TIMEOUT_S) of ``self.proc``: every process a scenario faults (roles, the operator)."""

    proc: subprocess.Popen[Any] | None
    paused: bool
    #: How long ``stop`` waits after SIGTERM before SIGKILL.
    term_timeout_s = STOP_TIMEOUT_S

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        self.resume()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        self._close()

    def pause(self) -> None:
        if self.running and not self.paused:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.paused:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGCONT)
            self.paused = False

    def pause_for(self, seconds: float) -> tuple[int, int]:
        """SIGSTOP, ``seconds`` stopped, SIGCONT: when it was stopped and when continued (wall clock, ms)."""
        stopped_ms = int(time.time() * 1000)
        self.pause()
        time.sleep(seconds)
        self.resume()
        return stopped_ms, int(time.time() * 1000)

    def stop(self) -> None:
        self.resume()
        if self.proc is not None:
            children.stop(self.proc, grace_s=self.term_timeout_s)
        self._close()

    def _close(self) -> None:
        """What else to release once the process is gone (pipes, channels)."""


@dataclass
class Child(Signals):
    """One child process; ``kill`` (-9), ``pause``/``resume`` (SIGSTOP/SIGCONT), ``stop`` (SIGTERM)."""

    name: str
    proc: subprocess.Popen[str] | None = None
    channel: grpc.Channel | None = None
    paused: bool = False
    #: Extra command-line options (TLS files, policies...).
    extra: tuple[str, ...] = ()
    #: (m)TLS of our own gRPC channel to the child; None = plaintext (loopback tests).
    tls: TlsFiles | None = None

    def _open(self, address: str) -> grpc.Channel:
        if self.tls is None:
            return grpc.insecure_channel(address)
        return grpc.secure_channel(address, self.tls.channel_credentials())

    def _close(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        if self.channel is not None:
            self.channel.close()
            self.channel = None


@dataclass
class Router(Child):
    router_id: int = 0
    role: str = "internal"
    port: int = 0
    control_port: int = 0
    stub: rpb_grpc.RouterControlStub | None = None

    def start(self) -> Router:
        """Start (or restart at the same ports once it has run)."""
        cmd = [sys.executable, "-m", "gridstat.cli.main", "router", "--name", self.name, "--id", str(self.router_id),
               "--host", "127.0.0.1", "--port", str(self.port), "--control-port", str(self.control_port),
               "--role", self.role, "--ping-interval-ms", "50", "--failure-timeout-ms", "300", "--exit-with-parent",
               *self.extra]
        self.proc, ready = _spawn(cmd, f"router {self.name}")
        self.port, self.control_port = ready_port(ready), ready_port(ready, "control_port")
        self.channel = self._open(f"127.0.0.1:{self.control_port}")
        self.stub = rpb_grpc.RouterControlStub(self.channel)  # type: ignore[no-untyped-call]
        return self

    def routes(self) -> list[rpb.Route]:
        assert self.stub is not None
        return list(self.stub.ListRoutes(rpb.ListRoutesRequest(), timeout=2).routes)

    def current_mode(self) -> int:
        assert self.stub is not None
        return int(self.stub.ListRoutes(rpb.ListRoutesRequest(), timeout=2).current_mode)


@dataclass
class Broker(Child):
    state: str = ""
    port: int = 0
    stub: bpb_grpc.QoSBrokerStub | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Broker:
        cmd = [sys.executable, "-m", "gridstat.cli.main", "broker", "--name", self.name, "--host", "127.0.0.1",
               "--port", str(self.port), "--state", self.state, "--supervise-interval-ms", "200",
               "--exit-with-parent", *self.extra]
        self.proc, ready = _spawn(cmd, f"broker {self.name}")
        self.port = ready_port(ready)
        self.channel = self._open(self.address)
        self.stub = bpb_grpc.QoSBrokerStub(self.channel)  # type: ignore[no-untyped-call]
        return self


@dataclass
class Admission(Child):
    port: int = 0
    args: tuple[str, ...] = field(default_factory=tuple)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Admission:
        cmd = [sys.executable, "-m", "gridstat.cli.main", "admission", "--name", self.name, "--host", "127.0.0.1",
               "--port", str(self.port), "--exit-with-parent", *self.args]
        self.proc, ready = _spawn(cmd, f"admission controller {self.name}")
        self.port = ready_port(ready)
        return self




@dataclass
class CondenseHost(Child):
    """``gridstat condense host``: a condensation function in a process of its own, a client of an
    edge router that proxies to the broker (``--broker``)."""

    edge_control_port: int = 0
    spec: str = ""
    variable_id: int = 0

    def start(self) -> CondenseHost:
        cmd = [sys.executable, "-m", "gridstat.cli.main", "condense", "host", "--edge",
               f"127.0.0.1:{self.edge_control_port}", "--spec", self.spec, "--status-interval-s", "0",
               "--exit-with-parent", *self.extra]
        self.proc, ready = _spawn(cmd, f"condensation host {self.name}")
        if not ready.get("variable_id", "").isdigit():
            raise ChaosError(f"condensation host {self.name}: READY line has no variable_id: {ready}", field="process")
        self.variable_id = int(ready["variable_id"])
        return self
