"""Which status variable each information object becomes (docs/iec104.md, "Variables" and "The map file").

An information object is named by its station's common address (CA) and its information object
address (IOA). By default it becomes ``ca<CA>/ioa<IOA>``; a map file (``load_point_map``) names
stations (``stations: {CA: publisher}``) and single points (``points: [{ca, ioa, name, ...}]``) and
sets their interval, minimum alert interval and attributes.

Measured values (normalized, scaled, short float) are periodic variables at ``interval_ms`` (the
outstation's cyclic rate: the protocol does not carry it); single and double points are alert
variables with ``min_interval_ms``, so each change is sent as it comes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar

from gridstat.core import yamldoc
from gridstat.core.model import BOOL, FLOAT, INT, TypeSpec, check_name, split_variable_name
from gridstat.errors import ValidationError
from gridstat.gateways.iec104.asdu import Kind, PointValue

#: Variable types by kind: a single point is a bool, a double point its DPI (0 .. 3) as an int.
TYPES: dict[Kind, TypeSpec] = {Kind.SINGLE: BOOL, Kind.DOUBLE: INT, Kind.NORMALIZED: FLOAT, Kind.SCALED: INT,
                               Kind.FLOAT: FLOAT}
DEFAULT_INTERVAL_MS = 1000
DEFAULT_MIN_INTERVAL_MS = 1
MAX_INTERVAL_MS = 86_400_000
_POINT_FIELDS = ("ca", "ioa", "name", "publisher", "variable", "kind", "interval_ms", "min_interval_ms", "attributes")
T = TypeVar("T")
_TOP_FIELDS = ("defaults", "stations", "points", "only_mapped")
_DEFAULT_FIELDS = ("interval_ms", "min_interval_ms", "attributes")


@dataclass(frozen=True)
class PointSpec:
    """One status variable: what the gateway registers for an information object."""

    common_address: int
    ioa: int
    publisher: str
    variable: str
    kind: Kind
    interval_ms: int
    min_interval_ms: int
    attributes: tuple[tuple[str, str], ...]

    @property
    def full_name(self) -> str:
        return f"{self.publisher}/{self.variable}"

    @property
    def alert(self) -> bool:
        return self.kind.is_point

    @property
    def type(self) -> TypeSpec:
        return TYPES[self.kind]

    @property
    def attributes_dict(self) -> dict[str, str]:
        return dict(self.attributes)


@dataclass(frozen=True)
class MapEntry:
    publisher: str | None = None
    variable: str | None = None
    kind: Kind | None = None
    interval_ms: int | None = None
    min_interval_ms: int | None = None
    attributes: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class PointMap:
    """The operator's names and settings; the defaults when empty."""

    points: Mapping[tuple[int, int], MapEntry] = field(default_factory=dict)
    stations: Mapping[int, str] = field(default_factory=dict)
    interval_ms: int = DEFAULT_INTERVAL_MS
    min_interval_ms: int = DEFAULT_MIN_INTERVAL_MS
    attributes: tuple[tuple[str, str], ...] = ()
    #: Publish only the points of the map; the others are counted (``unmapped``).
    only_mapped: bool = False

    def spec(self, common_address: int, ioa: int, kind: Kind) -> PointSpec | None:
        """The variable of an object of ``kind``; None when it is not mapped and ``only_mapped``."""
        entry = self.points.get((common_address, ioa))
        if entry is None:
            if self.only_mapped:
                return None
            entry = MapEntry()
        publisher = entry.publisher or self.stations.get(common_address) or f"ca{common_address}"
        attributes = {"protocol": "iec104", "common_address": str(common_address), "ioa": str(ioa),
                      "kind": kind.value, **dict(self.attributes), **dict(entry.attributes)}
        return PointSpec(common_address, ioa, publisher, entry.variable or f"ioa{ioa}", kind,
                         entry.interval_ms or self.interval_ms, entry.min_interval_ms or self.min_interval_ms,
                         tuple(sorted(attributes.items())))

    def spec_of(self, value: PointValue) -> PointSpec | None:
        return self.spec(value.common_address, value.ioa, value.kind)

    def declared(self) -> list[PointSpec]:
        """The variables of the map's points whose kind it states: registered before any value arrives."""
        out = []
        for (ca, ioa), entry in self.points.items():
            if entry.kind is not None:
                spec = self.spec(ca, ioa, entry.kind)
                if spec is not None:
                    out.append(spec)
        return out

    def expected_kind(self, common_address: int, ioa: int) -> Kind | None:
        entry = self.points.get((common_address, ioa))
        return entry.kind if entry is not None else None

    # -- reading --------------------------------------------------------------------------------

    @classmethod
    def parse(cls, data: object, source: str = "<map>", lines: Mapping[str, int] | None = None) -> PointMap:
        """A map from a document; ValidationError names the file, line, entry and field."""
        lines = lines or {}

        def fail(path: yamldoc.FieldPath, message: str) -> ValidationError:
            name = yamldoc.field_name(path)
            line = yamldoc.line_of(lines, path)
            return ValidationError(f"{source}:{line if line is not None else '?'}: {name}: {message}", field=name)

        if not isinstance(data, Mapping):
            raise fail((), f"a map file is a mapping of {', '.join(_TOP_FIELDS)}, not {yamldoc.kind_of(data)}")
        for key in data:
            if key not in _TOP_FIELDS:
                raise fail((str(key),), f"unknown field (one of {', '.join(_TOP_FIELDS)})")
        defaults = data.get("defaults") or {}
        if not isinstance(defaults, Mapping):
            raise fail(("defaults",), f"a mapping, not {yamldoc.kind_of(defaults)}")
        for key in defaults:
            if key not in _DEFAULT_FIELDS:
                raise fail(("defaults", str(key)), f"unknown field (one of {', '.join(_DEFAULT_FIELDS)})")
        interval = _interval(defaults, ("defaults",), "interval_ms", fail) or DEFAULT_INTERVAL_MS
        min_interval = _interval(defaults, ("defaults",), "min_interval_ms", fail) or DEFAULT_MIN_INTERVAL_MS
        attributes = _attributes(defaults.get("attributes"), ("defaults", "attributes"), fail)
        only = data.get("only_mapped", False)
        if not isinstance(only, bool):
            raise fail(("only_mapped",), f"true or false, not {yamldoc.kind_of(only)}")
        stations: dict[int, str] = {}
        raw_stations = data.get("stations") or {}
        if not isinstance(raw_stations, Mapping):
            raise fail(("stations",), f"a mapping of common address to publisher, not {yamldoc.kind_of(raw_stations)}")
        for ca, publisher in raw_stations.items():
            path: yamldoc.FieldPath = ("stations", str(ca))
            ca_int = _address(ca, path, "common address", 1, 0xFFFE, fail)
            if not isinstance(publisher, str):
                raise fail(path, f"a publisher name, not {yamldoc.kind_of(publisher)}")
            stations[ca_int] = _checked(partial(check_name, publisher, what="publisher"), path, fail)
        raw_points = data.get("points") or []
        if not isinstance(raw_points, list):
            raise fail(("points",), f"a list of points, not {yamldoc.kind_of(raw_points)}")
        points: dict[tuple[int, int], MapEntry] = {}
        names: dict[str, int] = {}
        for i, item in enumerate(raw_points):
            at: yamldoc.FieldPath = ("points", i)
            if not isinstance(item, Mapping):
                raise fail(at, f"a point is a mapping with ca and ioa, not {yamldoc.kind_of(item)}")
            for key in item:
                if key not in _POINT_FIELDS:
                    raise fail((*at, str(key)), f"unknown field (one of {', '.join(_POINT_FIELDS)})")
            for need in ("ca", "ioa"):
                if need not in item:
                    raise fail((*at, need), "missing")
            ca_int = _address(item["ca"], (*at, "ca"), "common address", 1, 0xFFFE, fail)
            ioa = _address(item["ioa"], (*at, "ioa"), "information object address", 0, 0xFF_FFFF, fail)
            if (ca_int, ioa) in points:
                raise fail(at, f"ca {ca_int} ioa {ioa} is mapped twice")
            publisher = variable = None
            if "name" in item:
                if "publisher" in item or "variable" in item:
                    raise fail((*at, "name"), "give name, or publisher and variable, not both")
                if not isinstance(item["name"], str):
                    raise fail((*at, "name"), f"\"publisher/variable\", not {yamldoc.kind_of(item['name'])}")
                publisher, variable = _checked(partial(split_variable_name, item["name"]), (*at, "name"), fail)
            for part in ("publisher", "variable"):
                if part in item:
                    if not isinstance(item[part], str):
                        raise fail((*at, part), f"a name, not {yamldoc.kind_of(item[part])}")
                    checked = _checked(partial(check_name, item[part], what=part), (*at, part), fail)
                    publisher, variable = (checked, variable) if part == "publisher" else (publisher, checked)
            kind = None
            if "kind" in item:
                try:
                    kind = Kind(item["kind"])
                except ValueError:
                    raise fail((*at, "kind"), f"one of {', '.join(k.value for k in Kind)}, not {item['kind']!r}") \
                        from None
            entry = MapEntry(publisher, variable, kind, _interval(item, at, "interval_ms", fail),
                             _interval(item, at, "min_interval_ms", fail),
                             _attributes(item.get("attributes"), (*at, "attributes"), fail))
            full = f"{publisher or stations.get(ca_int) or f'ca{ca_int}'}/{variable or f'ioa{ioa}'}"
            if full in names:
                raise fail(at, f"{full} is also points[{names[full]}]'s name")
            names[full] = i
            points[(ca_int, ioa)] = entry
        return cls(points, stations, interval, min_interval, attributes, only)


Fail = Callable[[yamldoc.FieldPath, str], ValidationError]


def _checked(check: Callable[[], T], path: yamldoc.FieldPath, fail: Fail) -> T:
    """``check()``, its ValidationError re-raised naming the file, line and field."""
    try:
        return check()
    except ValidationError as exc:
        raise fail(path, str(exc.args[0])) from None


def _address(value: object, path: yamldoc.FieldPath, what: str, low: int, high: int, fail: Fail) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise fail(path, f"the {what} is an integer {low} .. {high}, not {value!r}")
    return value


def _interval(item: Mapping[str, object], at: yamldoc.FieldPath, key: str, fail: Fail) -> int | None:
    if key not in item:
        return None
    value = item[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INTERVAL_MS:
        raise fail((*at, key), f"milliseconds, an integer 1 .. {MAX_INTERVAL_MS}, not {value!r}")
    return value


def _attributes(value: object, path: yamldoc.FieldPath, fail: Fail) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise fail(path, f"a mapping of names to strings, not {yamldoc.kind_of(value)}")
    out = []
    for k, v in value.items():
        if not isinstance(k, str) or isinstance(v, (Mapping, list)) or v is None:
            raise fail((*path, str(k)), f"attributes are names with a string or number, not {yamldoc.kind_of(v)}")
        out.append((k, str(v)))
    return tuple(out)


def load_point_map(path: str | Path) -> PointMap:
    """Read a map file (YAML, or JSON, which YAML reads too); ValidationError with file:line and field."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"--map {str(p)!r}: cannot read it: {exc}", field="map") from None
    data, lines = yamldoc.load(text, str(p), ValidationError)
    return PointMap.parse(data, str(p), lines)
