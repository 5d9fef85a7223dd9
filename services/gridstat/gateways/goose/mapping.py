"""The map file (``--map``, YAML or JSON): which GOOSE data-set members are which status variables,
and which variables a ``goose-publisher`` sends in which control block (docs/goose.md, "The map file").

Every error is a ``ValidationError`` naming the file and the entry, e.g.
``map.yaml: subscribe[0].members[2].kind: 'dbl' is not one of boolean, bitstring, ...``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gridstat.core.model import BOOL, FLOAT, INT, TypeSpec, split_variable_name
from gridstat.errors import ValidationError
from gridstat.gateways.goose.frames import DEFAULT_DST_MAC
from gridstat.gateways.goose.values import BitString, Unsigned, UtcTime, Value

#: Member kinds and the GridStat type each is published as.
KINDS: dict[str, TypeSpec] = {"boolean": BOOL, "bitstring": INT, "integer": INT, "unsigned": INT, "float": FLOAT,
                              "utc_time": INT}
_PATH = re.compile(r"^\d{1,4}(\.\d{1,4}){0,3}$")
_MAC = re.compile(r"^[0-9a-fA-F]{2}([:-][0-9a-fA-F]{2}){5}$")


@dataclass(frozen=True, slots=True)
class PointSpec:
    """One data-set member published as one status variable."""

    full_name: str
    kind: str
    #: Index of the member in allData, then of its element inside structures: (3,) or (3, 0).
    path: tuple[int, ...]
    #: Where its quality bit-string is (the ``q`` member), or None.
    quality_path: tuple[int, ...] | None = None
    min_interval_ms: int = 1
    attributes: tuple[tuple[str, str], ...] = ()

    @property
    def type(self) -> TypeSpec:
        return KINDS[self.kind]

    @property
    def publisher(self) -> str:
        return split_variable_name(self.full_name)[0]

    @property
    def variable(self) -> str:
        return split_variable_name(self.full_name)[1]


@dataclass(frozen=True)
class SubscribedBlock:
    """A GOOSE control block the gateway subscribes to: by gocbRef, APPID or both."""

    gocb_ref: str | None
    app_id: int | None
    points: tuple[PointSpec, ...]


@dataclass(frozen=True, slots=True)
class PublishedMember:
    full_name: str
    kind: str
    #: The bit-string's size in bits (``bitstring`` only).
    bits: int = 0

    @property
    def type(self) -> TypeSpec:
        return KINDS[self.kind]

    def mms_value(self, value: object) -> Value:
        """The GridStat value as this member's MMS value; raises ``ValueError``."""
        if self.kind == "boolean":
            return bool(value)
        if self.kind == "float":
            return float(value)  # type: ignore[arg-type]
        if not isinstance(value, int):
            raise ValueError(f"{self.full_name}: {value!r} is not an integer")
        if self.kind == "bitstring":
            return BitString(value & ((1 << self.bits) - 1), self.bits)
        if self.kind == "unsigned":
            return Unsigned(value)
        if self.kind == "utc_time":
            return UtcTime.from_ms(value)
        return value


@dataclass(frozen=True)
class PublishedBlock:
    """A control block ``goose-publisher`` sends: its identity and retransmission curve."""

    gocb_ref: str
    dat_set: str
    go_id: str
    app_id: int
    members: tuple[PublishedMember, ...]
    dst_mac: bytes = DEFAULT_DST_MAC
    conf_rev: int = 1
    vlan_id: int | None = None
    min_time_ms: int = 4
    max_time_ms: int = 1000
    time_allowed_to_live_ms: int = 2000


@dataclass(frozen=True)
class GooseMap:
    subscribe: tuple[SubscribedBlock, ...] = ()
    publish: tuple[PublishedBlock, ...] = ()
    points: Mapping[str, PointSpec] = field(default_factory=dict)


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> ValidationError:
        return ValidationError(f"{self.source}: {where}: {message}", field="map")

    def mapping(self, value: object, where: str, keys: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"must be a mapping, not {type(value).__name__}")
        unknown = sorted(set(value) - keys)
        if unknown:
            raise self.fail(where, f"unknown key {unknown[0]!r} (known: {', '.join(sorted(keys))})")
        return value

    def items(self, value: object, where: str) -> list[Any]:
        if not isinstance(value, list) or not value:
            raise self.fail(where, "must be a non-empty list")
        return value

    def text(self, value: object, where: str, max_len: int = 129) -> str:
        if not isinstance(value, str) or not value or len(value) > max_len or not value.isascii():
            raise self.fail(where, f"must be an ASCII string of 1..{max_len} characters")
        return value

    def integer(self, value: object, where: str, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise self.fail(where, f"must be an integer {lo}..{hi}, not {value!r}")
        return value

    def path(self, value: object, where: str) -> tuple[int, ...]:
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        if not isinstance(text, str) or not _PATH.match(text):
            raise self.fail(where, f"must be a member index such as 3 or \"3.0\", not {value!r}")
        return tuple(int(x) for x in text.split("."))

    def variable(self, value: object, where: str) -> str:
        name = self.text(value, where, 257)
        try:
            split_variable_name(name)
        except ValidationError as exc:
            raise self.fail(where, str(exc)) from None
        return name

    def kind(self, value: object, where: str) -> str:
        if value not in KINDS:
            raise self.fail(where, f"{value!r} is not one of {', '.join(KINDS)}")
        return str(value)

    def point(self, value: object, where: str) -> PointSpec:
        m = self.mapping(value, where, {"index", "variable", "kind", "quality", "min_interval_ms", "attributes"})
        for key in ("index", "variable", "kind"):
            if key not in m:
                raise self.fail(where, f"{key} is missing")
        attributes = m.get("attributes", {})
        if not isinstance(attributes, dict) or not all(isinstance(k, str) and isinstance(v, str | int | float)
                                                       for k, v in attributes.items()):
            raise self.fail(f"{where}.attributes", "must map names to strings")
        quality = self.path(m["quality"], f"{where}.quality") if "quality" in m else None
        return PointSpec(self.variable(m["variable"], f"{where}.variable"), self.kind(m["kind"], f"{where}.kind"),
                         self.path(m["index"], f"{where}.index"), quality,
                         self.integer(m.get("min_interval_ms", 1), f"{where}.min_interval_ms", 1, 86_400_000),
                         tuple(sorted((k, str(v)) for k, v in attributes.items())))

    def subscribed(self, value: object, where: str) -> SubscribedBlock:
        m = self.mapping(value, where, {"gocbRef", "appID", "members"})
        if "gocbRef" not in m and "appID" not in m:
            raise self.fail(where, "needs gocbRef, appID or both")
        gocb = self.text(m["gocbRef"], f"{where}.gocbRef") if "gocbRef" in m else None
        app_id = self.integer(m["appID"], f"{where}.appID", 0, 0xFFFF) if "appID" in m else None
        points = tuple(self.point(p, f"{where}.members[{i}]")
                       for i, p in enumerate(self.items(m.get("members"), f"{where}.members")))
        return SubscribedBlock(gocb, app_id, points)

    def published(self, value: object, where: str) -> PublishedBlock:
        keys = {"gocbRef", "datSet", "goID", "appID", "dst", "confRev", "vlan", "min_time_ms", "max_time_ms",
                "timeAllowedtoLive_ms", "members"}
        m = self.mapping(value, where, keys)
        for key in ("gocbRef", "datSet", "appID", "members"):
            if key not in m:
                raise self.fail(where, f"{key} is missing")
        members = []
        for i, item in enumerate(self.items(m["members"], f"{where}.members")):
            w = f"{where}.members[{i}]"
            mm = self.mapping(item, w, {"variable", "kind", "bits"})
            if "variable" not in mm or "kind" not in mm:
                raise self.fail(w, "needs variable and kind")
            kind = self.kind(mm["kind"], f"{w}.kind")
            bits = self.integer(mm.get("bits", 16 if kind == "bitstring" else 0), f"{w}.bits", 0, 64)
            if kind == "bitstring" and bits == 0:
                raise self.fail(f"{w}.bits", "a bitstring needs 1..64 bits")
            members.append(PublishedMember(self.variable(mm["variable"], f"{w}.variable"), kind, bits))
        dst = m.get("dst", "01:0c:cd:01:00:00")
        if not isinstance(dst, str) or not _MAC.match(dst):
            raise self.fail(f"{where}.dst", f"must be a MAC address such as 01:0c:cd:01:00:01, not {dst!r}")
        min_time = self.integer(m.get("min_time_ms", 4), f"{where}.min_time_ms", 1, 60_000)
        max_time = self.integer(m.get("max_time_ms", 1000), f"{where}.max_time_ms", 1, 60_000)
        if min_time > max_time:
            raise self.fail(f"{where}.min_time_ms", f"{min_time} is above max_time_ms {max_time}")
        vlan = m.get("vlan")
        return PublishedBlock(
            gocb_ref=self.text(m["gocbRef"], f"{where}.gocbRef"), dat_set=self.text(m["datSet"], f"{where}.datSet"),
            go_id=self.text(m.get("goID", m["gocbRef"]), f"{where}.goID"),
            app_id=self.integer(m["appID"], f"{where}.appID", 0, 0xFFFF), members=tuple(members),
            dst_mac=bytes.fromhex(dst.replace(":", "").replace("-", "")),
            conf_rev=self.integer(m.get("confRev", 1), f"{where}.confRev", 0, 0xFFFF_FFFF),
            vlan_id=None if vlan is None else self.integer(vlan, f"{where}.vlan", 0, 4095),
            min_time_ms=min_time, max_time_ms=max_time,
            time_allowed_to_live_ms=self.integer(m.get("timeAllowedtoLive_ms", 2 * max_time),
                                                 f"{where}.timeAllowedtoLive_ms", 1, 0xFFFF_FFFF))


def parse_map(data: object, source: str = "map") -> GooseMap:
    """A ``GooseMap`` from the parsed document; raises ``ValidationError`` naming the entry."""
    r = _Reader(source)
    m = r.mapping(data, "top level", {"subscribe", "publish"})
    subscribed = tuple(r.subscribed(b, f"subscribe[{i}]") for i, b in enumerate(m.get("subscribe") or []))
    published = tuple(r.published(b, f"publish[{i}]") for i, b in enumerate(m.get("publish") or []))
    points: dict[str, PointSpec] = {}
    seen_blocks: set[tuple[str | None, int | None]] = set()
    for i, block in enumerate(subscribed):
        key = (block.gocb_ref, block.app_id)
        if key in seen_blocks:
            raise r.fail(f"subscribe[{i}]", "the same control block twice")
        seen_blocks.add(key)
        for j, point in enumerate(block.points):
            if point.full_name in points:
                raise r.fail(f"subscribe[{i}].members[{j}].variable", f"{point.full_name} is mapped twice")
            points[point.full_name] = point
    return GooseMap(subscribed, published, points)


def load_map(path: str | Path) -> GooseMap:
    """Read a YAML or JSON map file (``.json``: JSON; else YAML, of which JSON is a subset)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ValidationError(f"--map {p}: {exc.strerror or exc}", field="map") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ValidationError(f"{p}: not valid {'JSON' if p.suffix == '.json' else 'YAML'}: {exc}",
                              field="map") from None
    return parse_map(data, str(p))
