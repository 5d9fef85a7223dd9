"""The DNP3 codec and master under generated input (hypothesis): random bytes and valid outstation
streams (dnp3py's encoding) cut, corrupted, spliced and padded with garbage. Nothing raises; bad frames,
segments and objects are counted drops; garbage between frames costs no frame; a stream read in any
split reads the same as whole (docs/dnp3.md, "Tests")."""

from __future__ import annotations

import dnp3_samples as s
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gridstat.gateways.dnp3 import DropCounter, MasterSession, SessionSettings, parse_objects
from gridstat.gateways.dnp3.link import LinkDecoder, encode_frame

FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
T = 1_700_000_000_000
ON_A, ON_B = s.AnalogQuality.ONLINE, s.BinaryQuality.ONLINE
BLOCKS = [
    s.ranged(30, 5, 0, [s.AnalogInputFloat(quality=ON_A, value=float(i)).to_bytes() for i in range(40)]),
    s.ranged(1, 2, 0, [s.BinaryInputFlags(quality=ON_B, state=bool(i % 2)).to_bytes() for i in range(9)]),
    s.indexed(32, 7, [(i, s.AnalogInputEventFloatTime(quality=ON_A, value=0.5,
                                                       timestamp=s.DNP3Timestamp(T + i)).to_bytes())
                      for i in range(5)]),
    s.indexed(2, 2, [(3, s.BinaryInputEventTime(quality=s.BinaryQuality.ONLINE, state=True,
                                                timestamp=s.DNP3Timestamp(T)).to_bytes())]),
]
#: A valid answer to the session's first request (an integrity poll, sequence 0): two fragments, then an
#: unsolicited response.
VALID = (s.response(BLOCKS[:2], seq=0, fin=False, con=True) + s.response(BLOCKS[2:], seq=1, fir=False, transport_seq=1)
         + s.response(BLOCKS[2:], seq=5, unsolicited=True, con=True, transport_seq=2))


def _session() -> MasterSession:
    m = MasterSession(SessionSettings())
    m.connecting()
    m.connected(0.0)
    return m


@FUZZ
@given(st.lists(st.binary(max_size=400), max_size=8))
def test_random_bytes_never_raise(chunks: list[bytes]) -> None:
    m = _session()
    now = 0.0
    for chunk in chunks:
        now += 0.5
        m.tcp_bytes(chunk, now)
        m.tick(now)
    assert m.stats.points == {}  # random bytes never pass three CRCs and the addresses


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    stream = bytearray(VALID)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(("flip", "insert", "delete")))
        at = draw(st.integers(0, len(stream) - 1))
        if op == "flip":
            stream[at] ^= draw(st.integers(1, 255))
        elif op == "insert":
            stream[at:at] = draw(st.binary(min_size=1, max_size=20))
        else:
            del stream[at:at + draw(st.integers(1, 20))]
    return bytes(stream)


@FUZZ
@given(mutated(), st.lists(st.integers(1, 200), max_size=6))
def test_corrupted_streams_are_counted_never_raise(stream: bytes, cuts: list[int]) -> None:
    m = _session()
    pos = 0
    for size in [*cuts, len(stream)]:
        m.tcp_bytes(stream[pos:pos + size], 0.1)
        pos += size
    assert m.stats.drops.total() > 0 or m.stats.points


@FUZZ
@given(st.lists(st.integers(1, 300), max_size=10))
def test_any_split_reads_the_same(cuts: list[int]) -> None:
    whole = _session().tcp_bytes(VALID, 0.1)
    m = _session()
    points = []
    pos = 0
    for size in [*cuts, len(VALID)]:
        points += m.tcp_bytes(VALID[pos:pos + size], 0.1).points
        pos += size
    assert points == whole.points and len(points) == 40 + 9 + 5 + 1 + 5 + 1
    assert m.stats.drops.as_dict() == {}


@FUZZ
@given(st.lists(st.binary(max_size=40).filter(lambda b: b"\x05\x64" not in b and not b.endswith(b"\x05")),
                min_size=1, max_size=5))
def test_garbage_between_frames_costs_no_frame(garbage: list[bytes]) -> None:
    frames = [encode_frame(0x44, 1, 10, bytes((0xC0 | i, i)) * 20) for i in range(len(garbage))]
    stream = b"".join(g + f for g, f in zip(garbage, frames, strict=True))
    drops = DropCounter()
    got = LinkDecoder(drops).feed(stream)
    assert len(got) == len(frames)
    assert drops.discarded_bytes == sum(len(g) for g in garbage)


@FUZZ
@given(st.binary(max_size=600))
def test_objects_parser_never_raises(fragment: bytes) -> None:
    for p in parse_objects(fragment, 0, DropCounter()):
        assert 0 <= p.index <= 0xFFFF_FFFF and 0 <= p.flags <= 0xFF
