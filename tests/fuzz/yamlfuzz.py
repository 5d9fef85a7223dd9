"""What the YAML input fuzzers share: values of any shape, every path into a document, and a document
with the value at one path replaced or removed (``test_analysis_loading_fuzz``, ``test_topology_fuzz``)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def values(words: Sequence[str]) -> st.SearchStrategy[Any]:
    """YAML values of every shape: scalars (``words`` among the strings), lists and mappings of them."""
    return st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
                  st.sampled_from(["", "0", "-1", "1e9", "x" * 200, *words]), st.text(max_size=10)),
        lambda inner: st.one_of(st.lists(inner, max_size=3),
                                st.dictionaries(st.text(max_size=8), inner, max_size=3)),
        max_leaves=6)


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (keys and indexes) into ``node``, the empty one (the whole document) first."""
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += paths(v, (*prefix, i))
    return out


def mutated(doc: Any, path: tuple[Any, ...], value: Any, *, remove: bool) -> Any:
    """A copy of ``doc`` with the value at ``path`` replaced by ``value``, or removed (``remove``, where
    it is a mapping's)."""
    if not path:
        return value
    doc = copy.deepcopy(doc)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if remove and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc
