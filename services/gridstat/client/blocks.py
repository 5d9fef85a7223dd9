"""Variables that are always published together: one encoding, one datagram (docs/interop.md).

A device's block of one frame -- a PMU's phasors, FREQ and DFREQ at one instant, with its device-time
option -- is a fixed set of variables of one publisher, stamped alike. ``EventBlock`` precompiles
the events of such a set into one ``struct`` layout per number of options, so publishing a block is
one ``pack`` call and one datagram instead of an encoding per event (`gridstat bench pmu`: the
gateway's hot path). The bytes are exactly those ``PublicationHandle.encode`` writes for each event
(docs/wire-format.md 3.1), so subscribers and routers cannot tell the difference.

Skipped instants are noted for the block as a whole (``SkipNotes``: one variable's, since all share
the timestamps). A block that would not fit one datagram is published event by event
(``Publisher.publish_many``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from gridstat.core import wire
from gridstat.core.model import ValueType
from gridstat.errors import TypeMismatch, ValidationError

from .publisher import PublicationHandle, Publisher, SkipNotes

_VALUE_CODES = {ValueType.INT: "q", ValueType.FLOAT: "d", ValueType.BOOL: "?7x"}
_OPTION = "HHId"


class EventBlock:
    """A fixed, ordered set of one publisher's periodic variables, published at one timestamp."""

    __slots__ = ("_fields", "_layouts", "_notes", "_split", "handles", "publisher")

    def __init__(self, handles: Sequence[PublicationHandle], *, options: int = 1) -> None:
        if not handles:
            raise ValidationError("an event block needs at least one variable", field="handles")
        publisher = handles[0].publisher
        for h in handles:
            if h.publisher is not publisher:
                raise ValidationError(f"{h.variable.full_name!r} belongs to another publisher", field="handles")
            if h.variable.alert:
                raise ValidationError(f"{h.variable.full_name!r} is an alert: alerts are sent one by one",
                                      field="handles")
        self.handles = tuple(handles)
        self.publisher: Publisher = publisher
        #: Per variable: (variable id, value length, struct field names or None, value code).
        self._fields: list[tuple[int, int, tuple[str, ...] | None, str]] = []
        for h in self.handles:
            t = h.variable.type
            if t.kind is ValueType.STRUCT:
                assert t.struct_type is not None
                st = t.struct_type
                self._fields.append((h.variable.variable_id, st.size, tuple(n for n, _ in st.fields),
                                     st._codec.format.lstrip(">")))
            else:
                self._fields.append((h.variable.variable_id, 8, None, _VALUE_CODES[t.kind]))
        self._layouts: dict[int, struct.Struct] = {}
        self._notes = SkipNotes(self.handles[0].variable)
        # Room for the caller's options and a SKIPPED note in one datagram, or event by event.
        self._split = self._layout(options + 1).size > publisher.payload_mtu

    def _layout(self, options: int) -> struct.Struct:
        layout = self._layouts.get(options)
        if layout is None:
            layout = self._layouts[options] = struct.Struct(
                ">" + "".join(f"QIBBH{code}{_OPTION * options}" for *_, code in self._fields))
        return layout

    def publish(self, values: Sequence[object], ts_ms: int, options: Sequence[wire.DerivedValue] = ()) -> int:
        """Every variable's value (struct values as mappings of their fields), stamped ``ts_ms``, with
        ``options`` on every event; the events published. Raises TypeMismatch (nothing is sent) when a
        value does not fit its variable, ValidationError when the publisher is not started."""
        if len(values) != len(self._fields):
            raise ValidationError(f"{len(values)} values for a block of {len(self._fields)} variables",
                                  field="values")
        if self._split:
            return self.publisher.publish_many(list(zip(self.handles, values, strict=True)), ts_ms, options=options)
        run, options = self._notes.note(ts_ms, options)
        if run:
            self.publisher.stats.skipped += run
        nopt = len(options)
        tail = [x for o in options for x in (o.kind, o.window, o.bits, o.value)]
        args: list[object] = []
        extend = args.extend
        try:
            for (vid, vlen, names, _code), value in zip(self._fields, values, strict=True):
                extend((ts_ms, vid, 0, nopt, vlen))
                if names is None:
                    args.append(value)
                else:
                    if not isinstance(value, Mapping):
                        raise TypeMismatch(f"expected a mapping for struct variable {vid}, got {type(value).__name__}")
                    extend([value[n] for n in names])
                extend(tail)
            body = self._layout(nopt).pack(*args)
        except KeyError as exc:
            raise TypeMismatch(f"a struct value lacks field {exc.args[0]!r}") from exc
        except (struct.error, OverflowError) as exc:
            raise TypeMismatch(f"a value does not fit its variable: {exc}") from exc
        self.publisher._emit(len(self._fields), body)
        return len(self._fields)

    @property
    def skipped(self) -> int:
        return self._notes.skipped


__all__ = ["EventBlock"]
