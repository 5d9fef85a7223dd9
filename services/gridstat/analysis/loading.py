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

MAX_BROKERS = 100_000

#: The file's shape (JSON Schema, checked by jsonschema: core.yamldoc.schema_problem); the tree (one
#: root, no cycle, known parents) and the workload's consistency are checked after it.
_BROKER_NAME = {"type": ["string", "integer"], "minLength": 1, "description": "a name"}
_COUNT = {"type": "integer", "minimum": 1, "maximum": 10**9}
_SIZE = {"type": "integer", "minimum": 1, "maximum": MAX_BROKERS}
_RATE = {"type": "number", "minimum": 0}
_LIFETIME = {"type": "number", "exclusiveMinimum": 0}
_DISTRIBUTION = {"enum": list(LIFETIME_DISTRIBUTIONS)}


def _obj(required: dict[str, object], optional: dict[str, object] | None = None) -> dict[str, object]:
    return {"type": "object", "properties": {**required, **(optional or {})}, "required": list(required),
            "additionalProperties": False}


_PARAMS = _obj({}, {"arrival_per_s": _RATE, "subscriptions": _RATE, "publish_per_s": _RATE, "lifetime_s": _LIFETIME})
SCHEMA: dict[str, object] = _obj({}, {
    "name": {"type": "string"},
    "brokers": {"type": "array", "minItems": 1, "maxItems": MAX_BROKERS, "description": "brokers",
                "items": _obj({"name": _BROKER_NAME}, {"parent": _BROKER_NAME})},
    "generate": _obj({"brokers": _SIZE, "max_per_level": _SIZE}, {"arity": _SIZE}),
    "classes": {"type": "array", "minItems": 1, "description": "filter classes", "items": _obj(
        {"name": _BROKER_NAME},
        {"count": _COUNT, "lifetime_s": _LIFETIME, "lifetime_distribution": _DISTRIBUTION, "default": _PARAMS,
         "at": {"type": "object", "additionalProperties": _PARAMS}})},
    "uniform": _obj({"subscriptions": _RATE}, {"classes": _COUNT, "lifetime_s": _LIFETIME, "publication_rate": _RATE,
                                               "lifetime_distribution": _DISTRIBUTION}),
})


class TopologyFileError(ValidationError):
    """An analysis input file is not valid; the message starts with ``file:line: field:``."""


class _Checker:
    def __init__(self, source: str, lines: Mapping[str, int]) -> None:
        self.source = source
        self.lines = lines

    def fail(self, path: _PathT, message: str, reason: str | None = None) -> TopologyFileError:
        name = field_name(path)
        line = yamldoc.line_of(self.lines, path)
        where = f"{self.source}:{line}" if line is not None else self.source
        return TopologyFileError(f"{where}: {name}: {message}", field=name, reason=reason)

    def number(self, value: object, path: _PathT) -> float:
        """A number the schema let through, refused if not finite (``.nan`` and ``.inf`` are numbers)."""
        v = float(value)  # type: ignore[arg-type]
        if not math.isfinite(v):
            raise self.fail(path, f"{value} is out of range (a finite number)")
        return v


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
    problem = yamldoc.schema_problem(data, SCHEMA, c.lines)
    if problem is not None:
        reason = "MissingParameter" if problem.keyword in ("required", "minItems") else None
        raise c.fail(problem.path, problem.message, reason=reason)
    assert isinstance(data, dict)
    top: dict[str, Any] = data
    tree = _tree(c, top) if _one_of(c, top, "brokers", "generate") == "brokers" else _generated(top["generate"])
    if _one_of(c, top, "classes", "uniform") == "uniform":
        u = top["uniform"]
        p: _PathT = ("uniform",)
        return uniform_workload(
            tree,
            subscriptions=c.number(u["subscriptions"], (*p, "subscriptions")),
            classes=u.get("classes", 1000),
            lifetime_s=c.number(u.get("lifetime_s", 60.0), (*p, "lifetime_s")),
            publication_rate=c.number(u.get("publication_rate", 1000.0), (*p, "publication_rate")),
            lifetime_distribution=u.get("lifetime_distribution", "exponential"))
    groups: list[ClassGroup] = []
    for i, item in enumerate(top["classes"]):
        group = _group(c, item, ("classes", i), tree)
        if any(g.name == group.name for g in groups):
            raise c.fail(("classes", i, "name"), f"duplicate class {group.name!r}")
        groups.append(group)
    return Workload(tree, tuple(groups))


def _generated(g: Mapping[str, Any]) -> BrokerTree:
    return paper_tree(g["max_per_level"], g["brokers"], arity=g.get("arity", 2))


def _tree(c: _Checker, top: Mapping[str, Any]) -> BrokerTree:
    items = top["brokers"]
    names: dict[str, int] = {}
    parent_names: list[str | None] = []
    for i, m in enumerate(items):
        name = str(m["name"])
        if name in names:
            raise c.fail(("brokers", i, "name"), f"duplicate broker {name!r}")
        names[name] = i
        parent = m.get("parent")
        parent_names.append(None if parent is None else str(parent))
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


def _group(c: _Checker, m: Mapping[str, Any], p: _PathT, tree: BrokerTree) -> ClassGroup:
    name = str(m["name"])
    life = c.number(m["lifetime_s"], (*p, "lifetime_s")) if "lifetime_s" in m else None
    if "default" not in m and "at" not in m:
        raise c.fail(p, f"class {name!r} gives no per-broker parameters: missing field 'default' or 'at'",
                     reason="MissingParameter")
    n = len(tree)
    default = _params(c, m.get("default", {}), (*p, "default"), life)
    lam = [default[0]] * n
    lifetimes = [default[1]] * n
    pub = [default[2]] * n
    for broker, params in m.get("at", {}).items():
        bp: _PathT = (*p, "at", str(broker))
        if str(broker) not in tree.names:
            raise c.fail(bp, f"unknown broker {broker!r}")
        b = tree.names.index(str(broker))
        lam[b], lifetimes[b], pub[b] = _params(c, params, bp, life, default)
    if sum(lam) == 0 and sum(pub) == 0:
        raise c.fail(p, f"class {name!r} has neither subscriptions nor publications anywhere",
                     reason="MissingParameter")
    return ClassGroup(name=name, count=m.get("count", 1), arrival_per_s=tuple(lam), lifetime_s=tuple(lifetimes),
                      publish_per_s=tuple(pub), lifetime_distribution=m.get("lifetime_distribution", "exponential"))


def _params(c: _Checker, m: Mapping[str, Any], p: _PathT, class_life: float | None,
            default: tuple[float, float, float] | None = None) -> tuple[float, float, float]:
    """``(arrival_per_s, lifetime_s, publish_per_s)`` of one broker (or the class default)."""
    if "arrival_per_s" in m and "subscriptions" in m:
        raise c.fail((*p, "subscriptions"), "give either 'arrival_per_s' or 'subscriptions' (the mean number "
                     "of concurrent subscriptions), not both")
    life = class_life if default is None else default[1]
    if "lifetime_s" in m:
        life = c.number(m["lifetime_s"], (*p, "lifetime_s"))
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
