"""Condensation functions at the leaf broker: validation, placement and setup (dissertation 7.3)."""

from __future__ import annotations


class CondensationMixin:
    """LeafBroker's condensing commands; LeafBroker provides the state, links, lock and store."""
