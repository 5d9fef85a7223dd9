"""The IEC 60870-5-104 codec (gridstat.gateways.iec104) under generated input: valid streams with bytes
flipped, inserted and removed, cut anywhere. Nothing escapes ``ApduSplitter``; every byte is in a frame,
discarded or pending; every returned frame encodes to the bytes it came from; an ASDU either decodes
or raises ``Iec104Error``, never anything else; CP56Time2a likewise."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gridstat.gateways.iec104 import apci, asdu, cp56
from gridstat.gateways.iec104.apci import ApduSplitter, IFrame, SFrame, UFrame, UFunction
from gridstat.gateways.iec104.asdu import Cot
from gridstat.gateways.iec104.errors import Iec104Error

FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
T0 = 1_795_810_899_287
ASDUS = [asdu.encode_interrogation(47, cot=Cot.ACTIVATION_CON),
         *(asdu.encode_values(t, Cot.SPONTANEOUS, 47, [(i, 1, 0x80, T0 + i) for i in range(4)])
           for t in asdu.MONITORED)]
STREAM = (apci.encode_u(UFunction.STARTDT_CON) + b"".join(apci.encode_i(n, 1, a) for n, a in enumerate(ASDUS))
          + apci.encode_s(3) + apci.encode_u(UFunction.TESTFR_ACT))


def encode(frame: IFrame | SFrame | UFrame) -> bytes:
    if isinstance(frame, IFrame):
        return apci.encode_i(frame.send_seq, frame.recv_seq, frame.asdu)
    if isinstance(frame, SFrame):
        return apci.encode_s(frame.recv_seq)
    return apci.encode_u(frame.function)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    raw = bytearray(STREAM)
    for _ in range(draw(st.integers(0, 5))):
        op = draw(st.sampled_from(["flip", "insert", "remove"]))
        i = draw(st.integers(0, len(raw) - 1))
        if op == "flip":
            raw[i] = draw(st.integers(0, 255))
        elif op == "insert":
            raw[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif len(raw) > 1:
            del raw[i]
    return bytes(raw)


@FUZZ
@given(mutated(), st.lists(st.integers(1, 64), max_size=10))
def test_the_splitter_accounts_for_every_byte(stream: bytes, cuts: list[int]) -> None:
    splitter = ApduSplitter()
    frames = []
    pos = 0
    for n in [*cuts, len(stream)]:
        frames += splitter.feed(stream[pos:pos + n])
        pos += n
    frames += splitter.feed(stream[pos:])
    framed = sum(len(encode(f)) for f in frames)
    dropped_frames = sum(splitter.drops.by_reason.values())
    assert framed + splitter.drops.discarded_bytes + splitter.pending >= len(stream) - 6 * dropped_frames
    for f in frames:  # a frame is bytes that were sent, not made up (an I frame's reserved N(R) bit 0 is ignored)
        assert (f.asdu if isinstance(f, IFrame) else encode(f)) in stream
    if stream == STREAM:
        assert len(frames) == len(ASDUS) + 3 and splitter.drops.total == 0


@FUZZ
@given(mutated())
def test_asdus_decode_or_raise_iec104_errors_only(stream: bytes) -> None:
    for frame in ApduSplitter().feed(stream):
        if isinstance(frame, IFrame):
            try:
                header = asdu.decode_header(frame.asdu)
                if header.type_id in asdu.MONITORED:
                    for v in asdu.decode_values(header, frame.asdu):
                        assert 0 <= v.ioa <= 0xFF_FFFF and v.quality & ~0xF1 == 0
            except Iec104Error:
                pass


@FUZZ
@given(st.binary(min_size=7, max_size=7))
def test_any_seven_bytes_are_a_time_or_a_bad_time(tag: bytes) -> None:
    try:
        t = cp56.decode(tag)
    except Iec104Error as exc:
        assert exc.field == "CP56Time2a"
    else:
        assert 946_684_800_000 <= t.epoch_ms < 4_102_444_800_000
        assert cp56.decode(cp56.encode(t.epoch_ms, t.flags)).epoch_ms == t.epoch_ms
