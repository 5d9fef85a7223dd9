"""The dnp3 gateway's codec against dnp3py's encoders (docs/dnp3.md, "Tests"): the CRC, link frames,
transport segments, response headers and the objects of binary and analog inputs with flags and times;
bad input counted by reason."""

from __future__ import annotations

import struct

import dnp3_samples as s
from dnp3.application.fragment import ObjectBlock
from dnp3.application.qualifiers import ObjectHeader
from dnp3.core.crc import compute_crc
from dnp3.datalink.parser import FrameParser
from dnp3.transport.reassembler import Reassembler as TheirReassembler
from dnp3.transport.segment import TransportSegment

from gridstat.gateways.dnp3 import DropCounter, Point, PointKind, TimeSource, parse_objects
from gridstat.gateways.dnp3 import application as app
from gridstat.gateways.dnp3.crc import crc16
from gridstat.gateways.dnp3.link import DIR, PRM, LinkDecoder, encode_frame
from gridstat.gateways.dnp3.segments import Reassembler, Segmenter

T = 1_700_000_000_123


def test_crc_equals_dnp3py() -> None:
    for data in (b"", b"\x05\x64\x05\xc0\x01\x00\x00\x04", bytes(range(256)), b"123456789"):
        assert crc16(data) == compute_crc(data)


def test_our_frames_read_by_dnp3py() -> None:
    user = bytes(range(40))
    wire = encode_frame(DIR | PRM | 4, 10, 1, user)
    (frame,) = list(FrameParser().feed(wire))
    assert (frame.header.destination, frame.header.source, frame.user_data) == (10, 1, user)
    assert frame.header.control.dir_from_master and frame.header.control.prm


def test_our_segments_reassembled_by_dnp3py() -> None:
    fragment = bytes(range(256)) * 3
    segments = Segmenter().segment(fragment)
    assert len(segments) == 4
    theirs = TheirReassembler()
    results = [theirs.add(TransportSegment.from_bytes(seg)) for seg in segments]
    assert results[-1] is not None and results[-1].data == fragment


def test_dnp3py_frames_decoded_in_any_split() -> None:
    wire = s.response([s.ranged(30, 5, 0, [s.AnalogInputFloat(quality=s.AnalogQuality.ONLINE, value=1.5).to_bytes()]
                                * 60)], seq=3)
    for cut in (1, 2, 9, 10, 11, 27, 100, len(wire) - 1):
        drops = DropCounter()
        dec = LinkDecoder(drops)
        frames = dec.feed(wire[:cut]) + dec.feed(wire[cut:])
        assert drops.as_dict() == {} and len(frames) > 1
        r = Reassembler(drops)
        out = [r.add(f.user_data) for f in frames]
        assert out[-1] is not None and all(o is None for o in out[:-1])
        header = app.parse_response_header(out[-1])
        assert header is not None and header.sequence == 3 and header.fir and header.fin


def test_master_requests() -> None:
    assert app.read_request(5, (2, 3, 4, 1)) == bytes((0xC5, 0x01, 60, 2, 6, 60, 3, 6, 60, 4, 6, 60, 1, 6))
    assert app.confirm(7, unsolicited=True) == bytes((0xD7, 0x00))
    assert app.clear_restart(1) == bytes((0xC1, 0x02, 80, 1, 0, 7, 7, 0))
    assert app.unsolicited_request(2, enable=True)[1] == 0x14


def parse(blocks: list[object], drops: DropCounter | None = None) -> list[Point]:
    frag = s.fragment(blocks)  # type: ignore[arg-type]
    return parse_objects(frag, 4, drops if drops is not None else DropCounter())


def test_static_binary_and_analog_variations() -> None:
    on = s.BinaryQuality.ONLINE
    bi = s.ranged(1, 2, 3, [s.BinaryInputFlags(quality=on, state=True).to_bytes(),
                            s.BinaryInputFlags(quality=on | s.BinaryQuality.LOCAL_FORCED, state=False).to_bytes()])
    q = s.AnalogQuality.ONLINE | s.AnalogQuality.OVER_RANGE
    ai = [s.ranged(30, 1, 0, [s.AnalogInput32(quality=q, value=-70000).to_bytes()]),
          s.ranged(30, 2, 1, [s.AnalogInput16(quality=q, value=-300).to_bytes()]),
          s.ranged(30, 3, 2, [s.AnalogInput32NoFlag(value=123456).to_bytes()]),
          s.ranged(30, 5, 3, [s.AnalogInputFloat(quality=q, value=0.25).to_bytes()]),
          s.ranged(30, 6, 4, [s.AnalogInputDouble(quality=s.AnalogQuality.REFERENCE_ERR, value=1e300).to_bytes()])]
    points = parse([bi, *ai])
    assert [(p.kind, p.index, p.value, p.flags) for p in points] == [
        (PointKind.BINARY_INPUT, 3, True, 0x81), (PointKind.BINARY_INPUT, 4, False, 0x11),
        (PointKind.ANALOG_INPUT, 0, -70000.0, 0x21), (PointKind.ANALOG_INPUT, 1, -300.0, 0x21),
        (PointKind.ANALOG_INPUT, 2, 123456.0, 0x01), (PointKind.ANALOG_INPUT, 3, 0.25, 0x21),
        (PointKind.ANALOG_INPUT, 4, 1e300, 0x40)]
    assert all(p.time_source is TimeSource.NONE and not p.event for p in points)


def test_packed_binary_inputs_g1v1() -> None:
    points = parse([ObjectBlock(ObjectHeader(1, 1, 0x00), bytes((5, 14, 0b1000_0101, 0b0000_0010)))])
    assert [(p.index, p.value, p.flags) for p in points] == [
        (5 + i, bool(v), 0x81 if v else 0x01) for i, v in enumerate([1, 0, 1, 0, 0, 0, 0, 1, 0, 1])]


def test_events_with_device_time() -> None:
    on = s.BinaryQuality.ONLINE
    ts = s.DNP3Timestamp(T)
    blocks = [s.indexed(2, 2, [(7, s.BinaryInputEventTime(quality=on, state=True, timestamp=ts).to_bytes())]),
              s.indexed(2, 1, [(8, s.BinaryInputEvent(quality=s.BinaryQuality.COMM_LOST, state=False).to_bytes())]),
              s.indexed(32, 3, [(1, s.AnalogInputEvent32Time(quality=s.AnalogQuality.ONLINE, value=42,
                                                             timestamp=s.DNP3Timestamp(T + 1)).to_bytes())]),
              s.indexed(32, 7, [(2, s.AnalogInputEventFloatTime(quality=s.AnalogQuality.ONLINE, value=59.75,
                                                                timestamp=s.DNP3Timestamp(T + 2)).to_bytes())]),
              s.indexed(32, 8, [(300, s.AnalogInputEventDoubleTime(quality=s.AnalogQuality.RESTART, value=-1.5,
                                                                   timestamp=s.DNP3Timestamp(T + 3)).to_bytes())])]
    points = parse(blocks)
    assert [(p.index, p.value, p.flags, p.time_ms, p.time_source, p.event) for p in points] == [
        (7, True, 0x81, T, TimeSource.ABSOLUTE, True), (8, False, 0x04, 0, TimeSource.NONE, True),
        (1, 42.0, 0x01, T + 1, TimeSource.ABSOLUTE, True), (2, 59.75, 0x01, T + 2, TimeSource.ABSOLUTE, True),
        (300, -1.5, 0x02, T + 3, TimeSource.ABSOLUTE, True)]


def test_relative_time_needs_a_cto() -> None:
    rel = s.indexed(2, 3, [(1, bytes((0x81,)) + struct.pack("<H", 250))])
    drops = DropCounter()
    (alone,) = parse([rel], drops)
    assert alone.time_source is TimeSource.NONE and drops.as_dict() == {"no_cto": 1}
    cto = s.counted(51, 1, [T.to_bytes(6, "little")])
    (timed,) = parse([cto, rel])
    assert (timed.time_ms, timed.time_source, timed.value) == (T + 250, TimeSource.RELATIVE, True)


def test_other_objects_are_skipped() -> None:
    counter = s.ranged(20, 1, 0, [bytes((1, 5, 0, 0, 0))] * 2)
    ai = s.ranged(30, 5, 9, [s.AnalogInputFloat(quality=s.AnalogQuality.ONLINE, value=3.0).to_bytes()])
    assert [(p.index, p.value) for p in parse([counter, ai])] == [(9, 3.0)]


def test_bad_objects_are_counted_and_end_the_fragment() -> None:
    ai = s.ranged(30, 5, 0, [s.AnalogInputFloat(quality=s.AnalogQuality.ONLINE, value=3.0).to_bytes()])
    frag = s.fragment([ai])
    for tail, reason in ((bytes((99, 1, 0x00, 0, 0, 1)), "unknown_object"),
                         (bytes((30, 5, 0x01, 0, 0, 5)), "truncated_object"),
                         (bytes((30, 5, 0x01, 5, 0, 1, 0)), "bad_range"),
                         (bytes((30, 5, 0x5B, 1)), "unsupported_qualifier"),
                         (bytes((30, 5)), "truncated_object")):
        drops = DropCounter()
        points = parse_objects(frag + tail, 4, drops)
        assert [p.value for p in points] == [3.0] and drops[reason] == 1, (tail, drops.as_dict())


def test_link_layer_drops() -> None:
    good = s.response([s.ranged(30, 5, 0, [s.AnalogInputFloat(quality=s.AnalogQuality.ONLINE,
                                                               value=1.0).to_bytes()])])
    bad_header = bytearray(good)
    bad_header[8] ^= 0xFF
    bad_block = bytearray(good)
    bad_block[12] ^= 0xFF
    drops = DropCounter()
    frames = LinkDecoder(drops).feed(b"garbage" + bytes(bad_header) + bytes(bad_block) + good)
    assert len(frames) == 1
    assert drops["bad_block_crc"] == 1 and drops["bad_header_crc"] == 1 and drops["bad_sync"] >= 1


def test_transport_drops() -> None:
    drops = DropCounter()
    r = Reassembler(drops, max_fragment_size=300)
    assert r.add(bytes((0x01,)) + b"x") is None  # not FIR, nothing under way
    assert r.add(bytes((0x40 | 2,)) + b"a") is None
    assert r.add(bytes((5,)) + b"b") is None  # out of sequence
    assert r.add(bytes((0x40 | 0,)) + bytes(200)) is None
    assert r.add(bytes((0x80 | 1,)) + bytes(200)) is None  # 400 octets > 300
    assert drops.as_dict() == {"transport_no_fir": 1, "transport_sequence": 1, "fragment_too_large": 1}
