"""Broker trees: the running example's T_k shapes (seed 001, section 3.2) and bad trees."""

from __future__ import annotations

import pytest

from gridstat.analysis import trees
from gridstat.errors import ValidationError


def test_paper_topologies_have_the_level_counts_of_the_leftmost_first_rule() -> None:
    levels = {name: len(t.level_sizes()) for name, t in trees.paper_trees().items()}
    assert levels == {"T1": 127, "T2": 64, "T4": 33, "T8": 18, "T16": 11, "T32": 8, "T64": 7}


def test_every_paper_topology_has_127_brokers_and_126_links() -> None:
    for t in trees.paper_trees().values():
        assert len(t) == 127
        assert t.links == 126
        assert sum(len(c) for c in t.children) == 126
        assert all(len(c) <= 2 for c in t.children)


def test_t8_levels_are_1_2_4_then_8() -> None:
    assert trees.paper_tree(8).level_sizes() == (1, 2, 4) + (8,) * 15


def test_each_parent_gets_two_children_before_the_next_parent() -> None:
    t = trees.paper_tree(2, brokers=7)
    # level 1: B1, B2 under B0; level 2: B3, B4 both under B1 (leftmost first), not one each.
    assert t.parents == (-1, 0, 0, 1, 1, 3, 3)


def test_path_to_root_excludes_the_root() -> None:
    t = trees.BrokerTree.from_parents({"R": None, "B1": "R", "B2": "B1"})
    assert t.path_to_root(2) == (2, 1)
    assert t.path_to_root(0) == ()
    assert t.depths == (0, 1, 2)
    assert t.post_order.index(2) < t.post_order.index(1) < t.post_order.index(0)


def test_a_cycle_is_a_specific_error() -> None:
    with pytest.raises(trees.TreeError) as err:
        trees.BrokerTree(("R", "a", "b"), (-1, 2, 1))
    assert err.value.reason == "CyclicTopology"
    assert "a -> b -> a" in str(err.value) or "b -> a -> b" in str(err.value)


def test_no_root_means_a_cycle() -> None:
    with pytest.raises(trees.TreeError) as err:
        trees.BrokerTree(("a", "b"), (1, 0))
    assert err.value.reason == "CyclicTopology"


def test_two_roots_and_unknown_parents_are_rejected() -> None:
    with pytest.raises(trees.TreeError, match="more than one root"):
        trees.BrokerTree(("a", "b"), (-1, -1))
    with pytest.raises(trees.TreeError, match="unknown parent"):
        trees.BrokerTree.from_parents({"a": None, "b": "zz"})


def test_generator_rejects_nonsense() -> None:
    with pytest.raises(ValidationError):
        trees.paper_tree(0)
