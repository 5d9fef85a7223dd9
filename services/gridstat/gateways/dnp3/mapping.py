"""Points to status variables: the default names and the map file (``--map``; docs/dnp3.md, "The map
file").

By default every analog input ``i`` is the periodic float variable ``dnp<outstation address>/ai<i>`` at the
default interval, and every binary input ``i`` the bool alert ``dnp<address>/bi<i>`` (each change an alert).
A map file (YAML or JSON) renames points, changes their kind (``periodic`` or ``alert``), interval,
minimum alert interval and attributes, and may leave unlisted points out (``others: skip``). An error
names the file, the line, the entry and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gridstat.core import yamldoc
from gridstat.core.model import BOOL, FLOAT, TypeSpec, check_attributes, check_name, split_variable_name
from gridstat.errors import ValidationError
from gridstat.gateways.dnp3.objects import PointKind

PERIODIC = "periodic"
ALERT = "alert"
#: Groups naming a kind in the map file: static and event objects of one point type.
GROUPS = {1: PointKind.BINARY_INPUT, 2: PointKind.BINARY_INPUT, 30: PointKind.ANALOG_INPUT,
          32: PointKind.ANALOG_INPUT}
MAX_INTERVAL_MS = 86_400_000
DEFAULT_INTERVAL_MS = 1000
#: An alert variable's minimum interval by default: a binary input changing faster loses the changes in
#: between (``alerts_too_early``).
DEFAULT_MIN_INTERVAL_MS = 100
_TOP_FIELDS = frozenset({"publisher", "interval_ms", "min_interval_ms", "others", "attributes", "points"})
_POINT_FIELDS = frozenset({"group", "index", "name", "kind", "interval_ms", "min_interval_ms", "attributes"})


@dataclass(frozen=True)
class PointSpec:
    """One status variable: what the gateway registers for a point."""

    point: PointKind
    index: int
    publisher: str
    variable: str
    #: ``periodic`` (the latest value every ``interval_ms``) or ``alert`` (each change).
    kind: str
    interval_ms: int
    min_interval_ms: int
    attributes: tuple[tuple[str, str], ...]

    @property
    def full_name(self) -> str:
        return f"{self.publisher}/{self.variable}"

    @property
    def type(self) -> TypeSpec:
        return FLOAT if self.point is PointKind.ANALOG_INPUT else BOOL

    @property
    def alert(self) -> bool:
        return self.kind == ALERT


@dataclass(frozen=True)
class _Entry:
    publisher: str | None
    variable: str | None
    kind: str | None
    interval_ms: int | None
    min_interval_ms: int | None
    attributes: tuple[tuple[str, str], ...]


@dataclass
class PointMap:
    """The map file's content (empty: every point by its default name)."""

    publisher: str | None = None
    #: The defaults of the points that do not say (None: DEFAULT_INTERVAL_MS, DEFAULT_MIN_INTERVAL_MS).
    interval_ms: int | None = None
    min_interval_ms: int | None = None
    #: Publish points the file does not list under their default names (False: ``others: skip``).
    others: bool = True
    attributes: tuple[tuple[str, str], ...] = ()
    entries: dict[tuple[PointKind, int], _Entry] = field(default_factory=dict)

    def spec(self, outstation: int, point: PointKind, index: int) -> PointSpec | None:
        """The variable of a point, or None when the file leaves it out."""
        entry = self.entries.get((point, index))
        if entry is None and not self.others:
            return None
        publisher = self.publisher or f"dnp{outstation}"
        variable = f"{point.value}{index}"
        default_kind = PERIODIC if point is PointKind.ANALOG_INPUT else ALERT
        attrs = {"protocol": "dnp3", "outstation": str(outstation), "point": f"{point.value}{index}",
                 "group": "30" if point is PointKind.ANALOG_INPUT else "1", "index": str(index),
                 "kind": "analog_input" if point is PointKind.ANALOG_INPUT else "binary_input",
                 **dict(self.attributes)}
        kind = default_kind
        interval = self.interval_ms or DEFAULT_INTERVAL_MS
        min_interval = self.min_interval_ms or DEFAULT_MIN_INTERVAL_MS
        if entry is not None:
            publisher = entry.publisher or publisher
            variable = entry.variable or variable
            kind = entry.kind or kind
            interval = entry.interval_ms or interval
            min_interval = entry.min_interval_ms or min_interval
            attrs.update(entry.attributes)
        return PointSpec(point, index, publisher, variable, kind, interval, min_interval,
                         tuple(sorted(attrs.items())))

    @classmethod
    def parse(cls, data: object, source: str = "<map>", lines: Mapping[str, int] | None = None) -> PointMap:
        """A map from a document; ValidationError names the line, the entry and the field."""
        lines = lines or {}

        def fail(path: yamldoc.FieldPath, message: str) -> ValidationError:
            name = yamldoc.field_name(path)
            return ValidationError(f"{source}:{yamldoc.line_of(lines, path) or '?'}: {name}: {message}", field=name)

        if not isinstance(data, Mapping):
            raise fail((), f"a map is a mapping with 'points', not {yamldoc.kind_of(data)}")
        for key in data:
            if key not in _TOP_FIELDS:
                raise fail((str(key),), f"unknown field (expected one of {', '.join(sorted(_TOP_FIELDS))})")
        out = cls()
        if "publisher" in data:
            out.publisher = _name(data["publisher"], ("publisher",), fail)
        if "interval_ms" in data:
            out.interval_ms = _interval(data["interval_ms"], ("interval_ms",), fail)
        if "min_interval_ms" in data:
            out.min_interval_ms = _interval(data["min_interval_ms"], ("min_interval_ms",), fail)
        if "others" in data:
            if data["others"] not in ("publish", "skip"):
                raise fail(("others",), f"must be 'publish' or 'skip', not {data['others']!r}")
            out.others = data["others"] == "publish"
        if "attributes" in data:
            out.attributes = _attributes(data["attributes"], ("attributes",), fail)
        points = data.get("points", [])
        if not isinstance(points, list):
            raise fail(("points",), f"a list of points, not {yamldoc.kind_of(points)}")
        names: dict[str, tuple[int, ...]] = {}
        for i, item in enumerate(points):
            path: yamldoc.FieldPath = ("points", i)
            if not isinstance(item, Mapping):
                raise fail(path, f"a point is a mapping with group and index, not {yamldoc.kind_of(item)}")
            for key in item:
                if key not in _POINT_FIELDS:
                    raise fail((*path, str(key)), f"unknown field (expected one of {', '.join(sorted(_POINT_FIELDS))})")
            for required in ("group", "index"):
                if required not in item:
                    raise fail(path, f"'{required}' is missing")
            group = item["group"]
            if isinstance(group, bool) or group not in GROUPS:
                raise fail((*path, "group"), f"must be 1 or 2 (binary input) or 30 or 32 (analog input), not {group!r}")
            index = item["index"]
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index <= 0xFFFF:
                raise fail((*path, "index"), f"must be an integer 0..65535, not {index!r}")
            point = GROUPS[group]
            if (point, index) in out.entries:
                raise fail(path, f"{point.value}{index} is listed twice")
            publisher = variable = None
            if "name" in item:
                raw = item["name"]
                if not isinstance(raw, str):
                    raise fail((*path, "name"), f"a string, not {yamldoc.kind_of(raw)}")
                try:
                    if "/" in raw:
                        publisher, variable = split_variable_name(raw)
                    else:
                        variable = check_name(raw, what="variable")
                except ValidationError as exc:
                    raise fail((*path, "name"), str(exc.args[0])) from None
            kind = item.get("kind")
            if kind is not None and kind not in (PERIODIC, ALERT):
                raise fail((*path, "kind"), f"must be 'periodic' or 'alert', not {kind!r}")
            interval = _interval(item["interval_ms"], (*path, "interval_ms"), fail) if "interval_ms" in item else None
            min_interval = (_interval(item["min_interval_ms"], (*path, "min_interval_ms"), fail)
                            if "min_interval_ms" in item else None)
            attrs = _attributes(item["attributes"], (*path, "attributes"), fail) if "attributes" in item else ()
            full = f"{publisher or out.publisher or '*'}/{variable or point.value + str(index)}"
            if full in names:
                raise fail(path, f"{full} is also the name of points[{names[full][0]}]")
            names[full] = (i,)
            out.entries[(point, index)] = _Entry(publisher, variable, kind, interval, min_interval, attrs)
        return out


def _name(value: object, path: yamldoc.FieldPath, fail: Any) -> str:
    if not isinstance(value, str):
        raise fail(path, f"a string, not {yamldoc.kind_of(value)}")
    try:
        return check_name(value, what="publisher")
    except ValidationError as exc:
        raise fail(path, str(exc.args[0])) from None


def _interval(value: object, path: yamldoc.FieldPath, fail: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INTERVAL_MS:
        raise fail(path, f"must be an integer 1..{MAX_INTERVAL_MS} (milliseconds), not {value!r}")
    return value


def _attributes(value: object, path: yamldoc.FieldPath, fail: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, Mapping):
        raise fail(path, f"a mapping of strings, not {yamldoc.kind_of(value)}")
    attrs = {str(k): v if isinstance(v, str) else str(v) for k, v in value.items()}
    try:
        check_attributes(attrs, yamldoc.field_name(path))
    except ValidationError as exc:
        raise fail(path, str(exc.args[0])) from None
    return tuple(sorted(attrs.items()))


def load_point_map(path: str | Path) -> PointMap:
    """Read a map file (YAML, or JSON, which YAML reads too)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"--map {str(p)!r}: cannot read it: {exc}", field="map") from None
    data, lines = yamldoc.load(text, str(p), ValidationError)
    return PointMap.parse(data, str(p), lines)
