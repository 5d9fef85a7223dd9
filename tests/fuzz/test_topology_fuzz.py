"""The topology parser (gridstat up FILE; demo/topology.py) under generated input: any text, and the
default topology with one value anywhere replaced by a value of another shape. It returns a topology
or raises TopologyError naming a field; nothing else escapes."""

from __future__ import annotations

from typing import Any

import yaml
import yamlfuzz
from hypothesis import given
from hypothesis import strategies as st

from gridstat.demo.topology import DEFAULT_TOPOLOGY_PATH, Topology, TopologyError, parse_topology

DEFAULT = yaml.safe_load(DEFAULT_TOPOLOGY_PATH.read_text())
FUZZ = yamlfuzz.FUZZ

values = yamlfuzz.values(["A", "a-edge1", "pmu-a1/freq", "edge"])


PATHS = yamlfuzz.paths(DEFAULT)


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
    _parse(yaml.safe_dump(yamlfuzz.mutated(DEFAULT, path, value, remove=remove), allow_unicode=True))
