"""Conversions between the model (``core.model``) and the gRPC messages (``gridstat.v1``).

One place for them, shared by the broker, the edge proxy's clients and the CLI,
so that a type travels the same way whichever role sends it.
"""

from __future__ import annotations

from typing import Any

from gridstat.core.model import PRIORITY_HIGH, StatusVariable, StructType, TypeSpec, ValueType
from gridstat.errors import ValidationError
from gridstat.v1 import broker_pb2 as bpb

_KINDS = {
    ValueType.INT: bpb.VALUE_KIND_INT,
    ValueType.FLOAT: bpb.VALUE_KIND_FLOAT,
    ValueType.BOOL: bpb.VALUE_KIND_BOOL,
    ValueType.STRUCT: bpb.VALUE_KIND_STRUCT,
}
_FROM = {v: k for k, v in _KINDS.items()}


def type_to_pb(t: TypeSpec) -> bpb.ValueType:
    msg = bpb.ValueType(kind=_KINDS[t.kind])
    if t.struct_type is not None:
        msg.struct_name = t.struct_type.name
        msg.fields.extend(bpb.StructField(name=n, type=ft) for n, ft in t.struct_type.fields)
    return msg


def type_from_pb(msg: bpb.ValueType, *, field: str = "type") -> TypeSpec | None:
    """The TypeSpec of a message; None when the kind is unspecified (the caller did not say)."""
    if msg.kind == bpb.VALUE_KIND_UNSPECIFIED:
        return None
    kind = _FROM.get(msg.kind)
    if kind is None:
        raise ValidationError(f"unknown value kind {msg.kind}", field=f"{field}.kind")
    if kind is ValueType.STRUCT:
        if not msg.struct_name:
            raise ValidationError("a struct type needs struct_name", field=f"{field}.struct_name")
        return TypeSpec(kind, StructType(msg.struct_name, tuple((f.name, f.type) for f in msg.fields)))
    return TypeSpec(kind)


def priority_of(message: Any) -> int:
    """A message's ``optional uint32 priority``: 0 (alert) when set to 0, PRIORITY_HIGH when unset."""
    return int(message.priority) if message.HasField("priority") else PRIORITY_HIGH


def publication_to_pb(v: StatusVariable, **extra: Any) -> bpb.Publication:
    """A status variable as a ``Publication`` (``extra``: edge_router, cloud ...)."""
    return bpb.Publication(publisher=v.publisher, variable=v.name, type=type_to_pb(v.type),
                           interval_ms=v.interval_ms, priority=v.priority, alert=v.alert,
                           min_interval_ms=v.min_interval_ms, variable_id=v.variable_id,
                           frames_per_s=v.frames_per_s, attributes=dict(v.attributes), **extra)


def publication_from_pb(p: bpb.Publication, t: TypeSpec) -> StatusVariable:
    """The status variable of a ``Publication`` whose type the caller has read (``type_from_pb``)."""
    return StatusVariable(p.publisher, p.variable, t, p.interval_ms, priority_of(p), p.alert, p.min_interval_ms,
                          variable_id=p.variable_id, frames_per_s=p.frames_per_s, attributes=dict(p.attributes))
