"""gRPC methods of the leaf broker for modes (protos/gridstat/v1/broker.proto), thin over LeafBroker."""

from __future__ import annotations


class ModesServicerMixin:
    """Mixed into QoSBrokerServicer; uses self.broker and self._run."""
