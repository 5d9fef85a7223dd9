"""What every frame shares (C37.118.2-2011 6.2): CHK, the SYNC and FRAMESIZE checks, the time quality
byte and the exact timestamp."""

from __future__ import annotations

from fractions import Fraction

import c37118_samples as samples
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridstat.errors import GridStatError, ValidationError
from gridstat.gateways.c37118 import (
    DropReason,
    FrameError,
    FrameType,
    MessageTimeQuality,
    TimeQuality,
    Timestamp,
    crc_ccitt,
    parse_frame,
)
from gridstat.gateways.c37118.framing import MIN_SIZE_OF_SYNC, read_head, seal
from gridstat.gateways.c37118.timestamps import TIME_QUALITIES, join_fracsec, split_fracsec


def _resealed(frame: bytes) -> bytes:
    """``frame`` with its CHK recomputed (so a test reaches the check it means)."""
    body = frame[:-2]
    return body + crc_ccitt(body).to_bytes(2, "big")


def test_chk_is_crc_ccitt_with_initial_ffff() -> None:
    assert crc_ccitt(b"123456789") == 0x29B1  # CRC-16/CCITT-FALSE check value
    assert crc_ccitt(b"") == 0xFFFF
    assert crc_ccitt(samples.PYPMU_DATA[:-2]) == 0xD43F


def test_min_size_of_sync_accepts_exactly_the_defined_types_and_versions() -> None:
    valid = {t << 4 | v for t in FrameType for v in range(1, 16)}
    assert {b for b in range(256) if MIN_SIZE_OF_SYNC[b]} == valid


def _error(frame: bytes) -> FrameError:
    with pytest.raises(FrameError) as info:
        read_head(frame)
    return info.value


@pytest.mark.parametrize(("frame", "reason", "field"), [
    (b"\xaa\x01\x00", DropReason.TRUNCATED, "FRAMESIZE"),
    (samples.PYPMU_DATA[:-1], DropReason.TRUNCATED, "FRAMESIZE"),
    (b"\xab" + samples.PYPMU_DATA[1:], DropReason.BAD_SYNC, "SYNC"),
    (_resealed(b"\xaa\x81" + samples.PYPMU_DATA[2:]), DropReason.BAD_SYNC, "SYNC"),  # reserved bit 7
    (_resealed(b"\xaa\x61" + samples.PYPMU_DATA[2:]), DropReason.BAD_SYNC, "SYNC"),  # frame type 6
    (_resealed(b"\xaa\x00" + samples.PYPMU_DATA[2:]), DropReason.BAD_SYNC, "SYNC"),  # version 0
    (samples.PYPMU_DATA + b"\x00", DropReason.BAD_SIZE, "FRAMESIZE"),
    (_resealed(b"\xaa\x41\x00\x10" + bytes(12)), DropReason.BAD_SIZE, "FRAMESIZE"),  # a command without CMD
    (samples.PYPMU_DATA[:-1] + b"\x00", DropReason.BAD_CRC, "CHK"),
    (samples.PYPMU_DATA[:20] + b"\xff" + samples.PYPMU_DATA[21:], DropReason.BAD_CRC, "CHK"),
])
def test_read_head_names_the_reason_and_the_field(frame: bytes, reason: DropReason, field: str) -> None:
    err = _error(frame)
    assert (err.drop_reason, err.field) == (reason, field)
    assert isinstance(err, GridStatError)
    assert err.reason == "MalformedFrame"
    assert reason.value in str(err)


def test_read_head_reads_the_common_fields() -> None:
    head = read_head(samples.PYPMU_CFG2)
    assert (head.frame_type, head.version, head.idcode, head.soc, head.fracsec) == (FrameType.CFG2, 1, 7734,
                                                                                   1149577200, 463000)
    assert head.time_quality == TimeQuality(MessageTimeQuality.WITHIN_100US, leap_second_pending=True,
                                            leap_second_deletion=True)


@pytest.mark.parametrize(("field", "kwargs"), [
    ("version", {"version": 0}),
    ("version", {"version": 16}),
    ("IDCODE", {"idcode": 0x10000}),
    ("SOC", {"soc": -1}),
    ("SOC", {"soc": 2**32}),
    ("FRACSEC", {"fracsec": 2**24}),
])
def test_seal_refuses_values_that_do_not_fit(field: str, kwargs: dict[str, int]) -> None:
    args = {"version": 1, "idcode": 1, "soc": 0, "fracsec": 0, **kwargs}
    with pytest.raises(ValidationError) as info:
        seal(FrameType.HEADER, time_quality=TimeQuality(), body=b"", **args)
    assert info.value.field == field


def test_seal_refuses_a_frame_over_65535_bytes() -> None:
    seal(FrameType.HEADER, version=1, idcode=1, soc=0, fracsec=0, time_quality=TimeQuality(), body=bytes(65519))
    with pytest.raises(ValidationError) as info:
        seal(FrameType.HEADER, version=1, idcode=1, soc=0, fracsec=0, time_quality=TimeQuality(), body=bytes(65520))
    assert info.value.field == "FRAMESIZE"


@given(st.integers(0, 0xFF), st.integers(0, 0xFF_FFFF))
def test_fracsec_word_round_trips_except_the_reserved_bit(quality_byte: int, count: int) -> None:
    fracsec, quality = split_fracsec(quality_byte << 24 | count)
    assert fracsec == count
    assert quality is TIME_QUALITIES[quality_byte]
    assert join_fracsec(fracsec, quality) == (quality_byte & 0x7F) << 24 | count


def test_time_quality_bits() -> None:
    """Table 3: bit 6 direction (1 delete), bit 5 occurred, bit 4 pending, bits 3-0 the Table 4 code."""
    assert TIME_QUALITIES[0x40] == TimeQuality(leap_second_deletion=True)
    assert TIME_QUALITIES[0x20] == TimeQuality(leap_second_occurred=True)
    assert TIME_QUALITIES[0x10] == TimeQuality(leap_second_pending=True)
    assert TIME_QUALITIES[0x0B].message_time_quality is MessageTimeQuality.WITHIN_10S
    assert TIME_QUALITIES[0x8F] == TimeQuality(MessageTimeQuality.CLOCK_FAILURE)


def test_timestamp_is_exact() -> None:
    ts = Timestamp(1_700_000_000, 1, 3)
    assert ts.seconds == Fraction(5_100_000_001, 3)
    assert ts.unix_ns == 1_700_000_000_333_333_333  # floored
    assert ts.unix_us == 1_700_000_000_333_333
    assert not ts.is_exact_in_ns
    assert Timestamp(1_700_000_000, 2**23, 2**24).unix_ns == 1_700_000_000_500_000_000
    assert Timestamp(1_700_000_000, 2**23, 2**24).is_exact_in_ns
    # float(SOC + FRACSEC/TIME_BASE) would lose the last digits; the Fraction keeps them.
    fine = Timestamp(4_000_000_000, 1, 16_777_215)
    assert float(fine.seconds) == 4_000_000_000.0
    assert fine.seconds - 4_000_000_000 == Fraction(1, 16_777_215)


@given(st.integers(0, 2**32 * 10**9 - 1), st.integers(1, 2**24 - 1))
def test_from_unix_ns_is_the_grid_point_at_or_below(unix_ns: int, time_base: int) -> None:
    ts = Timestamp.from_unix_ns(unix_ns, time_base=time_base)
    assert 0 <= ts.fracsec < time_base
    assert ts.seconds <= Fraction(unix_ns, 10**9) < ts.seconds + Fraction(1, time_base)


def test_inserted_leap_second_as_in_the_standard_example() -> None:
    """6.2.3, "Added leap second": 23:59:60 carries the next midnight's SOC with the pending bit set."""
    pending = TimeQuality(leap_second_pending=True)
    occurred = TimeQuality(leap_second_occurred=True)
    assert Timestamp(1114992000, 0, 10**6, pending).is_inserted_leap_second
    assert not Timestamp(1114991999, 0, 10**6, pending).is_inserted_leap_second
    assert not Timestamp(1114992000, 0, 10**6, occurred).is_inserted_leap_second
    deleting = TimeQuality(leap_second_pending=True, leap_second_deletion=True)
    assert not Timestamp(1114992000, 0, 10**6, deleting).is_inserted_leap_second


def test_parse_frame_without_a_configuration_for_data() -> None:
    with pytest.raises(FrameError) as info:
        parse_frame(samples.PYPMU_DATA)
    assert info.value.drop_reason is DropReason.NO_CONFIG
    assert (info.value.field, info.value.value) == ("IDCODE", 7734)
