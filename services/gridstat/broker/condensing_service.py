"""gRPC methods of the leaf broker for condensing (protos/gridstat/v1/broker.proto), thin over LeafBroker."""

from __future__ import annotations


class CondensationServicerMixin:
    """Mixed into QoSBrokerServicer; uses self.broker and self._run."""
