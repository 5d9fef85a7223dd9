"""The TCP frame splitter: frames out whatever the cuts, resynchronisation after garbage and bad
frames with every loss counted, no stall on a false frame start, and bounded memory."""

from __future__ import annotations

import itertools
import random

import c37118_samples as samples
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridstat.errors import ValidationError
from gridstat.gateways.c37118 import FrameSplitter, crc_ccitt

FRAMES = [samples.PYPMU_CFG2, samples.PYPMU_DATA, samples.PYPMU_HEADER, samples.PYPMU_COMMAND, samples.PYPMU_DATA]
STREAM = b"".join(FRAMES)


def _feed_all(splitter: FrameSplitter, chunks: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for c in chunks:
        out += splitter.feed(c)
    return out


def _accounted(splitter: FrameSplitter, frames: list[bytes]) -> bool:
    """Every byte fed is in a frame, discarded, or pending."""
    return splitter.bytes_in == sum(map(len, frames)) + splitter.drops.discarded_bytes + splitter.pending_bytes


def test_one_byte_at_a_time() -> None:
    splitter = FrameSplitter()
    out = _feed_all(splitter, [STREAM[i:i + 1] for i in range(len(STREAM))])
    assert out == FRAMES
    assert splitter.drops.total == 0
    assert splitter.frames_out == len(FRAMES)
    assert splitter.pending_bytes == 0


@given(st.lists(st.integers(0, len(STREAM)), max_size=10))
def test_any_cuts(cuts: list[int]) -> None:
    points = [0, *sorted(cuts), len(STREAM)]
    splitter = FrameSplitter()
    assert _feed_all(splitter, [STREAM[a:b] for a, b in itertools.pairwise(points)]) == FRAMES


def test_garbage_before_between_and_after_is_one_drop_per_run() -> None:
    splitter = FrameSplitter()
    noise = b"\x88" * 7 + b"\xaa\x99" + b"\x00" * 5  # an 0xAA that is no frame start
    out = splitter.feed(noise + samples.PYPMU_DATA + noise + samples.PYPMU_COMMAND + noise)
    assert out == [samples.PYPMU_DATA, samples.PYPMU_COMMAND]
    assert splitter.drops.as_dict() == {"bad_sync": 3}
    assert splitter.drops.discarded_bytes + splitter.pending_bytes == 3 * len(noise)
    assert _accounted(splitter, out)


def test_a_frame_with_a_bad_chk_is_dropped_and_the_next_one_kept() -> None:
    bad = samples.PYPMU_DATA[:30] + bytes([samples.PYPMU_DATA[30] ^ 0xFF]) + samples.PYPMU_DATA[31:]
    splitter = FrameSplitter()
    out = splitter.feed(samples.PYPMU_COMMAND + bad + samples.PYPMU_DATA)
    assert out == [samples.PYPMU_COMMAND, samples.PYPMU_DATA]
    assert splitter.drops.as_dict() == {"bad_crc": 1}
    assert splitter.drops.discarded_bytes == len(bad)


@pytest.mark.parametrize("size", [b"\x00\x05", b"\xff\xff"])
def test_a_frame_size_out_of_bounds(size: bytes) -> None:
    splitter = FrameSplitter(max_frame_size=1000)
    bad = samples.PYPMU_DATA[:2] + size + samples.PYPMU_DATA[4:]
    assert splitter.feed(bad + samples.PYPMU_DATA) == [samples.PYPMU_DATA]
    assert splitter.drops.as_dict() == {"bad_size": 1}


def test_a_false_frame_start_does_not_stall_the_stream() -> None:
    """Garbage holding a plausible start that claims 60000 bytes: the real frame after it completes
    first and is returned at once, not 60 kB later."""
    false_start = b"\xaa\x01\xea\x60" + b"\x00" * 10
    splitter = FrameSplitter()
    out = splitter.feed(b"\x01" + false_start + samples.PYPMU_DATA)
    assert out == [samples.PYPMU_DATA]
    assert splitter.drops.as_dict() == {"bad_sync": 1}
    assert splitter.in_sync
    assert splitter.feed(samples.PYPMU_COMMAND) == [samples.PYPMU_COMMAND]


def test_a_false_start_split_across_feeds() -> None:
    false_start = b"\xaa\x01\xea\x60" + b"\x00" * 10
    stream = b"\x01" + false_start + samples.PYPMU_DATA + samples.PYPMU_HEADER
    splitter = FrameSplitter()
    out = _feed_all(splitter, [stream[i:i + 7] for i in range(0, len(stream), 7)])
    assert out == [samples.PYPMU_DATA, samples.PYPMU_HEADER]
    assert _accounted(splitter, out)


def test_memory_stays_bounded_under_garbage() -> None:
    rng = random.Random(7)
    splitter = FrameSplitter(max_frame_size=4096)
    out: list[bytes] = []
    for _ in range(200):
        chunk = bytes(rng.randrange(256) for _ in range(4000))
        # plenty of plausible frame starts, each claiming up to 4 kB
        chunk = chunk.replace(b"\x00", b"\xaa\x01")
        out += splitter.feed(chunk)
        assert splitter.pending_bytes <= 4096
    out += splitter.feed(samples.PYPMU_DATA * 100)
    assert out[-1] == samples.PYPMU_DATA
    assert len(out) >= 90
    assert _accounted(splitter, out)


def test_close_counts_a_partial_frame() -> None:
    splitter = FrameSplitter()
    assert splitter.feed(samples.PYPMU_DATA + samples.PYPMU_CFG2[:100]) == [samples.PYPMU_DATA]
    splitter.close()
    assert splitter.drops.as_dict() == {"truncated": 1}
    assert splitter.drops.discarded_bytes == 100
    splitter.close()
    assert splitter.drops.total == 1
    assert splitter.feed(samples.PYPMU_COMMAND) == [samples.PYPMU_COMMAND]  # a new stream


def test_max_frame_size_is_checked() -> None:
    with pytest.raises(ValidationError):
        FrameSplitter(max_frame_size=15)
    with pytest.raises(ValidationError):
        FrameSplitter(max_frame_size=65536)


@given(st.lists(st.one_of(st.sampled_from(FRAMES), st.binary(max_size=40),
                          st.sampled_from(FRAMES).map(lambda f: f[:-1] + bytes([f[-1] ^ 1]))), max_size=12),
       st.integers(1, 64))
def test_every_byte_is_accounted_for(parts: list[bytes], chunk: int) -> None:
    stream = b"".join(parts)
    splitter = FrameSplitter()
    out = _feed_all(splitter, [stream[i:i + chunk] for i in range(0, len(stream), chunk)])
    assert _accounted(splitter, out)
    assert all(crc_ccitt(f[:-2]) == int.from_bytes(f[-2:], "big") for f in out)
    assert all(f in stream for f in out)
    if all(p in FRAMES for p in parts):
        assert out == parts
    splitter.close()
    assert splitter.bytes_in == sum(map(len, out)) + splitter.drops.discarded_bytes


def test_a_trickle_of_false_starts_costs_linear_work() -> None:
    """One byte per feed of garbage made of plausible starts claiming 60 kB each: thousands wait side by
    side, and each feed still does a bounded amount of work (this test would take minutes otherwise)."""
    splitter = FrameSplitter()
    garbage = b"\x01" + b"\xaa\x01\xea\x60" * 5000
    for i in range(len(garbage)):
        assert splitter.feed(garbage[i:i + 1]) == []
    assert splitter.pending_bytes <= 0xFFFF
    out = splitter.feed(samples.PYPMU_DATA)
    assert out == [samples.PYPMU_DATA]
    assert _accounted(splitter, out)


def test_in_sync_a_frame_size_is_trusted() -> None:
    """Right after a good frame the next FRAMESIZE is believed (TCP delivers bytes intact): a start that
    claims 60 kB is waited for, up to max_frame_size bytes, and then found wrong by its CHK."""
    splitter = FrameSplitter(max_frame_size=0xEA60)
    false_start = b"\xaa\x01\xea\x60"
    assert splitter.feed(samples.PYPMU_COMMAND + false_start + samples.PYPMU_DATA) == [samples.PYPMU_COMMAND]
    assert splitter.pending_bytes == len(false_start) + len(samples.PYPMU_DATA)
    out = splitter.feed(bytes(0xEA60))  # the claimed bytes arrive: a bad CHK, then the frame inside is found
    assert out == [samples.PYPMU_DATA]
    assert splitter.drops.as_dict() == {"bad_crc": 1, "bad_sync": 1}  # and the zeros after it are garbage
