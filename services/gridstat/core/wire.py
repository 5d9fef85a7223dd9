"""The event wire format: versioned, big-endian UDP datagrams of packed status events.

Layout (docs/wire-format.md is the normative description; keep them in step):

Datagram header, 16 bytes::

    0  u16 magic        0x4753 ("GS")
    2  u8  version      WIRE_VERSION
    3  u8  kind         1 events, 2 ping, 3 pong, 4 mode notice, 5 shed notice
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
link's round trip can be measured; they have count 0 (24 bytes exactly, 40 with a tag).

Control datagrams (ping, pong, mode and shed notices) sent on a keyed channel carry the same
16-byte HMAC tag as events (tag_len 16, the tag after the body) and a sequence number from the
same per-channel counter, and go through the receiver's replay window (docs/security.md); on an
unkeyed channel they carry no tag (tag_len 0). Any other tag length is malformed.

A mode notice (edge router -> subscriber, dissertation 6.3.2 phases 1 and 5) has
count 0 and a 16-byte body (32 bytes exactly, plus the tag on a keyed channel)::

    0  u8  phase        1 prepare (newModePreparation), 2 commit (newMode), 3 abort
    1  u8  mode         the new mode (prepare, commit) or the kept one (abort)
    2  u8  previous     the mode before the change
    3  u8  reserved     0
    4  u32 reserved     0
    8  u64 change_id    the broker's change counter; a receiver ignores one it has seen

A shed notice (router -> downstream router or subscriber, docs/overload.md) tells the receiver that
overload handling stopped or thinned some variables' streams; ``count`` is the number of entries,
and the body is 8 bytes then ``count`` entries of 8 bytes (24 + 8 * count bytes exactly, plus the tag
on a keyed channel)::

    0  u8  reason       1 cpu_overload (a route shed by the router), 2 link_overload (events shed
                        from a shaped channel's queue)
    1  u8  action       1 shed (no longer forwarded), 2 restored, 3 dropped (events dropped since
                        the previous notice)
    2  u8  hops         how many routers relayed it (a router relays it at most MAX_SHED_HOPS times)
    3  u8  reserved     0
    4  u32 reserved     0
    then per entry: u32 variable_id, u32 events (dropped events for action 3, else 0)

The decoder never raises on peer input: every failure maps to a ``DropReason``
so the receive loop can count it and carry on (docs/wire-format.md, "Drop reasons").
"""

from __future__ import annotations

import enum
import hmac
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
KIND_SHED = 5

MODE_PREPARE = 1
MODE_COMMIT = 2
MODE_ABORT = 3

SHED_CPU_OVERLOAD = 1
SHED_LINK_OVERLOAD = 2
SHED_ACTION_SHED = 1
SHED_ACTION_RESTORED = 2
SHED_ACTION_DROPPED = 3
SHED_REASONS = {SHED_CPU_OVERLOAD: "cpu_overload", SHED_LINK_OVERLOAD: "link_overload"}
SHED_ACTIONS = {SHED_ACTION_SHED: "shed", SHED_ACTION_RESTORED: "restored", SHED_ACTION_DROPPED: "dropped"}
#: Entries per shed notice (a longer list goes out as several notices) and relays per notice.
MAX_SHED_ENTRIES = 1024
MAX_SHED_HOPS = 15

HEADER = struct.Struct(">HBBIIHBB")
HEADER_SIZE = HEADER.size  # 16
EVENT_HEAD = struct.Struct(">QIBBH")
EVENT_HEAD_SIZE = EVENT_HEAD.size  # 16
OPTION = struct.Struct(">HHId")
OPTION_SIZE = OPTION.size  # 16
PING_BODY = struct.Struct(">Q")
MODE_BODY = struct.Struct(">BBBxIQ")
SHED_BODY = struct.Struct(">BBBxI")
SHED_ENTRY = struct.Struct(">II")

SCALAR_SIZE = 8
FLAG_ALERT = 0x01
FLAG_FLOODED = 0x02

#: Largest value we accept in one event; keeps a forged value_len from claiming the whole datagram.
MAX_VALUE_LEN = 1024
MAX_TAG_LEN = 64
#: Bytes of the HMAC-SHA256 tag of an authenticated events datagram (truncated, as RFC 2104 allows).
AUTH_TAG_LEN = 16
#: Smallest channel key accepted (bytes).
MIN_KEY_LEN = 16
#: Sequence numbers behind the newest one that an authenticated channel still accepts once.
REPLAY_WINDOW = 64
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
    #: An authenticated datagram whose sequence number was already seen or is older than the
    #: replay window (section 5 of docs/wire-format.md).
    REPLAYED = "replayed"
    UNKNOWN_SENDER = "unknown_sender"
    #: From a sender with no inbound channel while the router's channels are being set up (it started,
    #: or a channel was added or removed, in the last SETTLE_MS): a neighbour whose channel is on its way.
    SENDER_PENDING = "sender_pending"
    UNKNOWN_VARIABLE = "unknown_variable"
    FUTURE_TIMESTAMP = "future_timestamp"
    #: A later copy of a flooded event: only the first copy per timestamp is flooded (5.3.2).
    FLOOD_DUPLICATE = "flood_duplicate"
    #: A flooded event stamped too far ahead of the router's clock (the forged-timestamp attack).
    FLOOD_CLOCK = "flood_clock"
    QUEUE_FULL = "queue_full"
    #: Shed from a shaped channel's queue under link overload (modified RED, lowest value first; HAPS).
    LINK_OVERLOAD = "link_overload"
    #: Not forwarded on a route shed under router CPU overload (link shedding; HAPS).
    CPU_OVERLOAD = "cpu_overload"
    LINK_DOWN = "link_down"
    SEND_ERROR = "send_error"


class OptionKind(enum.IntEnum):
    """Derived values a publisher may attach to an event (dissertation 3.2.1)."""

    MOVING_AVERAGE = 1
    MINIMUM = 2
    MAXIMUM = 3
    RATE_OF_CHANGE = 4
    #: Not a derived value: the publisher's note of the instants it skipped before this event
    #: (docs/wire-format.md 3.4): ``window`` the run of instants skipped right before it, ``bits``
    #: the 32 instants before that run, ``value`` the publisher's skipped instants in all.
    SKIPPED = 5
    #: Not a derived value: a synchrophasor's own time and quality (docs/wire-format.md 3.5):
    #: ``window`` the C37.118 STAT word, ``bits`` the raw FRACSEC field (time quality byte and count),
    #: ``value`` the device's TIME_BASE.
    DEVICE_TIME = 6
    #: Not a derived value: an IEC 60870-5-104 point's quality, cause of transmission and time tag
    #: (docs/iec104.md, "Time and quality"; 104 is also the APDU's start byte 0x68).
    IEC104 = 104
    #: Not a derived value: a DNP3 point's flags and device time (docs/dnp3.md; 0x1815 after IEEE 1815).
    DNP3 = 0x1815


#: Instants before a skip run that a SKIPPED option describes (its u32 ``bits``).
SKIP_BITS = 32


@dataclass(frozen=True, slots=True)
class DerivedValue:
    kind: int
    window: int
    value: float
    #: The option's u32 (reserved for derived values; a bitmap for SKIPPED).
    bits: int = 0


def device_time(stat: int, fracsec: int, time_base: int) -> DerivedValue:
    """The DEVICE_TIME option of an event from a C37.118 device (docs/wire-format.md 3.5)."""
    if not 0 <= stat <= 0xFFFF:
        raise ValidationError(f"STAT must be a 16-bit word, got {stat}", field="stat")
    if not 0 <= fracsec <= 0xFFFF_FFFF:
        raise ValidationError(f"FRACSEC must be a 32-bit field, got {fracsec}", field="fracsec")
    if not 1 <= time_base <= 0xFF_FFFF:
        raise ValidationError(f"TIME_BASE must be 1..16777215, got {time_base}", field="time_base")
    return DerivedValue(OptionKind.DEVICE_TIME, stat, float(time_base), fracsec)


def read_device_time(options: Iterable[DerivedValue]) -> tuple[int, int, int] | None:
    """``(stat, fracsec, time_base)`` of an event's DEVICE_TIME option; None without a valid one."""
    for o in options:
        if o.kind == OptionKind.DEVICE_TIME:
            base = o.value
            if base != base or not 1 <= base <= 0xFF_FFFF or base != int(base):
                return None
            return o.window, o.bits, int(base)
    return None


def device_timestamp_ms(soc: int, count: int, time_base: int) -> int:
    """The event timestamp of a device's SOC and FRACSEC count: milliseconds, rounded down, so
    ``timestamp_ms // 1000`` is SOC again (docs/wire-format.md 3.5)."""
    return soc * 1000 + count * 1000 // time_base


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
    #: Shed notices only.
    shed_notice: ShedNotice | None = None


@dataclass(frozen=True, slots=True)
class ShedNotice:
    """Overload handling stopped or thinned these variables' streams (kind 5, docs/overload.md)."""

    reason: int
    action: int
    #: (variable id, events dropped since the previous notice; 0 for shed and restored).
    entries: tuple[tuple[int, int], ...]
    hops: int = 0

    @property
    def reason_name(self) -> str:
        return SHED_REASONS.get(self.reason, "unknown")

    @property
    def action_name(self) -> str:
        return SHED_ACTIONS.get(self.action, "unknown")


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
        parts.extend(OPTION.pack(o.kind, o.window, o.bits, o.value) for o in event.options)
    except struct.error as exc:
        raise ValidationError(f"option kind and window must be 0..65535, bits 0..2**32-1, value a float: {exc}",
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


# -- datagram authentication (docs/wire-format.md section 5, docs/security.md) --------------------

def check_key(key: bytes) -> bytes:
    """A channel key: at least MIN_KEY_LEN bytes (32 random bytes recommended)."""
    if not isinstance(key, bytes | bytearray) or len(key) < MIN_KEY_LEN:
        raise ValidationError(f"a channel key needs at least {MIN_KEY_LEN} bytes", field="key")
    return bytes(key)


def auth_tag(key: bytes, signed: bytes | bytearray | memoryview) -> bytes:
    """HMAC-SHA256 over the header (with its tag_len) and body, truncated to AUTH_TAG_LEN bytes."""
    return hmac.digest(key, signed, "sha256")[:AUTH_TAG_LEN]


def sign_datagram(key: bytes, datagram: bytes) -> bytes:
    """Append the tag to an untagged events datagram (its tag_len set to AUTH_TAG_LEN first)."""
    if len(datagram) < HEADER_SIZE or datagram[14] != 0:
        raise ValidationError("only an untagged datagram can be signed", field="tag")
    signed = b"".join([datagram[:14], bytes((AUTH_TAG_LEN,)), datagram[15:]])
    if len(signed) + AUTH_TAG_LEN > MAX_DATAGRAM:
        raise ValidationError(f"signed datagram would exceed {MAX_DATAGRAM} bytes", field="events")
    return signed + auth_tag(key, signed)


def verify_datagram(key: bytes, data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` carries a valid AUTH_TAG_LEN tag under ``key`` (constant-time compare)."""
    nbytes = len(data)
    if nbytes < HEADER_SIZE + AUTH_TAG_LEN or data[14] != AUTH_TAG_LEN:
        return False
    body_end = nbytes - AUTH_TAG_LEN
    return hmac.compare_digest(hmac.digest(key, data[:body_end], "sha256")[:AUTH_TAG_LEN], data[body_end:])


class ReplayWindow:
    """Sliding window over a sender's 32-bit sequence numbers (RFC 1982 order, IPsec-style bitmap).

    ``accept`` is called only for datagrams whose tag verified (a forged sequence number must not
    move the window). A number is accepted once: newer than the newest seen, or within
    REPLAY_WINDOW behind it and not seen yet. Reordering within the window is tolerated.
    """

    __slots__ = ("bits", "started", "top")

    def __init__(self) -> None:
        self.top = 0
        self.bits = 0
        self.started = False

    def reset(self) -> None:
        self.top = self.bits = 0
        self.started = False

    def accept(self, seq: int) -> bool:
        if not self.started:
            self.started = True
            self.top, self.bits = seq, 1
            return True
        ahead = (seq - self.top) & 0xFFFF_FFFF
        if ahead == 0:
            return False
        if ahead < 0x8000_0000:
            self.bits = ((self.bits << ahead) | 1) & ((1 << REPLAY_WINDOW) - 1) if ahead < REPLAY_WINDOW else 1
            self.top = seq
            return True
        back = (self.top - seq) & 0xFFFF_FFFF
        if back >= REPLAY_WINDOW or self.bits >> back & 1:
            return False
        self.bits |= 1 << back
        return True


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


def encode_shed_notices(sender_id: int, sequence: int, *, reason: int, action: int,
                        entries: Sequence[tuple[int, int]], hops: int = 0) -> list[bytes]:
    """Shed notices for ``entries`` (variable id, events), MAX_SHED_ENTRIES per datagram."""
    if reason not in SHED_REASONS:
        raise ValidationError(f"shed reason {reason} is not 1 (cpu_overload) or 2 (link_overload)", field="reason")
    if action not in SHED_ACTIONS:
        raise ValidationError(f"shed action {action} is not 1 (shed), 2 (restored) or 3 (dropped)", field="action")
    if not 0 <= hops <= MAX_SHED_HOPS:
        raise ValidationError(f"hops {hops} is outside 0..{MAX_SHED_HOPS}", field="hops")
    if not entries:
        raise ValidationError("a shed notice needs at least one variable", field="entries")
    out = []
    for i in range(0, len(entries), MAX_SHED_ENTRIES):
        chunk = entries[i:i + MAX_SHED_ENTRIES]
        try:
            body = b"".join(SHED_ENTRY.pack(v, min(n, 0xFFFF_FFFF)) for v, n in chunk)
        except struct.error as exc:
            raise ValidationError(f"variable ids and counts must be 0..2**32-1: {exc}", field="entries") from exc
        out.append(encode_header(KIND_SHED, sender_id, sequence, len(chunk)) + SHED_BODY.pack(reason, action, hops, 0)
                   + body)
    return out


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

#: Tag lengths a control datagram may carry: none (unkeyed channel) or the HMAC tag (keyed channel).
_CONTROL_TAGS = (0, AUTH_TAG_LEN)


def is_ping(nbytes: int, count: int, tag_len: int) -> bool:
    """Whether a datagram of kind ``KIND_PING``/``KIND_PONG`` is well formed."""
    return count == 0 and tag_len in _CONTROL_TAGS and nbytes - tag_len == HEADER_SIZE + PING_BODY.size


def is_mode_notice(data: bytes | bytearray | memoryview, nbytes: int, count: int, tag_len: int) -> bool:
    """Whether a datagram of kind ``KIND_MODE`` is well formed (the one rule for every receiver)."""
    return (count == 0 and tag_len in _CONTROL_TAGS and nbytes - tag_len == HEADER_SIZE + MODE_BODY.size
            and data[HEADER_SIZE] in (MODE_PREPARE, MODE_COMMIT, MODE_ABORT))


def is_shed_notice(data: bytes | bytearray | memoryview, nbytes: int, count: int, tag_len: int) -> bool:
    """Whether a datagram of kind ``KIND_SHED`` is well formed (the one rule for every receiver)."""
    return (0 < count <= MAX_SHED_ENTRIES and tag_len in _CONTROL_TAGS
            and nbytes - tag_len == HEADER_SIZE + SHED_BODY.size + SHED_ENTRY.size * count
            and data[HEADER_SIZE] in SHED_REASONS and data[HEADER_SIZE + 1] in SHED_ACTIONS
            and data[HEADER_SIZE + 2] <= MAX_SHED_HOPS)


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
        if not is_ping(nbytes, count, tag_len):
            raise DecodeError(DropReason.MALFORMED, "ping/pong must carry exactly one u64, no events and no tag "
                                                    f"or a {AUTH_TAG_LEN}-byte one")
        body_end = nbytes - tag_len
    elif kind == KIND_MODE:
        if not is_mode_notice(data, nbytes, count, tag_len):
            raise DecodeError(DropReason.MALFORMED, "mode notice must carry exactly a 16-byte body with a known "
                                                    f"phase, no events and no tag or a {AUTH_TAG_LEN}-byte one")
        body_end = nbytes - tag_len
    elif kind == KIND_SHED:
        if not is_shed_notice(data, nbytes, count, tag_len):
            raise DecodeError(DropReason.MALFORMED, "shed notice must carry an 8-byte body and count 8-byte entries "
                                                    f"(1..{MAX_SHED_ENTRIES}), a known reason and action, no tag "
                                                    f"or a {AUTH_TAG_LEN}-byte one")
        body_end = nbytes - tag_len
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
        return Datagram(kind, sender, seq, mode_notice=(phase, mode, previous, change_id), tag=tag)
    if kind == KIND_SHED:
        reason, action, hops, _r = SHED_BODY.unpack_from(data, HEADER_SIZE)
        off = HEADER_SIZE + SHED_BODY.size
        entries = tuple(SHED_ENTRY.unpack_from(data, off + i * SHED_ENTRY.size) for i in range(count))
        return Datagram(kind, sender, seq, shed_notice=ShedNotice(reason, action, entries, hops), tag=tag)
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
            DerivedValue(k, w, v, r)
            for k, w, r, v in (OPTION.unpack_from(data, vstart + vlen + i * OPTION_SIZE) for i in range(nopt))
        )
        events.append(Event(ts, var_id, value, flags, options))
        off = end
    if off != body_end:
        raise DecodeError(DropReason.MALFORMED, f"{body_end - off} trailing bytes after {count} events")
    return Datagram(kind, sender, seq, tuple(events), tag=tag)
