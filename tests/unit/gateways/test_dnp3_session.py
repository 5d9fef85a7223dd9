"""The DNP3 master's state machine, sans I/O with a fake clock, against responses dnp3py encodes
(docs/dnp3.md, "The master"): startup, confirmations, unsolicited responses, the internal indications,
sequence checks, timeouts, keep-alive and bad input counted."""

from __future__ import annotations

import dnp3_samples as s
import pytest
from dnp3.datalink.builder import build_confirmed_user_data, build_link_status, build_request_link_status
from dnp3.datalink.parser import FrameParser
from dnp3.transport.reassembler import Reassembler
from dnp3.transport.segment import TransportSegment

from gridstat.errors import ValidationError
from gridstat.gateways.dnp3 import LinkState, MasterSession, Output, SessionSettings

T0 = 1000.0
AI = s.ranged(30, 5, 0, [s.AnalogInputFloat(quality=s.AnalogQuality.ONLINE, value=2.5).to_bytes()])
READ, CONFIRM, WRITE, ENABLE, DISABLE = 0x01, 0x00, 0x02, 0x14, 0x15
INTEGRITY_OBJECTS = bytes((60, 2, 6, 60, 3, 6, 60, 4, 6, 60, 1, 6))
EVENT_OBJECTS = bytes((60, 2, 6, 60, 3, 6, 60, 4, 6))


def sent(out: Output) -> list[bytes]:
    """The fragments the master sent, read back by dnp3py's link parser and reassembler."""
    fragments = []
    theirs = Reassembler()
    for frame in FrameParser().feed(b"".join(out.send)):
        assert frame.header.control.dir_from_master and frame.header.destination == s.OUTSTATION
        if frame.user_data:
            done = theirs.add(TransportSegment.from_bytes(frame.user_data))
            if done is not None:
                fragments.append(done.data)
    return fragments


def started(**kwargs: object) -> tuple[MasterSession, int]:
    """A session that connected and did its integrity poll; the next request's sequence."""
    m = MasterSession(SessionSettings(**kwargs))  # type: ignore[arg-type]
    m.connecting()
    (req,) = sent(m.connected(T0))
    assert req[1] == READ and req[2:] == INTEGRITY_OBJECTS
    out = m.tcp_bytes(s.response([AI], seq=req[0] & 0x0F), T0 + 0.01)
    assert [p.value for p in out.points] == [2.5]
    assert m.state is LinkState.POLLING
    return m, 1


def test_startup_integrity_then_event_polls() -> None:
    m, seq = started(event_poll_s=1.0, integrity_poll_s=10.0)
    assert sent(m.tick(T0 + 0.5)) == []
    (poll,) = sent(m.tick(T0 + 1.0))
    assert poll == bytes((0xC0 | seq, READ)) + EVENT_OBJECTS
    m.tcp_bytes(s.response([], seq=seq), T0 + 1.01)
    (integrity,) = sent(m.tick(T0 + 10.0))
    assert integrity[2:] == INTEGRITY_OBJECTS
    assert m.stats.requests == {"integrity": 2, "events": 1}
    assert m.stats.drops.as_dict() == {}


def test_startup_with_unsolicited() -> None:
    m = MasterSession(SessionSettings(unsolicited=True, event_poll_s=0))
    (disable,) = sent(m.connected(T0))
    assert disable[1] == DISABLE and disable[2:] == EVENT_OBJECTS
    (integrity,) = sent(m.tcp_bytes(s.response([], seq=0), T0))
    assert integrity[1] == READ and integrity[2:] == INTEGRITY_OBJECTS
    (enable,) = sent(m.tcp_bytes(s.response([AI], seq=1), T0))
    assert enable[1] == ENABLE
    assert sent(m.tcp_bytes(s.response([], seq=2), T0)) == []
    # An unsolicited response asking for confirmation: confirmed with UNS, its points out; a repeat is counted.
    event = s.indexed(32, 7, [(0, s.AnalogInputEventFloatTime(quality=s.AnalogQuality.ONLINE, value=7.0,
                                                               timestamp=s.DNP3Timestamp(5)).to_bytes())])
    out = m.tcp_bytes(s.response([event], seq=4, unsolicited=True, con=True), T0 + 1)
    assert sent(out) == [bytes((0xD4, CONFIRM))] and [p.value for p in out.points] == [7.0]
    again = m.tcp_bytes(s.response([event], seq=4, unsolicited=True, con=True), T0 + 2)
    assert sent(again) == [bytes((0xD4, CONFIRM))] and again.points == []
    assert m.stats.drops.as_dict() == {"duplicate_unsolicited": 1} and m.stats.unsolicited == 1
    assert sent(m.tick(T0 + 100)) == []  # no event polls


def test_confirms_a_multi_fragment_response() -> None:
    m = MasterSession(SessionSettings())
    m.connected(T0)
    first = s.response([AI], seq=0, fin=False, con=True)
    second = s.response([AI], seq=1, fir=False, con=True, transport_seq=1)
    out1 = m.tcp_bytes(first, T0)
    assert sent(out1) == [bytes((0xC0, CONFIRM))] and m.state is LinkState.STARTING
    out2 = m.tcp_bytes(second, T0)
    assert sent(out2) == [bytes((0xC1, CONFIRM))] and m.state is LinkState.POLLING
    assert len(out1.points) + len(out2.points) == 2


def test_device_restart_is_cleared_and_polled_again() -> None:
    m = MasterSession(SessionSettings())
    m.connected(T0)
    (clear,) = sent(m.tcp_bytes(s.response([AI], seq=0, iin=int(s.IIN.DEVICE_RESTART)), T0))
    assert clear == bytes((0xC1, WRITE, 80, 1, 0, 7, 7, 0))
    assert sent(m.tcp_bytes(s.response([], seq=1), T0)) == []
    # Restarted under us (a serial bridge keeps TCP up): clear it again and read everything again.
    (poll,) = sent(m.tick(T0 + 1))
    (clear2,) = sent(m.tcp_bytes(s.response([], seq=2, iin=int(s.IIN.DEVICE_RESTART)), T0 + 1))
    assert clear2[1] == WRITE and poll[1] == READ
    (integrity,) = sent(m.tcp_bytes(s.response([], seq=3), T0 + 1))
    assert integrity[2:] == INTEGRITY_OBJECTS
    assert m.stats.iin["device_restart"] == 2


def test_an_outstation_that_cannot_clear_restart_is_not_asked_again() -> None:
    m = MasterSession(SessionSettings())
    m.connected(T0)
    restart = int(s.IIN.DEVICE_RESTART)
    (clear,) = sent(m.tcp_bytes(s.response([], seq=0, iin=restart), T0))
    assert clear[1] == WRITE
    assert sent(m.tcp_bytes(s.response([], seq=1, iin=restart | int(s.IIN.PARAMETER_ERROR)), T0)) == []


def test_events_pending_and_buffer_overflow() -> None:
    m, seq = started()
    (_poll,) = sent(m.tick(T0 + 1))
    (again,) = sent(m.tcp_bytes(s.response([], seq=seq, iin=int(s.IIN.CLASS_1_EVENTS)), T0 + 1))
    assert again[2:] == EVENT_OBJECTS
    (integrity,) = sent(m.tcp_bytes(s.response([], seq=seq + 1, iin=int(s.IIN.EVENT_BUFFER_OVERFLOW)), T0 + 1))
    assert integrity[2:] == INTEGRITY_OBJECTS


def test_unexpected_sequences_are_dropped() -> None:
    m, seq = started()
    out = m.tcp_bytes(s.response([AI], seq=9), T0 + 0.1)  # nothing asked
    assert out.points == []
    m.tick(T0 + 1)
    out = m.tcp_bytes(s.response([AI], seq=(seq + 3) & 0x0F), T0 + 1)
    assert out.points == [] and m.stats.drops["unexpected_sequence"] == 2
    assert m.tcp_bytes(s.response([AI], seq=seq), T0 + 1).points


def test_timeouts_retry_then_reconnect() -> None:
    m = MasterSession(SessionSettings(response_timeout_s=2, timeouts_before_reconnect=2))
    m.connected(T0)
    (retry,) = sent(m.tick(T0 + 2))
    assert retry[2:] == INTEGRITY_OBJECTS and m.stats.response_timeouts == 1
    out = m.tick(T0 + 4)
    assert out.close is not None and m.stats.response_timeouts == 2


def test_keepalive() -> None:
    m, _ = started(keepalive_s=30, event_poll_s=1000, integrity_poll_s=0)
    ask = m.tick(T0 + 31)
    (frame,) = FrameParser().feed(b"".join(ask.send))
    assert frame.header.control.function_code == 9 and frame.header.control.prm
    answer = build_link_status(destination=s.MASTER, source=s.OUTSTATION, dir_from_master=False).to_bytes()
    m.tcp_bytes(answer, T0 + 31.5)
    assert m.tick(T0 + 40).close is None
    m.tick(T0 + 80)
    assert m.tick(T0 + 86).close == "no answer to REQUEST LINK STATUS" and m.stats.keepalive_timeouts == 1


def test_link_services_of_the_outstation() -> None:
    m, seq = started()
    status = build_request_link_status(destination=s.MASTER, source=s.OUTSTATION, dir_from_master=False)
    (reply,) = FrameParser().feed(b"".join(m.tcp_bytes(status.to_bytes(), T0).send))
    assert reply.header.control.function_code == 11 and not reply.header.control.prm
    m.tick(T0 + 1)
    seg = s.frames(s.fragment([AI], seq=seq))
    confirmed = build_confirmed_user_data(destination=s.MASTER, source=s.OUTSTATION, dir_from_master=False,
                                          user_data=next(iter(FrameParser().feed(seg))).user_data, fcb=False)
    out = m.tcp_bytes(confirmed.to_bytes(), T0 + 1)
    (ack,) = FrameParser().feed(out.send[0])
    assert ack.header.control.function_code == 0 and [p.value for p in out.points] == [2.5]


def test_wrong_address_and_direction() -> None:
    m, seq = started()
    m.tick(T0 + 1)
    foreign = s.frames(s.fragment([AI], seq=seq), source=11)
    mirrored = s.frames(s.fragment([AI], seq=seq), destination=2)
    assert m.tcp_bytes(foreign + mirrored, T0 + 1).points == []
    assert m.stats.drops["wrong_address"] == 2


def test_settings_are_checked() -> None:
    with pytest.raises(ValidationError, match="different addresses"):
        SessionSettings(master_address=3, outstation_address=3)
    with pytest.raises(ValidationError, match="unsolicited"):
        SessionSettings(event_poll_s=0)
    with pytest.raises(ValidationError, match="outstation_address"):
        SessionSettings(outstation_address=70000)
