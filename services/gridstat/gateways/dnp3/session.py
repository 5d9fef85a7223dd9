"""The master's side of a DNP3 association, sans I/O: bytes from the outstation and clock readings in,
frames to send and points out (docs/dnp3.md, "The master").

``connected(now_s)`` starts the association: with unsolicited responses, DISABLE UNSOLICITED first, then
the integrity poll (READ class 1, 2, 3 and 0), then ENABLE UNSOLICITED; without, the integrity poll. Then
it polls the events (class 1, 2, 3) every ``event_poll_s`` and does an integrity poll every
``integrity_poll_s``. The internal indications steer it (IEEE 1815-2012): DEVICE_RESTART
clears the restart indication (WRITE g80v1 index 7) and polls integrity again; EVENT_BUFFER_OVERFLOW polls
integrity; a class's events pending are polled at once. Responses asking for CONFIRM are confirmed,
unsolicited ones with UNS. One request is out at a time; one unanswered for ``response_timeout_s`` is
tried again, and after ``timeouts_before_reconnect`` in a row the connection is dropped. A link silent for
``keepalive_s`` is asked for its status (REQUEST LINK STATUS); no answer drops it too.

No sockets, no clock: ``gateway`` brings those. Peer input never raises: every loss is counted by reason.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from gridstat.errors import ValidationError
from gridstat.gateways.dnp3 import application as app
from gridstat.gateways.dnp3.drops import DropReason
from gridstat.gateways.dnp3.link import DIR, PRM, LinkDecoder, PrimaryFunction, SecondaryFunction, encode_frame
from gridstat.gateways.dnp3.objects import Point, parse_objects
from gridstat.gateways.dnp3.segments import DEFAULT_MAX_FRAGMENT, Reassembler, Segmenter
from gridstat.gateways.dnp3.stats import Dnp3Stats


class LinkState(enum.Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    #: Connected; the startup requests (and the first integrity poll) are under way.
    STARTING = "starting"
    #: The first integrity poll is done: polling events (or waiting for unsolicited responses).
    POLLING = "polling"


#: Requests in the order they are sent when several are due.
INTEGRITY = "integrity"
EVENTS = "events"
CLEAR_RESTART = "clear_restart"
ENABLE_UNSOLICITED = "enable_unsolicited"
DISABLE_UNSOLICITED = "disable_unsolicited"
_ORDER = (CLEAR_RESTART, DISABLE_UNSOLICITED, INTEGRITY, ENABLE_UNSOLICITED, EVENTS)
_CLASSES_123 = (app.CLASS_1, app.CLASS_2, app.CLASS_3)
_INTEGRITY = (*_CLASSES_123, app.CLASS_0)


@dataclass(frozen=True)
class SessionSettings:
    #: The link addresses: the master's own and the outstation's (0 .. 65519).
    master_address: int = 1
    outstation_address: int = 10
    #: Integrity poll every so often (0: only at startup and when the indications ask for one).
    integrity_poll_s: float = 300.0
    #: Event poll (class 1, 2, 3) every so often (0: none, the outstation reports unsolicited).
    event_poll_s: float = 1.0
    #: Enable unsolicited responses at startup (and disable them first).
    unsolicited: bool = False
    response_timeout_s: float = 5.0
    timeouts_before_reconnect: int = 2
    #: REQUEST LINK STATUS after this long without a frame (0: never).
    keepalive_s: float = 60.0
    max_fragment_size: int = DEFAULT_MAX_FRAGMENT

    def __post_init__(self) -> None:
        for name in ("master_address", "outstation_address"):
            if not 0 <= getattr(self, name) <= 0xFFEF:
                raise ValidationError(f"{name} must be 0..65519, got {getattr(self, name)}", field=name)
        if self.master_address == self.outstation_address:
            raise ValidationError("the master and the outstation need different addresses", field="master_address")
        for name in ("integrity_poll_s", "event_poll_s", "keepalive_s"):
            if getattr(self, name) < 0:
                raise ValidationError(f"{name} must not be negative, got {getattr(self, name)}", field=name)
        if not self.response_timeout_s > 0:
            raise ValidationError(f"response_timeout_s must be positive, got {self.response_timeout_s}",
                                  field="response_timeout_s")
        if self.timeouts_before_reconnect < 1:
            raise ValidationError("timeouts_before_reconnect must be at least 1", field="timeouts_before_reconnect")
        if not 249 <= self.max_fragment_size <= 65535:
            raise ValidationError(f"max_fragment_size must be 249..65535, got {self.max_fragment_size}",
                                  field="max_fragment_size")
        if self.event_poll_s == 0 and not self.unsolicited:
            raise ValidationError("with no event polls (event_poll_s 0) the outstation must report unsolicited",
                                  field="event_poll_s")


@dataclass
class Output:
    """What the caller must do after one input."""

    #: Link frames to write, in order.
    send: list[bytes] = field(default_factory=list)
    #: Points read (static and events), in the order of the responses.
    points: list[Point] = field(default_factory=list)
    #: Why the connection must be dropped (then reconnect after the back-off), or None.
    close: str | None = None


@dataclass
class _Request:
    kind: str
    sequence: int
    sent_s: float


class MasterSession:
    """A DNP3 master's state machine for one outstation."""

    def __init__(self, settings: SessionSettings, *, stats: Dnp3Stats | None = None) -> None:
        self.settings = settings
        self.stats = stats or Dnp3Stats()
        drops = self.stats.drops
        self._link = LinkDecoder(drops)
        self._reassembler = Reassembler(drops, max_fragment_size=settings.max_fragment_size)
        self._segmenter = Segmenter()
        self.state = LinkState.DISCONNECTED
        self._sequence = 0
        self._pending: _Request | None = None
        #: The sequence the next fragment of a multi-fragment response carries.
        self._next_fragment: int | None = None
        self._todo: set[str] = set()
        self._timeouts = 0
        self._next_integrity_s = 0.0
        self._next_events_s = 0.0
        self._last_rx_s = 0.0
        self._keepalive_sent_s: float | None = None
        self._last_unsolicited: int | None = None
        self._restart_seen = False
        self._restart_clear_failed = False
        self._set_state(LinkState.DISCONNECTED)

    def _set_state(self, state: LinkState) -> None:
        self.state = state
        self.stats.state = state.value

    # -- the connection's life ---------------------------------------------------------------------

    def connecting(self) -> None:
        self._set_state(LinkState.CONNECTING)

    def connected(self, now_s: float) -> Output:
        self._link.reset()
        self._reassembler.reset()
        self._segmenter = Segmenter()
        self._pending = None
        self._next_fragment = None
        self._timeouts = 0
        self._last_rx_s = now_s
        self._keepalive_sent_s = None
        self._last_unsolicited = None
        self._restart_seen = False
        self._restart_clear_failed = False
        s = self.settings
        self._todo = {DISABLE_UNSOLICITED, INTEGRITY, ENABLE_UNSOLICITED} if s.unsolicited else {INTEGRITY}
        self._next_integrity_s = now_s + s.integrity_poll_s
        self._next_events_s = now_s + s.event_poll_s
        self._set_state(LinkState.STARTING)
        out = Output()
        self._next(now_s, out)
        return out

    def disconnected(self) -> None:
        self._pending = None
        self._set_state(LinkState.DISCONNECTED)

    # -- input -------------------------------------------------------------------------------------

    def tcp_bytes(self, data: bytes, now_s: float) -> Output:
        out = Output()
        if self.state in (LinkState.DISCONNECTED, LinkState.CONNECTING):
            return out
        s = self.settings
        drops = self.stats.drops
        for frame in self._link.feed(data):
            if frame.from_master:
                drops.add(DropReason.WRONG_DIRECTION, len(frame.user_data))
                continue
            if frame.destination != s.master_address or frame.source != s.outstation_address:
                drops.add(DropReason.WRONG_ADDRESS, len(frame.user_data))
                continue
            self._last_rx_s = now_s
            self._keepalive_sent_s = None
            fc = frame.function
            if not frame.primary:
                if fc not in (SecondaryFunction.ACK, SecondaryFunction.LINK_STATUS):
                    drops.add(DropReason.LINK_FUNCTION)
                continue
            if fc == PrimaryFunction.CONFIRMED_USER_DATA:
                out.send.append(self._secondary(SecondaryFunction.ACK))
            elif fc in (PrimaryFunction.RESET_LINK_STATES, PrimaryFunction.TEST_LINK_STATES):
                out.send.append(self._secondary(SecondaryFunction.ACK))
                continue
            elif fc == PrimaryFunction.REQUEST_LINK_STATUS:
                out.send.append(self._secondary(SecondaryFunction.LINK_STATUS))
                continue
            elif fc != PrimaryFunction.UNCONFIRMED_USER_DATA:
                drops.add(DropReason.LINK_FUNCTION, len(frame.user_data))
                continue
            fragment = self._reassembler.add(frame.user_data)
            if fragment is not None:
                self._fragment(fragment, now_s, out)
        if out.close is None:
            self._next(now_s, out)
        return out

    def tick(self, now_s: float) -> Output:
        """Timeouts and the periodic polls."""
        out = Output()
        if self.state in (LinkState.DISCONNECTED, LinkState.CONNECTING):
            return out
        s = self.settings
        pending = self._pending
        if pending is not None and now_s - pending.sent_s >= s.response_timeout_s:
            self.stats.response_timeouts += 1
            self._timeouts += 1
            self._pending = None
            self._next_fragment = None
            if self._timeouts >= s.timeouts_before_reconnect:
                out.close = f"no response to {self._timeouts} requests in a row"
                return out
            self._todo.add(pending.kind)
        if self._keepalive_sent_s is not None and now_s - self._keepalive_sent_s >= s.response_timeout_s:
            self.stats.keepalive_timeouts += 1
            out.close = "no answer to REQUEST LINK STATUS"
            return out
        if s.integrity_poll_s and now_s >= self._next_integrity_s:
            self._todo.add(INTEGRITY)
            self._next_integrity_s = now_s + s.integrity_poll_s
        if s.event_poll_s and now_s >= self._next_events_s:
            self._todo.add(EVENTS)
            self._next_events_s = now_s + s.event_poll_s
        if (s.keepalive_s and self._keepalive_sent_s is None and self._pending is None
                and now_s - self._last_rx_s >= s.keepalive_s):
            self._keepalive_sent_s = now_s
            out.send.append(encode_frame(DIR | PRM | PrimaryFunction.REQUEST_LINK_STATUS, s.outstation_address,
                                         s.master_address))
        self._next(now_s, out)
        return out

    # -- fragments ---------------------------------------------------------------------------------

    def _fragment(self, fragment: bytes, now_s: float, out: Output) -> None:
        drops = self.stats.drops
        header = app.parse_response_header(fragment)
        if header is None:
            drops.add(DropReason.SHORT_FRAGMENT, len(fragment))
            return
        if header.function == app.FunctionCode.UNSOLICITED_RESPONSE:
            if header.con:
                self._confirm(header.sequence, True, out)
            if header.sequence == self._last_unsolicited:
                drops.add(DropReason.DUPLICATE_UNSOLICITED, len(fragment))
                return
            self._last_unsolicited = header.sequence
            self.stats.unsolicited += 1
            self._indications(header.iin)
        elif header.function == app.FunctionCode.RESPONSE:
            pending = self._pending
            expected = pending.sequence if header.fir and pending is not None else self._next_fragment
            if pending is None or header.sequence != expected or (not header.fir and expected is None):
                drops.add(DropReason.UNEXPECTED_SEQUENCE, len(fragment))
                return
            if header.con:
                self._confirm(header.sequence, False, out)
            self.stats.responses += 1
            self._next_fragment = (header.sequence + 1) & 0x0F
            self._indications(header.iin)
            if header.fin:
                self._done(pending, header.iin)
        else:
            drops.add(DropReason.UNEXPECTED_FUNCTION, len(fragment))
            return
        points = parse_objects(fragment, 4, drops)
        if points:
            counts = self.stats.points
            for p in points:
                key = f"{p.kind.value}_{'event' if p.event else 'static'}"
                counts[key] = counts.get(key, 0) + 1
            out.points.extend(points)

    def _done(self, request: _Request, iin: int) -> None:
        self._pending = None
        self._next_fragment = None
        self._timeouts = 0
        if request.kind == INTEGRITY and self.state is LinkState.STARTING:
            self._set_state(LinkState.POLLING)
        if request.kind == CLEAR_RESTART and iin & (app.Iin.DEVICE_RESTART | app.Iin.PARAMETER_ERROR
                                                    | app.Iin.OBJECT_UNKNOWN | app.Iin.NO_FUNC_CODE_SUPPORT):
            self._restart_clear_failed = True  # the outstation will not clear it: do not ask again
            self._todo.discard(CLEAR_RESTART)

    def _indications(self, iin: int) -> None:
        if iin:
            names = self.stats.iin
            for bit, name in app.IIN_NAMES.items():
                if iin & bit:
                    names[name] = names.get(name, 0) + 1
        if iin & app.Iin.DEVICE_RESTART:
            if not self._restart_clear_failed:
                self._todo.add(CLEAR_RESTART)
            if not self._restart_seen:
                self._restart_seen = True
                if self.state is LinkState.POLLING:  # restarted under us: its data is read again
                    self._todo.add(INTEGRITY)
        else:
            self._restart_seen = False
        if iin & app.Iin.EVENT_BUFFER_OVERFLOW:
            self._todo.add(INTEGRITY)
        if iin & app.EVENTS_PENDING and self.state is LinkState.POLLING:
            self._todo.add(EVENTS)

    # -- output ------------------------------------------------------------------------------------

    def _next(self, now_s: float, out: Output) -> None:
        """Send the next request due, if none is out."""
        if self._pending is not None or not self._todo or self._keepalive_sent_s is not None:
            return
        kind = next(k for k in _ORDER if k in self._todo)
        self._todo.discard(kind)
        seq = self._sequence
        self._sequence = (seq + 1) & 0x0F
        if kind == INTEGRITY:
            fragment = app.read_request(seq, _INTEGRITY)
            self._todo.discard(EVENTS)  # an integrity poll reads the events too
            self._next_events_s = now_s + self.settings.event_poll_s
        elif kind == EVENTS:
            fragment = app.read_request(seq, _CLASSES_123)
        elif kind == CLEAR_RESTART:
            fragment = app.clear_restart(seq)
        else:
            fragment = app.unsolicited_request(seq, enable=kind == ENABLE_UNSOLICITED)
        self._pending = _Request(kind, seq, now_s)
        self._next_fragment = None
        self.stats.count_request(kind)
        out.send.extend(self._frames(fragment))

    def _confirm(self, sequence: int, unsolicited: bool, out: Output) -> None:
        self.stats.confirms_sent += 1
        out.send.extend(self._frames(app.confirm(sequence, unsolicited=unsolicited)))

    def _frames(self, fragment: bytes) -> list[bytes]:
        s = self.settings
        control = DIR | PRM | PrimaryFunction.UNCONFIRMED_USER_DATA
        return [encode_frame(control, s.outstation_address, s.master_address, seg)
                for seg in self._segmenter.segment(fragment)]

    def _secondary(self, function: SecondaryFunction) -> bytes:
        s = self.settings
        return encode_frame(DIR | function, s.outstation_address, s.master_address)
