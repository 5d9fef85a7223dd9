"""``gridstat analyze`` input files: a broker tree and its per-broker workload, in YAML.

The schema is in ``docs/analysis.md``. A file has a tree (``brokers``, a list with one
parent-less root, or ``generate``, the paper's ``T_k``) and a workload (``classes``, groups of
identical filter classes with per-broker parameters, or ``uniform``, the paper's even
spread). Errors name the file, the line and the field, as the embedded runner's topology
files do (``topology.yaml:14: brokers[3].parent: unknown broker 'r9'``): a ``TopologyFileError``
whose ``reason`` says what kind of problem it is (``CyclicTopology``, ``MissingParameter``,
``InvalidArgument``) and whose ``field`` is the dotted path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gridstat.analysis.trees import BrokerTree, paper_tree
from gridstat.analysis.workloads import LIFETIME_DISTRIBUTIONS, ClassGroup, Workload, uniform_workload
from gridstat.core import yamldoc
from gridstat.core.yamldoc import field_name
from gridstat.errors import ValidationError

_PathT = yamldoc.FieldPath

_TOP = ("brokers", "generate", "classes", "uniform", "name")
_BROKER = ("name", "parent")
_GENERATE = ("brokers", "max_per_level", "arity")
_UNIFORM = ("classes", "subscriptions", "lifetime_s", "publication_rate", "lifetime_distribution")
_CLASS = ("name", "count", "lifetime_s", "lifetime_distribution", "default", "at")
_PARAMS = ("arrival_per_s", "subscriptions", "publish_per_s", "lifetime_s")

MAX_BROKERS = 100_000


class TopologyFileError(ValidationError):
    """An analysis input file is not valid; the message starts with ``file:line: field:``."""


class _Checker:
    def __init__(self, source: str, lines: Mapping[str, int]) -> None:
        self.source = source
        self.lines = lines

    def fail(self, path: _PathT, message: str, reason: str | None = None) -> TopologyFileError:
        name = field_name(path)
        line = None
        for n in range(len(path), -1, -1):
            line = self.lines.get(field_name(path[:n]))
            if line is not None:
                break
        where = f"{self.source}:{line}" if line is not None else self.source
        return TopologyFileError(f"{where}: {name}: {message}", field=name, reason=reason)

    def mapping(self, value: object, path: _PathT, keys: tuple[str, ...],
                required: tuple[str, ...] = ()) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping, got {_kind(value)}")
        for k in value:
            if k not in keys:
                raise self.fail((*path, str(k)), f"unknown field {k!r}; expected one of {', '.join(keys)}")
        for k in required:
            if k not in value:
                raise self.fail(path, f"missing field {k!r}", reason="MissingParameter")
        return value

    def number(self, value: object, path: _PathT, *, positive: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(path, f"expected a number, got {_kind(value)}")
        v = float(value)
        if not math.isfinite(v) or v < 0 or (positive and v == 0):
            raise self.fail(path, f"{value} is out of range ({'> 0' if positive else '>= 0'})")
        return v

    def integer(self, value: object, path: _PathT, *, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {_kind(value)}")
        if not low <= value <= high:
            raise self.fail(path, f"{value} is out of range ({low}..{high})")
        return value

    def name(self, value: object, path: _PathT) -> str:
        if isinstance(value, bool) or not isinstance(value, str | int) or str(value) == "":
            raise self.fail(path, f"expected a name, got {_kind(value)}")
        return str(value)


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number"}.get(type(value), type(value).__name__)


def parse_analysis_file(text: str, source: str = "topology.yaml") -> Workload:
    """Parse and validate an analysis input document; ``source`` names it in errors."""
    data, lines = yamldoc.load(text, source, TopologyFileError)
    return _validate(data, _Checker(source, lines))


def load_analysis_file(path: str | Path) -> Workload:
    """Read and validate an analysis input file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TopologyFileError(f"{path}: cannot read the file: {exc}", field="path") from None
    return parse_analysis_file(text, str(path))


def _one_of(c: _Checker, top: Mapping[str, Any], a: str, b: str) -> str:
    if a in top and b in top:
        raise c.fail((b,), f"give either {a!r} or {b!r}, not both")
    if a not in top and b not in top:
        raise c.fail((), f"missing field: one of {a!r} or {b!r}", reason="MissingParameter")
    return a if a in top else b


def _validate(data: object, c: _Checker) -> Workload:
    top = c.mapping(data, (), _TOP)
    tree = _tree(c, top) if _one_of(c, top, "brokers", "generate") == "brokers" else _generated(c, top["generate"])
    if _one_of(c, top, "classes", "uniform") == "uniform":
        u = c.mapping(top["uniform"], ("uniform",), _UNIFORM, required=("subscriptions",))
        p: _PathT = ("uniform",)
        dist = _distribution(c, u.get("lifetime_distribution", "exponential"), (*p, "lifetime_distribution"))
        return uniform_workload(
            tree,
            subscriptions=c.number(u["subscriptions"], (*p, "subscriptions")),
            classes=c.integer(u.get("classes", 1000), (*p, "classes"), low=1, high=10**9),
            lifetime_s=c.number(u.get("lifetime_s", 60.0), (*p, "lifetime_s"), positive=True),
            publication_rate=c.number(u.get("publication_rate", 1000.0), (*p, "publication_rate")),
            lifetime_distribution=dist)
    items = top["classes"]
    if not isinstance(items, list) or not items:
        raise c.fail(("classes",), "expected a non-empty list of filter classes", reason="MissingParameter")
    groups: list[ClassGroup] = []
    for i, item in enumerate(items):
        group = _group(c, item, ("classes", i), tree)
        if any(g.name == group.name for g in groups):
            raise c.fail(("classes", i, "name"), f"duplicate class {group.name!r}")
        groups.append(group)
    return Workload(tree, tuple(groups))


def _distribution(c: _Checker, value: object, path: _PathT) -> str:
    if value not in LIFETIME_DISTRIBUTIONS:
        raise c.fail(path, f"{value!r} is not one of {', '.join(LIFETIME_DISTRIBUTIONS)}")
    return str(value)


def _generated(c: _Checker, value: object) -> BrokerTree:
    p: _PathT = ("generate",)
    g = c.mapping(value, p, _GENERATE, required=("brokers", "max_per_level"))
    return paper_tree(c.integer(g["max_per_level"], (*p, "max_per_level"), low=1, high=MAX_BROKERS),
                      c.integer(g["brokers"], (*p, "brokers"), low=1, high=MAX_BROKERS),
                      arity=c.integer(g.get("arity", 2), (*p, "arity"), low=1, high=MAX_BROKERS))


def _tree(c: _Checker, top: Mapping[str, Any]) -> BrokerTree:
    items = top["brokers"]
    if not isinstance(items, list) or not items:
        raise c.fail(("brokers",), "expected a non-empty list of brokers")
    if len(items) > MAX_BROKERS:
        raise c.fail(("brokers",), f"at most {MAX_BROKERS} brokers")
    names: dict[str, int] = {}
    parent_names: list[str | None] = []
    for i, item in enumerate(items):
        m = c.mapping(item, ("brokers", i), _BROKER, required=("name",))
        name = c.name(m["name"], ("brokers", i, "name"))
        if name in names:
            raise c.fail(("brokers", i, "name"), f"duplicate broker {name!r}")
        names[name] = i
        parent = m.get("parent")
        parent_names.append(None if parent is None else c.name(parent, ("brokers", i, "parent")))
    parents: list[int] = []
    for i, parent in enumerate(parent_names):
        if parent is None:
            parents.append(-1)
        elif parent not in names:
            raise c.fail(("brokers", i, "parent"), f"unknown broker {parent!r}")
        elif names[parent] == i:
            raise c.fail(("brokers", i, "parent"), f"broker {parent!r} is its own parent", reason="CyclicTopology")
        else:
            parents.append(names[parent])
    roots = [i for i, p in enumerate(parents) if p == -1]
    if len(roots) > 1:
        raise c.fail(("brokers", roots[1]), f"a second root ({list(names)[roots[1]]!r}; the first is "
                     f"{list(names)[roots[0]]!r}): every broker but one needs a parent")
    # A cycle: following parents from some broker never reaches a root.
    state = [0] * len(parents)  # 0 unseen, 1 on the current walk, 2 reaches the root
    for start in range(len(parents)):
        walk = []
        b = start
        while b != -1 and state[b] == 0:
            state[b] = 1
            walk.append(b)
            b = parents[b]
        if b != -1 and state[b] == 1:
            cycle = walk[walk.index(b):]
            shown = " -> ".join(list(names)[x] for x in [*cycle, b])
            raise c.fail(("brokers", min(cycle), "parent"), f"the brokers form a cycle: {shown}",
                         reason="CyclicTopology")
        for x in walk:
            state[x] = 2
    return BrokerTree(tuple(names), tuple(parents))


def _group(c: _Checker, item: object, p: _PathT, tree: BrokerTree) -> ClassGroup:
    m = c.mapping(item, p, _CLASS, required=("name",))
    name = c.name(m["name"], (*p, "name"))
    count = c.integer(m.get("count", 1), (*p, "count"), low=1, high=10**9)
    life = c.number(m["lifetime_s"], (*p, "lifetime_s"), positive=True) if "lifetime_s" in m else None
    dist = _distribution(c, m.get("lifetime_distribution", "exponential"), (*p, "lifetime_distribution"))
    if "default" not in m and "at" not in m:
        raise c.fail(p, f"class {name!r} gives no per-broker parameters: missing field 'default' or 'at'",
                     reason="MissingParameter")
    n = len(tree)
    default = _params(c, m.get("default", {}), (*p, "default"), life)
    lam = [default[0]] * n
    lifetimes = [default[1]] * n
    pub = [default[2]] * n
    at = m.get("at", {})
    if not isinstance(at, dict):
        raise c.fail((*p, "at"), f"expected a mapping of broker name to parameters, got {_kind(at)}")
    for broker, params in at.items():
        bp: _PathT = (*p, "at", str(broker))
        if str(broker) not in tree.names:
            raise c.fail(bp, f"unknown broker {broker!r}")
        b = tree.names.index(str(broker))
        lam[b], lifetimes[b], pub[b] = _params(c, params, bp, life, default)
    if sum(lam) == 0 and sum(pub) == 0:
        raise c.fail(p, f"class {name!r} has neither subscriptions nor publications anywhere",
                     reason="MissingParameter")
    return ClassGroup(name=name, count=count, arrival_per_s=tuple(lam), lifetime_s=tuple(lifetimes),
                      publish_per_s=tuple(pub), lifetime_distribution=dist)


def _params(c: _Checker, value: object, p: _PathT, class_life: float | None,
            default: tuple[float, float, float] | None = None) -> tuple[float, float, float]:
    """``(arrival_per_s, lifetime_s, publish_per_s)`` of one broker (or the class default)."""
    m = c.mapping(value, p, _PARAMS)
    if "arrival_per_s" in m and "subscriptions" in m:
        raise c.fail((*p, "subscriptions"), "give either 'arrival_per_s' or 'subscriptions' (the mean number "
                     "of concurrent subscriptions), not both")
    life = class_life if default is None else default[1]
    if "lifetime_s" in m:
        life = c.number(m["lifetime_s"], (*p, "lifetime_s"), positive=True)
    lam = default[0] if default is not None and "subscriptions" not in m else 0.0
    if "arrival_per_s" in m:
        lam = c.number(m["arrival_per_s"], (*p, "arrival_per_s"))
    if "subscriptions" in m:
        mean = c.number(m["subscriptions"], (*p, "subscriptions"))
        if mean > 0 and life is None:
            raise c.fail((*p, "subscriptions"), "a mean number of subscriptions needs a lifetime: missing "
                         "'lifetime_s' here or on the class", reason="MissingParameter")
        lam = mean / life if mean > 0 and life else 0.0
    if lam > 0 and life is None:
        raise c.fail(p, "subscriptions arrive here but no lifetime is given: missing 'lifetime_s' here or on "
                     "the class", reason="MissingParameter")
    pub = default[2] if default is not None else 0.0
    if "publish_per_s" in m:
        pub = c.number(m["publish_per_s"], (*p, "publish_per_s"))
    return lam, life or 0.0, pub
