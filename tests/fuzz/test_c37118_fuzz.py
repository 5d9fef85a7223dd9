"""The C37.118 stream API (gridstat.gateways.c37118) under generated input: valid sessions with bytes
flipped, inserted and removed, cut anywhere. Nothing escapes ``StreamDecoder``; every byte is in a
frame, discarded or pending; every returned frame builds; garbage without 0xAA between frames costs no
frame. The parse functions raise nothing but ``FrameError``. (fuzz_c37118.py is the atheris harness.)"""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "gateways"))

import itertools

import c37118_samples as samples

from gridstat.gateways.c37118 import (
    ConfigFrame,
    DataLayout,
    FrameError,
    StreamDecoder,
    build_frame,
    crc_ccitt,
    parse_frame,
)

FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
SESSION = [samples.PYPMU_COMMAND, samples.PYPMU_HEADER, samples.PYPMU_CFG2, samples.PYPMU_DATA, samples.PYPMU_DATA,
           samples.FOUR_PMU_CFG2, samples.FOUR_PMU_DATA, samples.PYPMU_DATA]
CONFIG = parse_frame(samples.PYPMU_CFG2)
assert isinstance(CONFIG, ConfigFrame)
LAYOUT = DataLayout(CONFIG)


@st.composite
def mutated_sessions(draw: st.DrawFn) -> bytes:
    stream = bytearray(b"".join(SESSION))
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, len(stream)))
        kind = draw(st.sampled_from(["flip", "insert", "delete"]))
        if kind == "flip" and at < len(stream):
            stream[at] ^= draw(st.integers(1, 255))
        elif kind == "insert":
            stream[at:at] = draw(st.binary(min_size=1, max_size=30))
        else:
            del stream[at:at + draw(st.integers(1, 30))]
    return bytes(stream)


def _decode(stream: bytes, cuts: list[int]) -> tuple[StreamDecoder, list[object]]:
    decoder = StreamDecoder()
    points = [0, *sorted(c % (len(stream) + 1) for c in cuts), len(stream)]
    frames: list[object] = []
    for a, b in itertools.pairwise(points):
        frames += decoder.feed(stream[a:b])
    return decoder, frames


@FUZZ
@given(mutated_sessions(), st.lists(st.integers(0, 10**6), max_size=6))
def test_mutated_sessions(stream: bytes, cuts: list[int]) -> None:
    decoder, frames = _decode(stream, cuts)
    splitter = decoder.splitter
    assert splitter.pending_bytes <= 0xFFFF
    for f in frames:
        assert build_frame(f) in stream  # type: ignore[arg-type]
    decoder.close()
    assert splitter.bytes_in == len(stream)
    assert splitter.drops.discarded_bytes <= len(stream)


@FUZZ
@given(st.lists(st.binary(max_size=40).filter(lambda g: b"\xaa" not in g), min_size=len(SESSION) + 1,
                max_size=len(SESSION) + 1), st.lists(st.integers(0, 10**6), max_size=6))
def test_garbage_between_frames_costs_no_frame(garbage: list[bytes], cuts: list[int]) -> None:
    stream = garbage[0] + b"".join(f + g for f, g in zip(SESSION, garbage[1:], strict=True))
    decoder, frames = _decode(stream, cuts)
    assert [build_frame(f) for f in frames] == SESSION  # type: ignore[arg-type]
    assert decoder.drops.discarded_bytes + decoder.splitter.pending_bytes == sum(map(len, garbage))
    assert decoder.drops.as_dict().keys() <= {"bad_sync"}


def _sealed(data: bytes) -> bytes:
    body = b"\xaa" + data[1:2] + len(data).to_bytes(2, "big") + data[4:-2]
    return body + crc_ccitt(body).to_bytes(2, "big")


@FUZZ
@given(st.one_of(st.binary(min_size=16, max_size=600), mutated_sessions().map(lambda s: s[:600])))
def test_parse_functions_raise_only_frame_errors(data: bytes) -> None:
    for candidate in (data, _sealed(data)):
        for config in (None, LAYOUT):
            try:
                frame = parse_frame(candidate, config=config)
            except FrameError as exc:
                assert exc.drop_reason is not None
                continue
            again = build_frame(frame)
            assert build_frame(parse_frame(again, config=config)) == again
        StreamDecoder().receive_datagram(candidate)
