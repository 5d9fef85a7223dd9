"""The topology parser (gridstat up FILE; demo/topology.py) under generated input: any text, and the
default topology with one value anywhere replaced by a value of another shape. It returns a topology
or raises TopologyError naming a field; nothing else escapes."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gridstat.demo.topology import DEFAULT_TOPOLOGY_PATH, Topology, TopologyError, parse_topology

DEFAULT = yaml.safe_load(DEFAULT_TOPOLOGY_PATH.read_text())
FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
              st.sampled_from(["", "A", "a-edge1", "pmu-a1/freq", "edge", "0", "-1", "1e9", "x" * 200]),
              st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


PATHS = _paths(DEFAULT)


def _parse(text: str) -> None:
    try:
        topo = parse_topology(text, "fuzz.yaml")
    except TopologyError as exc:
        assert exc.field, exc
        return
    assert isinstance(topo, Topology)


@FUZZ
@given(st.text(max_size=300))
def test_any_text(text: str) -> None:
    _parse(text)


@FUZZ
@given(st.sampled_from(PATHS), values, st.booleans())
def test_default_topology_with_one_value_replaced_or_removed(path: tuple[Any, ...], value: Any, remove: bool) -> None:
    doc = copy.deepcopy(DEFAULT)
    if not path:
        doc = value
    else:
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if remove and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = value
    _parse(yaml.safe_dump(doc, allow_unicode=True))
