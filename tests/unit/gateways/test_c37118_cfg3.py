"""CFG-3 series (C37.118.2-2011 6.4, Table 11, CONT_IDX): how a builder cuts a large configuration,
and how the reassembler puts it back together or counts why it could not."""

from __future__ import annotations

import dataclasses

import pytest

from gridstat.errors import ValidationError
from gridstat.gateways.c37118 import (
    Cfg3Details,
    ConfigFragment,
    ConfigFrame,
    ConfigReassembler,
    DataFormat,
    DataFrame,
    DigitalUnit,
    DropReason,
    FrameType,
    PhasorScale,
    PmuConfig,
    PmuData,
    Stat,
    StreamDecoder,
    build_cfg3_frames,
    build_frame,
    parse_frame,
)
from gridstat.gateways.c37118.cfg3 import CONT_LAST, build_cfg3_body

PMU = PmuConfig("Station B", 11, DataFormat(phasors_float=True), tuple(f"phasor {i}" for i in range(40)),
                digital_names=tuple(f"bit {i}" for i in range(16)), digital_units=(DigitalUnit(),),
                cfg3=Cfg3Details(phasor_scales=(PhasorScale(),) * 40))
CONFIG = ConfigFrame(FrameType.CFG3, 11, 1_700_000_000, 0, 1_000_000, (PMU, PMU), 50)


def _fragments(max_frame_size: int = 300) -> list[ConfigFragment]:
    out = []
    for raw in build_cfg3_frames(CONFIG, max_frame_size=max_frame_size):
        part = parse_frame(raw)
        assert isinstance(part, ConfigFragment)
        out.append(part)
    return out


def test_a_series_is_numbered_1_2_3_then_ffff() -> None:
    frames = build_cfg3_frames(CONFIG, max_frame_size=300)
    assert len(frames) > 3
    assert all(len(f) <= 300 for f in frames)
    assert [int.from_bytes(f[14:16], "big") for f in frames] == [*range(1, len(frames)), CONT_LAST]
    assert b"".join(f[16:-2] for f in frames) == build_cfg3_body(CONFIG)
    assert build_cfg3_frames(CONFIG) == [build_frame(CONFIG)]  # small enough for one frame: CONT_IDX 0


def test_a_series_too_long_to_number() -> None:
    wide = dataclasses.replace(PMU, phasor_names=("",) * 6000, cfg3=Cfg3Details(phasor_scales=(PhasorScale(),) * 6000))
    with pytest.raises(ValidationError) as info:  # 78 kB of body, one byte per frame: 78000 frames
        build_cfg3_frames(dataclasses.replace(CONFIG, pmus=(wide,)), max_frame_size=19)
    assert info.value.field == "CONT_IDX"
    with pytest.raises(ValidationError) as info:
        build_cfg3_frames(CONFIG, max_frame_size=18)  # no room for a body
    assert info.value.field == "max_frame_size"


def test_reassembled_in_order() -> None:
    reassembler = ConfigReassembler()
    parts = _fragments()
    assert [reassembler.add(p) for p in parts[:-1]] == [None] * (len(parts) - 1)
    assert reassembler.open_series == 1
    assert reassembler.pending_bytes == sum(len(p.body) for p in parts[:-1])
    assert reassembler.add(parts[-1]) == CONFIG
    assert reassembler.open_series == 0
    assert reassembler.drops.total == 0


def test_out_of_order_drops_the_series() -> None:
    reassembler = ConfigReassembler()
    parts = _fragments()
    reassembler.add(parts[0])
    assert reassembler.add(parts[2]) is None
    assert reassembler.drops.as_dict() == {"bad_field": 1}
    assert reassembler.drops.by_field == {"CONT_IDX": 1}
    assert reassembler.open_series == 0
    assert reassembler.add(parts[-1]) is None  # nothing open any more
    assert reassembler.drops.by_field == {"CONT_IDX": 2}


def test_a_new_first_fragment_abandons_the_open_series() -> None:
    reassembler = ConfigReassembler()
    parts = _fragments()
    reassembler.add(parts[0])
    reassembler.add(parts[1])
    results = [reassembler.add(p) for p in parts]
    assert results[-1] == CONFIG
    assert reassembler.drops.as_dict() == {"truncated": 1}


def test_series_are_per_stream_and_bounded_in_number() -> None:
    reassembler = ConfigReassembler(max_series=2)
    parts = _fragments()
    for idcode in (1, 2, 3):
        reassembler.add(dataclasses.replace(parts[0], idcode=idcode))
    assert reassembler.open_series == 2
    assert reassembler.drops.as_dict() == {"truncated": 1}  # stream 1's, the oldest
    for p in parts[1:]:
        reassembler.add(dataclasses.replace(p, idcode=3))
    assert reassembler.open_series == 1


def test_a_series_longer_than_the_cap() -> None:
    reassembler = ConfigReassembler(max_config_bytes=1000)
    assert all(reassembler.add(p) is None for p in _fragments())
    assert reassembler.drops.by_reason[DropReason.BAD_SIZE] == 1
    assert reassembler.open_series == 0


def test_a_series_whose_body_does_not_parse() -> None:
    reassembler = ConfigReassembler()
    parts = _fragments()
    parts[1] = dataclasses.replace(parts[1], body=parts[1].body[:-1])
    assert [reassembler.add(p) for p in parts][-1] is None
    assert reassembler.drops.total == 1
    assert reassembler.drops.last_error is not None


def test_reset_counts_open_series() -> None:
    reassembler = ConfigReassembler()
    reassembler.add(_fragments()[0])
    reassembler.reset()
    assert reassembler.drops.as_dict() == {"truncated": 1}
    assert reassembler.open_series == 0


def test_the_decoder_applies_a_reassembled_configuration() -> None:
    decoder = StreamDecoder()
    stream = b"".join(build_cfg3_frames(CONFIG, max_frame_size=512))
    data = DataFrame(11, 1_700_000_000, 20_000, tuple(PmuData(Stat(), ((1.0, 2.0),) * 40, -20, 3, (), (0,), p)
                                                      for p in CONFIG.pmus), CONFIG)
    frames = decoder.feed(stream + build_frame(data))
    assert frames == [CONFIG, data]
    assert decoder.configs == {11: CONFIG}
