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

Algorithm 2's BandwidthViolated runs live in ``RelayOverlay``: every relay counts the events
that arrive (``received``, and per variable for the rates of its sub-spaces); the overlay's
timer samples the counts every ``interval_ms`` and, where the arrival rate ``R(s)`` exceeds
``B(s)/(m+1)``, refines the peer's mapping from the counted rates (section 5.1: ``DZ_+1`` by
counting), delivers the NARROW and DISCONNECT messages to its parents and children and
re-wires the relays whose children changed (``gridstat.granularity.triggers``,
docs/granularity.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gridstat.core import wire
from gridstat.errors import ValidationError
from gridstat.granularity import accuracy, dz, overlay, triggers
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
        #: events that arrived (from parents, or a feed's router), whatever happened to them
        self.received = 0
        #: arrivals per variable id since the last ``take_arrivals``
        self.arrivals: Counter[int] = Counter()
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

    def take_arrivals(self) -> Counter[int]:
        """The per-variable arrival counts since the last call (the counter restarts)."""
        out, self.arrivals = self.arrivals, Counter()
        return out

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
        self.received += len(events)
        for ev in events:
            point = self.catalogue.get(ev.variable_id)
            if point is None:
                self.drops["unknown-variable"] += 1
                continue
            self.arrivals[ev.variable_id] += 1
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


class RelayOverlay:
    """The relays' peer states and the timer that raises Algorithm 2's BandwidthViolated on them.

    ``states`` are the peers' ``overlay.PeerState`` (a ``serving.RelayPlan``'s ``peers``),
    ``rects`` and ``budgets`` the user-level subscriptions and ``B(s)/(m+1)`` of the relays that
    have one (feeds have neither). ``tick(now_s)`` is one sample; ``start(interval_ms=...)``
    runs it on the event loop's clock until ``stop``.
    """

    def __init__(self, peers: Mapping[str, RelayPeer], states: Mapping[str, overlay.PeerState], *,
                 rects: Mapping[str, Rectangle], budgets: Mapping[str, accuracy.Budget], max_depth: int,
                 step: int = 1) -> None:
        missing = sorted((set(states) - set(peers)) | (set(budgets) - set(rects)) | (set(budgets) - set(states)))
        if missing:
            raise ValidationError(f"relay overlay: no relay, state or rectangle for {', '.join(missing)}",
                                  field="peers")
        self.peers = dict(peers)
        self.states = dict(states)
        self.rects = dict(rects)
        self.budgets = dict(budgets)
        self.max_depth = max_depth
        self.step = step
        #: ``R(s)`` of the last sample, events per second, per relay with a budget
        self.rate_eps: dict[str, float] = {}
        #: BandwidthViolated raised, and how many of those made a mapping finer
        self.bandwidth_violations = 0
        self.refinements = 0
        self._since_s: float | None = None
        self._since_count: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    def wire(self, names: Iterable[str] | None = None) -> None:
        """Point the relays (all, or ``names``) at the children their states forward to."""
        chosen = self.states if names is None else names
        wire_children(self.peers, {n: [(e.peer, e.dz) for e in self.states[n].children] for n in chosen})

    def tick(self, now_s: float) -> tuple[str, ...]:
        """One sample of every relay's arrivals since the last tick; returns the peers whose mapping was refined.

        The first tick only opens the window. ``R(s)`` is the arrival count over the elapsed
        time; the counted rates per sub-space (``accuracy.MeasuredRates`` over the same window)
        are what ``refine`` chooses the finer mapping by.
        """
        counts = {n: self.peers[n].received for n in self.budgets}
        arrivals = {n: self.peers[n].take_arrivals() for n in self.budgets}
        since, self._since_s = self._since_s, now_s
        previous, self._since_count = self._since_count, counts
        if since is None or now_s <= since:
            return ()
        elapsed_s = now_s - since
        refined: list[str] = []
        rewire: set[str] = set()
        for name, budget in sorted(self.budgets.items()):
            state, rect = self.states[name], self.rects[name]
            rate_eps = (counts[name] - previous.get(name, counts[name])) / elapsed_s
            self.rate_eps[name] = rate_eps
            measured = accuracy.MeasuredRates(depth=self.max_depth, window_s=elapsed_s)
            measured.receiving = dz.minimal(state.mapping)
            catalogue = self.peers[name].catalogue
            for vid, n in arrivals[name].items():
                point = catalogue[vid]
                measured.observe(point, matched=rect.contains(point), n=n)
            done = triggers.check_bandwidth(state, rect, measured, budget, rate_eps=rate_eps, step=self.step,
                                            max_depth=self.max_depth)
            if done is None:
                continue
            self.bandwidth_violations += 1
            if not done.refined:
                continue
            self.refinements += 1
            refined.append(name)
            self.states[name] = done.state
            rewire |= {name} | self._deliver(done.messages)
        if rewire:
            self.wire(sorted(rewire))
        return tuple(refined)

    def _deliver(self, messages: Iterable[overlay.Message]) -> set[str]:
        """Hand the messages to their receivers' handlers (and what those answer); the peers that changed."""
        queue = list(messages)
        changed: set[str] = set()
        while queue:
            msg = queue.pop(0)
            if msg.receiver not in self.states:
                continue
            state, out = overlay.handle(self.states[msg.receiver], msg)
            if state != self.states[msg.receiver]:
                changed.add(msg.receiver)
                self.states[msg.receiver] = state
            queue.extend(out)
        return changed

    def start(self, *, interval_ms: float) -> None:
        """Run ``tick`` every ``interval_ms`` on the running loop's clock (idempotent)."""
        if not interval_ms > 0:
            raise ValidationError(f"interval_ms must be > 0, got {interval_ms}", field="interval_ms")
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(interval_ms / 1000.0))

    async def _run(self, interval_s: float) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self.tick(loop.time())
            await asyncio.sleep(interval_s)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
