"""gRPC methods of the leaf broker for flooding (protos/gridstat/v1/broker.proto), thin over LeafBroker."""

from __future__ import annotations


class FloodingServicerMixin:
    """Mixed into QoSBrokerServicer; uses self.broker and self._run."""
