"""Every frame type round-trips: what a builder writes parses back equal, and builds again to the same
bytes (hypothesis over valid configurations and data)."""

from __future__ import annotations

import c37118_strategies as cs
from hypothesis import given
from hypothesis import strategies as st

from gridstat.gateways.c37118 import (
    CommandFrame,
    ConfigFragment,
    ConfigFrame,
    ConfigReassembler,
    DataFrame,
    DataLayout,
    FrameType,
    HeaderFrame,
    StreamDecoder,
    build_cfg3_frames,
    build_frame,
    parse_frame,
)
from gridstat.gateways.c37118.framing import read_head


def _round_trip(frame: object, *, config: ConfigFrame | None = None) -> None:
    raw = build_frame(frame)  # type: ignore[arg-type]
    assert len(raw) == int.from_bytes(raw[2:4], "big")
    back = parse_frame(raw, config=config)
    assert back == frame
    assert build_frame(back) == raw


@given(cs.config_frames(frame_types=(FrameType.CFG1, FrameType.CFG2)))
def test_cfg1_and_cfg2(config: ConfigFrame) -> None:
    _round_trip(config)


@given(cs.config_frames(frame_types=(FrameType.CFG3,)))
def test_cfg3(config: ConfigFrame) -> None:
    _round_trip(config)


@given(cs.data_frames())
def test_data(frame: DataFrame) -> None:
    _round_trip(frame, config=frame.config)
    layout = DataLayout(frame.config)
    raw = build_frame(frame)
    assert len(raw) == layout.frame_size
    assert layout.unpack(raw, read_head(raw)) == frame


@given(cs.header_frames)
def test_header(frame: HeaderFrame) -> None:
    _round_trip(frame)


@given(cs.command_frames)
def test_command(frame: CommandFrame) -> None:
    _round_trip(frame)


@given(cs.config_fragments)
def test_cfg3_fragment(fragment: ConfigFragment) -> None:
    _round_trip(fragment)


@given(cs.config_frames(frame_types=(FrameType.CFG3,), max_channels=6), st.integers(19, 400))
def test_cfg3_series_reassemble(config: ConfigFrame, max_frame_size: int) -> None:
    frames = build_cfg3_frames(config, max_frame_size=max_frame_size)
    assert all(len(f) <= max_frame_size for f in frames)
    reassembler = ConfigReassembler()
    results = []
    for raw in frames:
        part = parse_frame(raw)
        if isinstance(part, ConfigFrame):
            results.append(part)
        else:
            assert isinstance(part, ConfigFragment)
            done = reassembler.add(part)
            if done is not None:
                results.append(done)
    assert results == [config]
    assert reassembler.open_series == 0
    assert reassembler.drops.total == 0


@given(st.data())
def test_a_stream_of_every_type_decodes_in_order(data: st.DataObject) -> None:
    config = data.draw(cs.config_frames(frame_types=(FrameType.CFG2, FrameType.CFG3)))
    frames: list[object] = [config]
    frames += data.draw(st.lists(st.one_of(cs.data_frames(config), cs.header_frames, cs.command_frames), max_size=6))
    stream = b"".join(build_frame(f) for f in frames)  # type: ignore[arg-type]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder = StreamDecoder()
    out = []
    for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        out += decoder.feed(stream[a:b])
    assert out == frames
    assert decoder.drops.total == 0
    assert decoder.splitter.pending_bytes == 0
