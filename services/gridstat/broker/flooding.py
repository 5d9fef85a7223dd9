"""Limited flooding at the leaf broker: per variable and mode, pushed to the routers (dissertation 5.2)."""

from __future__ import annotations


class FloodingMixin:
    """LeafBroker's flooding commands; LeafBroker provides the state, links, lock and store."""
