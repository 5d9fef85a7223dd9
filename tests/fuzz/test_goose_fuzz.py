"""The subscriber never raises on what arrives from the network, and counts every frame it cannot use:
random bytes, and valid frames cut, corrupted and spliced (hypothesis)."""

from __future__ import annotations

import goose_samples as s
from hypothesis import given, settings
from hypothesis import strategies as st

from gridstat.gateways.goose import SubscriberSession, decode_frame
from gridstat.gateways.goose.errors import FrameError

VALID = [s.frame(n, k, t_ms=1_800_000_000_000 + n) for n in range(1, 4) for k in range(3)] + [s.LIBIEC61850_FRAME]


def _accounted(session: SubscriberSession) -> None:
    st_ = session.stats
    assert st_.frames == st_.states + st_.retransmissions + st_.drops.total - st_.drops.counts.get("bad_member", 0)


@given(st.lists(st.binary(max_size=400), max_size=10))
def test_random_bytes_never_raise_and_are_counted(frames: list[bytes]) -> None:
    session = SubscriberSession(s.GOOSE_MAP)
    for i, f in enumerate(frames):
        session.receive(f, float(i))
        session.tick(float(i))
    _accounted(session)


@settings(max_examples=300)
@given(st.data())
def test_corrupted_frames_never_raise_and_every_frame_is_accounted(data: st.DataObject) -> None:
    session = SubscriberSession(s.GOOSE_MAP)
    for _ in range(data.draw(st.integers(1, 6))):
        raw = bytearray(data.draw(st.sampled_from(VALID)))
        for _ in range(data.draw(st.integers(0, 4))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
        cut = data.draw(st.integers(0, len(raw)))
        tail = data.draw(st.sampled_from(VALID))[data.draw(st.integers(0, 200)):]
        frame = bytes(raw[:cut]) + (tail if data.draw(st.booleans()) else b"")
        session.receive(frame, 0.0)
    _accounted(session)


@given(st.binary(max_size=300))
def test_decode_raises_only_frame_error(raw: bytes) -> None:
    frame = s.frame()[:22] + raw
    try:
        decode_frame(frame)
    except FrameError:
        pass
