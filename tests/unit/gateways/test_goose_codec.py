"""The GOOSE codec: libiec61850's frame read and written back byte for byte, every Data type, BER
lengths, 802.1Q tags, and each kind of bad frame raising FrameError with its reason."""

from __future__ import annotations

import math
import struct

import goose_samples as s
import pytest

from gridstat.gateways.goose import DropReason, FrameError, GooseFrame, decode_frame, encode_frame
from gridstat.gateways.goose.ber import decode_integer, encode_integer, encode_length, read_tlv
from gridstat.gateways.goose.values import BitString, Other, Unsigned, UtcTime, decode_value, encode_value


def test_libiec61850_frame_decodes_and_encodes_back_byte_for_byte() -> None:
    f = decode_frame(s.LIBIEC61850_FRAME)
    assert (f.app_id, f.gocb_ref, f.dat_set, f.go_id) == (0x1000, s.GOCB, "IED1/LLN0$ds1", "gid1")
    assert (f.st_num, f.sq_num, f.conf_rev, f.time_allowed_to_live_ms) == (1, 0, 1, 2000)
    assert (f.simulation, f.nds_com, f.vlan_id) == (False, False, None)
    assert f.all_data == (True, 42, 3.5, "x")
    assert f.t.quality == 0x0A and f.t.seconds == 0x6B09E571
    assert encode_frame(f) == s.LIBIEC61850_FRAME


@pytest.mark.parametrize("value", [True, False, 0, 1, -1, 127, 128, -129, 2**31 - 1, -(2**31), 2**63 - 1, 1.5, -0.25,
                                   "IED1", b"\x00\xff", BitString(0b10, 2), BitString(0x1ABC, 13), BitString(0, 0),
                                   UtcTime(1_700_000_000, 123, 0x0A), (True, (1, 2.5)), [1, 2, 3], [],
                                   Other(0x8C, b"\x01\x02\x03\x04\x05\x06")])
def test_every_data_type_round_trips(value: object) -> None:
    raw = encode_value(value)  # type: ignore[arg-type]
    tag, a, b = read_tlv(raw, 0, len(raw))
    assert b == len(raw)
    assert decode_value(tag, raw[a:b]) == value


def test_unsigned_and_double() -> None:
    raw = encode_value(Unsigned(2**32 - 1))
    assert raw[0] == 0x86 and decode_value(raw[0], raw[2:]) == 2**32 - 1
    double = bytes((0x0B,)) + struct.pack(">d", math.pi)
    assert decode_value(0x87, double) == math.pi


def test_utc_time_milliseconds_round_trip() -> None:
    for ms in range(1_700_000_000_000, 1_700_000_002_000):
        assert UtcTime.from_ms(ms).ms == ms
    # libiec61850 wrote 1_700_000_000_123 ms as fraction floor(123 * 2**24 / 1000): read back as 123, not 122
    assert UtcTime.from_ms(1_700_000_000_123) == UtcTime(1_700_000_000, 2063597)
    assert UtcTime(1_700_000_000, 2063597).ms == 1_700_000_000_123


def test_ber_integers_and_long_lengths() -> None:
    for v in (0, 1, 127, 128, 255, 256, -1, -128, -129, 2**32 - 1, -(2**31)):
        assert decode_integer(encode_integer(v)) == v
    assert encode_integer(128) == b"\x00\x80" and encode_integer(-128) == b"\x80"
    assert encode_length(0x7F) == b"\x7f" and encode_length(0x80) == b"\x81\x80"
    assert encode_length(300) == b"\x82\x01\x2c"
    big = s.frame(all_data=tuple(float(i) for i in range(60)))  # allData longer than 255 bytes
    assert decode_frame(big).all_data == tuple(float(i) for i in range(60))


def test_vlan_tagged_frame() -> None:
    f = decode_frame(s.frame())
    tagged = encode_frame(GooseFrame(**{**{k: getattr(f, k) for k in f.__slots__}, "vlan_id": 17}))
    assert tagged[12:14] == b"\x81\x00" and decode_frame(tagged).vlan_id == 17
    assert decode_frame(tagged).all_data == f.all_data


def test_ethernet_padding_after_the_pdu_is_ignored() -> None:
    assert decode_frame(s.frame() + b"\x00" * 10).st_num == 1


def _reason(data: bytes) -> DropReason:
    with pytest.raises(FrameError) as info:
        decode_frame(data)
    return info.value.drop


def test_bad_frames_raise_with_their_reason() -> None:
    good = bytearray(s.frame())
    assert _reason(b"\x01" * 10) is DropReason.NOT_GOOSE
    assert _reason(bytes(good[:12]) + b"\x08\x00" + bytes(good[14:])) is DropReason.NOT_GOOSE
    assert _reason(bytes(good[:40])) is DropReason.BAD_LENGTH
    bad_len = bytearray(good)
    bad_len[16:18] = (3).to_bytes(2, "big")
    assert _reason(bytes(bad_len)) is DropReason.BAD_LENGTH
    not_pdu = bytearray(good)
    not_pdu[22] = 0x62
    assert _reason(bytes(not_pdu)) is DropReason.BAD_BER
    entries = bytearray(good)
    i = entries.index(b"\x8a\x01\x06")
    entries[i + 2] = 5
    assert _reason(bytes(entries)) is DropReason.ENTRIES_MISMATCH
    f = decode_frame(bytes(good))
    assert decode_frame(bytes(good)).st_num == 1 and f.sq_num == 0
    negative = bytearray(good)
    j = negative.index(b"\x85\x01\x01")
    negative[j + 2] = 0xFF  # stNum -1
    assert _reason(bytes(negative)) is DropReason.BAD_FIELD


def test_a_frame_too_long_for_ethernet_is_refused() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        s.frame(all_data=tuple(float(i) for i in range(400)))
