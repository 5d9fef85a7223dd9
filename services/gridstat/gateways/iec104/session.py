"""The controlling station's side of an IEC 60870-5-104 connection, sans I/O.

Bytes from the outstation's TCP connection (``received``) and clock readings (``now_s``, monotonic,
passed in) go in; an ``Output`` comes out: the frames to send, the monitored values read, and whether
to drop the connection. No sockets, no clock, no sleeping: ``transport`` and ``gateway`` bring those.

The link (IEC 60870-5-104 clause 5; docs/iec104.md, "The link"):

* on connecting, STARTDT act; at STARTDT con, a general interrogation (C_IC_NA_1, QOI 20) of every
  common address configured (the global address 65535 by default), and again after M_EI_NA_1;
* I frames are numbered: N(S) of a received I frame must be V(R), else the connection is closed
  (``bad_sequence``); an N(R) must acknowledge only frames sent (``bad_ack``);
* at most ``k`` own I frames unacknowledged (the rest wait); the received ones are acknowledged with
  an S frame after ``w`` of them, or ``t2`` after the first, whichever comes first;
* ``t1``: an own I frame or a STARTDT/TESTFR act not acknowledged within it closes the connection;
* ``t3``: that long without a frame received, TESTFR act.

Peer input never raises: the codec counts every loss by reason (``errors.DropCounter``).
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from dataclasses import dataclass, field

from gridstat.errors import ValidationError
from gridstat.gateways.iec104 import apci
from gridstat.gateways.iec104.apci import IFrame, SFrame, UFrame, UFunction
from gridstat.gateways.iec104.asdu import (
    GLOBAL_ADDRESS,
    MONITORED,
    Cot,
    PointValue,
    TypeId,
    decode_header,
    decode_values,
    encode_interrogation,
)
from gridstat.gateways.iec104.errors import DropReason, Iec104Error
from gridstat.gateways.iec104.stats import ConnectionStats, GatewayStats

log = logging.getLogger(__name__)

_TYPE_NAMES = {int(t): t.name for t in TypeId}


#: The causes an outstation answers a command with (confirmations, termination, refusals; 7.2.3).
_ANSWER_CAUSES = frozenset({Cot.ACTIVATION_CON, Cot.DEACTIVATION_CON, Cot.ACTIVATION_TERMINATION, Cot.UNKNOWN_TYPE,
                            Cot.UNKNOWN_CAUSE, Cot.UNKNOWN_COMMON_ADDRESS, Cot.UNKNOWN_IOA})


def _check_cause(cot: int, allowed: frozenset[int], type_name: str) -> None:
    """A command type's or M_EI_NA_1's cause of transmission, or a BAD_CAUSE drop."""
    if cot not in allowed:
        raise Iec104Error(DropReason.BAD_CAUSE, f"{type_name} with cause of transmission {cot}",
                          field="cause of transmission")


class LinkState(enum.Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    #: Connected; STARTDT act sent, no STARTDT con yet.
    STARTING = "starting"
    #: Data transfer started (STARTDT con received).
    STARTED = "started"


@dataclass(frozen=True)
class SessionSettings:
    #: The most own I frames unacknowledged, and the received ones acknowledged at the latest (5.5).
    k: int = 12
    w: int = 8
    #: Timeouts (5.6): t1 of sends and tests, t2 of acknowledgements, t3 of idle tests; seconds.
    t1_s: float = 15.0
    t2_s: float = 10.0
    t3_s: float = 20.0
    #: The common addresses a general interrogation is sent to (65535: every station).
    common_addresses: tuple[int, ...] = (GLOBAL_ADDRESS,)
    #: A general interrogation this often while started (0: at start and after M_EI_NA_1 only).
    interrogation_period_s: float = 0.0
    #: The originator address of the commands sent (0: not used).
    originator: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.k <= 32767 or not 1 <= self.w <= self.k:
            raise ValidationError(f"need 1 <= w <= k <= 32767, got k={self.k} w={self.w}", field="k")
        for name in ("t1_s", "t2_s", "t3_s"):
            if not getattr(self, name) > 0:
                raise ValidationError(f"{name} must be positive, got {getattr(self, name)}", field=name)
        if self.t2_s >= self.t1_s:
            raise ValidationError(f"t2 ({self.t2_s:g} s) must be below t1 ({self.t1_s:g} s)", field="t2_s")
        if not self.common_addresses or not all(1 <= ca <= 0xFFFF for ca in self.common_addresses):
            raise ValidationError("common addresses are 1 .. 65535", field="common_addresses")
        if self.interrogation_period_s < 0 or not 0 <= self.originator <= 255:
            raise ValidationError("interrogation_period_s must not be negative and originator is 0 .. 255",
                                  field="interrogation_period_s")


@dataclass
class Output:
    """What the caller must do after one input."""

    #: Frames to write to the TCP connection, in order.
    send: list[bytes] = field(default_factory=list)
    values: list[PointValue] = field(default_factory=list)
    #: Why the connection must be dropped (then reconnect after the back-off), or None.
    close: str | None = None


class Iec104Session:
    """The link state machine of one outstation connection (the counters are kept across connections)."""

    def __init__(self, settings: SessionSettings | None = None, *, stats: GatewayStats | None = None) -> None:
        self.settings = settings or SessionSettings()
        self.stats = stats or GatewayStats()
        self.splitter = apci.ApduSplitter(self.stats.drops)
        self.state = LinkState.DISCONNECTED
        self._reset()

    def _reset(self) -> None:
        self.send_seq = 0  # V(S)
        self.recv_seq = 0  # V(R)
        self._acked = 0  # the N(R) last received: the oldest own I frame not acknowledged
        #: Send times of own I frames not acknowledged, oldest first (t1).
        self._unacked_sent: deque[float] = deque()
        #: ASDUs waiting for room in the k window.
        self._waiting: deque[bytes] = deque()
        self._received_unacked = 0
        self._first_unacked_s = 0.0
        #: A STARTDT or TESTFR act waiting for its con (t1), and when it was sent.
        self._u_pending: tuple[UFunction, float] | None = None
        self._last_received_s = 0.0
        self._last_interrogation_s = 0.0

    # -- state ------------------------------------------------------------------------------------

    def _set_state(self, state: LinkState, why: str = "") -> None:
        if state is not self.state:
            log.info("outstation: %s -> %s%s", self.state.value, state.value, f" ({why})" if why else "")
            self.state = state
            self.stats.state = state.value

    def connecting(self) -> None:
        self._set_state(LinkState.CONNECTING)

    def connected(self, now_s: float, peer: str = "") -> Output:
        """The TCP connection is up: STARTDT act."""
        self._reset()
        self.stats.connection = ConnectionStats(peer=peer)
        self._last_received_s = now_s
        out = Output()
        self._set_state(LinkState.STARTING, "connected")
        self._send_u(out, UFunction.STARTDT_ACT, now_s)
        return out

    def disconnected(self, why: str) -> None:
        """The connection ended: a partial APDU is counted (``truncated``)."""
        self.splitter.close()
        self._reset()
        self._set_state(LinkState.DISCONNECTED, why)

    def stopping(self) -> Output:
        """The gateway stops: acknowledge what was received (the outstation need not repeat it)."""
        out = Output()
        if self.state is LinkState.STARTED and self._received_unacked:
            self._send_s(out)
        return out

    # -- input ------------------------------------------------------------------------------------

    def received(self, data: bytes | bytearray | memoryview, now_s: float) -> Output:
        out = Output()
        frames = self.splitter.feed(data)
        if frames:
            self._last_received_s = now_s
        for frame in frames:
            if isinstance(frame, IFrame):
                self._on_i(frame, now_s, out)
            elif isinstance(frame, SFrame):
                self.stats.connection.s_received += 1
                self._on_ack(frame.recv_seq, out)
            else:
                self._on_u(frame, now_s, out)
            if out.close is not None:
                return out
        if self._received_unacked >= self.settings.w:
            self._send_s(out)
        self._send_waiting(out, now_s)
        return out

    def tick(self, now_s: float) -> Output:
        """The timers; call a few times a second."""
        out = Output()
        if self.state not in (LinkState.STARTING, LinkState.STARTED):
            return out
        s = self.settings
        if self._unacked_sent and now_s - self._unacked_sent[0] >= s.t1_s:
            self.stats.t1_timeouts += 1
            out.close = f"t1: an I frame not acknowledged in {s.t1_s:g} s"
            return out
        if self._u_pending is not None and now_s - self._u_pending[1] >= s.t1_s:
            self.stats.t1_timeouts += 1
            out.close = f"t1: no {self._u_pending[0].name.replace('_ACT', ' con')} in {s.t1_s:g} s"
            return out
        if self._received_unacked and now_s - self._first_unacked_s >= s.t2_s:
            self._send_s(out)
        if self._u_pending is None and now_s - self._last_received_s >= s.t3_s:
            self.stats.tests_sent += 1
            self._send_u(out, UFunction.TESTFR_ACT, now_s)
        if self.state is LinkState.STARTED and s.interrogation_period_s \
                and now_s - self._last_interrogation_s >= s.interrogation_period_s:
            self._interrogate(out, now_s)
        self._send_waiting(out, now_s)
        return out

    def interrogate(self, now_s: float) -> Output:
        """A general interrogation now (when started)."""
        out = Output()
        if self.state is LinkState.STARTED:
            self._interrogate(out, now_s)
            self._send_waiting(out, now_s)
        return out

    # -- frames -----------------------------------------------------------------------------------

    def _on_i(self, frame: IFrame, now_s: float, out: Output) -> None:
        conn = self.stats.connection
        conn.i_received += 1
        if frame.send_seq != self.recv_seq:
            self.stats.drops.count(DropReason.BAD_SEQUENCE)
            out.close = f"I frame N(S)={frame.send_seq}, expected {self.recv_seq}"
            return
        self.recv_seq = (self.recv_seq + 1) % apci.SEQ_MOD
        if not self._received_unacked:
            self._first_unacked_s = now_s
        self._received_unacked += 1
        self._on_ack(frame.recv_seq, out)
        if out.close is None:
            self._on_asdu(frame.asdu, now_s, out)

    def _on_ack(self, recv_seq: int, out: Output) -> None:
        acked = (recv_seq - self._acked) % apci.SEQ_MOD
        outstanding = len(self._unacked_sent)
        if acked > outstanding:
            self.stats.drops.count(DropReason.BAD_ACK)
            out.close = f"N(R)={recv_seq} acknowledges I frames never sent (V(S)={self.send_seq})"
            return
        for _ in range(acked):
            self._unacked_sent.popleft()
        self._acked = recv_seq

    def _on_u(self, frame: UFrame, now_s: float, out: Output) -> None:
        self.stats.connection.u_received += 1
        fn = frame.function
        pending = self._u_pending
        if fn is UFunction.TESTFR_ACT:
            self._send_u(out, UFunction.TESTFR_CON, now_s)
        elif fn is UFunction.STARTDT_CON and pending is not None and pending[0] is UFunction.STARTDT_ACT:
            self._u_pending = None
            self._set_state(LinkState.STARTED, "STARTDT con")
            self._interrogate(out, now_s)
            self._send_waiting(out, now_s)
        elif fn is UFunction.TESTFR_CON and pending is not None and pending[0] is UFunction.TESTFR_ACT:
            self._u_pending = None
        # STOPDT con, or a con nobody asked for, or an act a controlling station does not answer: ignored

    def _on_asdu(self, asdu: bytes, now_s: float, out: Output) -> None:
        stats = self.stats
        try:
            header = decode_header(asdu)
            name = _TYPE_NAMES.get(header.type_id)
            if header.type_id in MONITORED:
                values = decode_values(header, asdu)
            elif header.type_id == TypeId.C_IC_NA_1:
                _check_cause(header.cot, _ANSWER_CAUSES, "C_IC_NA_1")
                self._on_interrogation(header.cot, header.negative, header.common_address)
                values = []
            elif header.type_id == TypeId.M_EI_NA_1:
                _check_cause(header.cot, frozenset({Cot.INITIALIZED}), "M_EI_NA_1")
                stats.end_of_initialization += 1
                log.info("outstation: end of initialization of station %d: interrogating again",
                         header.common_address)
                if self.state is LinkState.STARTED:
                    self._interrogate(out, now_s)
                values = []
            elif name is None:
                raise Iec104Error(DropReason.UNSUPPORTED_TYPE, f"type identification {header.type_id}",
                                  field="type identification")
            else:
                _check_cause(header.cot, _ANSWER_CAUSES, name)
                values = []  # C_CS_NA_1 and the like: read, nothing to publish
        except Iec104Error as exc:
            stats.drops.count_error(exc)
            return
        stats.count_asdu(name or str(header.type_id))
        if values:
            stats.values += len(values)
            stats.connection.values += len(values)
            out.values.extend(values)

    def _on_interrogation(self, cot: int, negative: bool, common_address: int) -> None:
        if negative or cot in (Cot.UNKNOWN_TYPE, Cot.UNKNOWN_CAUSE, Cot.UNKNOWN_COMMON_ADDRESS, Cot.UNKNOWN_IOA):
            self.stats.interrogations_refused += 1
            log.warning("outstation: general interrogation of station %d refused (cause %d)", common_address, cot)
        elif cot == Cot.ACTIVATION_TERMINATION:
            self.stats.interrogations_completed += 1
            log.info("outstation: general interrogation of station %d done", common_address)

    # -- sending ----------------------------------------------------------------------------------

    def _interrogate(self, out: Output, now_s: float) -> None:
        self._last_interrogation_s = now_s
        for ca in self.settings.common_addresses:
            self.stats.interrogations += 1
            self._waiting.append(encode_interrogation(ca))

    def _send_waiting(self, out: Output, now_s: float) -> None:
        waiting = self._waiting
        if not waiting or self.state is not LinkState.STARTED:
            return
        k = self.settings.k
        while waiting:
            if len(self._unacked_sent) >= k:
                self.stats.connection.window_full += 1
                return
            out.send.append(apci.encode_i(self.send_seq, self.recv_seq, waiting.popleft()))
            self.send_seq = (self.send_seq + 1) % apci.SEQ_MOD
            self._unacked_sent.append(now_s)
            self._received_unacked = 0  # the I frame's N(R) acknowledges everything received
            self.stats.connection.i_sent += 1

    def _send_s(self, out: Output) -> None:
        out.send.append(apci.encode_s(self.recv_seq))
        self._received_unacked = 0
        self.stats.connection.s_sent += 1

    def _send_u(self, out: Output, function: UFunction, now_s: float) -> None:
        out.send.append(apci.encode_u(function))
        self.stats.connection.u_sent += 1
        if function in (UFunction.STARTDT_ACT, UFunction.TESTFR_ACT):
            self._u_pending = (function, now_s)
