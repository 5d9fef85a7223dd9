"""Status variables, their value types and the name <-> id registry (dissertation 2.1.3-2.1.5).

A status variable is named ``publisher/variable``; the management plane maps the
name to a numeric variable id that travels on the wire and keys every routing
table. Values are int (signed 64 bit), float (IEEE double), bool, or a
user-defined struct whose layout is declared once and type-checked when a
subscriber asks for it. Alert (aperiodic) variables carry a minimum interval to
keep them from flooding the network; priority 0 is the alert priority and
1 (high) .. 6 (low) order periodic traffic.
"""

from __future__ import annotations

import enum
import re
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from gridstat.errors import DuplicateName, TypeMismatch, UnknownVariable, ValidationError

#: Alert events bypass the FIFO send queues (dissertation 2.1.4: "Alert=0, 1-5 High-Low").
PRIORITY_ALERT = 0
PRIORITY_HIGH = 1
PRIORITY_LOW = 6
PRIORITIES = range(PRIORITY_ALERT, PRIORITY_LOW + 1)

#: Variable ids are 32-bit on the wire (the dissertation's code uses a 4-byte int).
MAX_VARIABLE_ID = 0xFFFF_FFFF

#: Sixteen modes plus the temporary slot edge routers use during a mode change (chapter 6).
MAX_MODES = 16
TEMPORARY_MODE_SLOT = 16
INITIAL_MODE = 0

#: Names of publishers, variables, routers, clouds and clients (a JSON Schema ``pattern`` too).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
_NAME_RE = re.compile(NAME_PATTERN[1:-1])


class ValueType(enum.IntEnum):
    """Wire type codes of a value; STRUCT values carry a user-defined layout."""

    INT = 1
    FLOAT = 2
    BOOL = 3
    STRUCT = 4


#: Struct field codes a user-defined type may use (network byte order).
_STRUCT_FIELD_CODES: Mapping[str, str] = {
    "int8": "b", "int16": "h", "int32": "i", "int64": "q",
    "uint8": "B", "uint16": "H", "uint32": "I", "uint64": "Q",
    "float32": "f", "float64": "d", "bool": "?",
}


@dataclass(frozen=True)
class StructType:
    """A user-defined value type: an ordered list of (field name, field type).

    Its name and layout are what a subscriber must match; the encoding is a
    packed big-endian struct, so the wire size is fixed per type.
    """

    name: str
    fields: tuple[tuple[str, str], ...]
    _codec: struct.Struct = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not _NAME_RE.fullmatch(self.name):
            raise ValidationError(f"struct type name {self.name!r} is not a valid name", field="name")
        if not self.fields:
            raise ValidationError(f"struct type {self.name!r} has no fields", field="fields")
        seen: set[str] = set()
        codes = []
        for fname, ftype in self.fields:
            if not isinstance(fname, str) or not _NAME_RE.fullmatch(fname):
                raise ValidationError(f"struct type {self.name!r} field name {fname!r} is not a valid name",
                                      field="fields")
            if fname in seen:
                raise ValidationError(f"struct type {self.name!r} repeats field {fname!r}", field="fields")
            seen.add(fname)
            code = _STRUCT_FIELD_CODES.get(ftype)
            if code is None:
                raise ValidationError(
                    f"struct type {self.name!r} field {fname!r} has unknown type {ftype!r}; "
                    f"expected one of {sorted(_STRUCT_FIELD_CODES)}",
                    field=f"fields.{fname}",
                )
            codes.append(code)
        object.__setattr__(self, "_codec", struct.Struct(">" + "".join(codes)))

    @property
    def size(self) -> int:
        return self._codec.size

    def pack(self, value: Mapping[str, object]) -> bytes:
        try:
            return self._codec.pack(*(value[name] for name, _ in self.fields))
        except KeyError as exc:
            raise TypeMismatch(f"value for struct {self.name!r} lacks field {exc.args[0]!r}") from exc
        except struct.error as exc:
            raise TypeMismatch(f"value does not fit struct {self.name!r}: {exc}") from exc

    def unpack(self, data: bytes | memoryview) -> dict[str, object]:
        values = self._codec.unpack(data)
        return {name: v for (name, _), v in zip(self.fields, values, strict=True)}


@dataclass(frozen=True)
class TypeSpec:
    """The declared type of a status variable: a built-in or a user-defined struct."""

    kind: ValueType
    struct_type: StructType | None = None

    def __post_init__(self) -> None:
        if (self.kind is ValueType.STRUCT) != (self.struct_type is not None):
            raise ValidationError("a STRUCT type needs struct_type, and only a STRUCT may have one", field="type")

    @property
    def name(self) -> str:
        if self.struct_type is not None:
            return self.struct_type.name
        return self.kind.name.lower()

    @classmethod
    def parse(cls, text: str, structs: Mapping[str, StructType] | None = None) -> TypeSpec:
        lowered = text.lower()
        for kind in (ValueType.INT, ValueType.FLOAT, ValueType.BOOL):
            if lowered == kind.name.lower():
                return cls(kind)
        if structs and text in structs:
            return cls(ValueType.STRUCT, structs[text])
        raise ValidationError(f"unknown value type {text!r}; expected int, float, bool or a declared struct",
                              field="type")


INT = TypeSpec(ValueType.INT)
FLOAT = TypeSpec(ValueType.FLOAT)
BOOL = TypeSpec(ValueType.BOOL)


def check_name(name: str, *, what: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ValidationError(
            f"{what} {name!r} must be 1-128 characters of letters, digits, '_', '.', ':' or '-'", field=what
        )
    return name


def split_variable_name(full_name: str) -> tuple[str, str]:
    """``"pmu1/freq"`` -> ``("pmu1", "freq")`` with a specific error for each malformed part."""
    if not isinstance(full_name, str) or full_name.count("/") != 1:
        raise ValidationError(
            f"status variable name {full_name!r} must have the form 'publisher/variable'", field="variable"
        )
    publisher, variable = full_name.split("/")
    return check_name(publisher, what="publisher"), check_name(variable, what="variable")


@dataclass(frozen=True)
class StatusVariable:
    """A registered publication (dissertation 2.1.3): what a publisher promises to send."""

    publisher: str
    name: str
    type: TypeSpec
    interval_ms: int
    priority: int = PRIORITY_HIGH
    alert: bool = False
    #: For alert variables: the smallest gap between two alerts, to keep them from flooding.
    min_interval_ms: int = 0
    variable_id: int = 0
    #: A device's frame rate (C37.118 DATA_RATE): its period is 1000/frames_per_s ms exactly, which
    #: the rate filter keeps (docs/frame-rates.md); ``interval_ms`` is then ``1000 // frames_per_s``.
    #: 0 = a period of ``interval_ms``.
    frames_per_s: int = 0
    #: What the variable is, as its publisher describes it (station, units, kind ...): strings.
    attributes: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        check_name(self.publisher, what="publisher")
        check_name(self.name, what="variable")
        check_attributes(self.attributes, f"{self.publisher}/{self.name}")
        if self.frames_per_s:
            if self.alert:
                raise ValidationError(f"alert variable {self.full_name!r} has no frame rate", field="frames_per_s")
            if isinstance(self.frames_per_s, bool) or not isinstance(self.frames_per_s, int) \
                    or not 1 <= self.frames_per_s <= MAX_FRAMES_PER_S:
                raise ValidationError(f"frame rate of {self.full_name!r} must be 1..{MAX_FRAMES_PER_S} frames/s, "
                                      f"got {self.frames_per_s!r}", field="frames_per_s")
            if self.interval_ms != 1000 // self.frames_per_s:
                raise ValidationError(
                    f"publication interval of {self.full_name!r} at {self.frames_per_s} frames/s must be "
                    f"{1000 // self.frames_per_s} ms (1000 // frames_per_s), got {self.interval_ms}",
                    field="interval_ms")
        if self.alert:
            if self.min_interval_ms <= 0:
                raise ValidationError(
                    f"alert variable {self.full_name!r} needs min_interval_ms > 0, got {self.min_interval_ms}",
                    field="min_interval_ms",
                )
        elif not 1 <= self.interval_ms <= 86_400_000:
            raise ValidationError(
                f"publication interval of {self.full_name!r} must be 1..86400000 ms, got {self.interval_ms}",
                field="interval_ms",
            )
        if self.priority not in PRIORITIES:
            raise ValidationError(
                f"priority of {self.full_name!r} must be 0 (alert) .. 6 (low), got {self.priority}",
                field="priority",
            )
        if not 0 <= self.variable_id <= MAX_VARIABLE_ID:
            raise ValidationError(f"variable id {self.variable_id} out of 32-bit range", field="variable_id")

    @property
    def full_name(self) -> str:
        return f"{self.publisher}/{self.name}"

    @property
    def effective_interval_ms(self) -> int:
        """The interval the rate filter works with: alerts use their minimum interval."""
        return self.min_interval_ms if self.alert else self.interval_ms


#: Attributes of one variable: at most this many, names and values at most ATTRIBUTE_LEN characters.
MAX_ATTRIBUTES = 32
ATTRIBUTE_LEN = 256
#: The highest device frame rate: millisecond timestamps still name one frame each, within less than
#: half a frame, so the rate filter stays exact (gridstat.core.filtering, docs/frame-rates.md).
MAX_FRAMES_PER_S = 400


def check_attributes(attributes: Mapping[str, str], owner: str) -> Mapping[str, str]:
    """A variable's attributes: string names (GridStat's name rule) to printable strings."""
    if not isinstance(attributes, Mapping):
        raise ValidationError(f"attributes of {owner!r} must be a mapping of strings", field="attributes")
    if len(attributes) > MAX_ATTRIBUTES:
        raise ValidationError(f"{owner!r} has {len(attributes)} attributes, at most {MAX_ATTRIBUTES}",
                              field="attributes")
    for key, value in attributes.items():
        if not isinstance(key, str) or not _NAME_RE.fullmatch(key):
            raise ValidationError(f"attribute name {key!r} of {owner!r} must match {NAME_PATTERN}",
                                  field="attributes")
        if not isinstance(value, str) or len(value) > ATTRIBUTE_LEN or not value.isprintable():
            raise ValidationError(f"attribute {key!r} of {owner!r} must be printable text of at most "
                                  f"{ATTRIBUTE_LEN} characters, got {value!r:.80}", field=f"attributes.{key}")
    return attributes


class VariableRegistry:
    """Assigns variable ids to ``publisher/variable`` names and answers type checks.

    The leaf QoS broker owns one per cloud; the embedded runner and the tests use
    one directly. Ids are never reused within a registry, so a stale id in flight
    cannot be mistaken for a newer variable.
    """

    def __init__(self, *, first_id: int = 1) -> None:
        self._by_name: dict[str, StatusVariable] = {}
        self._by_id: dict[int, StatusVariable] = {}
        self._next_id = first_id

    def register(
        self,
        publisher: str,
        name: str,
        type: TypeSpec,
        *,
        interval_ms: int,
        priority: int = PRIORITY_HIGH,
        alert: bool = False,
        min_interval_ms: int = 0,
        frames_per_s: int = 0,
        attributes: Mapping[str, str] | None = None,
    ) -> StatusVariable:
        full = f"{publisher}/{name}"
        if full in self._by_name:
            raise DuplicateName(f"status variable {full!r} is already registered", field="variable")
        if self._next_id > MAX_VARIABLE_ID:
            raise ValidationError("variable id space exhausted", field="variable_id")
        var = StatusVariable(
            publisher, name, type, interval_ms, priority, alert, min_interval_ms, variable_id=self._next_id,
            frames_per_s=frames_per_s, attributes=dict(attributes or {}),
        )
        self._next_id += 1
        self._by_name[full] = var
        self._by_id[var.variable_id] = var
        return var

    def restore(self, var: StatusVariable) -> StatusVariable:
        """Re-insert a variable with its id, e.g. from a broker's durable state; ids stay unique."""
        if var.full_name in self._by_name or var.variable_id in self._by_id:
            raise DuplicateName(f"status variable {var.full_name!r} or id {var.variable_id} already present",
                                field="variable")
        self._by_name[var.full_name] = var
        self._by_id[var.variable_id] = var
        self._next_id = max(self._next_id, var.variable_id + 1)
        return var

    def unregister(self, full_name: str) -> StatusVariable:
        var = self.lookup(full_name)
        del self._by_name[full_name]
        del self._by_id[var.variable_id]
        return var

    def lookup(self, full_name: str) -> StatusVariable:
        split_variable_name(full_name)
        try:
            return self._by_name[full_name]
        except KeyError:
            raise UnknownVariable(f"no status variable named {full_name!r} is registered",
                                  field="variable") from None

    def by_id(self, variable_id: int) -> StatusVariable:
        try:
            return self._by_id[variable_id]
        except KeyError:
            raise UnknownVariable(f"no status variable has id {variable_id}", field="variable_id") from None

    def check_subscription_type(self, full_name: str, expected: TypeSpec) -> StatusVariable:
        """Type-check a subscription against the registration (rejects with TypeMismatch)."""
        var = self.lookup(full_name)
        if var.type != expected:
            raise TypeMismatch(
                f"subscription to {full_name!r} expects type {expected.name!r} but it is published as "
                f"{var.type.name!r}",
                field="type",
            )
        return var

    def __iter__(self) -> Iterator[StatusVariable]:
        return iter(list(self._by_id.values()))

    def __len__(self) -> int:
        return len(self._by_id)


def variables_by_id(variables: Sequence[StatusVariable]) -> dict[int, StatusVariable]:
    return {v.variable_id: v for v in variables}

