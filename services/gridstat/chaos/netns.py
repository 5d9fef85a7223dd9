"""Test hosts in network namespaces joined by veth pairs, and kernel-level faults on their links.

Why: event channels must be cut and degraded between test hosts (docs/chaos.md), not only inside one
process's relay (``traffic.ImpairedLink``). Each ``Lab`` node is a namespace the suite creates, with
a management veth to the root namespace (the broker there reaches the router's control port on the
node's address 10.99.B+k.2; the root end has an address but nothing binds to it) and one veth per
link to a neighbour, with a /32 route so router-to-router traffic takes exactly that link. Faults are
the kernel's own: ``cut`` takes the link down (both directions); ``netns_faults.FaultLab`` adds loss
and duplication (nftables) and a rate limit (tbf), ``netns_queue.DelayQueue`` delay and reordering
(NFQUEUE). This kernel has no ``sch_netem`` (docs/chaos.md). Names are unique per run (pid and a
random token); namespaces are always deleted, on failure too, and those of dead runs are swept
first. Needs root and the tools of scripts/netns-tools.sh.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from .procs import ChaosError

PREFIX = "gridstat-chaos"
NET = "10.99"
CMD_TIMEOUT_S = 10.0
_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def run(*cmd: str, ns: str = "", stdin: str | None = None) -> str:
    """Run a command (in namespace ``ns``), bounded in time; ChaosError with its stderr if it fails."""
    full = ["ip", "netns", "exec", ns, *cmd] if ns else list(cmd)
    try:
        done = subprocess.run(full, input=stdin, capture_output=True, text=True, timeout=CMD_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ChaosError(f"{' '.join(full)}: {exc}") from exc
    if done.returncode != 0:
        raise ChaosError(f"{' '.join(full)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def missing_tools() -> list[str]:
    """What the kernel-level scenarios need and cannot find: root, ip, tc, nft, iptables."""
    gaps = [t for t in ("ip", "tc", "nft", "iptables") if shutil.which(t) is None]
    return gaps + ([] if os.geteuid() == 0 else ["root"])


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise ChaosError(f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def entered(ns: str) -> Iterator[None]:
    """The calling thread inside namespace ``ns``: sockets and threads created meanwhile stay there."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)


@dataclass(frozen=True)
class Node:
    label: str
    ns: str
    #: The node's address (routers bind it) and the root end of its management veth.
    addr: str
    root_addr: str


def _sweep_dead_runs() -> None:
    """Delete namespaces left by runs whose process is gone (a SIGKILLed suite cannot clean up)."""
    for line in run("ip", "netns", "list").splitlines():
        name = line.split()[0] if line.strip() else ""
        parts = name.split("-")
        if name.startswith(PREFIX + "-") and len(parts) > 3 and parts[2].isdigit() and \
                not os.path.exists(f"/proc/{parts[2]}"):
            with contextlib.suppress(ChaosError):
                run("ip", "netns", "del", name)


def _free_block() -> int:
    """A third octet base B (multiple of 16) with no 10.99.B..B+15 address in the root namespace."""
    used = run("ip", "-o", "-4", "addr", "show")
    for _ in range(64):
        base = 16 * secrets.randbelow(15)
        if not any(f" {NET}.{base + k}." in used for k in range(16)):
            return base
    raise ChaosError(f"no free {NET}.x.0/24 block in the root namespace")


class Lab:
    """Namespaces ``labels`` joined by veth ``links``; a context manager that always cleans up."""

    def __init__(self, labels: list[str], links: list[tuple[str, str]]) -> None:
        if len(labels) > 15:
            raise ChaosError("a lab has at most 15 nodes")
        self.token = secrets.token_hex(3)
        self.labels, self.links = labels, links
        self.nodes: dict[str, Node] = {}
        self._created: list[str] = []

    def dev(self, a: str, b: str) -> str:
        """The interface in ``a``'s namespace on the link to ``b``."""
        return f"to-{b}"[:15]

    def __enter__(self) -> Self:
        gaps = missing_tools()
        if gaps:
            raise ChaosError(f"network namespace scenarios need {', '.join(gaps)} (run as root; "
                             "scripts/netns-tools.sh installs the tools)")
        try:
            _sweep_dead_runs()
            base = _free_block()
            for k, label in enumerate(self.labels, start=1):
                node = Node(label, f"{PREFIX}-{os.getpid()}-{self.token}-{label}", f"{NET}.{base + k}.2",
                            f"{NET}.{base + k}.1")
                run("ip", "netns", "add", node.ns)
                self._created.append(node.ns)
                self.nodes[label] = node
                host = f"gs{self.token}{k:x}"
                run("ip", "link", "add", host, "type", "veth", "peer", "name", "mgmt", "netns", node.ns)
                run("ip", "addr", "add", f"{node.root_addr}/24", "dev", host)
                run("ip", "link", "set", host, "up")
                run("ip", "-n", node.ns, "addr", "add", f"{node.addr}/24", "dev", "mgmt")
                run("ip", "-n", node.ns, "link", "set", "mgmt", "up")
                run("ip", "-n", node.ns, "link", "set", "lo", "up")
            for a, b in self.links:
                na, nb = self.nodes[a], self.nodes[b]
                run("ip", "-n", na.ns, "link", "add", self.dev(a, b), "type", "veth", "peer", "name",
                    self.dev(b, a), "netns", nb.ns)
                self.heal(a, b)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Kill what still runs in our namespaces (only our own children can), then delete them; the
        root ends of the management veths first (the kernel tears a namespace down asynchronously)."""
        for k in range(1, len(self._created) + 1):
            with contextlib.suppress(ChaosError):
                run("ip", "link", "del", f"gs{self.token}{k:x}")
        for ns in reversed(self._created):
            with contextlib.suppress(ChaosError, ValueError, ProcessLookupError):
                for pid in run("ip", "netns", "pids", ns).split():
                    if int(pid) != os.getpid():
                        os.kill(int(pid), 9)
            with contextlib.suppress(ChaosError):
                run("ip", "netns", "del", ns)
        self._created.clear()

    # -- the link itself -----------------------------------------------------------------------------
    def cut(self, a: str, b: str) -> None:
        """Pull the cable: the link goes down on both ends (its routes go with it)."""
        run("ip", "-n", self.nodes[a].ns, "link", "set", self.dev(a, b), "down")
        run("ip", "-n", self.nodes[b].ns, "link", "set", self.dev(b, a), "down")

    def heal(self, a: str, b: str) -> None:
        """The link up on both ends, with each side's /32 route to the other over it."""
        for x, y in ((a, b), (b, a)):
            nx, ny = self.nodes[x], self.nodes[y]
            run("ip", "-n", nx.ns, "link", "set", self.dev(x, y), "up")
            run("ip", "-n", nx.ns, "route", "replace", f"{ny.addr}/32", "dev", self.dev(x, y), "src", nx.addr)
