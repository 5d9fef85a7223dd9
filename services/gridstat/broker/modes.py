"""Operating modes at the leaf broker: the mode registry and the five-phase change (dissertation 6.3)."""

from __future__ import annotations


class ModesMixin:
    """LeafBroker's modes commands; LeafBroker provides the state, links, lock and store."""
