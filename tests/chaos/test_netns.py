"""Kernel-level channel faults between network namespaces the suite creates (chaos.netns, netns_faults, netns_queue).

Raw UDP between two namespaces joined by a veth pair: a cut, loss, duplication, a rate limit and delay
with reordering, each measured. The scenarios that run routers over such links (netns-path-loss,
netns-degraded-link) run in test_chaos.py. Needs root and scripts/netns-tools.sh (scripts/test.sh runs
it); a missing tool fails with the message that names it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from gridstat.chaos import netns
from gridstat.chaos.netns import Lab, entered, run
from gridstat.chaos.netns_faults import FaultLab
from gridstat.chaos.netns_queue import DelayQueue
from gridstat.chaos.procs import ChaosError

pytestmark = pytest.mark.integration

N = 200


def _ours(token: str) -> list[str]:
    names = [line.split()[0] for line in run("ip", "netns", "list").splitlines() if line.strip()]
    links = [line for line in run("ip", "-o", "link").splitlines() if f"gs{token}" in line]
    return [n for n in names if f"-{token}-" in n] + links


@pytest.fixture
def pair() -> Iterator[tuple[FaultLab, socket.socket, socket.socket]]:
    gaps = netns.missing_tools()
    assert not gaps, f"kernel-level chaos needs {gaps}: run scripts/netns-tools.sh (as root)"
    with FaultLab(["a", "b"], [("a", "b")]) as lab:
        with entered(lab.nodes["b"].ns):
            rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            rx.bind((lab.nodes["b"].addr, 0))
        with entered(lab.nodes["a"].ns):
            tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            tx.bind((lab.nodes["a"].addr, 0))
        rx.settimeout(0.3)
        # Room for every datagram and copy of a burst (we read only after sending): root may exceed rmem_max.
        rx.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 1 << 22)
        try:
            yield lab, tx, rx
        finally:
            tx.close()
            rx.close()
    assert _ours(lab.token) == []


def _exchange(tx: socket.socket, rx: socket.socket, n: int = N, size: int = 64) -> list[int]:
    """Send n numbered datagrams 1 ms apart; what arrived, in arrival order (bounded: 0.3 s of silence)."""
    for i in range(n):
        tx.sendto(i.to_bytes(4, "big") + b"\0" * (size - 4), rx.getsockname())
        time.sleep(0.001)
    got: list[int] = []
    while len(got) < 4 * n:
        try:
            got.append(int.from_bytes(rx.recv(2048)[:4], "big"))
        except TimeoutError:
            break
    return got


@pytest.mark.timeout(60)
def test_cut_loss_and_duplication_in_the_kernel(pair: tuple[FaultLab, socket.socket, socket.socket]) -> None:
    lab, tx, rx = pair
    assert sorted(_exchange(tx, rx)) == list(range(N))
    lab.cut("a", "b")
    with pytest.raises(OSError):  # the link is down: the route with it (ENETUNREACH)
        _exchange(tx, rx, n=1)
    lab.heal("a", "b")
    assert sorted(_exchange(tx, rx)) == list(range(N))
    lab.impair("a", "b", loss=0.3)
    got = _exchange(tx, rx)
    assert 0.5 * N < len(got) < 0.9 * N and lab.counters("a", "b")["dropped"] == N - len(got)
    lab.impair("a", "b", duplicate=0.3)
    got = _exchange(tx, rx)
    assert set(got) == set(range(N)) and len(got) - N == lab.counters("a", "b")["duplicated"] > 0.1 * N
    lab.clear("a", "b")
    assert sorted(_exchange(tx, rx)) == list(range(N))


@pytest.mark.timeout(60)
def test_rate_limit_delay_and_reordering_in_the_kernel(pair: tuple[FaultLab, socket.socket, socket.socket]) -> None:
    lab, tx, rx = pair
    # 200 datagrams of 500 bytes in 0.2 s (about 4 Mbit/s) into a 400 kbit/s bucket: most wait, then drop.
    lab.rate("a", "b", kbit=400, burst_bytes=2000, latency_ms=20)
    got = _exchange(tx, rx, size=500)
    assert len(got) < 0.6 * N and lab.rate_drops("a", "b") == N - len(got)
    lab.clear("a", "b")
    queue = DelayQueue(lab.nodes["a"].ns, lab.dev("a", "b"), delay_ms=5, jitter_ms=4)
    try:
        t0 = time.monotonic()
        tx.sendto((0).to_bytes(4, "big"), rx.getsockname())
        rx.recv(64)
        held_for = time.monotonic() - t0
        got = _exchange(tx, rx)
    finally:
        queue.close()
    assert held_for >= 0.001, held_for
    assert sorted(got) == list(range(N)), "delayed, not lost"
    assert got != sorted(got) and queue.counts["reordered"] > 0 and queue.counts["held"] == N + 1
    iptables = run("iptables-legacy", "-S", "OUTPUT", ns=lab.nodes["a"].ns)
    assert "NFQUEUE" not in iptables, "the queue's rule is removed on close"
    assert sorted(_exchange(tx, rx)) == list(range(N))


@pytest.mark.timeout(30)
def test_namespaces_are_removed_when_the_body_fails_and_tools_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    lab = Lab(["x", "y"], [("x", "y")])
    with pytest.raises(RuntimeError), lab:
        assert len(_ours(lab.token)) == 2 + 2  # two namespaces, two management veths in the root namespace
        raise RuntimeError("scenario failed")
    assert _ours(lab.token) == []
    monkeypatch.setattr("gridstat.chaos.netns.shutil.which", lambda t: None if t == "nft" else "/usr/sbin/" + t)
    with pytest.raises(ChaosError, match=r"need nft \(run as root; scripts/netns-tools.sh installs"), Lab(["z"], []):
        pass
