"""The stream API: typed frames from TCP bytes and UDP datagrams, configurations applied per stream,
and every frame it does not return counted under its reason -- nothing raised."""

from __future__ import annotations

import dataclasses

import c37118_samples as samples

from gridstat.gateways.c37118 import (
    CommandFrame,
    ConfigFrame,
    DataFrame,
    FrameType,
    HeaderFrame,
    StreamDecoder,
    build_frame,
    crc_ccitt,
    parse_frame,
)

ANNEX = parse_frame(samples.PYPMU_CFG2)
assert isinstance(ANNEX, ConfigFrame)


def _resealed(body: bytes) -> bytes:
    return body + crc_ccitt(body).to_bytes(2, "big")


def test_a_session() -> None:
    decoder = StreamDecoder()
    frames = decoder.feed(samples.PYPMU_COMMAND + samples.PYPMU_HEADER + samples.PYPMU_CFG2 + samples.PYPMU_DATA * 3)
    assert [type(f) for f in frames] == [CommandFrame, HeaderFrame, ConfigFrame, DataFrame, DataFrame, DataFrame]
    assert decoder.configs == {7734: ANNEX}
    assert decoder.frames_out == 6
    assert decoder.drops.total == 0


def test_data_before_any_configuration() -> None:
    decoder = StreamDecoder()
    assert decoder.feed(samples.PYPMU_DATA * 2) == []
    assert decoder.drops.as_dict() == {"no_config": 2}
    assert decoder.drops.last_error is not None and decoder.drops.last_error.value == 7734
    assert len(decoder.feed(samples.PYPMU_CFG2 + samples.PYPMU_DATA)) == 2


def test_data_from_a_stream_without_configuration_while_others_have_one() -> None:
    decoder = StreamDecoder()
    decoder.configure(dataclasses.replace(ANNEX, idcode=1))
    assert decoder.feed(samples.PYPMU_DATA) == []
    assert decoder.drops.as_dict() == {"unknown_idcode": 1}


def test_data_frames_of_another_shape_than_the_configuration() -> None:
    decoder = StreamDecoder()
    decoder.feed(samples.PYPMU_CFG2_TWO_PMUS)
    assert decoder.feed(samples.PYPMU_DATA) == []
    assert decoder.drops.as_dict() == {"num_pmu_mismatch": 1}
    decoder.feed(samples.PYPMU_CFG2)  # a new CFG-2 replaces the stream's configuration
    assert len(decoder.feed(samples.PYPMU_DATA)) == 1


def test_cfg1_is_returned_but_not_applied() -> None:
    cfg1 = dataclasses.replace(ANNEX, frame_type=FrameType.CFG1)
    decoder = StreamDecoder()
    assert decoder.feed(build_frame(cfg1)) == [cfg1]
    assert decoder.configs == {}


def test_bad_fields_are_counted_by_field() -> None:
    bad_phunit = bytearray(samples.PYPMU_CFG2[:-2])
    bad_phunit[46 + 16 * 23] = 7  # PHUNIT's type byte: 0 or 1 only
    decoder = StreamDecoder()
    assert decoder.feed(_resealed(bytes(bad_phunit)) + samples.PYPMU_DATA) == []
    assert decoder.drops.as_dict() == {"bad_field": 1, "no_config": 1}
    assert decoder.drops.by_field == {"PHUNIT": 1}


def test_a_configuration_whose_data_frames_would_not_fit_is_refused() -> None:
    decoder = StreamDecoder()
    huge = dataclasses.replace(ANNEX, pmus=ANNEX.pmus * 2000)  # 2000 blocks of 36 bytes: over 65535
    assert not decoder.configure(huge)
    assert decoder.drops.as_dict() == {"bad_size": 1}
    assert decoder.configs == {}


def test_the_number_of_streams_is_bounded() -> None:
    decoder = StreamDecoder(max_streams=2)
    assert decoder.configure(dataclasses.replace(ANNEX, idcode=1))
    assert decoder.configure(dataclasses.replace(ANNEX, idcode=2))
    assert not decoder.configure(dataclasses.replace(ANNEX, idcode=3))
    assert decoder.configure(dataclasses.replace(ANNEX, idcode=2, data_rate=10))  # a known stream may change
    assert decoder.drops.by_field == {"IDCODE": 1}


def test_datagrams() -> None:
    decoder = StreamDecoder()
    assert decoder.receive_datagram(samples.UDP_CFG2) is not None
    assert isinstance(decoder.receive_datagram(samples.UDP_DATA), DataFrame)
    assert decoder.receive_datagram(samples.UDP_DATA[:-3]) is None
    assert decoder.receive_datagram(samples.UDP_DATA + b"\x00") is None
    assert decoder.receive_datagram(samples.UDP_DATA[:-1] + b"\x00") is None
    assert decoder.receive_datagram(b"\x00" * 20) is None
    assert decoder.receive_datagram(b"") is None
    assert decoder.drops.as_dict() == {"truncated": 2, "bad_size": 1, "bad_crc": 1, "bad_sync": 1}


def test_close_counts_what_was_left_open() -> None:
    decoder = StreamDecoder()
    decoder.feed(samples.PYPMU_CFG2 + samples.PYPMU_DATA[:10])
    decoder.close()
    assert decoder.drops.as_dict() == {"truncated": 1}
    assert decoder.configs == {7734: ANNEX}  # kept for the next connection
