"""Topology files of the embedded runner: clouds, routers, links, publishers, subscriptions, and
optionally the grid's stations and the broker hierarchy.

The schema is documented in ``docs/topology.md``. ``load_topology`` reads a YAML
file and validates it whole; every error names the file, the line (from the
YAML node marks) and the field, e.g. ``topology.yaml:14: links[2].b: unknown
router 'r9'``, and is a ``TopologyError`` (a ``ValidationError``), so the CLI
exits 2 with that message.

Router ids (the sender id of their datagrams) are assigned here, in file order,
1, 2, ...; the leaf QoS brokers assign the client ids of publishers and
subscribers and the variable ids. The numbered ``publisher_id``,
``subscriber_id`` and ``variable_id`` kept here only seed the simulated signals.

A utility's grid is written down as it is (docs/topology.md, "Stations" and "Broker
hierarchy"): ``stations`` (substations with coordinates, voltage level, owner and region)
attached to routers, whose attributes every variable published at the station carries, so
where-expressions (docs/queries.md) select by them; and ``brokers``, a tree of parent QoS
brokers of any depth over the clouds' leaf brokers (dissertation 3.3.2).

``gateways`` (docs/topology.md, "Gateways") are SCADA gateways ``gridstat up`` runs as child processes
in front of the user's own devices: ``iec104-gateway`` (an IEC 60870-5-104 outstation), ``dnp3-gateway``
(a DNP3 outstation) and ``goose-gateway`` (a GOOSE LAN). Their map files are read here with the
gateways' own loaders (paths relative to the topology file), so a bad map fails ``gridstat up`` before
anything starts, and so the publisher names each gateway will use are known: its certificate carries
them (docs/security.md, "Certificates (embedded mode)"). The variables a gateway publishes may be
declared (``variables``) for the file's subscriptions to name them.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gridstat.core import filtering, yamldoc
from gridstat.core.model import (
    ATTRIBUTE_LEN,
    MAX_FRAMES_PER_S,
    NAME_PATTERN,
    PRIORITIES,
    PRIORITY_ALERT,
    PRIORITY_HIGH,
    TypeSpec,
    ValueType,
)
from gridstat.core.yamldoc import field_name
from gridstat.errors import ValidationError

DEFAULT_TOPOLOGY_PATH = Path(__file__).with_name("default-topology.yaml")

ROLES = ("edge", "internal", "border", "edge-border")
#: Roles whose routers host publishers and subscribers, and roles whose routers end inter-cloud links.
CLIENT_ROLES = ("edge", "edge-border")
BORDER_ROLES = ("border", "edge-border")
VALUE_TYPES = ("int", "float", "bool")
PUBLISHER_ID_BASE = 1000
SUBSCRIBER_ID_BASE = 2000
MAX_REDUNDANCY = 2
#: Events/s a router forwards when the file does not say (the broker's admission budget).
DEFAULT_CAPACITY_EPS = 50_000
DEFAULT_BANDWIDTH_KBPS = 100_000

#: The file's shape (JSON Schema, checked by jsonschema: core.yamldoc.schema_problem); what refers
#: to what (clouds, routers, variables) and the duplicates are checked after it, in ``_validate``.
_NAME = {"type": "string", "pattern": NAME_PATTERN,
         "description": "a valid name (1-128 letters, digits, '_', '.', ':', '-')"}
_INTERVAL = {"type": "integer", "minimum": 1, "maximum": 86_400_000}
#: Free text (a description, an owner, a region): what a variable's attribute may hold.
_TEXT = {"type": "string", "minLength": 1, "maxLength": ATTRIBUTE_LEN, "pattern": r"^[^\x00-\x1f\x7f]*$",
         "description": f"printable text of 1-{ATTRIBUTE_LEN} characters"}
_LATITUDE = {"type": "number", "minimum": -90, "maximum": 90}
_LONGITUDE = {"type": "number", "minimum": -180, "maximum": 180}
#: Descriptive fields of a router (docs/topology.md, "Routers").
_ROUTER_META = {"description": _TEXT, "latitude": _LATITUDE, "longitude": _LONGITUDE, "owner": _TEXT,
                "site": _TEXT}


#: The SCADA gateways ``gridstat up`` can run (docs/topology.md, "Gateways"), and their commands.
GATEWAY_KINDS = ("iec104", "dnp3", "goose")
GATEWAY_COMMANDS = {"iec104": "iec104-gateway", "dnp3": "dnp3-gateway", "goose": "goose-gateway"}
#: Fields every gateway may have, and those of each kind (each a command-line option of its gateway).
_GATEWAY_COMMON = frozenset({"name", "kind", "edge", "station", "map", "priority", "variables"})
GATEWAY_FIELDS = {
    "iec104": frozenset({"outstation", "allow_remote", "common_addresses", "interval_ms", "min_interval_ms"}),
    "dnp3": frozenset({"outstation", "allow_remote", "address", "master_address", "interval_ms", "min_interval_ms",
                       "event_poll_s", "integrity_poll_s", "unsolicited"}),
    "goose": frozenset({"interface"}),
}
GATEWAY_REQUIRED = {"iec104": ("outstation",), "dnp3": ("outstation", "address"), "goose": ("interface", "map")}
#: The lowest priority each gateway takes for its periodic variables (dnp3-gateway: 1, alerts are 0).
GATEWAY_MIN_PRIORITY = {"iec104": 0, "dnp3": 1, "goose": 0}
_HOST_PORT = {"type": "string", "pattern": r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}$",
              "description": "HOST:PORT"}
_DNP3_ADDRESS = {"type": "integer", "minimum": 0, "maximum": 65519}
_SECONDS = {"type": "number", "minimum": 0, "maximum": 86_400}


def _obj(required: dict[str, object], optional: dict[str, object] | None = None) -> dict[str, object]:
    return {"type": "object", "properties": {**required, **(optional or {})}, "required": list(required),
            "additionalProperties": False}


SCHEMA: dict[str, object] = _obj({
    "clouds": {"type": ["array", "null"], "items": _obj({"name": _NAME},
                                                        {"broker": {}, "description": _TEXT})},
    "routers": {"type": ["array", "null"], "items": _obj(
        {"name": _NAME, "role": {"enum": list(ROLES)}, "cloud": {}},
        {"capacity_eps": {"type": "integer", "minimum": 1, "maximum": 0xFFFF_FFFF}, **_ROUTER_META})},
    "links": {"type": ["array", "null"], "items": _obj(
        {"a": {}, "b": {}, "latency_ms": {"type": "number", "minimum": 0}},
        {"bandwidth_kbps": {"type": "integer", "minimum": 1, "maximum": 10**12}})},
    "publishers": {"type": ["array", "null"], "items": _obj({
        "name": _NAME}, {"edge": {}, "station": {},
        "variables": {"type": ["array", "null"], "items": _obj(
            {"name": _NAME, "type": {"enum": list(VALUE_TYPES)}, "interval_ms": _INTERVAL},
            {"priority": {"type": "integer", "minimum": PRIORITIES[1], "maximum": PRIORITIES[-1]}})},
        # A simulated PMU speaking IEEE C37.118, published by a pmu-gateway (docs/topology.md).
        "c37118": _obj({"frames_per_s": {"type": "integer", "minimum": 1, "maximum": MAX_FRAMES_PER_S}}, {
            "phasors": {"type": "integer", "minimum": 0, "maximum": 32},
            "analogs": {"type": ["array", "null"], "items": _NAME, "maxItems": 32}})})},
    "subscriptions": {"type": ["array", "null"], "items": _obj(
        {"name": _NAME, "edge": {}, "variable": {}, "interval_ms": _INTERVAL,
         "latency_ms": {"type": "integer", "minimum": 1}},
        {"redundancy": {"type": "integer", "minimum": 1, "maximum": MAX_REDUNDANCY}})},
}, {
    # The grid's substations (docs/topology.md, "Stations").
    "stations": {"type": ["array", "null"], "items": _obj(
        {"name": _NAME, "router": {}},
        {"latitude": _LATITUDE, "longitude": _LONGITUDE, "voltage_kv": {"type": "number", "exclusiveMinimum": 0,
                                                                         "maximum": 2000},
         "owner": _TEXT, "region": _TEXT, "description": _TEXT})},
    # Parent QoS brokers over the clouds' leaf brokers, a tree of any depth (docs/topology.md).
    "brokers": {"type": ["array", "null"], "items": _obj(
        {"name": _NAME}, {"parent": {}, "description": _TEXT, "owner": _TEXT, "region": _TEXT})},
    # SCADA gateways run as child processes (docs/topology.md, "Gateways"); the fields of each kind
    # are checked after the schema (GATEWAY_FIELDS).
    "gateways": {"type": ["array", "null"], "items": _obj(
        {"name": _NAME, "kind": {"enum": list(GATEWAY_KINDS)}},
        {"edge": {}, "station": {}, "map": {"type": "string", "minLength": 1},
         "priority": {"type": "integer", "minimum": PRIORITIES[0], "maximum": PRIORITIES[-1]},
         "outstation": _HOST_PORT, "allow_remote": {"type": "boolean"},
         "common_addresses": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 1,
                                                                         "maximum": 65535}},
         "address": _DNP3_ADDRESS, "master_address": _DNP3_ADDRESS,
         "interval_ms": _INTERVAL, "min_interval_ms": _INTERVAL, "event_poll_s": _SECONDS,
         "integrity_poll_s": _SECONDS, "unsolicited": {"type": "boolean"},
         "interface": {"type": "string", "pattern": r"^[A-Za-z0-9_.:@-]{1,15}$",
                       "description": "a network interface name (1-15 characters)"},
         "variables": {"type": ["array", "null"], "items": _obj(
             {"name": {"type": "string", "pattern": r"^[^/]+/[^/]+$",
                       "description": "'publisher/variable', as the gateway names it"},
              "type": {"enum": list(VALUE_TYPES)}, "interval_ms": _INTERVAL},
             {"priority": {"type": "integer", "minimum": PRIORITIES[0], "maximum": PRIORITIES[-1]}})}})},
})


class TopologyError(ValidationError):
    """A topology file is not valid; the message starts with ``file:line: field:``."""


Path_ = yamldoc.FieldPath


@dataclass(frozen=True)
class Router:
    name: str
    role: str
    cloud: str
    router_id: int
    capacity_eps: int = DEFAULT_CAPACITY_EPS
    #: Descriptive fields as written (``description``, ``latitude``, ``longitude``, ``owner``, ``site``), as text.
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Station:
    """A substation of the grid, attached to a router (docs/topology.md, "Stations")."""

    name: str
    router: str
    latitude: float | None = None
    longitude: float | None = None
    voltage_kv: float | None = None
    owner: str = ""
    region: str = ""
    description: str = ""

    @property
    def attributes(self) -> dict[str, str]:
        """What every variable published at the station carries (docs/queries.md): ``station``,
        ``router`` and each field given, numbers as text (``voltage_kv`` ``345``)."""
        out = {"station": self.name, "router": self.router}
        for key, value in (("region", self.region), ("owner", self.owner), ("voltage_kv", self.voltage_kv),
                           ("latitude", self.latitude), ("longitude", self.longitude),
                           ("description", self.description)):
            if value is not None and value != "":
                out[key] = _text(value)
        return out


@dataclass(frozen=True)
class Broker:
    """A parent QoS broker of the hierarchy (``brokers``); ``parent`` None for the root."""

    name: str
    parent: str | None
    metadata: Mapping[str, str] = field(default_factory=dict)


def _text(value: object) -> str:
    """An attribute's text: ``345`` for 345.0, ``47.61`` for 47.61."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


@dataclass(frozen=True)
class Link:
    a: str
    b: str
    latency_ms: float
    bandwidth_kbps: int


@dataclass(frozen=True)
class Variable:
    publisher: str
    name: str
    type: str
    interval_ms: int
    priority: int
    variable_id: int
    #: A device's frame rate (docs/frame-rates.md); 0 = a period of ``interval_ms``.
    frames_per_s: int = 0

    @property
    def full_name(self) -> str:
        return f"{self.publisher}/{self.name}"

    @property
    def type_spec(self) -> TypeSpec:
        return TypeSpec(ValueType[self.type.upper()])


@dataclass(frozen=True)
class Device:
    """A simulated C37.118 PMU behind a publisher (``c37118:``): its rate, phasors and analogs' names."""

    frames_per_s: int
    phasors: int
    analogs: tuple[str, ...]


@dataclass(frozen=True)
class Publisher:
    name: str
    edge: str
    variables: tuple[Variable, ...]
    publisher_id: int
    #: Fed over IEEE C37.118 by a simulated device through a pmu-gateway; None = the client SDK.
    device: Device | None = None
    #: The station it is at (``station:``), or None.
    station: Station | None = None

    @property
    def attributes(self) -> dict[str, str]:
        """Attributes each of its variables is registered with: its station's, or none."""
        return self.station.attributes if self.station is not None else {}


@dataclass(frozen=True)
class Subscription:
    name: str
    edge: str
    variable: str
    interval_ms: int
    latency_ms: int
    redundancy: int
    subscriber_id: int


@dataclass(frozen=True)
class Gateway:
    """A SCADA gateway ``gridstat up`` runs (``gateways:``; docs/topology.md, "Gateways"): the kind, its
    edge router, and the options of its command line that the file sets (None/empty: the gateway's default)."""

    name: str
    kind: str
    edge: str
    #: The outstation (iec104, dnp3) as written, ``HOST:PORT``; the interface (goose).
    outstation: str = ""
    interface: str = ""
    allow_remote: bool = False
    common_addresses: tuple[int, ...] = ()
    address: int | None = None
    master_address: int | None = None
    #: The map file, resolved against the topology file's directory.
    map_path: Path | None = None
    priority: int | None = None
    interval_ms: int | None = None
    min_interval_ms: int | None = None
    event_poll_s: float | None = None
    integrity_poll_s: float | None = None
    unsolicited: bool = False
    #: The publisher names it will publish under (its certificate carries each: the broker binds them).
    publishers: tuple[str, ...] = ()
    #: Variables declared for the file's subscriptions (``publisher/variable``, type, interval).
    variables: tuple[Variable, ...] = ()
    station: Station | None = None

    @property
    def command(self) -> str:
        return GATEWAY_COMMANDS[self.kind]

    @property
    def target(self) -> str:
        """What it reads: the outstation's ``HOST:PORT`` or the interface."""
        return self.outstation or self.interface


@dataclass(frozen=True)
class Topology:
    source: str
    clouds: tuple[str, ...]
    routers: tuple[Router, ...]
    links: tuple[Link, ...]
    publishers: tuple[Publisher, ...]
    subscriptions: tuple[Subscription, ...]
    #: ``field_name(path)`` -> 1-based line, for errors found after loading.
    lines: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)
    stations: tuple[Station, ...] = ()
    #: The parent brokers, parents before their children (empty: one parent over every leaf).
    brokers: tuple[Broker, ...] = ()
    #: The parent broker above each cloud's leaf broker (with ``brokers``).
    cloud_brokers: Mapping[str, str] = field(default_factory=dict)
    #: SCADA gateways run as child processes (docs/topology.md, "Gateways").
    gateways: tuple[Gateway, ...] = ()

    def router(self, name: str) -> Router:
        return next(r for r in self.routers if r.name == name)

    @property
    def root_broker(self) -> Broker | None:
        return self.brokers[0] if self.brokers else None

    def broker_depth(self, name: str) -> int:
        """0 for the root, 1 for its children ...; a cloud's leaf is one below its parent broker."""
        parents = {b.name: b.parent for b in self.brokers}
        depth = 0
        up = parents.get(name) if name in parents else self.cloud_brokers.get(name)
        while up is not None:
            depth += 1
            up = parents.get(up)
        return depth

    def variable(self, full_name: str) -> Variable:
        for p in self.publishers:
            for v in p.variables:
                if v.full_name == full_name:
                    return v
        for g in self.gateways:
            for v in g.variables:
                if v.full_name == full_name:
                    return v
        raise KeyError(full_name)

    def gateway_of(self, full_name: str) -> Gateway | None:
        """The gateway that declares the variable ``full_name``, or None (a publisher's)."""
        return next((g for g in self.gateways if any(v.full_name == full_name for v in g.variables)), None)

    def edge_of(self, full_name: str) -> str:
        """The edge router the variable is published at (its publisher's or its gateway's)."""
        gateway = self.gateway_of(full_name)
        return gateway.edge if gateway is not None else self.publisher_of(full_name).edge

    def publisher_of(self, full_name: str) -> Publisher:
        pub = full_name.split("/", 1)[0]
        return next(p for p in self.publishers if p.name == pub)

    def expected_rate(self, sub: Subscription) -> float:
        """Events per second a subscription should receive (per path; duplicates not counted)."""
        var = self.variable(sub.variable)
        interval = effective_interval_ms(sub.interval_ms, var.interval_ms, var.frames_per_s)
        if var.frames_per_s:  # whole frames (docs/frame-rates.md)
            return var.frames_per_s / filtering.frames_in(interval, var.frames_per_s)
        return 1000.0 / interval

    def crosses_clouds(self, sub: Subscription) -> bool:
        """Whether the subscription's publisher is in another cloud (the parent broker's business)."""
        return self.router(self.edge_of(sub.variable)).cloud != self.router(sub.edge).cloud

    def error(self, path: Path_, message: str) -> TopologyError:
        """An error at ``path`` (the nearest enclosing node that has a line)."""
        return _error(self.source, self.lines, path, message)


def effective_interval_ms(sub_interval_ms: int, pub_interval_ms: int, frames_per_s: int = 0) -> int:
    """The interval a subscription actually gets (rounded down to a multiple of pubInt, GridStat 4.2;
    to whole frames at a device's frame rate, docs/frame-rates.md)."""
    return filtering.round_down_interval(sub_interval_ms, pub_interval_ms, frames_per_s)


def _error(source: str, lines: Mapping[str, int], path: Path_, message: str) -> TopologyError:
    name = field_name(path)
    line = None
    for n in range(len(path), -1, -1):
        line = lines.get(field_name(path[:n]))
        if line is not None:
            break
    where = f"{source}:{line}" if line is not None else source
    return TopologyError(f"{where}: {name}: {message}", field=name)


class _Checker:
    def __init__(self, source: str, lines: Mapping[str, int]) -> None:
        self.source = source
        self.lines = lines

    def fail(self, path: Path_, message: str) -> TopologyError:
        return _error(self.source, self.lines, path, message)


def parse_topology(text: str, source: str = "topology.yaml", base: Path | None = None) -> Topology:
    """Parse and validate a topology document; ``source`` names it in errors; gateways' map files are
    relative to ``base`` (default: the directory of ``source``)."""
    data, lines = yamldoc.load(text, source, TopologyError)
    return _validate(data, source, lines, base if base is not None else Path(source).parent)


def load_topology(path: str | Path | None = None) -> Topology:
    """Load a topology file (the built-in default when ``path`` is None)."""
    p = Path(path) if path is not None else DEFAULT_TOPOLOGY_PATH
    source = str(path) if path is not None else p.name
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TopologyError(f"{source}: cannot read the topology file: {exc}", field="path") from None
    return parse_topology(text, source)


def _validate(data: object, source: str, lines: dict[str, int], base: Path) -> Topology:
    c = _Checker(source, lines)
    problem = yamldoc.schema_problem(data, SCHEMA, lines)
    if problem is not None:
        raise c.fail(problem.path, problem.message)
    assert isinstance(data, dict)
    top: dict[str, Any] = {k: v or [] for k, v in data.items()}

    clouds: list[str] = []
    for i, m in enumerate(top["clouds"]):
        name = m["name"]
        if name in clouds:
            raise c.fail(("clouds", i, "name"), f"duplicate cloud {name!r}")
        clouds.append(name)
    if not clouds:
        raise c.fail(("clouds",), "at least one cloud is needed")
    brokers, cloud_brokers = _brokers(c, top, clouds)

    routers: dict[str, Router] = {}
    for i, m in enumerate(top["routers"]):
        p: Path_ = ("routers", i)
        name = m["name"]
        if name in routers:
            raise c.fail((*p, "name"), f"duplicate router {name!r}")
        cloud = m["cloud"]
        if cloud not in clouds:
            raise c.fail((*p, "cloud"), f"unknown cloud {cloud!r}")
        if ("latitude" in m) != ("longitude" in m):
            raise c.fail((*p, "longitude" if "latitude" in m else "latitude"),
                         f"router {name!r} has a {'latitude' if 'latitude' in m else 'longitude'}: give both "
                         "latitude and longitude, or neither")
        metadata = {k: _text(m[k]) for k in _ROUTER_META if k in m}
        routers[name] = Router(name, m["role"], str(cloud), len(routers) + 1,
                               m.get("capacity_eps", DEFAULT_CAPACITY_EPS), metadata)
    if not routers:
        raise c.fail(("routers",), "at least one router is needed")

    links: list[Link] = []
    pairs: set[frozenset[str]] = set()
    for i, m in enumerate(top["links"]):
        p = ("links", i)
        ends = []
        for end in ("a", "b"):
            r = m[end]
            if not isinstance(r, str) or r not in routers:
                raise c.fail((*p, end), f"unknown router {r!r}")
            ends.append(r)
        a, b = ends
        if a == b:
            raise c.fail((*p, "b"), f"a link must join two different routers, both ends are {a!r}")
        if frozenset(ends) in pairs:
            raise c.fail(p, f"duplicate link between {a!r} and {b!r}")
        pairs.add(frozenset(ends))
        ra, rb = routers[a], routers[b]
        if ra.cloud != rb.cloud:
            for end, r in (("a", ra), ("b", rb)):
                if r.role not in BORDER_ROLES:
                    raise c.fail((*p, end), f"link joins clouds {ra.cloud} and {rb.cloud} but {r.name!r} "
                                 f"is {_a(r.role)} router, not a border or edge-border router")
        links.append(Link(a, b, float(m["latency_ms"]), m.get("bandwidth_kbps", DEFAULT_BANDWIDTH_KBPS)))

    stations = _stations(c, top, routers)
    publishers: list[Publisher] = []
    variables: dict[str, Variable] = {}
    for i, m in enumerate(top["publishers"]):
        p = ("publishers", i)
        name = m["name"]
        if any(pub.name == name for pub in publishers):
            raise c.fail((*p, "name"), f"duplicate publisher {name!r}")
        station = None
        if "station" in m:
            station = stations.get(m["station"]) if isinstance(m["station"], str) else None
            if station is None:
                raise c.fail((*p, "station"), f"unknown station {m['station']!r}")
        if "edge" not in m and station is None:
            raise c.fail(p, "missing field 'edge' (or a 'station', whose router it then attaches to)")
        edge = _edge(c, m.get("edge", station.router if station else None), (*p, "edge"), routers)
        if station is not None and edge != station.router:
            raise c.fail((*p, "edge"), f"publisher {name!r} is at station {station.name!r}, attached to router "
                         f"{station.router!r}, not {edge!r} (leave out 'edge': it is the station's router)")
        pvars: list[Variable] = []
        device = None
        if m.get("c37118") is not None:
            if m.get("variables"):
                raise c.fail((*p, "variables"), f"publisher {name!r} is a C37.118 device (c37118): its variables "
                             "are its channels (freq, dfreq and the analogs), not listed")
            d = m["c37118"]
            device = Device(d["frames_per_s"], d.get("phasors", 1), tuple(d.get("analogs") or ()))
            if len(set(device.analogs)) != len(device.analogs) or {"freq", "dfreq"} & set(device.analogs):
                raise c.fail((*p, "c37118", "analogs"), f"analog names of {name!r} must be distinct and not "
                             "freq or dfreq")
            interval = filtering.nominal_interval_ms(device.frames_per_s)
            for vname in ("freq", "dfreq", *device.analogs):
                var = Variable(name, vname, "float", interval, PRIORITY_HIGH, len(variables) + 1,
                               device.frames_per_s)
                variables[var.full_name] = var
                pvars.append(var)
        for j, vm in enumerate(m.get("variables") or ()):
            vp: Path_ = (*p, "variables", j)
            vname = vm["name"]
            if any(v.name == vname for v in pvars):
                raise c.fail((*vp, "name"), f"duplicate variable {vname!r} of publisher {name!r}")
            var = Variable(name, vname, vm["type"], vm["interval_ms"], vm.get("priority", PRIORITY_HIGH),
                           len(variables) + 1)
            variables[var.full_name] = var
            pvars.append(var)
        if not pvars:
            raise c.fail((*p, "variables"), f"publisher {name!r} has no variables")
        publishers.append(Publisher(name, edge, tuple(pvars), PUBLISHER_ID_BASE + len(publishers) + 1, device,
                                    station))

    gateways = _gateways(c, top, routers, stations, publishers, base, len(variables))
    for g in gateways:
        variables.update((v.full_name, v) for v in g.variables)

    subscriptions: list[Subscription] = []
    for i, m in enumerate(top["subscriptions"]):
        p = ("subscriptions", i)
        name = m["name"]
        if any(s.name == name for s in subscriptions):
            raise c.fail((*p, "name"), f"duplicate subscription {name!r}")
        if any(g.name == name for g in gateways):
            raise c.fail((*p, "name"), f"{name!r} is also a gateway's name: each client has its own certificate "
                         "identity")
        edge = _edge(c, m["edge"], (*p, "edge"), routers)
        var_name = m["variable"]
        if not isinstance(var_name, str) or var_name.count("/") != 1:
            raise c.fail((*p, "variable"), f"{var_name!r} is not of the form 'publisher/variable'")
        if var_name not in variables:
            raise c.fail((*p, "variable"), f"unknown status variable {var_name!r}"
                         + (" (a gateway's variable must be declared in its 'variables')" if gateways else ""))
        subscriptions.append(Subscription(name, edge, var_name, m["interval_ms"], m["latency_ms"],
                                          m.get("redundancy", 1), SUBSCRIBER_ID_BASE + len(subscriptions) + 1))
    return Topology(source, tuple(clouds), tuple(routers.values()), tuple(links), tuple(publishers),
                    tuple(subscriptions), lines, tuple(stations.values()), brokers, cloud_brokers, gateways)


def _stations(c: _Checker, top: Mapping[str, Any], routers: Mapping[str, Router]) -> dict[str, Station]:
    stations: dict[str, Station] = {}
    for i, m in enumerate(top.get("stations") or ()):
        p: Path_ = ("stations", i)
        name = m["name"]
        if name in stations:
            raise c.fail((*p, "name"), f"duplicate station {name!r}")
        router = _edge(c, m["router"], (*p, "router"), routers, what="stations")
        if ("latitude" in m) != ("longitude" in m):
            raise c.fail((*p, "longitude" if "latitude" in m else "latitude"),
                         f"station {name!r} has a {'latitude' if 'latitude' in m else 'longitude'}: give both "
                         "latitude and longitude, or neither")
        kv = m.get("voltage_kv")
        stations[name] = Station(name, router, _float(m.get("latitude")), _float(m.get("longitude")), _float(kv),
                                 m.get("owner", ""), m.get("region", ""), m.get("description", ""))
    return stations


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _brokers(c: _Checker, top: Mapping[str, Any],
             clouds: list[str]) -> tuple[tuple[Broker, ...], dict[str, str]]:
    """The parent brokers, root first and every parent before its children, and each cloud's parent
    broker; both empty without ``brokers`` (one parent over every leaf, as before)."""
    items = list(top.get("brokers") or ())
    declared: dict[str, tuple[int, Mapping[str, Any]]] = {}
    for i, m in enumerate(items):
        name = m["name"]
        if name in declared:
            raise c.fail(("brokers", i, "name"), f"duplicate broker {name!r}")
        if name in clouds:
            raise c.fail(("brokers", i, "name"), f"{name!r} is a cloud: a cloud's leaf broker is named as the "
                         "cloud and is not listed in brokers")
        declared[name] = (i, m)
    cloud_brokers: dict[str, str] = {}
    for i, m in enumerate(top["clouds"]):
        if "broker" not in m:
            continue
        want = m["broker"]
        if not declared:
            raise c.fail(("clouds", i, "broker"), "there is no brokers list: name the cloud's parent broker "
                         "there, or leave 'broker' out (one parent broker over every cloud)")
        if not isinstance(want, str) or want not in declared:
            raise c.fail(("clouds", i, "broker"), f"unknown broker {want!r}")
        cloud_brokers[m["name"]] = want
    if not declared:
        return (), {}
    roots = [name for name, (_, m) in declared.items() if m.get("parent") is None]
    if len(roots) > 1:
        i, _ = declared[roots[1]]
        raise c.fail(("brokers", i, "parent"), f"brokers {roots[0]!r} and {roots[1]!r} both have no parent: "
                     "the hierarchy has one root")
    for name, (i, m) in declared.items():
        up = m.get("parent")
        if up is not None and (not isinstance(up, str) or up not in declared):
            raise c.fail(("brokers", i, "parent"), f"unknown broker {up!r}")
        seen = [name]
        while up is not None:
            if up in seen:
                raise c.fail(("brokers", i, "parent"), "the brokers form a cycle, not a tree: "
                             f"{' -> '.join([*seen, up])}")
            seen.append(up)
            up = declared[up][1].get("parent")
    root = roots[0] if roots else None  # a cycle was found above when there is none
    for cloud in clouds:
        cloud_brokers.setdefault(cloud, str(root))
    children = {name: 0 for name in declared}
    for _, m in declared.values():
        if m.get("parent") is not None:
            children[m["parent"]] += 1
    for cloud_parent in cloud_brokers.values():
        children[cloud_parent] += 1
    for name, n in children.items():
        if n == 0:
            raise c.fail(("brokers", declared[name][0], "name"), f"broker {name!r} has no children: no broker "
                         "names it as parent and no cloud as broker")
    ordered: list[Broker] = []
    pending = [str(root)]
    while pending:  # breadth first: every parent before its children
        name = pending.pop(0)
        _, m = declared[name]
        ordered.append(Broker(name, m.get("parent"), {k: str(m[k]) for k in ("description", "owner", "region")
                                                      if k in m}))
        pending += [n for n, (_, x) in declared.items() if x.get("parent") == name]
    return tuple(ordered), cloud_brokers


def _a(role: str) -> str:
    """``an internal``, ``a border``: the role with its article, for messages."""
    return f"{'an' if role[0] in 'aeiou' else 'a'} {role}"


def _edge(c: _Checker, value: object, path: Path_, routers: Mapping[str, Router], *,
          what: str = "publishers and subscribers") -> str:
    if not isinstance(value, str) or value not in routers:
        raise c.fail(path, f"unknown router {value!r}")
    if routers[value].role not in CLIENT_ROLES:
        raise c.fail(path, f"{value!r} is {_a(routers[value].role)} router; {what} "
                     "attach to edge or edge-border routers")
    return value


def _gateways(c: _Checker, top: Mapping[str, Any], routers: Mapping[str, Router], stations: Mapping[str, Station],
              publishers: list[Publisher], base: Path, first_variable_id: int) -> tuple[Gateway, ...]:
    """The ``gateways`` (docs/topology.md, "Gateways"): each kind's fields, the edge, the map file read with
    the gateway's own loader, the publisher names it will use, its declared variables."""
    out: list[Gateway] = []
    taken = {p.name: f"publisher {p.name!r}" for p in publishers}
    next_id = first_variable_id + 1
    for i, m in enumerate(top.get("gateways") or ()):
        p: Path_ = ("gateways", i)
        name, kind = m["name"], m["kind"]
        if any(g.name == name for g in out):
            raise c.fail((*p, "name"), f"duplicate gateway {name!r}")
        if name in taken:
            raise c.fail((*p, "name"), f"{name!r} is also the name of {taken[name]}: each client has its own "
                         "certificate identity")
        allowed = _GATEWAY_COMMON | GATEWAY_FIELDS[kind]
        for key in m:
            if key not in allowed:
                others = [k for k, fields in GATEWAY_FIELDS.items() if key in fields]
                raise c.fail((*p, key), f"a {kind} gateway has no {key!r}"
                             + (f" (that is a field of {' and '.join(others)} gateways)" if others else ""))
        for key in GATEWAY_REQUIRED[kind]:
            if key not in m:
                raise c.fail(p, f"missing field {key!r} (a {kind} gateway needs {', '.join(GATEWAY_REQUIRED[kind])})")
        station = None
        if "station" in m:
            station = stations.get(m["station"]) if isinstance(m["station"], str) else None
            if station is None:
                raise c.fail((*p, "station"), f"unknown station {m['station']!r}")
        if "edge" not in m and station is None:
            raise c.fail(p, "missing field 'edge' (or a 'station', whose router it then attaches to)")
        edge = _edge(c, m.get("edge", station.router if station else None), (*p, "edge"), routers,
                     what="gateways")
        if station is not None and edge != station.router:
            raise c.fail((*p, "edge"), f"gateway {name!r} is at station {station.name!r}, attached to router "
                         f"{station.router!r}, not {edge!r} (leave out 'edge': it is the station's router)")
        priority = m.get("priority")
        if priority is not None and priority < GATEWAY_MIN_PRIORITY[kind]:
            raise c.fail((*p, "priority"), f"a {kind} gateway's priority is {GATEWAY_MIN_PRIORITY[kind]}.."
                         f"{PRIORITIES[-1]}, not {priority}")
        outstation = m.get("outstation", "")
        if outstation:
            host, _, port = outstation.rpartition(":")
            if not 0 < int(port) < 65536:
                raise c.fail((*p, "outstation"), f"port {port} of {outstation!r} is not 1..65535")
            if not m.get("allow_remote") and not _loopback(host.strip("[]")):
                raise c.fail((*p, "outstation"), f"{outstation!r} is not on this host: add 'allow_remote: true' "
                             "to talk to an outstation on the network")
        if m.get("event_poll_s") == 0 and not m.get("unsolicited"):
            raise c.fail((*p, "event_poll_s"), "0 polls no events: give 'unsolicited: true' too, or a period")
        map_path = None
        if "map" in m:
            map_path = (base / m["map"]).absolute()  # an absolute path stays as it is
            if not map_path.is_file():
                raise c.fail((*p, "map"), f"no map file {str(map_path)!r} (relative paths are relative to the "
                             "topology file)")
        gw = Gateway(name, kind, edge, outstation=outstation, interface=m.get("interface", ""),
                     allow_remote=bool(m.get("allow_remote", False)),
                     common_addresses=tuple(dict.fromkeys(m.get("common_addresses") or ())),
                     address=m.get("address"), master_address=m.get("master_address"), map_path=map_path,
                     priority=priority, interval_ms=m.get("interval_ms"), min_interval_ms=m.get("min_interval_ms"),
                     event_poll_s=_float(m.get("event_poll_s")), integrity_poll_s=_float(m.get("integrity_poll_s")),
                     unsolicited=bool(m.get("unsolicited", False)), station=station)
        try:
            names = gateway_publishers(gw)
        except ValidationError as exc:
            raise c.fail((*p, "map"), exc.message) from None
        for pub in names:
            if pub in taken and taken[pub] != f"gateway {name!r}":
                raise c.fail((*p, "map") if map_path else p, f"gateway {name!r} publishes as {pub!r}, which is "
                             f"also {taken[pub]}")
            taken[pub] = f"gateway {name!r}"
        taken[name] = f"gateway {name!r}"
        declared: list[Variable] = []
        for j, vm in enumerate(m.get("variables") or ()):
            vp: Path_ = (*p, "variables", j)
            pub, vname = vm["name"].split("/", 1)
            if pub not in names:
                raise c.fail((*vp, "name"), f"gateway {name!r} publishes as {', '.join(names) or 'nothing known'}, "
                             f"not {pub!r} (its map file names the publishers)")
            if any(v.full_name == vm["name"] for v in declared):
                raise c.fail((*vp, "name"), f"duplicate variable {vm['name']!r} of gateway {name!r}")
            default = PRIORITY_ALERT if vm["type"] == "bool" else max(PRIORITY_HIGH, priority or PRIORITY_HIGH)
            declared.append(Variable(pub, vname, vm["type"], vm["interval_ms"], vm.get("priority", default),
                                     next_id))
            next_id += 1
        out.append(dataclasses.replace(gw, publishers=names, variables=tuple(declared)))
    return tuple(out)


def gateway_publishers(g: Gateway) -> tuple[str, ...]:
    """The publisher names a gateway will publish under: its map file's names and its defaults
    (``ca<CA>`` of each common address, ``dnp<address>``); a bad map file is a ValidationError."""
    names: list[str] = []
    if g.kind == "iec104":
        from gridstat.gateways.iec104 import mapping as iec104

        pm = iec104.load_point_map(g.map_path) if g.map_path else iec104.PointMap()
        names += pm.stations.values()
        for (ca, _), entry in pm.points.items():
            names.append(entry.publisher or pm.stations.get(ca) or f"ca{ca}")
        if not pm.only_mapped:
            names += [pm.stations.get(ca) or f"ca{ca}" for ca in g.common_addresses]
    elif g.kind == "dnp3":
        from gridstat.gateways.dnp3 import mapping as dnp3

        dm = dnp3.load_point_map(g.map_path) if g.map_path else dnp3.PointMap()
        default = dm.publisher or f"dnp{g.address}"
        names += [entry.publisher or default for entry in dm.entries.values()]
        if dm.others or not dm.entries:
            names.append(default)
    else:
        from gridstat.gateways.goose import mapping as goose

        assert g.map_path is not None
        gm = goose.load_map(g.map_path)
        names += [point.full_name.split("/", 1)[0] for block in gm.subscribe for point in block.points]
    return tuple(dict.fromkeys(names))


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
