"""The controlling station's link state machine (gateways/iec104/session.py), sans I/O with a fake
clock: STARTDT, the general interrogation, sequence numbers, the k and w windows, t1/t2/t3."""

from __future__ import annotations

from gridstat.gateways.iec104 import apci, asdu
from gridstat.gateways.iec104.apci import IFrame, SFrame, UFrame, UFunction
from gridstat.gateways.iec104.asdu import Cot, TypeId
from gridstat.gateways.iec104.session import Iec104Session, LinkState, SessionSettings

T0 = 1_795_810_899_287


def parse(frames: list[bytes]) -> list[object]:
    return [apci.parse_apdu(f) for f in frames]


class Outstation:
    """The peer's side of the numbering: I frames it sends, acknowledging what it received."""

    def __init__(self) -> None:
        self.send_seq = 0
        self.recv_seq = 0

    def i(self, body: bytes) -> bytes:
        frame = apci.encode_i(self.send_seq, self.recv_seq, body)
        self.send_seq += 1
        return frame

    def values(self, cot: int = Cot.PERIODIC, n: int = 1, ca: int = 47) -> bytes:
        return self.i(asdu.encode_values(TypeId.M_ME_TF_1, cot, ca, [(100 + j, 1.5 * j, 0, T0 + j) for j in range(n)]))


def started(settings: SessionSettings | None = None) -> tuple[Iec104Session, Outstation]:
    session = Iec104Session(settings or SessionSettings())
    out = session.connected(0.0, "127.0.0.1:2404")
    assert parse(out.send) == [UFrame(UFunction.STARTDT_ACT)] and session.state is LinkState.STARTING
    out = session.received(apci.encode_u(UFunction.STARTDT_CON), 0.1)
    assert session.state is LinkState.STARTED
    (gi,) = parse(out.send)
    assert isinstance(gi, IFrame) and (gi.send_seq, gi.recv_seq) == (0, 0)
    assert gi.asdu == asdu.encode_interrogation(asdu.GLOBAL_ADDRESS)
    return session, Outstation()


def test_start_interrogate_and_read_the_answers() -> None:
    session, peer = started()
    peer.recv_seq = 1
    assert session.received(peer.i(asdu.encode_interrogation(asdu.GLOBAL_ADDRESS, cot=Cot.ACTIVATION_CON)), 0.2).send \
        == []
    out = session.received(peer.values(Cot.INTERROGATED_BY_STATION, n=3), 0.3)
    assert [(v.ioa, v.value, v.time_ms, v.cot) for v in out.values] == [
        (100, 0.0, T0, 20), (101, 1.5, T0 + 1, 20), (102, 3.0, T0 + 2, 20)]
    session.received(peer.i(asdu.encode_interrogation(asdu.GLOBAL_ADDRESS, cot=Cot.ACTIVATION_TERMINATION)), 0.4)
    st = session.stats
    assert (st.interrogations, st.interrogations_completed, st.values) == (1, 1, 3)
    assert st.asdus == {"C_IC_NA_1": 2, "M_ME_TF_1": 1} and st.drops.total == 0
    assert st.connection.as_dict()["i_received"] == 3 and st.connection.peer == "127.0.0.1:2404"


def test_received_i_frames_are_acknowledged_after_w_or_t2() -> None:
    session, peer = started(SessionSettings(w=3, t2_s=2.0))
    sent = []
    for n in range(3):
        sent += parse(session.received(peer.values(), 1.0 + n * 0.01).send)
    assert sent == [SFrame(3)]
    assert parse(session.received(peer.values(), 2.0).send) == []
    assert parse(session.tick(3.9).send) == []
    assert parse(session.tick(4.0).send) == [SFrame(4)]  # t2 after the first unacknowledged one
    assert parse(session.tick(9.0).send) == []


def test_a_wrong_send_sequence_number_closes_the_connection() -> None:
    session, peer = started()
    peer.send_seq = 5
    out = session.received(peer.values(), 1.0)
    assert out.close is not None and "N(S)=5" in out.close
    assert session.stats.drops.as_dict() == {"bad_sequence": 1}


def test_an_acknowledgement_of_frames_never_sent_closes_the_connection() -> None:
    session, _ = started()
    out = session.received(apci.encode_s(2), 1.0)  # one I frame (the interrogation) was sent
    assert out.close is not None and session.stats.drops.as_dict() == {"bad_ack": 1}


def test_t1_an_interrogation_not_acknowledged_closes_the_connection() -> None:
    session, _ = started(SessionSettings(t1_s=15.0))
    assert session.tick(15.0).close is None  # sent at 0.1
    out = session.tick(15.1)
    assert out.close is not None and out.close.startswith("t1") and session.stats.t1_timeouts == 1


def test_t1_no_startdt_con_closes_the_connection() -> None:
    session = Iec104Session(SessionSettings(t1_s=5.0, t2_s=1.0))
    session.connected(0.0)
    out = session.tick(5.0)
    assert out.close == "t1: no STARTDT con in 5 s"


def test_t3_silence_sends_a_test_frame_and_its_con_is_awaited() -> None:
    session, _ = started(SessionSettings(t3_s=20.0))
    session.received(apci.encode_s(1), 0.2)  # the interrogation acknowledged
    assert parse(session.tick(20.1).send) == []
    assert parse(session.tick(20.2).send) == [UFrame(UFunction.TESTFR_ACT)]
    assert parse(session.tick(25.0).send) == []  # one test at a time
    session.received(apci.encode_u(UFunction.TESTFR_CON), 25.0)
    assert session.tick(40.0).close is None and session.stats.tests_sent == 1
    assert session.tick(45.1).send  # t3 again after the con


def test_the_outstations_test_frames_are_answered() -> None:
    session, _ = started()
    assert parse(session.received(apci.encode_u(UFunction.TESTFR_ACT), 1.0).send) == [UFrame(UFunction.TESTFR_CON)]


def test_at_most_k_own_i_frames_are_unacknowledged() -> None:
    settings = SessionSettings(k=1, w=1, common_addresses=(1, 2, 3))
    session = Iec104Session(settings)
    session.connected(0.0)
    out = session.received(apci.encode_u(UFunction.STARTDT_CON), 0.1)
    assert [f.asdu[4] for f in parse(out.send) if isinstance(f, IFrame)] == [1]
    out = session.received(apci.encode_s(1), 0.2)
    (second,) = parse(out.send)
    assert isinstance(second, IFrame) and second.send_seq == 1 and second.asdu[4] == 2
    assert session.stats.connection.window_full >= 1


def test_end_of_initialization_asks_again_and_a_refusal_is_counted() -> None:
    session, peer = started()
    peer.recv_seq = 1
    out = session.received(peer.i(asdu.encode_header(TypeId.M_EI_NA_1, 1, Cot.INITIALIZED, 47)
                                  + asdu.encode_ioa(0) + b"\x00"), 1.0)
    assert any(isinstance(f, IFrame) and f.asdu[0] == TypeId.C_IC_NA_1 for f in parse(out.send))
    session.received(peer.i(asdu.encode_interrogation(47, cot=Cot.ACTIVATION_CON, negative=True)), 1.1)
    st = session.stats
    assert (st.end_of_initialization, st.interrogations, st.interrogations_refused) == (1, 2, 1)


def test_a_periodic_interrogation_when_asked_for() -> None:
    session, _ = started(SessionSettings(interrogation_period_s=60.0))
    session.received(apci.encode_s(1), 0.2)
    assert not any(isinstance(f, IFrame) for f in parse(session.tick(59.0).send))  # a TESTFR act (t3) only
    assert any(isinstance(f, IFrame) for f in parse(session.tick(60.2).send))


def test_bad_asdus_are_counted_and_the_link_goes_on() -> None:
    session, peer = started()
    peer.recv_seq = 1
    session.received(peer.i(b"\x0f\x01\x03\x00\x01\x00\x01\x00\x00\x00\x00\x00\x00\x00"), 1.0)  # M_IT_NA_1
    session.received(peer.i(b"\x0d\x02\x03\x00\x01\x00\x01\x00\x00"), 1.1)  # two floats announced, none there
    tag = bytearray(peer.values())
    tag[-2] = 13  # the CP56Time2a's month
    session.received(bytes(tag), 1.2)
    out = session.received(peer.values(), 1.3)
    assert len(out.values) == 1 and out.close is None
    assert session.stats.drops.as_dict() == {"unsupported_type": 1, "truncated": 1, "bad_time": 1}


def test_reconnecting_starts_the_numbering_again() -> None:
    session, peer = started()
    session.received(peer.values(), 1.0)
    session.disconnected("gone")
    assert session.state is LinkState.DISCONNECTED and (session.send_seq, session.recv_seq) == (0, 0)
    session.connected(2.0)
    session.received(apci.encode_u(UFunction.STARTDT_CON), 2.1)
    assert session.stats.interrogations == 2
