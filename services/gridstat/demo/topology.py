"""Topology files of the embedded runner: clouds, routers, links, publishers, subscriptions.

The schema is documented in ``docs/topology.md``. ``load_topology`` reads a YAML
file and validates it whole; every error names the file, the line (from the
YAML node marks) and the field, e.g. ``topology.yaml:14: links[2].b: unknown
router 'r9'``, and is a ``TopologyError`` (a ``ValidationError``), so the CLI
exits 2 with that message.

Router ids (the sender id of their datagrams) are assigned here, in file order,
1, 2, ...; the leaf QoS brokers assign the client ids of publishers and
subscribers and the variable ids. The numbered ``publisher_id``,
``subscriber_id`` and ``variable_id`` kept here only seed the simulated signals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gridstat.core import filtering, yamldoc
from gridstat.core.model import PRIORITIES, PRIORITY_HIGH, TypeSpec, ValueType, check_name
from gridstat.core.yamldoc import field_name
from gridstat.errors import ValidationError

DEFAULT_TOPOLOGY_PATH = Path(__file__).with_name("default-topology.yaml")

ROLES = ("edge", "internal", "border")
VALUE_TYPES = ("int", "float", "bool")
PUBLISHER_ID_BASE = 1000
SUBSCRIBER_ID_BASE = 2000
MAX_REDUNDANCY = 2
#: Events/s a router forwards when the file does not say (the broker's admission budget).
DEFAULT_CAPACITY_EPS = 50_000
DEFAULT_BANDWIDTH_KBPS = 100_000

_TOP_KEYS = {"clouds": True, "routers": True, "links": True, "publishers": True, "subscriptions": True}
_CLOUD_KEYS = {"name": True}
_ROUTER_KEYS = {"name": True, "role": True, "cloud": True, "capacity_eps": False}
_LINK_KEYS = {"a": True, "b": True, "latency_ms": True, "bandwidth_kbps": False}
_PUBLISHER_KEYS = {"name": True, "edge": True, "variables": True}
_VARIABLE_KEYS = {"name": True, "type": True, "interval_ms": True, "priority": False}
_SUBSCRIPTION_KEYS = {"name": True, "edge": True, "variable": True, "interval_ms": True, "latency_ms": True,
                      "redundancy": False}


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

    @property
    def full_name(self) -> str:
        return f"{self.publisher}/{self.name}"

    @property
    def type_spec(self) -> TypeSpec:
        return TypeSpec(ValueType[self.type.upper()])


@dataclass(frozen=True)
class Publisher:
    name: str
    edge: str
    variables: tuple[Variable, ...]
    publisher_id: int


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
class Topology:
    source: str
    clouds: tuple[str, ...]
    routers: tuple[Router, ...]
    links: tuple[Link, ...]
    publishers: tuple[Publisher, ...]
    subscriptions: tuple[Subscription, ...]
    #: ``field_name(path)`` -> 1-based line, for errors found after loading.
    lines: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)

    def router(self, name: str) -> Router:
        return next(r for r in self.routers if r.name == name)

    def variable(self, full_name: str) -> Variable:
        for p in self.publishers:
            for v in p.variables:
                if v.full_name == full_name:
                    return v
        raise KeyError(full_name)

    def publisher_of(self, full_name: str) -> Publisher:
        pub = full_name.split("/", 1)[0]
        return next(p for p in self.publishers if p.name == pub)

    def expected_rate(self, sub: Subscription) -> float:
        """Events per second a subscription should receive (per path; duplicates not counted)."""
        return 1000.0 / effective_interval_ms(sub.interval_ms, self.variable(sub.variable).interval_ms)

    def crosses_clouds(self, sub: Subscription) -> bool:
        """Whether the subscription's publisher is in another cloud (the parent broker's business)."""
        pub = self.publisher_of(sub.variable)
        return self.router(pub.edge).cloud != self.router(sub.edge).cloud

    def error(self, path: Path_, message: str) -> TopologyError:
        """An error at ``path`` (the nearest enclosing node that has a line)."""
        return _error(self.source, self.lines, path, message)


def effective_interval_ms(sub_interval_ms: int, pub_interval_ms: int) -> int:
    """The interval a subscription actually gets (rounded down to a multiple of pubInt, GridStat 4.2)."""
    return filtering.round_down_interval(sub_interval_ms, pub_interval_ms)


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

    def mapping(self, value: object, path: Path_, keys: Mapping[str, bool]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping, got {_kind(value)}")
        for k in value:
            if k not in keys:
                raise self.fail((*path, str(k)), f"unknown field {k!r}; expected one of {', '.join(keys)}")
        for k, required in keys.items():
            if required and k not in value:
                raise self.fail(path, f"missing field {k!r}")
        return value

    def sequence(self, value: object, path: Path_) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list, got {_kind(value)}")
        return value

    def name(self, value: object, path: Path_) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"expected a name, got {_kind(value)}")
        try:
            return check_name(value, what="name")
        except ValidationError:
            raise self.fail(path, f"{value!r} is not a valid name (1-128 letters, digits, '_', '.', ':', '-')"
                            ) from None

    def integer(self, value: object, path: Path_, *, low: int, high: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {_kind(value)}")
        if value < low or (high is not None and value > high):
            bound = f"{low}..{high}" if high is not None else f">= {low}"
            raise self.fail(path, f"{value} is out of range ({bound})")
        return value

    def number(self, value: object, path: Path_, *, low: float) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(path, f"expected a number, got {_kind(value)}")
        if value < low:
            raise self.fail(path, f"{value} is out of range (>= {low})")
        return float(value)

    def choice(self, value: object, path: Path_, choices: tuple[str, ...]) -> str:
        if value not in choices:
            raise self.fail(path, f"{value!r} is not one of {', '.join(choices)}")
        assert isinstance(value, str)
        return value


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number"}.get(type(value), type(value).__name__)


def parse_topology(text: str, source: str = "topology.yaml") -> Topology:
    """Parse and validate a topology document; ``source`` names it in errors."""
    data, lines = yamldoc.load(text, source, TopologyError)
    return _validate(data, source, lines)


def load_topology(path: str | Path | None = None) -> Topology:
    """Load a topology file (the built-in default when ``path`` is None)."""
    p = Path(path) if path is not None else DEFAULT_TOPOLOGY_PATH
    source = str(path) if path is not None else p.name
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TopologyError(f"{source}: cannot read the topology file: {exc}", field="path") from None
    return parse_topology(text, source)


def _validate(data: object, source: str, lines: dict[str, int]) -> Topology:
    c = _Checker(source, lines)
    top = c.mapping(data, (), _TOP_KEYS)

    clouds: list[str] = []
    for i, item in enumerate(c.sequence(top["clouds"], ("clouds",))):
        m = c.mapping(item, ("clouds", i), _CLOUD_KEYS)
        name = c.name(m["name"], ("clouds", i, "name"))
        if name in clouds:
            raise c.fail(("clouds", i, "name"), f"duplicate cloud {name!r}")
        clouds.append(name)
    if not clouds:
        raise c.fail(("clouds",), "at least one cloud is needed")

    routers: dict[str, Router] = {}
    for i, item in enumerate(c.sequence(top["routers"], ("routers",))):
        p: Path_ = ("routers", i)
        m = c.mapping(item, p, _ROUTER_KEYS)
        name = c.name(m["name"], (*p, "name"))
        if name in routers:
            raise c.fail((*p, "name"), f"duplicate router {name!r}")
        role = c.choice(m["role"], (*p, "role"), ROLES)
        cloud = m["cloud"]
        if cloud not in clouds:
            raise c.fail((*p, "cloud"), f"unknown cloud {cloud!r}")
        capacity = c.integer(m.get("capacity_eps", DEFAULT_CAPACITY_EPS), (*p, "capacity_eps"), low=1,
                             high=0xFFFF_FFFF)
        routers[name] = Router(name, role, str(cloud), len(routers) + 1, capacity)
    if not routers:
        raise c.fail(("routers",), "at least one router is needed")

    links: list[Link] = []
    pairs: set[frozenset[str]] = set()
    for i, item in enumerate(c.sequence(top["links"], ("links",))):
        p = ("links", i)
        m = c.mapping(item, p, _LINK_KEYS)
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
                if r.role != "border":
                    raise c.fail((*p, end), f"link joins clouds {ra.cloud} and {rb.cloud} but {r.name!r} "
                                 f"is a {r.role} router, not a border router")
        latency = c.number(m["latency_ms"], (*p, "latency_ms"), low=0)
        bandwidth = c.integer(m.get("bandwidth_kbps", DEFAULT_BANDWIDTH_KBPS), (*p, "bandwidth_kbps"), low=1,
                              high=10**12)
        links.append(Link(a, b, latency, bandwidth))

    publishers: list[Publisher] = []
    variables: dict[str, Variable] = {}
    for i, item in enumerate(c.sequence(top["publishers"], ("publishers",))):
        p = ("publishers", i)
        m = c.mapping(item, p, _PUBLISHER_KEYS)
        name = c.name(m["name"], (*p, "name"))
        if any(pub.name == name for pub in publishers):
            raise c.fail((*p, "name"), f"duplicate publisher {name!r}")
        edge = _edge(c, m["edge"], (*p, "edge"), routers)
        pvars: list[Variable] = []
        for j, vitem in enumerate(c.sequence(m["variables"], (*p, "variables"))):
            vp: Path_ = (*p, "variables", j)
            vm = c.mapping(vitem, vp, _VARIABLE_KEYS)
            vname = c.name(vm["name"], (*vp, "name"))
            if any(v.name == vname for v in pvars):
                raise c.fail((*vp, "name"), f"duplicate variable {vname!r} of publisher {name!r}")
            vtype = c.choice(vm["type"], (*vp, "type"), VALUE_TYPES)
            interval = c.integer(vm["interval_ms"], (*vp, "interval_ms"), low=1, high=86_400_000)
            priority = c.integer(vm.get("priority", PRIORITY_HIGH), (*vp, "priority"),
                                 low=PRIORITIES[1], high=PRIORITIES[-1])
            var = Variable(name, vname, vtype, interval, priority, len(variables) + 1)
            variables[var.full_name] = var
            pvars.append(var)
        if not pvars:
            raise c.fail((*p, "variables"), f"publisher {name!r} has no variables")
        publishers.append(Publisher(name, edge, tuple(pvars), PUBLISHER_ID_BASE + len(publishers) + 1))

    subscriptions: list[Subscription] = []
    for i, item in enumerate(c.sequence(top["subscriptions"], ("subscriptions",))):
        p = ("subscriptions", i)
        m = c.mapping(item, p, _SUBSCRIPTION_KEYS)
        name = c.name(m["name"], (*p, "name"))
        if any(s.name == name for s in subscriptions):
            raise c.fail((*p, "name"), f"duplicate subscription {name!r}")
        edge = _edge(c, m["edge"], (*p, "edge"), routers)
        var_name = m["variable"]
        if not isinstance(var_name, str) or var_name.count("/") != 1:
            raise c.fail((*p, "variable"), f"{var_name!r} is not of the form 'publisher/variable'")
        if var_name not in variables:
            raise c.fail((*p, "variable"), f"unknown status variable {var_name!r}")
        interval = c.integer(m["interval_ms"], (*p, "interval_ms"), low=1, high=86_400_000)
        latency = c.integer(m["latency_ms"], (*p, "latency_ms"), low=1)
        redundancy = c.integer(m.get("redundancy", 1), (*p, "redundancy"), low=1, high=MAX_REDUNDANCY)
        subscriptions.append(Subscription(name, edge, var_name, interval, latency, redundancy,
                                          SUBSCRIBER_ID_BASE + len(subscriptions) + 1))
    return Topology(source, tuple(clouds), tuple(routers.values()), tuple(links), tuple(publishers),
                    tuple(subscriptions), lines)


def _edge(c: _Checker, value: object, path: Path_, routers: Mapping[str, Router]) -> str:
    if not isinstance(value, str) or value not in routers:
        raise c.fail(path, f"unknown router {value!r}")
    if routers[value].role != "edge":
        raise c.fail(path, f"{value!r} is a {routers[value].role} router; publishers and subscribers "
                     "attach to edge routers")
    return value
