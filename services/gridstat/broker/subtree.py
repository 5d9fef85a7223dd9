"""A parent broker's view of the clouds below it (dissertation 3.3.2).

A parent QoS broker knows its children (leaf or parent brokers) and, through their
``GetTopology``, which leaf clouds are under each and which inter-cloud channels were
registered further down. :class:`Subtree` holds that view and the calls that read it: the
parent broker (``parent_service.ParentBroker``) plans inter-cloud paths over it, its
``ParentModes`` calls the children in order and its ``ParentFlooding`` finds the child whose
subtree holds a publisher's cloud. The view is refreshed when needed; a child that does not
answer keeps what was known of it.
"""

from __future__ import annotations

import asyncio

import grpc

from gridstat.broker import parent as plan
from gridstat.broker.delegation import RPC_TIMEOUT_S, Peers
from gridstat.errors import NotFound
from gridstat.v1 import broker_pb2 as pb

#: A child's topology is read within this, when the height is asked.
TOPOLOGY_TIMEOUT_S = 5.0


class Subtree:
    """The children of one parent broker, the leaf clouds under each and the channels registered below."""

    def __init__(self, name: str, peers: Peers) -> None:
        self.name = name
        self.peers = peers
        #: The child brokers by name (stored by the parent broker, table ``child``).
        self.children: dict[str, pb.ChildBroker] = {}
        #: The leaf clouds under each child, as last read.
        self.child_clouds: dict[str, frozenset[str]] = {}
        #: Inter-cloud channels registered by brokers below this one, as last read.
        self.below: list[plan.InterChannel] = []

    def addresses(self) -> dict[str, str]:
        """Each child's gRPC address, by name."""
        return {n: c.address for n, c in self.children.items()}

    def clouds(self) -> frozenset[str]:
        """Every leaf cloud below this broker."""
        return frozenset().union(*self.child_clouds.values()) if self.child_clouds else frozenset()

    async def refresh(self) -> None:
        """Read the children's topology again (an unreachable child keeps what was known)."""
        async def view(c: pb.ChildBroker) -> pb.TopologyView:
            v: pb.TopologyView = await self.peers(c.address).broker.GetTopology(pb.GetTopologyRequest(),
                                                                                timeout=RPC_TIMEOUT_S)
            return v
        kids = list(self.children.values())
        views = await asyncio.gather(*(view(c) for c in kids), return_exceptions=True)
        below: list[plan.InterChannel] = []
        for c, v in zip(kids, views, strict=True):
            if isinstance(v, BaseException):
                continue  # unreachable child: keep what we knew
            self.child_clouds[c.name] = frozenset([c.name] if c.leaf else v.clouds)
            if not c.leaf:
                below += [plan.InterChannel(x.cloud_a, x.router_a, x.cloud_b, x.router_b, float(x.bandwidth_bps),
                                            x.latency_ms) for x in v.inter_cloud_channels]
        self.below = below

    async def leaf_address(self, cloud: str) -> str:
        """Walk down the subtree to the leaf broker of ``cloud``."""
        kids = dict(self.children)
        clouds = dict(self.child_clouds)
        for _ in range(32):
            name = plan.child_for(cloud, clouds)
            if name is None:
                break
            child = kids[name]
            if child.leaf:
                return child.address
            v = await self.peers(child.address).broker.GetTopology(pb.GetTopologyRequest(), timeout=RPC_TIMEOUT_S)
            kids = {c.name: c for c in v.children}
            clouds = {c.name: frozenset([c.name]) for c in v.children if c.leaf}
            for c in v.children:
                if not c.leaf:
                    sub = await self.peers(c.address).broker.GetTopology(pb.GetTopologyRequest(),
                                                                         timeout=RPC_TIMEOUT_S)
                    clouds[c.name] = frozenset(sub.clouds)
        raise NotFound(f"cloud {cloud!r} is not in the subtree of {self.name!r}", field="cloud")

    async def resolve(self, variable: str) -> pb.Publication | None:
        """``getVariableId`` down the subtree: the publication of ``variable`` and its cloud, or None."""
        for child in self.children.values():
            try:
                r = await self.peers(child.address).segments.ResolveVariable(
                    pb.ResolveVariableRequest(variable=variable), timeout=RPC_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE,
                                  grpc.StatusCode.DEADLINE_EXCEEDED):
                    continue
                raise
            pub: pb.Publication = r.publication
            if child.leaf:
                pub.cloud = child.name
            return pub
        return None

    async def list_variables(self, where: str) -> tuple[list[pb.Publication], list[str]]:
        """Every publication below that ``where`` matches, each with its cloud, and the children that
        did not answer (their clouds' publications are missing; docs/queries.md, "Across clouds")."""
        async def ask(c: pb.ChildBroker) -> pb.ListVariablesReply:
            r: pb.ListVariablesReply = await self.peers(c.address).segments.ListVariables(
                pb.ListVariablesRequest(where=where), timeout=RPC_TIMEOUT_S)
            return r
        kids = list(self.children.values())
        replies = await asyncio.gather(*(ask(c) for c in kids), return_exceptions=True)
        publications: list[pb.Publication] = []
        unreachable: list[str] = []
        for c, r in zip(kids, replies, strict=True):
            if isinstance(r, grpc.aio.AioRpcError):
                unreachable.append(c.name)
                continue
            if isinstance(r, BaseException):
                raise r
            for p in r.publications:
                if c.leaf and not p.cloud:
                    p.cloud = c.name
            publications += r.publications
            unreachable += r.unreachable
        return publications, unreachable

    async def height(self) -> int:
        """This broker's height in the hierarchy: 1 + its tallest child's (a leaf is 1)."""

        async def of(child: pb.ChildBroker) -> int:
            if child.leaf:
                return 1
            view: pb.TopologyView = await self.peers(child.address).broker.GetTopology(
                pb.GetTopologyRequest(), timeout=TOPOLOGY_TIMEOUT_S)
            return 1 + max([await of(c) for c in view.children], default=1)

        return 1 + max([await of(c) for c in list(self.children.values())], default=1)


__all__ = ["TOPOLOGY_TIMEOUT_S", "Subtree"]
