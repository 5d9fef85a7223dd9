"""Condensation functions in a status router's slot (dissertation 7.3; Fig A.34, CondFunInterface).

GridStat plugs a condensation function into the routing table as a pseudo *outgoing*
channel: the leaf broker routes the function's input subscriptions to it like to any
subscriber, so the rate filter and multicast deliver exactly the inputs it asked for.
Here that channel is ``cf:<function_id>``; the table resolves it to a
``CondensationSlot``, which is a ``tables.Target`` (``push`` and ``filtered``).

The forwarding loop only appends to the slot, as to a channel's queue; the slot
decodes and feeds its events to the function (``gridstat.condensation``) on the next
turn of the router's loop (``call_soon``), so the hot path does no condensation work
and the function's outputs never re-enter a forwarding pass that is running. A time
trigger is a loop timer at the function's aligned instants, not per-event work.

Outputs are injected into this router's own forwarding as events of the output
variable: a datagram is built with ``core.wire`` and run through the ``Forwarder``
with the sender id of the output publisher's inbound channel (``pub:<publisher>``,
opened by the leaf broker), so rate filtering, multicast and the per-channel counters
apply to them as to any publisher's events.

Bad input never stops the router: an input event that does not decode as its input's
type is counted as ``malformed`` in the router's drops; a calculator that raises is
counted by the function (``calculator_errors``, ``last_error``); the admitted streams
of the router keep flowing.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gridstat import condensation
from gridstat.condensation import CondensationFunction, CondensationSpec, InputInfo, Output
from gridstat.condensation.spec import input_from_message, spec_from_message
from gridstat.core import clock, wire
from gridstat.core.model import BOOL, FLOAT, INT, MAX_VARIABLE_ID, PRIORITIES, TypeSpec, check_name
from gridstat.core.wire import DropReason
from gridstat.errors import NotFound, TypeMismatch, ValidationError
from gridstat.router.forwarding import Forwarder
from gridstat.router.tables import RoutingTable

log = logging.getLogger(__name__)

_TYPES: dict[str, TypeSpec] = {"int": INT, "float": FLOAT, "bool": BOOL}
#: Input events a slot holds between two turns of the loop before it drops (a stalled loop).
PENDING_LIMIT = 65_536

_EVENT_HEAD_UNPACK = wire.EVENT_HEAD.unpack_from
_EVENT_HEAD_SIZE = wire.EVENT_HEAD_SIZE
_R_MALFORMED = DropReason.MALFORMED.value
_R_QUEUE_FULL = DropReason.QUEUE_FULL.value


@dataclass(frozen=True)
class SlotSetup:
    """``gridstat.v1.CondensationSetup`` as the router keeps it."""

    function_id: str
    creator: str
    inputs: tuple[InputInfo, ...]
    spec: CondensationSpec
    output_variable_id: int
    output_pub_interval_ms: int
    output_alert: bool = False
    output_priority: int = 1
    output_sender_id: int = 0

    def validate(self) -> SlotSetup:
        check_name(self.function_id, what="function_id")
        if not 1 <= self.output_variable_id <= MAX_VARIABLE_ID:
            raise ValidationError(f"output variable id {self.output_variable_id} is outside 1..2**32-1",
                                  field="output_variable_id")
        if self.output_pub_interval_ms <= 0:
            raise ValidationError("output_pub_interval_ms must be positive", field="output_pub_interval_ms")
        if self.output_priority not in PRIORITIES:
            raise ValidationError(f"output priority {self.output_priority} is outside 0..6", field="output_priority")
        if not 1 <= self.output_sender_id <= 0xFFFF_FFFF:
            raise ValidationError("output_sender_id must name the inbound channel of the output's publisher",
                                  field="output_sender_id")
        if any(i.variable_id == self.output_variable_id for i in self.inputs):
            raise ValidationError("a function's output cannot be one of its inputs", field="output_variable_id")
        return self

    @property
    def channel(self) -> str:
        return condensation.channel_name(self.function_id)


def setup_from_message(m: Any) -> SlotSetup:
    """A validated ``SlotSetup`` from a ``gridstat.v1.CondensationSetup`` message."""
    return SlotSetup(
        function_id=m.function_id, creator=m.creator, inputs=tuple(input_from_message(i) for i in m.inputs),
        spec=spec_from_message(m.spec), output_variable_id=m.output_variable_id,
        output_pub_interval_ms=m.output_pub_interval_ms, output_alert=m.output_alert,
        output_priority=m.output_priority, output_sender_id=m.output_sender_id,
    ).validate()


def build_function(setup: SlotSetup) -> CondensationFunction:
    """The engine of a setup; raises NotFound (no such calculator) or ValidationError."""
    return CondensationFunction(setup.spec, setup.inputs, function_id=setup.function_id,
                                output_min_interval_ms=setup.output_pub_interval_ms if setup.output_alert else 0)


class CondensationSlot:
    """One function in this router: the target its input routes push to, its timer, its output."""

    def __init__(self, setup: SlotSetup, function: CondensationFunction, host: CondensationSlots) -> None:
        #: Input events the rate filter did not pass to this function (``tables.Target``).
        self.filtered = 0
        self._host = host
        self._pending: list[bytes] = []
        self._scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._sequence = 0
        self.configure(setup, function)

    def configure(self, setup: SlotSetup, function: CondensationFunction) -> None:
        """Take a (new) setup; the slot object stays, so compiled routing entries keep pointing at it."""
        self.setup = setup
        self.function = function
        self._types = {i.variable_id: _TYPES[i.value_type] for i in setup.inputs}
        self._output_type = _TYPES[function.output_type]
        self._flags = wire.FLAG_ALERT if setup.output_alert else 0
        self._cancel_timer()
        self._schedule_tick()

    # -- input: the forwarding loop's side ----------------------------------------------------------
    def push(self, event: bytes) -> None:
        pending = self._pending
        if len(pending) >= PENDING_LIMIT:
            self._host.drops[_R_QUEUE_FULL] += 1
            return
        pending.append(event)
        if not self._scheduled:
            loop = self._host.loop
            if loop is not None:  # without one (a test driving the router by hand) drain() is called
                self._scheduled = True
                loop.call_soon(self.drain)

    def drain(self) -> None:
        """Feed the pending input events to the function and publish what it outputs."""
        self._scheduled = False
        events, self._pending = self._pending, []
        if self._closed:
            return
        feed = self.function.feed
        types = self._types
        outputs: list[Output] = []
        for ev in events:
            try:
                ts, vid, flags, _nopt, vlen = _EVENT_HEAD_UNPACK(ev, 0)
                value = wire.decode_value(types[vid], ev[_EVENT_HEAD_SIZE:_EVENT_HEAD_SIZE + vlen])
            except (KeyError, ValueError, TypeMismatch):
                self._host.drops[_R_MALFORMED] += 1
                continue
            if isinstance(value, int | float):
                outputs.extend(feed(vid, ts, value, bool(flags & wire.FLAG_ALERT)))
        if outputs:
            self._publish(outputs)

    # -- time trigger ---------------------------------------------------------------------------------
    def _schedule_tick(self, after_ms: int | None = None) -> None:
        loop = self._host.loop
        if loop is None or self._closed:
            return
        now = clock.now_ms()
        due = self.function.next_tick_ms(max(now, after_ms or 0))
        if due is not None:
            self._timer = loop.call_later(max(0.0, (due - now) / 1000), self._on_tick, due)

    def _on_tick(self, instant_ms: int) -> None:
        self._timer = None
        if self._closed:
            return
        try:
            outputs = self.function.tick(max(clock.now_ms(), instant_ms))
            if outputs:
                self._publish(outputs)
        finally:
            self._schedule_tick(instant_ms)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- output ---------------------------------------------------------------------------------------
    def _publish(self, outputs: list[Output]) -> None:
        """Run the outputs through this router's forwarding as events of the output variable."""
        setup = self.setup
        vid = setup.output_variable_id
        if vid not in self._host.table.active:
            return  # nobody subscribes to the output in the current mode: nothing to forward
        try:
            events = [wire.encode_event(wire.Event(o.timestamp_ms, vid, wire.encode_value(self._output_type, o.value),
                                                   self._flags)) for o in outputs]
            # On a keyed output channel (``--channel-auth all``) the datagram is signed with that channel's
            # key and numbered from the channel's own counter (which outlives a replaced slot), so the
            # forwarder authenticates it like a publisher's, and a forger using the output publisher's
            # sender id from the network is dropped as auth_failed.
            inbound = self._host.forwarder.by_sender.get(setup.output_sender_id)
            key = inbound.key if inbound is not None else None
            for batch in wire.pack_events(events, mtu=wire.MAX_DATAGRAM):
                if key is None or inbound is None:
                    self._sequence = (self._sequence + 1) & 0xFFFF_FFFF
                    self._host.inject(wire.encode_datagram(setup.output_sender_id, self._sequence, batch))
                else:
                    inbound.sequence = (inbound.sequence + 1) & 0xFFFF_FFFF
                    self._host.inject(wire.sign_datagram(
                        key, wire.encode_datagram(setup.output_sender_id, inbound.sequence, batch)))
        except Exception as exc:  # never let a bad output stop the router; report it in the status
            log.exception("condensation function %s: publishing its output failed", setup.function_id)
            self.function.counters.last_error = f"publishing the output failed: {type(exc).__name__}: {exc}"

    def close(self) -> None:
        self._closed = True
        self._cancel_timer()
        self._pending.clear()

    def status(self) -> dict[str, Any]:
        return {**self.function.status(), "router": self._host.router_name}


class CondensationSlots:
    """The condensation functions of one router, by pseudo channel name (``cf:<function_id>``)."""

    def __init__(self, router_name: str, forwarder: Forwarder, flush: Callable[[], None], table: RoutingTable) -> None:
        self.router_name = router_name
        self.forwarder = forwarder
        self.flush = flush
        self.table = table
        #: Router-level drop counters (shared with the forwarder): malformed inputs, a stalled loop.
        self.drops: Counter[str] = forwarder.drops
        self._slots: dict[str, CondensationSlot] = {}

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        try:
            return asyncio.get_running_loop()
        except RuntimeError:
            return None

    def get(self, channel: str) -> CondensationSlot | None:
        return self._slots.get(channel)

    def __contains__(self, channel: object) -> bool:
        return channel in self._slots

    def __iter__(self) -> Iterator[CondensationSlot]:
        return iter(list(self._slots.values()))

    def __len__(self) -> int:
        return len(self._slots)

    def inject(self, datagram: bytes) -> None:
        """Forward a datagram the router made itself (a function's output), then send what it queued."""
        self.forwarder.process(datagram, clock.now_ms())
        self.flush()

    def setup(self, setup: SlotSetup) -> str:
        """Load a function (``setupCondensation``); returns its channel. Idempotent for the same setup;
        a different setup of the same function id replaces it in place (its counters restart)."""
        channel = setup.channel
        existing = self._slots.get(channel)
        if existing is not None and existing.setup == setup:
            return channel
        function = build_function(setup)  # NotFound / ValidationError before anything changes
        if existing is not None:
            existing.configure(setup, function)
            log.info("router %s: condensation function %s reconfigured", self.router_name, setup.function_id)
        else:
            self._slots[channel] = CondensationSlot(setup, function, self)
            log.info("router %s: condensation function %s loaded (%s, %d inputs)", self.router_name,
                     setup.function_id, setup.spec.calculator, len(setup.inputs))
        return channel

    def terminate(self, function_id: str) -> bool:
        """Unload a function (``terminateCondensation``) and any route still leading to it."""
        channel = condensation.channel_name(function_id)
        slot = self._slots.pop(channel, None)
        if slot is None:
            return False
        slot.close()
        self.table.remove_channel_routes(channel)
        return True

    def require(self, function_id: str) -> CondensationSlot:
        slot = self._slots.get(condensation.channel_name(function_id))
        if slot is None:
            raise NotFound(f"router {self.router_name} has no condensation function {function_id!r}",
                           field="function_id")
        return slot

    def statuses(self) -> list[dict[str, Any]]:
        return [s.status() for s in self._slots.values()]

    def close(self) -> None:
        for slot in self._slots.values():
            slot.close()
