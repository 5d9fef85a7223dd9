"""In-process relay peers: forward GridStat event datagrams along a ``RelayPlan`` over UDP.

A relay peer is what a dashboard process runs to take part in the overlay: it binds a UDP
socket (127.0.0.1 here; a pod address in a cluster), delivers the events its user-level
subscription matches, counts the false positives its coarser peer-level subscription brings,
and forwards every event to each child whose edge sub-space holds it, once per child. A
*feed* is a relay peer without a subscription of its own: it sits where a best-effort router
subscription ends and is the overlay's publisher.

The datagrams are GridStat's own wire format (``gridstat.core.wire``), re-packed per child,
so a relay is a small status router whose routing table is a set of dz-expressions. Bad
datagrams and unknown variables are dropped and counted, never raised (DESIGN: "a counted
drop, never a crash"). Events carry no attributes on the wire: every peer holds the
catalogue (variable id -> attribute point) from the variables' advertisements.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gridstat.core import wire
from gridstat.granularity import dz
from gridstat.granularity.space import Rectangle

Address = tuple[str, int]


@dataclass(frozen=True)
class Child:
    """Where to forward: a child's address and the sub-spaces of its edges."""

    name: str
    address: Address
    dzs: tuple[str, ...]


class RelayPeer(asyncio.DatagramProtocol):
    """One relay peer (or a feed when ``rect`` is None); ``start`` binds, ``stop`` closes (idempotent)."""

    def __init__(self, name: str, *, sender_id: int, catalogue: Mapping[int, tuple[float, ...]],
                 rect: Rectangle | None = None, on_event: Callable[[wire.Event], None] | None = None) -> None:
        self.name = name
        self.sender_id = sender_id
        self.catalogue = catalogue
        self.rect = rect
        self.on_event = on_event
        self.children: tuple[Child, ...] = ()
        self.delivered = 0
        self.false_positives = 0
        self.forwarded = 0
        self.drops: Counter[str] = Counter()
        self._transport: asyncio.DatagramTransport | None = None
        self._sequence = 0
        self._closed = False

    async def start(self, host: str = "127.0.0.1") -> Address:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: self, local_addr=(host, 0))
        self._transport = transport
        addr = transport.get_extra_info("sockname")
        return str(addr[0]), int(addr[1])

    @property
    def address(self) -> Address:
        assert self._transport is not None, "start() first"
        addr = self._transport.get_extra_info("sockname")
        return str(addr[0]), int(addr[1])

    def set_children(self, children: Sequence[Child]) -> None:
        self.children = tuple(children)

    async def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._transport is not None:
            self._transport.close()

    def datagram_received(self, data: bytes, addr: Address) -> None:
        try:
            dgram = wire.decode_datagram(data)
        except wire.DecodeError as exc:
            self.drops[exc.reason.value] += 1
            return
        if dgram.kind != wire.KIND_EVENTS:
            self.drops["not-events"] += 1
            return
        self.publish(dgram.events)

    def publish(self, events: Sequence[wire.Event]) -> None:
        """Deliver locally what matches and forward to the children (a feed calls this with its router's events)."""
        batches: dict[int, list[bytes]] = {}
        for ev in events:
            point = self.catalogue.get(ev.variable_id)
            if point is None:
                self.drops["unknown-variable"] += 1
                continue
            if self.rect is not None:
                if self.rect.contains(point):
                    self.delivered += 1
                    if self.on_event is not None:
                        self.on_event(ev)
                else:
                    self.false_positives += 1
            for i, child in enumerate(self.children):
                if any(dz.contains(x, point) for x in child.dzs):
                    batches.setdefault(i, []).append(wire.encode_event(ev))
        if self._transport is None or self._closed:
            return
        for i, encoded in batches.items():
            for run in wire.pack_events(encoded):
                self._sequence = (self._sequence + 1) & 0xFFFF_FFFF
                self._transport.sendto(wire.encode_datagram(self.sender_id, self._sequence, run),
                                       self.children[i].address)
                self.forwarded += len(run)


def wire_children(peers: Mapping[str, RelayPeer], plan_children: Mapping[str, Sequence[tuple[str, str]]]) -> None:
    """Point every peer at its children: ``plan_children[peer]`` is ``[(child, dz), ...]`` from the plan's edges."""
    for name, edges in plan_children.items():
        by_child: dict[str, list[str]] = {}
        for child, expr in edges:
            by_child.setdefault(child, []).append(expr)
        peers[name].set_children([Child(c, peers[c].address, tuple(x)) for c, x in sorted(by_child.items())])
