"""The event wire format (docs/wire-format.md): round trips, packing, and every malformation."""

from __future__ import annotations

import itertools
import math
import re
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridstat.core import wire
from gridstat.core.model import BOOL, FLOAT, INT, StructType, TypeSpec, ValueType
from gridstat.core.wire import DecodeError, DerivedValue, DropReason, Event
from gridstat.errors import TypeMismatch, ValidationError

DOC = Path(__file__).resolve().parents[3] / "docs" / "wire-format.md"

PMU = StructType("pmu", (("freq", "float64"), ("angle", "float32"), ("status", "uint16"), ("ok", "bool")))
PMU_SPEC = TypeSpec(ValueType.STRUCT, PMU)

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFF_FFFF)
u64 = st.integers(0, 0xFFFF_FFFF_FFFF_FFFF)
i64 = st.integers(-(2**63), 2**63 - 1)
f64 = st.floats(allow_nan=False)

options = st.builds(DerivedValue, u16, u16, f64)

typed_values = st.one_of(
    st.tuples(st.just(INT), i64),
    st.tuples(st.just(FLOAT), f64),
    st.tuples(st.just(BOOL), st.booleans()),
    st.tuples(
        st.just(PMU_SPEC),
        st.fixed_dictionaries({
            "freq": f64,
            "angle": st.floats(width=32, allow_nan=False),
            "status": u16,
            "ok": st.booleans(),
        }),
    ),
)


@st.composite
def events(draw: st.DrawFn, max_options: int = 3) -> Event:
    spec, value = draw(typed_values)
    return Event(draw(u64), draw(u32), wire.encode_value(spec, value), draw(u8),
                 tuple(draw(st.lists(options, max_size=max_options))))


def one_event(ts: int = 1_000, var: int = 1, value: float = 1.0) -> bytes:
    return wire.encode_event(Event(ts, var, wire.encode_value(FLOAT, value)))


def dgram(*evs: bytes, sender: int = 7, seq: int = 1, tag: bytes = b"") -> bytes:
    return wire.encode_datagram(sender, seq, list(evs) or [one_event()], tag)


def with_header(data: bytes, **fields: int) -> bytes:
    names = ("magic", "version", "kind", "sender", "seq", "count", "tag_len", "reserved")
    values = dict(zip(names, wire.HEADER.unpack_from(data, 0), strict=True))
    values.update(fields)
    return wire.HEADER.pack(*values.values()) + data[wire.HEADER_SIZE:]


def reason_of(data: bytes) -> DropReason:
    with pytest.raises(DecodeError) as exc:
        wire.decode_datagram(data)
    return exc.value.reason


# -- sizes and constants ----------------------------------------------------------

def test_layout_sizes_match_the_spec() -> None:
    assert wire.HEADER_SIZE == 16 and wire.EVENT_HEAD_SIZE == 16 and wire.OPTION_SIZE == 16
    assert wire.PING_BODY.size == 8 and wire.MAGIC.to_bytes(2, "big") == b"GS"


@pytest.mark.parametrize("spec,value", [(INT, -5), (FLOAT, 2.5), (BOOL, True)])
def test_scalar_event_is_gridstats_24_bytes(spec: TypeSpec, value: object) -> None:
    assert len(wire.encode_event(Event(1, 2, wire.encode_value(spec, value)))) == 24


# -- round trips --------------------------------------------------------------

@given(typed_values)
def test_value_round_trip(tv: tuple[TypeSpec, object]) -> None:
    spec, value = tv
    data = wire.encode_value(spec, value)
    assert len(data) == (PMU.size if spec is PMU_SPEC else wire.SCALAR_SIZE)
    assert wire.decode_value(spec, data) == value


@given(st.lists(events(), min_size=1, max_size=20), u32, u64, st.binary(max_size=wire.MAX_TAG_LEN))
def test_datagram_round_trip(evs: list[Event], sender: int, seq: int, tag: bytes) -> None:
    data = wire.encode_datagram(sender, seq, [wire.encode_event(e) for e in evs], tag)
    assert len(data) == wire.HEADER_SIZE + sum(e.wire_size for e in evs) + len(tag)
    d = wire.decode_datagram(data)
    assert (d.kind, d.sender_id, d.sequence, d.tag) == (wire.KIND_EVENTS, sender, seq % 2**32, tag)
    assert list(d.events) == evs
    # decoding from a larger receive buffer with nbytes gives the same datagram
    assert wire.decode_datagram(memoryview(bytearray(data) + b"\xaa" * 9), len(data)) == d


@given(u64, u32)
def test_reserved_flag_bits_survive_a_round_trip(ts: int, var: int) -> None:
    ev = Event(ts, var, wire.encode_value(INT, 1), flags=0xFC | wire.FLAG_ALERT)
    (back,) = wire.decode_datagram(dgram(wire.encode_event(ev))).events
    assert back.flags == 0xFD and back.is_alert


def test_sequence_wraps_at_2_32() -> None:
    assert wire.decode_datagram(dgram(seq=2**32 + 5)).sequence == 5
    assert wire.decode_datagram(dgram(seq=2**32 - 1)).sequence == 2**32 - 1


@pytest.mark.parametrize("kind", [wire.KIND_PING, wire.KIND_PONG])
@given(ns=st.integers(0, 2**70), sender=u32)
def test_ping_pong_round_trip(kind: int, ns: int, sender: int) -> None:
    data = wire.encode_ping(kind, sender, 0, ns)
    assert len(data) == 24
    d = wire.decode_datagram(data)
    assert (d.kind, d.sender_id, d.ping_ns, d.events, d.tag) == (kind, sender, ns % 2**64, (), b"")


def test_worked_example_in_the_doc_is_exact() -> None:
    e1 = Event(1_700_000_000_000, 3, wire.encode_value(FLOAT, 60.0))
    e2 = Event(1_700_000_000_020, 9, wire.encode_value(INT, -2), wire.FLAG_ALERT,
               (DerivedValue(wire.OptionKind.MOVING_AVERAGE, 10, 59.5),))
    data = wire.encode_datagram(7, 42, [wire.encode_event(e1), wire.encode_event(e2)])
    text = DOC.read_text()
    block = text.split("## 9. Worked example", 1)[1].split("```", 2)[1]
    hex_lines = re.findall(r"^[0-9a-f]{4}  ((?:[0-9a-f]{2} ?)+)$", block, re.MULTILINE)
    assert bytes.fromhex("".join(hex_lines)) == data
    assert wire.decode_datagram(data).events == (e1, e2)


def test_doc_lists_every_drop_reason() -> None:
    text = DOC.read_text()
    for reason in DropReason:
        assert f"| `{reason.value}` |" in text


# -- packing ----------------------------------------------------------------------

@given(st.lists(st.binary(min_size=24, max_size=200), max_size=60), st.integers(216, 1472),
       st.integers(1, 10))
def test_pack_events_respects_mtu_and_keeps_order(evs: list[bytes], mtu: int, max_events: int) -> None:
    batches = list(wire.pack_events(evs, mtu=mtu, max_events=max_events))
    assert [e for b in batches for e in b] == evs
    for b in batches:
        assert b and len(b) <= max_events
        assert wire.HEADER_SIZE + sum(map(len, b)) <= mtu
    # greedy: a batch was closed only because the next event would not fit
    for b, nxt in itertools.pairwise(batches):
        assert len(b) == max_events or wire.HEADER_SIZE + sum(map(len, b)) + len(nxt[0]) > mtu


def test_pack_events_with_real_events_decodes_in_order() -> None:
    evs = [one_event(ts=i) for i in range(100)]
    batches = list(wire.pack_events(evs, mtu=wire.HEADER_SIZE + 5 * 24))
    assert [len(b) for b in batches] == [5] * 20
    decoded = [e.timestamp_ms for b in batches for e in wire.decode_datagram(dgram(*b)).events]
    assert decoded == list(range(100))


def test_pack_events_rejects_bad_mtu_and_too_big_event() -> None:
    with pytest.raises(ValidationError) as exc:
        list(wire.pack_events([one_event()], mtu=39))
    assert exc.value.field == "mtu"
    with pytest.raises(ValidationError) as exc:
        list(wire.pack_events([b"x" * 100], mtu=100))
    assert exc.value.field == "mtu"
    assert list(wire.pack_events([], mtu=40)) == []


# -- decode: every malformation has its reason -------------------------------------

def test_truncated_header() -> None:
    data = dgram()
    for n in range(wire.HEADER_SIZE):
        assert reason_of(data[:n]) is DropReason.TRUNCATED


def test_truncated_event_head_and_body() -> None:
    ev = wire.encode_event(Event(1, 2, wire.encode_value(INT, 3), options=(DerivedValue(1, 2, 3.0),)))
    data = dgram(one_event(), ev)
    for cut in range(wire.HEADER_SIZE + 24 + 1, len(data)):
        assert reason_of(data[:cut]) is DropReason.TRUNCATED, cut
    # count says more events than there are
    assert reason_of(with_header(data, count=3)) is DropReason.TRUNCATED


def test_value_len_over_max_is_malformed() -> None:
    big = wire.EVENT_HEAD.pack(1, 2, 0, 0, wire.MAX_VALUE_LEN + 1) + b"\0" * (wire.MAX_VALUE_LEN + 1)
    data = wire.encode_header(wire.KIND_EVENTS, 1, 1, 1) + big
    assert reason_of(data) is DropReason.MALFORMED
    # even when the datagram also ends early, the router and the decoder agree: malformed
    assert reason_of(data[:40]) is DropReason.MALFORMED
    ok = wire.EVENT_HEAD.pack(1, 2, 0, 0, wire.MAX_VALUE_LEN) + b"\0" * wire.MAX_VALUE_LEN
    assert len(wire.decode_datagram(wire.encode_header(wire.KIND_EVENTS, 1, 1, 1) + ok).events) == 1


def test_trailing_bytes_are_malformed() -> None:
    assert reason_of(dgram() + b"\0") is DropReason.MALFORMED
    # trailing bytes before a tag are malformed too
    data = dgram(tag=b"T" * 8)
    assert reason_of(with_header(data[:-8] + b"x" + data[-8:], tag_len=8)) is DropReason.MALFORMED


def test_bad_magic_version_kind() -> None:
    data = dgram()
    assert reason_of(with_header(data, magic=0x4754)) is DropReason.BAD_MAGIC
    assert reason_of(with_header(data, version=0)) is DropReason.BAD_VERSION
    assert reason_of(with_header(data, version=2)) is DropReason.BAD_VERSION
    for kind in (0, 6, 255):  # 5 is the shed notice
        assert reason_of(with_header(data, kind=kind)) is DropReason.BAD_KIND
    # an unknown kind is bad_kind whatever its tag_len says (same order as the router)
    assert reason_of(with_header(data, kind=9, tag_len=200)) is DropReason.BAD_KIND


def test_oversized_datagram() -> None:
    assert reason_of(dgram() + b"\0" * wire.MAX_DATAGRAM) is DropReason.OVERSIZED


def test_tag_len_too_large_or_overlapping_the_header() -> None:
    data = dgram(tag=b"T" * wire.MAX_TAG_LEN)
    assert len(wire.decode_datagram(data).tag) == wire.MAX_TAG_LEN
    assert reason_of(with_header(data, tag_len=wire.MAX_TAG_LEN + 1)) is DropReason.MALFORMED
    assert reason_of(with_header(data, tag_len=255)) is DropReason.MALFORMED
    short = wire.encode_header(wire.KIND_EVENTS, 1, 1, 1, tag_len=20) + b"\0" * 2
    assert reason_of(short) is DropReason.TRUNCATED


def test_events_datagram_with_zero_count() -> None:
    assert reason_of(wire.encode_header(wire.KIND_EVENTS, 1, 1, 0)) is DropReason.MALFORMED
    assert reason_of(with_header(dgram(), count=0)) is DropReason.MALFORMED


@pytest.mark.parametrize("kind", [wire.KIND_PING, wire.KIND_PONG])
def test_malformed_ping(kind: int) -> None:
    ping = wire.encode_ping(kind, 1, 0, 123)
    assert reason_of(ping[:-1]) is DropReason.MALFORMED
    assert reason_of(ping + b"\0") is DropReason.MALFORMED
    assert reason_of(ping[:16]) is DropReason.MALFORMED
    assert reason_of(with_header(ping, count=1)) is DropReason.MALFORMED
    # a tag on a ping is malformed (the router drops it, so the decoder does too)
    assert reason_of(with_header(ping + b"TAG!", tag_len=4)) is DropReason.MALFORMED


@given(st.binary(max_size=300))
def test_decode_raises_only_decode_error(data: bytes) -> None:
    try:
        wire.decode_datagram(data)
    except DecodeError as exc:
        assert isinstance(exc.reason, DropReason)


@given(st.lists(events(max_options=2), min_size=1, max_size=4), st.data())
def test_decode_of_mutated_datagrams_raises_only_decode_error(evs: list[Event], data: st.DataObject) -> None:
    raw = bytearray(wire.encode_datagram(1, 1, [wire.encode_event(e) for e in evs]))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(u8)
    try:
        wire.decode_datagram(bytes(raw))
    except DecodeError:
        pass


def test_decode_error_carries_reason_and_detail() -> None:
    with pytest.raises(DecodeError) as exc:
        wire.decode_datagram(b"")
    assert exc.value.reason is DropReason.TRUNCATED and str(exc.value).startswith("truncated: ")


# -- encode_value / decode_value type checks ----------------------------------------

@pytest.mark.parametrize("spec,value", [
    (INT, 1.5), (INT, True), (INT, "1"), (INT, None),
    (FLOAT, "1.0"), (FLOAT, False), (FLOAT, None), (FLOAT, [1.0]),
    (BOOL, 1), (BOOL, 0.0), (BOOL, "true"),
    (PMU_SPEC, 1.0), (PMU_SPEC, [1.0, 2.0, 3, True]),
])
def test_encode_value_rejects_wrong_python_types(spec: TypeSpec, value: object) -> None:
    with pytest.raises(TypeMismatch):
        wire.encode_value(spec, value)


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**64, -(2**100)])
def test_encode_int_out_of_range(value: int) -> None:
    with pytest.raises(TypeMismatch, match="64 bits"):
        wire.encode_value(INT, value)
    assert wire.decode_value(INT, wire.encode_value(INT, 2**63 - 1)) == 2**63 - 1
    assert wire.decode_value(INT, wire.encode_value(INT, -(2**63))) == -(2**63)


def test_encode_float_accepts_ints_and_rejects_huge_ones() -> None:
    assert wire.decode_value(FLOAT, wire.encode_value(FLOAT, 3)) == 3.0
    with pytest.raises(TypeMismatch):
        wire.encode_value(FLOAT, 10**400)
    assert math.isnan(struct.unpack(">d", wire.encode_value(FLOAT, math.nan))[0])


@pytest.mark.parametrize("value", [
    {"freq": 50.0, "angle": 1.0, "status": 1},                        # missing field
    {"freq": 50.0, "angle": 1.0, "status": 70000, "ok": True},        # uint16 overflow
    {"freq": 50.0, "angle": 1.0, "status": -1, "ok": True},           # unsigned negative
    {"freq": "50", "angle": 1.0, "status": 1, "ok": True},            # str in a float field
    {"freq": 50.0, "angle": 1e300, "status": 1, "ok": True},          # float32 overflow
    {"freq": 50.0, "angle": 1.0, "status": 1.5, "ok": True},          # float in an int field
])
def test_encode_struct_type_mismatches(value: dict[str, object]) -> None:
    with pytest.raises(TypeMismatch):
        wire.encode_value(PMU_SPEC, value)


@pytest.mark.parametrize("spec", [INT, FLOAT, BOOL, PMU_SPEC])
@pytest.mark.parametrize("n", [0, 1, 7, 9, 16])
def test_decode_value_wrong_length(spec: TypeSpec, n: int) -> None:
    if spec is PMU_SPEC and n == PMU.size:
        return
    with pytest.raises(TypeMismatch):
        wire.decode_value(spec, b"\x01" * n)


def test_decode_bool_nonzero_is_true() -> None:
    assert wire.decode_value(BOOL, b"\x02" + b"\0" * 7) is True
    assert wire.decode_value(BOOL, b"\0" * 8) is False


# -- encoder validation ---------------------------------------------------------------

def test_encode_event_limits() -> None:
    with pytest.raises(ValidationError) as exc:
        wire.encode_event(Event(1, 1, b"\0" * (wire.MAX_VALUE_LEN + 1)))
    assert exc.value.field == "value"
    with pytest.raises(ValidationError) as exc:
        wire.encode_event(Event(1, 1, b"\0" * 8, options=(DerivedValue(1, 1, 0.0),) * 256))
    assert exc.value.field == "options"
    for bad in (Event(-1, 1, b""), Event(2**64, 1, b""), Event(1, 2**32, b""), Event(1, -1, b"")):
        with pytest.raises(ValidationError) as exc:
            wire.encode_event(bad)
        assert exc.value.field == "event"
    with pytest.raises(ValidationError) as exc:
        wire.encode_event(Event(1, 1, b"", options=(DerivedValue(70000, 1, 0.0),)))
    assert exc.value.field == "options"


def test_encode_datagram_limits() -> None:
    with pytest.raises(ValidationError) as exc:
        wire.encode_datagram(1, 1, [])
    assert exc.value.field == "events"
    with pytest.raises(ValidationError) as exc:
        wire.encode_datagram(1, 1, [one_event()], tag=b"T" * (wire.MAX_TAG_LEN + 1))
    assert exc.value.field == "tag"
    with pytest.raises(ValidationError) as exc:
        wire.encode_datagram(1, 1, [one_event()] * 0x10000)
    assert exc.value.field == "events"
    big = wire.encode_event(Event(1, 1, b"\0" * wire.MAX_VALUE_LEN))
    with pytest.raises(ValidationError):
        wire.encode_datagram(1, 1, [big] * 64)
    with pytest.raises(ValidationError) as exc:
        wire.encode_datagram(2**32, 1, [one_event()])
    assert exc.value.field == "header"


def test_encode_ping_checks_kind() -> None:
    with pytest.raises(ValidationError) as exc:
        wire.encode_ping(wire.KIND_EVENTS, 1, 0, 0)
    assert exc.value.field == "kind"


def test_event_wire_size_and_alert() -> None:
    ev = Event(1, 2, b"\0" * 8, wire.FLAG_ALERT, (DerivedValue(1, 2, 3.0),))
    assert ev.wire_size == len(wire.encode_event(ev)) == 40 and ev.is_alert
    assert not Event(1, 2, b"").is_alert


def test_struct_module_layout_is_big_endian() -> None:
    data = dgram(one_event(ts=0x0102030405060708, var=0x0A0B0C0D))
    assert data[:4] == b"GS\x01\x01"
    assert data[16:28] == bytes.fromhex("0102030405060708") + bytes.fromhex("0A0B0C0D")
    assert struct.unpack(">d", data[32:40]) == (1.0,)
