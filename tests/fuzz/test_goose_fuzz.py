"""The GOOSE subscriber (gridstat.gateways.goose) under generated input: random bytes, and valid frames
(ours and libiec61850's) with bytes changed, cut anywhere and spliced. ``SubscriberSession.receive`` never
raises and every frame is taken (a state or a retransmission) or counted as a drop; ``decode_frame``
raises nothing but ``FrameError``; a frame that decodes encodes to one that decodes the same."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "gateways"))

import goose_samples as s

from gridstat.gateways.goose import SubscriberSession, decode_frame, encode_frame
from gridstat.gateways.goose.errors import FrameError
from gridstat.gateways.goose.values import BitString, Other, UtcTime

FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

VALID = [s.frame(n, k, t_ms=1_800_000_000_000 + n) for n in range(1, 4) for k in range(3)] + [s.LIBIEC61850_FRAME]


def _accounted(session: SubscriberSession) -> None:
    st_ = session.stats
    assert st_.frames == st_.states + st_.retransmissions + st_.drops.total - st_.drops.counts.get("bad_member", 0)


@FUZZ
@given(st.lists(st.binary(max_size=400), max_size=10))
def test_random_bytes_never_raise_and_are_counted(frames: list[bytes]) -> None:
    session = SubscriberSession(s.GOOSE_MAP)
    for i, f in enumerate(frames):
        session.receive(f, float(i))
        session.tick(float(i))
    _accounted(session)


@FUZZ
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


@FUZZ
@given(st.binary(max_size=300), st.integers(0, 200))
def test_decode_raises_only_frame_error_and_what_decodes_encodes(raw: bytes, keep: int) -> None:
    frame = s.frame()[:22 + keep] + raw
    try:
        decoded = decode_frame(frame)
    except FrameError:
        return
    if all(isinstance(v, EXACT) for v in decoded.all_data):  # floats may be doubles, strings UTF-8
        assert decode_frame(encode_frame(decoded)) == decoded


#: Data members that encode back to what they decoded from.
EXACT = (bool, int, BitString, UtcTime, Other)
