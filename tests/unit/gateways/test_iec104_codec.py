"""The IEC 60870-5-104 codec (gateways/iec104: apci, asdu, cp56): frames and ASDUs both ways, losses
counted by reason; our encodings read back by c104 (lib60870), an implementation no one here wrote."""

from __future__ import annotations

import struct

import pytest

from gridstat.gateways.iec104 import apci, asdu, cp56
from gridstat.gateways.iec104.apci import ApduSplitter, IFrame, SFrame, UFrame, UFunction
from gridstat.gateways.iec104.asdu import BL, IV, NT, OV, SB, Cot, Kind, TypeId
from gridstat.gateways.iec104.errors import DropReason, Iec104Error

T0 = 1_795_810_899_287  # 2026-11-27 20:21:39.287 UTC


def test_frames_round_trip_through_the_splitter_byte_by_byte() -> None:
    body = asdu.encode_interrogation(47)
    stream = apci.encode_u(UFunction.STARTDT_CON) + apci.encode_i(32767, 5, body) + apci.encode_s(12)
    splitter = ApduSplitter()
    frames = [f for b in stream for f in splitter.feed(bytes([b]))]
    assert frames == [UFrame(UFunction.STARTDT_CON), IFrame(32767, 5, body), SFrame(12)]
    assert splitter.drops.total == 0 and splitter.pending == 0


def test_sequence_numbers_wrap_at_2_to_the_15() -> None:
    frame = apci.parse_apdu(apci.encode_i(32768 + 3, 65536 + 4, b"\x01\x01\x03\x00\x01\x00"))
    assert isinstance(frame, IFrame) and (frame.send_seq, frame.recv_seq) == (3, 4)


def test_garbage_is_skipped_to_the_next_start_byte_and_counted() -> None:
    splitter = ApduSplitter()
    frames = splitter.feed(b"\x00\x01\x02" + apci.encode_s(1) + b"\x68\x02\x00\x00" + apci.encode_s(2))
    assert frames == [SFrame(1), SFrame(2)]
    d = splitter.drops
    assert d.by_reason[DropReason.BAD_START] == 2 and d.by_reason[DropReason.BAD_LENGTH] == 1
    assert d.discarded_bytes == 3 + 4


def test_bad_control_fields_and_u_or_s_frames_with_a_body_are_dropped() -> None:
    splitter = ApduSplitter()
    bad_u = bytes((0x68, 4, 0x07 | 0x40, 0, 0, 0))  # STARTDT act and TESTFR act at once
    s_with_body = bytes((0x68, 5, 0x01, 0, 2, 0, 9))
    assert splitter.feed(bad_u + s_with_body + apci.encode_u(UFunction.TESTFR_ACT)) == [UFrame(UFunction.TESTFR_ACT)]
    assert splitter.drops.as_dict() == {"bad_control": 1, "bad_length": 1}


def test_a_partial_apdu_at_the_end_is_truncated() -> None:
    splitter = ApduSplitter()
    assert splitter.feed(apci.encode_i(0, 0, asdu.encode_interrogation(1))[:-2]) == []
    splitter.close()
    assert splitter.drops.as_dict() == {"truncated": 1} and splitter.drops.discarded_bytes == 14


@pytest.mark.parametrize(("type_id", "kind", "value", "quality"), [
    (TypeId.M_SP_NA_1, Kind.SINGLE, True, IV | BL), (TypeId.M_SP_TB_1, Kind.SINGLE, False, NT),
    (TypeId.M_DP_NA_1, Kind.DOUBLE, 2, SB), (TypeId.M_DP_TB_1, Kind.DOUBLE, 3, 0),
    (TypeId.M_ME_NA_1, Kind.NORMALIZED, -0.5, OV), (TypeId.M_ME_TD_1, Kind.NORMALIZED, 0.999969482421875, 0),
    (TypeId.M_ME_NB_1, Kind.SCALED, -32768, IV | OV), (TypeId.M_ME_TE_1, Kind.SCALED, 32767, BL),
    (TypeId.M_ME_NC_1, Kind.FLOAT, 49.98500061035156, 0), (TypeId.M_ME_TF_1, Kind.FLOAT, -1e-3, IV | NT | SB),
])
def test_every_monitored_type_round_trips(type_id: int, kind: Kind, value: object, quality: int) -> None:
    raw = asdu.encode_values(type_id, Cot.SPONTANEOUS, 47, [(0x123456, value, quality, T0), (7, value, 0, T0 + 1)])
    header = asdu.decode_header(raw)
    assert (header.type_id, header.count, header.cot, header.common_address) == (type_id, 2, 3, 47)
    first, second = asdu.decode_values(header, raw)
    timed = asdu.MONITORED[type_id][2]
    if kind is Kind.FLOAT:
        value = struct.unpack("<f", struct.pack("<f", value))[0]  # type: ignore[arg-type]
    assert (first.ioa, first.kind, first.value, first.quality) == (0x123456, kind, value, quality)
    assert (first.time_ms, second.time_ms) == ((T0, T0 + 1) if timed else (None, None))
    assert second.ioa == 7 and second.quality == 0


def test_a_sequence_of_objects_has_one_address() -> None:
    raw = asdu.encode_header(TypeId.M_ME_NB_1, 3, Cot.INTERROGATED_BY_STATION, 2, sq=True) + asdu.encode_ioa(100) \
        + b"".join(asdu.encode_element(Kind.SCALED, v, 0) for v in (1, -2, 3))
    values = asdu.decode_values(asdu.decode_header(raw), raw)
    assert [(v.ioa, v.value, v.cot) for v in values] == [(100, 1, 20), (101, -2, 20), (102, 3, 20)]


def test_asdus_that_do_not_fit_their_objects_are_refused_with_a_reason() -> None:
    raw = asdu.encode_values(TypeId.M_ME_NC_1, 1, 1, [(1, 1.0, 0, None)])
    header = asdu.decode_header(raw)
    with pytest.raises(Iec104Error) as short:
        asdu.decode_values(header, raw[:-1])
    with pytest.raises(Iec104Error) as long:
        asdu.decode_values(header, raw + b"\x00")
    with pytest.raises(Iec104Error) as unknown:
        asdu.decode_values(asdu.decode_header(b"\x0f\x01\x03\x00\x01\x00"), b"\x0f\x01\x03\x00\x01\x00")
    assert (short.value.drop_reason, long.value.drop_reason, unknown.value.drop_reason) == (
        DropReason.TRUNCATED, DropReason.BAD_FIELD, DropReason.UNSUPPORTED_TYPE)
    with pytest.raises(Iec104Error):
        asdu.decode_header(b"\x01\x01")


def test_cp56time2a_round_trips_with_its_flags_and_refuses_non_dates() -> None:
    for ms in (T0, 946_684_800_000, 4_102_444_799_999):  # 2026, 2000-01-01, 2099-12-31 23:59:59.999
        assert cp56.decode(cp56.encode(ms, cp56.SUMMER_TIME)) == cp56.Cp56Time(ms, cp56.SUMMER_TIME)
    assert cp56.decode(cp56.encode(T0, cp56.TIME_INVALID)).flags == cp56.TIME_INVALID
    tag = bytearray(cp56.encode(T0))
    tag[5] = 13  # month 13
    with pytest.raises(Iec104Error) as exc:
        cp56.decode(bytes(tag))
    assert exc.value.drop_reason is DropReason.BAD_TIME
    with pytest.raises(ValueError):
        cp56.encode(0)  # 1970 does not fit


def test_c104_reads_our_frames_as_we_meant_them() -> None:
    c104 = pytest.importorskip("c104")
    i = c104.explain_bytes_dict(apdu=apci.encode_i(3, 5, asdu.encode_values(
        TypeId.M_ME_TF_1, Cot.SPONTANEOUS, 47, [(100, 1.25, IV | OV, T0)])))
    assert (i["format"], i["tx"], i["rx"], i["type"], i["cot"], i["commonAddress"]) == (
        "I", 3, 5, c104.Type.M_ME_TF_1, c104.Cot.SPONTANEOUS, 47)
    assert i["firstInformationObjectAddress"] == 100 and i["numberOfObjects"] == 1
    gi = c104.explain_bytes_dict(apdu=apci.encode_i(0, 0, asdu.encode_interrogation(47)))
    assert (gi["type"], gi["cot"], gi["elements"].split()[-1]) == (c104.Type.C_IC_NA_1, c104.Cot.ACTIVATION, "14")
    assert c104.explain_bytes_dict(apdu=apci.encode_s(7)) == {"format": "S", "rx": 7}
    assert c104.explain_bytes_dict(apdu=apci.encode_u(UFunction.STARTDT_ACT)) == {
        "format": "U", "type": "STARTDT", "cot": "ACT"}
