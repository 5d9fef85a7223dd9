"""Delay and reordering in the kernel without sch_netem: an NFQUEUE whose verdicts are held back.

Why: this kernel has no ``sch_netem`` and no nftables ``queue`` expression, but it has the iptables
NFQUEUE target and nfnetlink_queue. ``DelayQueue`` sends a link's UDP to a queue (``iptables -j
NFQUEUE`` in the sender's namespace) and binds that queue over netlink from a thread: each packet
stays in the kernel, and its accept verdict is issued ``delay_ms`` +- ``jitter_ms`` later, so packets
leave late and, with jitter above the gap between them, out of order. Only the packet ids cross to
user space (copy mode "meta"); the decision of when is ours, the queueing and the sending the
kernel's. nfnetlink_queue is spoken directly (a few fixed structs), so nothing else is needed.
On ``close`` everything still held is accepted and the rule removed.
"""

from __future__ import annotations

import contextlib
import random
import select
import socket
import struct
import threading
import time

from .netns import entered, run

_NETLINK_NETFILTER = 12
_QUEUE = 3 << 8  # NFNL_SUBSYS_QUEUE
_MSG_PACKET, _MSG_VERDICT, _MSG_CONFIG = _QUEUE | 0, _QUEUE | 1, _QUEUE | 2
_REQUEST, _ACK = 1, 4
_CMD_BIND, _CMD_UNBIND, _COPY_META, _ACCEPT = 1, 2, 1, 1
_NLMSG_ERROR = 2
_HDR = struct.Struct("=IHHII")
_ATTR = struct.Struct("=HH")


def _attr(kind: int, payload: bytes) -> bytes:
    pad = (4 - len(payload) % 4) % 4
    return _ATTR.pack(_ATTR.size + len(payload), kind) + payload + b"\0" * pad


def _msg(kind: int, queue: int, attrs: bytes, seq: int, flags: int = _REQUEST) -> bytes:
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + attrs
    return _HDR.pack(_HDR.size + len(body), kind, flags, seq, 0) + body


def _packet_ids(data: bytes) -> list[int]:
    """The ids of the NFQNL_MSG_PACKET messages in one netlink read."""
    ids, off = [], 0
    while off + _HDR.size <= len(data):
        length, kind, _, _, _ = _HDR.unpack_from(data, off)
        if length < _HDR.size:
            break
        if kind == _MSG_PACKET:
            a = off + _HDR.size + 4
            while a + _ATTR.size <= off + length:
                alen, atype = _ATTR.unpack_from(data, a)
                if alen < _ATTR.size:
                    break
                if atype & 0x7FFF == 1:  # NFQA_PACKET_HDR: be32 packet_id, be16 hw_protocol, u8 hook
                    ids.append(struct.unpack_from(">I", data, a + _ATTR.size)[0])
                a += (alen + 3) & ~3
        off += (length + 3) & ~3
    return ids


class DelayQueue:
    """UDP leaving ``dev`` in namespace ``ns`` held ``delay_ms`` +- ``jitter_ms`` in the kernel (seeded)."""

    def __init__(self, ns: str, dev: str, *, delay_ms: float, jitter_ms: float = 0.0, queue: int = 9,
                 seed: int = 9) -> None:
        self.ns, self.dev, self.queue = ns, dev, queue
        self.delay_ms, self.jitter_ms, self.rng = delay_ms, jitter_ms, random.Random(seed)
        self.counts = {"held": 0, "reordered": 0}
        self._rule = ["OUTPUT", "-o", dev, "-p", "udp", "-j", "NFQUEUE", "--queue-num", str(queue)]
        with entered(ns):
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_NETFILTER)
        self.sock.bind((0, 0))
        self._config(struct.pack("=BBH", _CMD_BIND, 0, socket.htons(socket.AF_INET)), 1)
        self._config(struct.pack(">IB", 0, _COPY_META), 2)
        run("iptables-legacy" if self._legacy() else "iptables", "-A", *self._rule, ns=ns)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-nfqueue", daemon=True)
        self._thread.start()

    @staticmethod
    def _legacy() -> bool:
        """The xtables NFQUEUE target (iptables-nft may turn it into the nft queue this kernel lacks)."""
        import shutil

        return shutil.which("iptables-legacy") is not None

    def _config(self, payload: bytes, kind: int) -> None:
        self.sock.send(_msg(_MSG_CONFIG, self.queue, _attr(kind, payload), seq=kind, flags=_REQUEST | _ACK))
        self.sock.settimeout(2)
        reply = self.sock.recv(65536)
        _, kind_, _, _, _ = _HDR.unpack_from(reply)
        if kind_ == _NLMSG_ERROR and struct.unpack_from("=i", reply, _HDR.size)[0] != 0:
            from .procs import ChaosError

            raise ChaosError(f"nfnetlink_queue refused the queue {self.queue} config ({kind})")

    def _verdict(self, packet_id: int) -> None:
        with contextlib.suppress(OSError):
            self.sock.send(_msg(_MSG_VERDICT, self.queue, _attr(2, struct.pack(">II", _ACCEPT, packet_id)), 0))

    def _run(self) -> None:
        held: list[tuple[float, int]] = []
        last_id = -1
        while True:
            stopping = self._stop.is_set()
            now = time.monotonic()
            wait = 0.0 if stopping else max(0.0, min([p[0] for p in held], default=now + 0.05) - now)
            if select.select([self.sock], [], [], min(wait, 0.05))[0]:
                with contextlib.suppress(OSError):
                    for pid in _packet_ids(self.sock.recv(65536)):
                        self.counts["held"] += 1
                        jitter = self.rng.uniform(-1, 1) * self.jitter_ms
                        held.append((time.monotonic() + max(0.0, self.delay_ms + jitter) / 1e3, pid))
            now = float("inf") if stopping else time.monotonic()  # closing: let everything go now
            for _, pid in sorted(p for p in held if p[0] <= now):
                self.counts["reordered"] += pid < last_id
                last_id = max(last_id, pid)
                self._verdict(pid)
            held = [p for p in held if p[0] > now]
            if stopping:
                return

    def close(self) -> None:
        with contextlib.suppress(Exception):
            run("iptables-legacy" if self._legacy() else "iptables", "-D", *self._rule, ns=self.ns)
        self._stop.set()
        self._thread.join(timeout=2)
        with contextlib.suppress(OSError):
            self.sock.send(_msg(_MSG_CONFIG, self.queue, _attr(1, struct.pack("=BBH", _CMD_UNBIND, 0, 0)), 9))
        self.sock.close()
