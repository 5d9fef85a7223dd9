"""The event wire format: versioned, big-endian UDP datagrams of packed status events.

Layout (docs/wire-format.md is the normative description; keep them in step):

Datagram header, 16 bytes::

    0  u16 magic        0x4753 ("GS")
    2  u8  version      WIRE_VERSION
    3  u8  kind         1 events, 2 ping, 3 pong, 4 mode notice
    4  u32 sender_id    publisher or router id of the sending end of the event channel
    8  u32 sequence     per sender, per channel; wraps at 2**32
    12 u16 count        events in this datagram (0 for ping/pong)
    14 u8  tag_len      length of the authentication tag at the end (0 = none)
    15 u8  reserved     0

Event, 16-byte head then the value then the options (GridStat's 24-byte base
event when the value is a scalar and there are no options)::

    0  u64 timestamp_ms GPS-aligned, ms since the Unix epoch
    8  u32 variable_id
    12 u8  flags        bit 0 alert, bit 1 flooded; others reserved (forwarded as is)
    13 u8  option_count options of 16 bytes each follow the value
    14 u16 value_len    bytes of value (8 for int, float and bool)
    16 ...  value, then option_count x (u16 kind, u16 window, u32 reserved, f64 value)

Ping and pong carry one u64 (the sender's monotonic ns) as their body, so a
link's round trip can be measured; they have count 0 and no tag (24 bytes exactly).

A mode notice (edge router -> subscriber, dissertation 6.3.2 phases 1 and 5) has
count 0, no tag and a 16-byte body (32 bytes exactly)::

    0  u8  phase        1 prepare (newModePreparation), 2 commit (newMode), 3 abort
    1  u8  mode         the new mode (prepare, commit) or the kept one (abort)
    2  u8  previous     the mode before the change
    3  u8  reserved     0
    4  u32 reserved     0
    8  u64 change_id    the broker's change counter; a receiver ignores one it has seen

The decoder never raises on peer input: every failure maps to a ``DropReason``
so the receive loop can count it and carry on (issue 2, "Bad input").
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from gridstat.core.model import StructType, TypeSpec, ValueType
from gridstat.errors import TypeMismatch, ValidationError

MAGIC = 0x4753
WIRE_VERSION = 1

KIND_EVENTS = 1
KIND_PING = 2
KIND_PONG = 3
KIND_MODE = 4

MODE_PREPARE = 1
MODE_COMMIT = 2
MODE_ABORT = 3

HEADER = struct.Struct(">HBBIIHBB")
HEADER_SIZE = HEADER.size  # 16
EVENT_HEAD = struct.Struct(">QIBBH")
EVENT_HEAD_SIZE = EVENT_HEAD.size  # 16
OPTION = struct.Struct(">HHId")
OPTION_SIZE = OPTION.size  # 16
PING_BODY = struct.Struct(">Q")
MODE_BODY = struct.Struct(">BBBxIQ")

SCALAR_SIZE = 8
FLAG_ALERT = 0x01
FLAG_FLOODED = 0x02

#: Largest value we accept in one event; keeps a forged value_len from claiming the whole datagram.
MAX_VALUE_LEN = 1024
MAX_TAG_LEN = 64
#: Largest UDP payload over IPv4 (65535 - 8 UDP - 20 IP).
MAX_DATAGRAM = 65507
#: Default packing limit: fits an Ethernet frame (1500 - 20 IP - 8 UDP).
DEFAULT_MTU = 1472

_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_BOOL = struct.Struct(">?7x")


class DropReason(enum.Enum):
    """Why a datagram or an event was not forwarded; every one of them is counted."""

    TRUNCATED = "truncated"
    OVERSIZED = "oversized"
    BAD_MAGIC = "bad_magic"
    BAD_VERSION = "bad_version"
    BAD_KIND = "bad_kind"
    MALFORMED = "malformed"
    AUTH_FAILED = "auth_failed"
    UNKNOWN_SENDER = "unknown_sender"
    UNKNOWN_VARIABLE = "unknown_variable"
    FUTURE_TIMESTAMP = "future_timestamp"
    #: A later copy of a flooded event: only the first copy per timestamp is flooded (5.3.2).
    FLOOD_DUPLICATE = "flood_duplicate"
    #: A flooded event stamped too far ahead of the router's clock (the forged-timestamp attack).
    FLOOD_CLOCK = "flood_clock"
    QUEUE_FULL = "queue_full"
    LINK_DOWN = "link_down"
    SEND_ERROR = "send_error"


class OptionKind(enum.IntEnum):
    """Derived values a publisher may attach to an event (dissertation 3.2.1)."""

    MOVING_AVERAGE = 1
    MINIMUM = 2
    MAXIMUM = 3
    RATE_OF_CHANGE = 4


@dataclass(frozen=True, slots=True)
class DerivedValue:
    kind: int
    window: int
    value: float


@dataclass(frozen=True, slots=True)
class Event:
    """One decoded status event. ``value`` is raw bytes until a TypeSpec decodes it."""

    timestamp_ms: int
    variable_id: int
    value: bytes
    flags: int = 0
    options: tuple[DerivedValue, ...] = ()

    @property
    def is_alert(self) -> bool:
        return bool(self.flags & FLAG_ALERT)

    @property
    def wire_size(self) -> int:
        return EVENT_HEAD_SIZE + len(self.value) + OPTION_SIZE * len(self.options)


@dataclass(frozen=True, slots=True)
class Datagram:
    kind: int
    sender_id: int
    sequence: int
    events: tuple[Event, ...] = ()
    ping_ns: int = 0
    tag: bytes = b""
    #: Mode notices only: (phase, mode, previous mode, change id).
    mode_notice: tuple[int, int, int, int] | None = None


class DecodeError(Exception):
    """Raised by ``decode_datagram``; carries the DropReason to count."""

    def __init__(self, reason: DropReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


# -- values -----------------------------------------------------------------

def encode_value(type_spec: TypeSpec, value: object) -> bytes:
    """Encode a value of the declared type; TypeMismatch names what was wrong."""
    kind = type_spec.kind
    if kind is ValueType.INT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeMismatch(f"expected an int value, got {type(value).__name__}")
        try:
            return _I64.pack(value)
        except struct.error as exc:
            raise TypeMismatch(f"int value {value} does not fit in 64 bits") from exc
    if kind is ValueType.FLOAT:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeMismatch(f"expected a float value, got {type(value).__name__}")
        try:
            return _F64.pack(float(value))
        except OverflowError as exc:  # an int beyond the double range
            raise TypeMismatch(f"int value {value} does not fit in a 64-bit float") from exc
    if kind is ValueType.BOOL:
        if not isinstance(value, bool):
            raise TypeMismatch(f"expected a bool value, got {type(value).__name__}")
        return _BOOL.pack(value)
    assert type_spec.struct_type is not None
    if not isinstance(value, dict):
        raise TypeMismatch(f"expected a dict for struct {type_spec.name!r}, got {type(value).__name__}")
    try:
        return type_spec.struct_type.pack(value)
    except OverflowError as exc:  # 1e300 in a float32 field: struct raises OverflowError here
        raise TypeMismatch(f"value does not fit struct {type_spec.name!r}: {exc}") from exc


def decode_value(type_spec: TypeSpec, data: bytes) -> object:
    kind = type_spec.kind
    try:
        if kind is ValueType.INT:
            return _I64.unpack(data)[0]
        if kind is ValueType.FLOAT:
            return _F64.unpack(data)[0]
        if kind is ValueType.BOOL:
            if len(data) != SCALAR_SIZE:
                raise TypeMismatch(f"{len(data)} value bytes do not decode as 'bool'")
            return data[0] != 0
        st: StructType | None = type_spec.struct_type
        assert st is not None
        return st.unpack(data)
    except (struct.error, IndexError) as exc:
        raise TypeMismatch(f"{len(data)} value bytes do not decode as {type_spec.name!r}") from exc


# -- encoding ---------------------------------------------------------------

def encode_event(event: Event) -> bytes:
    if len(event.value) > MAX_VALUE_LEN:
        raise ValidationError(f"value of {len(event.value)} bytes exceeds {MAX_VALUE_LEN}", field="value")
    if len(event.options) > 255:
        raise ValidationError("at most 255 options per event", field="options")
    try:
        parts = [
            EVENT_HEAD.pack(event.timestamp_ms, event.variable_id, event.flags & 0xFF, len(event.options),
                            len(event.value)),
            event.value,
        ]
    except struct.error as exc:
        raise ValidationError(f"timestamp_ms must be 0..2**64-1 and variable_id 0..2**32-1: {exc}",
                              field="event") from exc
    try:
        parts.extend(OPTION.pack(o.kind, o.window, 0, o.value) for o in event.options)
    except struct.error as exc:
        raise ValidationError(f"option kind and window must be 0..65535, value a float: {exc}",
                              field="options") from exc
    return b"".join(parts)


def encode_header(kind: int, sender_id: int, sequence: int, count: int, tag_len: int = 0) -> bytes:
    try:
        return HEADER.pack(MAGIC, WIRE_VERSION, kind, sender_id, sequence & 0xFFFF_FFFF, count, tag_len, 0)
    except struct.error as exc:
        raise ValidationError(f"datagram header field out of range: {exc}", field="header") from exc


def encode_datagram(sender_id: int, sequence: int, encoded_events: Sequence[bytes], tag: bytes = b"") -> bytes:
    if not encoded_events:
        raise ValidationError("an events datagram needs at least one event", field="events")
    if len(encoded_events) > 0xFFFF:
        raise ValidationError("at most 65535 events per datagram", field="events")
    if len(tag) > MAX_TAG_LEN:
        raise ValidationError(f"authentication tag longer than {MAX_TAG_LEN} bytes", field="tag")
    data = b"".join([encode_header(KIND_EVENTS, sender_id, sequence, len(encoded_events), len(tag)),
                     *encoded_events, tag])
    if len(data) > MAX_DATAGRAM:
        raise ValidationError(f"datagram of {len(data)} bytes exceeds {MAX_DATAGRAM}", field="events")
    return data


def encode_ping(kind: int, sender_id: int, sequence: int, ping_ns: int) -> bytes:
    if kind not in (KIND_PING, KIND_PONG):
        raise ValidationError(f"kind {kind} is not ping ({KIND_PING}) or pong ({KIND_PONG})", field="kind")
    return encode_header(kind, sender_id, sequence, 0) + PING_BODY.pack(ping_ns & 0xFFFF_FFFF_FFFF_FFFF)


def encode_mode_notice(sender_id: int, sequence: int, *, phase: int, mode: int, previous_mode: int,
                       change_id: int) -> bytes:
    if phase not in (MODE_PREPARE, MODE_COMMIT, MODE_ABORT):
        raise ValidationError(f"mode notice phase {phase} is not 1 (prepare), 2 (commit) or 3 (abort)",
                              field="phase")
    for name, m in (("mode", mode), ("previous_mode", previous_mode)):
        if not 0 <= m <= 0xFF:
            raise ValidationError(f"{name} {m} does not fit one byte", field=name)
    return encode_header(KIND_MODE, sender_id, sequence, 0) + MODE_BODY.pack(
        phase, mode, previous_mode, 0, change_id & 0xFFFF_FFFF_FFFF_FFFF)


def pack_events(
    encoded_events: Iterable[bytes], *, mtu: int = DEFAULT_MTU, max_events: int = 0xFFFF
) -> Iterator[list[bytes]]:
    """Group encoded events into runs that fit one datagram of at most ``mtu`` bytes."""
    if mtu < HEADER_SIZE + EVENT_HEAD_SIZE + SCALAR_SIZE:
        raise ValidationError(f"mtu {mtu} cannot hold even one scalar event", field="mtu")
    batch: list[bytes] = []
    size = HEADER_SIZE
    for ev in encoded_events:
        if len(ev) + HEADER_SIZE > mtu:
            raise ValidationError(f"event of {len(ev)} bytes does not fit mtu {mtu}", field="mtu")
        if batch and (size + len(ev) > mtu or len(batch) >= max_events):
            yield batch
            batch, size = [], HEADER_SIZE
        batch.append(ev)
        size += len(ev)
    if batch:
        yield batch


# -- decoding ---------------------------------------------------------------

def is_mode_notice(data: bytes | bytearray | memoryview, nbytes: int, count: int, tag_len: int) -> bool:
    """Whether a datagram of kind ``KIND_MODE`` is well formed (the one rule for every receiver)."""
    return (count == 0 and tag_len == 0 and nbytes == HEADER_SIZE + MODE_BODY.size
            and data[HEADER_SIZE] in (MODE_PREPARE, MODE_COMMIT, MODE_ABORT))


def check_header(data: bytes | bytearray | memoryview, nbytes: int) -> tuple[int, int, int, int, int]:
    """Validate a datagram header; returns (kind, sender_id, sequence, count, body_end)."""
    if nbytes < HEADER_SIZE:
        raise DecodeError(DropReason.TRUNCATED, f"{nbytes} bytes is shorter than the {HEADER_SIZE}-byte header")
    if nbytes > MAX_DATAGRAM:
        raise DecodeError(DropReason.OVERSIZED, f"{nbytes} bytes exceeds {MAX_DATAGRAM}")
    magic, version, kind, sender, seq, count, tag_len, _reserved = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise DecodeError(DropReason.BAD_MAGIC, f"magic 0x{magic:04x} is not 0x{MAGIC:04x}")
    if version != WIRE_VERSION:
        raise DecodeError(DropReason.BAD_VERSION, f"version {version} is not {WIRE_VERSION}")
    # Same checks in the same order as the router's Forwarder.process, so both receivers
    # drop a given datagram for the same reason.
    if kind == KIND_EVENTS:
        if tag_len > MAX_TAG_LEN:
            raise DecodeError(DropReason.MALFORMED, f"tag length {tag_len} exceeds {MAX_TAG_LEN}")
        if count == 0:
            raise DecodeError(DropReason.MALFORMED, "events datagram with no events")
        body_end = nbytes - tag_len
        if body_end < HEADER_SIZE:
            raise DecodeError(DropReason.TRUNCATED, f"tag of {tag_len} bytes overlaps the header")
    elif kind in (KIND_PING, KIND_PONG):
        if count != 0 or tag_len != 0 or nbytes != HEADER_SIZE + PING_BODY.size:
            raise DecodeError(DropReason.MALFORMED,
                              "ping/pong must carry exactly one u64, no events and no tag")
        body_end = nbytes
    elif kind == KIND_MODE:
        if not is_mode_notice(data, nbytes, count, tag_len):
            raise DecodeError(DropReason.MALFORMED, "mode notice must carry exactly a 16-byte body with a known "
                                                    "phase, no events and no tag")
        body_end = nbytes
    else:
        raise DecodeError(DropReason.BAD_KIND, f"unknown datagram kind {kind}")
    return kind, sender, seq, count, body_end


def decode_datagram(data: bytes | bytearray | memoryview, nbytes: int | None = None) -> Datagram:
    """Fully decode and validate a datagram. Raises only DecodeError."""
    if nbytes is None:
        nbytes = len(data)
    kind, sender, seq, count, body_end = check_header(data, nbytes)
    tag = bytes(data[body_end:nbytes])
    if kind == KIND_MODE:
        phase, mode, previous, _r, change_id = MODE_BODY.unpack_from(data, HEADER_SIZE)
        return Datagram(kind, sender, seq, mode_notice=(phase, mode, previous, change_id))
    if kind != KIND_EVENTS:
        return Datagram(kind, sender, seq, ping_ns=PING_BODY.unpack_from(data, HEADER_SIZE)[0], tag=tag)
    events = []
    off = HEADER_SIZE
    for _ in range(count):
        if off + EVENT_HEAD_SIZE > body_end:
            raise DecodeError(DropReason.TRUNCATED, f"event head at offset {off} runs past the body")
        ts, var_id, flags, nopt, vlen = EVENT_HEAD.unpack_from(data, off)
        if vlen > MAX_VALUE_LEN:
            raise DecodeError(DropReason.MALFORMED, f"value length {vlen} at offset {off} exceeds {MAX_VALUE_LEN}")
        vstart = off + EVENT_HEAD_SIZE
        end = vstart + vlen + nopt * OPTION_SIZE
        if end > body_end:
            raise DecodeError(DropReason.TRUNCATED, f"event at offset {off} claims {end - off} bytes")
        value = bytes(data[vstart:vstart + vlen])
        options = tuple(
            DerivedValue(k, w, v)
            for k, w, _r, v in (OPTION.unpack_from(data, vstart + vlen + i * OPTION_SIZE) for i in range(nopt))
        )
        events.append(Event(ts, var_id, value, flags, options))
        off = end
    if off != body_end:
        raise DecodeError(DropReason.MALFORMED, f"{body_end - off} trailing bytes after {count} events")
    return Datagram(kind, sender, seq, tuple(events), tag=tag)
