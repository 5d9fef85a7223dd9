"""The leaf broker's side of the admission controller (``gridstat broker --admission HOST:PORT``; docs/admission.md).

The broker plans a subscription's paths and reserves them in its own state as always (its
reservation check: rates after filtering against channel and router capacity). With a controller
configured, that reservation is tentative until the controller agrees: the broker sends it the
subscription's filter (the variable), its interval and every hop of every path (router, outgoing
link, mode), and the controller decides with its own model (advertised rates, Theorem 1, CPU,
bandwidth and memory per router, the full or percentage criterion). Refused: the broker undoes its
reservation and the subscriber gets the controller's reason and per-hop verdicts. Partially
guaranteed (percentage criterion): admitted, with its routes marked best effort so that overloaded
routers shed them before guaranteed streams. Unreachable: the broker's own check stands, and the
reply says so (``fallback``); nothing beyond the broker's capacity model is admitted either way.

Before asking, the link brings the controller up to date when needed: the broker's routers and
links (``DeclareResources``) after a topology change, its publications as advertisements
(``SyncAdvertisements``, one source per cloud) after a publication change, and both after the
controller restarted (a new ``epoch``).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

from gridstat.broker.rejections import AdmissionRejected
from gridstat.core.tls import ClientChannel, TlsFiles
from gridstat.errors import ValidationError
from gridstat.v1 import admission_pb2 as apb
from gridstat.v1 import admission_pb2_grpc as apb_grpc
from gridstat.v1 import broker_pb2 as pb

if TYPE_CHECKING:
    from gridstat.broker.cloud import Cloud
    from gridstat.cloud.state import SubscriptionRecord
    from gridstat.core.model import StatusVariable

log = logging.getLogger(__name__)

DEFAULT_DEADLINE_S = 2.0
#: The most events/s one publication may advertise (the controller refuses more; see admission.covering).
MAX_RATE_EPS = 1_000_000.0


class ControllerRejected(AdmissionRejected):
    """The admission controller refused the subscription; ``note`` carries its decision per hop."""

    def __init__(self, reason: str, message: str, note: pb.AdmissionNote) -> None:
        super().__init__(f"admission controller: {message}", field="admission")
        self.reason = reason or "AdmissionRejected"
        self.note = note


@dataclass(frozen=True)
class Consulted:
    """The controller's part in an admitted subscription."""

    note: pb.AdmissionNote
    #: Only part of the rate is guaranteed (percentage criterion): the routes become best effort.
    partial: bool = False


def advertised_rate(var: StatusVariable, max_rate_eps: float | None) -> float:
    """A publication's V_pmax: the declared one, validated, or the rate its interval implies."""
    implied = 1000.0 / var.effective_interval_ms
    if max_rate_eps is None:
        return implied
    rate = float(max_rate_eps)
    if not math.isfinite(rate) or rate <= 0:
        raise ValidationError(f"max rate {max_rate_eps!r} of {var.full_name!r} must be a finite number of "
                              "events/s above 0", field="publication.max_rate_eps")
    if rate > MAX_RATE_EPS:
        raise ValidationError(f"max rate {rate:g} events/s of {var.full_name!r} is absurd (more than "
                              f"{MAX_RATE_EPS:g})", field="publication.max_rate_eps")
    if rate < implied * (1 - 1e-9):
        raise ValidationError(f"max rate {rate:g} events/s of {var.full_name!r} is below the {implied:g} events/s "
                              "its interval publishes", field="publication.max_rate_eps")
    return rate


class AdmissionLink:
    """One leaf broker's gRPC client of the admission controller."""

    def __init__(self, address: str, *, tls: TlsFiles | None = None, deadline_s: float = DEFAULT_DEADLINE_S) -> None:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValidationError(f"admission controller address {address!r} must be HOST:PORT", field="admission")
        if deadline_s <= 0:
            raise ValidationError("the admission deadline must be positive", field="admission_deadline_ms")
        self.address = address
        self.deadline_s = deadline_s
        #: Follows its certificate files: a renewed certificate is used without a restart.
        self._client = ClientChannel(address, tls)
        self._epoch = ""
        self._resources_version = -1
        self._adverts_version = -1
        self._sync_lock = asyncio.Lock()
        #: Releases the controller could not be told of yet; retried before the next request.
        self._releases: set[str] = set()
        #: Outcomes so far: admitted, partial, rejected, fallback.
        self.counts: dict[str, int] = {"admitted": 0, "partial": 0, "rejected": 0, "fallback": 0}
        #: Held subscriptions must be registered again (controller restarted, or missed some).
        self._replay = False

    @property
    def _stub(self) -> apb_grpc.AdmissionControlStub:
        return self._client.stub(apb_grpc.AdmissionControlStub)

    async def close(self) -> None:
        await self._client.close()

    # -- bringing the controller up to date ------------------------------------------------------
    async def sync(self, cloud: Cloud) -> None:
        """Declare resources and advertisements if the broker's or the controller's side changed."""
        async with self._sync_lock:
            if self._resources_version != cloud.resources_version or not self._epoch:
                version = cloud.resources_version
                topo = cloud.state.topology
                reply = await self._stub.DeclareResources(apb.DeclareResourcesRequest(
                    source=cloud.name,
                    routers=[apb.RouterResources(router=r.name, cpu_eps=float(r.capacity_eps)) for r in topo],
                    links=[apb.LinkResources(link=c.name, router=c.src, bandwidth_bps=float(c.bandwidth_bps))
                           for c in topo.channels.values()]), timeout=self.deadline_s)
                self._note_epoch(reply.epoch)
                self._resources_version = version
            if self._adverts_version != cloud.adverts_version:
                version = cloud.adverts_version
                reply = await self._stub.SyncAdvertisements(apb.SyncAdvertisementsRequest(
                    source=cloud.name, advertisements=list(self._advertisements(cloud))), timeout=self.deadline_s)
                self._note_epoch(reply.epoch)
                self._adverts_version = version
            for sid in sorted(self._releases):
                await self._stub.Release(apb.ReleaseRequest(subscription_id=sid), timeout=self.deadline_s)
                self._releases.discard(sid)
            if self._replay:
                await self._replay_held(cloud)

    async def _replay_held(self, cloud: Cloud) -> None:
        """Register every subscription the broker holds with a controller that lacks them: one
        that restarted (its state is in memory) or one that was unreachable while subscriptions were
        admitted by the broker's own check. Admit is idempotent per subscription id, so the ones it
        already holds cost a lookup. A refusal here cannot undo what is installed; it is logged and
        counted, and the controller then knows the load it refused."""
        refused = 0
        for record in list(cloud.state.subscriptions.values()):
            reply = await self._stub.Admit(self._request(cloud, record), timeout=self.deadline_s)
            if not reply.admitted:
                refused += 1
        self._replay = False
        self.counts["replayed"] = self.counts.get("replayed", 0) + len(cloud.state.subscriptions)
        if refused:
            self.counts["replay_refused"] = self.counts.get("replay_refused", 0) + refused
            log.warning("admission controller %s refused %d of the %d subscriptions the broker holds when they "
                        "were registered again", self.address, refused, len(cloud.state.subscriptions))

    def _note_epoch(self, epoch: str) -> None:
        if self._epoch and epoch != self._epoch:
            log.warning("admission controller %s restarted: declaring resources, advertisements and held "
                        "subscriptions again", self.address)
            self._resources_version = self._adverts_version = -1
            self._replay = True
        self._epoch = epoch

    def _advertisements(self, cloud: Cloud) -> Iterable[apb.Advertisement]:
        for var in cloud.state.registry:
            rate = cloud.max_rates.get(var.full_name) or 1000.0 / var.effective_interval_ms
            yield apb.Advertisement(advertisement_id=f"{cloud.name}:{var.full_name}",
                                    filter=apb.Filter(variable=var.full_name), max_rate_eps=rate, source=cloud.name)

    # -- deciding ----------------------------------------------------------------------------------
    async def consult(self, cloud: Cloud, record: SubscriptionRecord) -> Consulted:
        """Ask the controller about an admitted-by-the-broker subscription.

        Returns the controller's note (or a fallback note when it cannot be reached); raises
        :class:`ControllerRejected` when it refuses.
        """
        try:
            await self.sync(cloud)
            request = self._request(cloud, record)
            reply: apb.AdmissionDecision = await self._stub.Admit(request, timeout=self.deadline_s)
            if reply.epoch != self._epoch:  # restarted since the last sync: it lacks this cloud's state
                self._note_epoch(reply.epoch)
                await self.sync(cloud)
                await self._stub.Release(apb.ReleaseRequest(subscription_id=request.subscription_id),
                                         timeout=self.deadline_s)
                reply = await self._stub.Admit(request, timeout=self.deadline_s)
        except grpc.aio.AioRpcError as exc:
            self.counts["fallback"] += 1
            self._replay = True  # the controller will not know this one: register it when it is back
            what = "unreachable" if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) \
                else f"failed ({exc.code().name}: {exc.details()})"
            log.warning("admission controller %s %s; subscription %s decided by the broker's own reservation check",
                        self.address, what, record.subscription_id)
            return Consulted(pb.AdmissionNote(
                consulted=True, fallback=True, decided_by="broker", controller=self.address,
                note=f"admission controller {self.address} {what}: admitted by the leaf broker's own reservation "
                     "check (rates after filtering against channel and router capacity) alone"))
        self._note_epoch(reply.epoch)
        note = pb.AdmissionNote(consulted=True, decided_by="controller", controller=self.address, note=reply.message,
                                decision=reply)
        if not reply.admitted:
            self.counts["rejected"] += 1
            raise ControllerRejected(reply.reason, reply.message, note)
        partial = reply.reason == "PartiallyGuaranteed"
        self.counts["partial" if partial else "admitted"] += 1
        return Consulted(note, partial)

    def _request(self, cloud: Cloud, record: SubscriptionRecord) -> apb.AdmitRequest:
        topo = cloud.state.topology
        hops = []
        for mode, paths in record.paths:
            for path in paths:
                routers = path.routers
                for i, router in enumerate(routers):
                    link = topo.channel_between(router, routers[i + 1]).name if i + 1 < len(routers) else \
                        record.reserved_last_channel(router)
                    hops.append(apb.Hop(router=router, link=link, mode=mode))
        interval = min(q.interval_ms for q in record.qos)
        return apb.AdmitRequest(subscription_id=f"{cloud.name}:{record.subscription_id}",
                                filter=apb.Filter(variable=record.variable), interval_ms=interval, hops=hops)

    async def release(self, broker_name: str, subscription_id: str) -> None:
        """Tell the controller a subscription is gone; retried later if it cannot be reached now."""
        sid = f"{broker_name}:{subscription_id}"
        try:
            await self._stub.Release(apb.ReleaseRequest(subscription_id=sid), timeout=self.deadline_s)
        except grpc.aio.AioRpcError as exc:
            log.warning("admission controller %s: release of %s failed (%s); retried later", self.address, sid,
                        exc.code().name)
            self._releases.add(sid)


__all__ = ["AdmissionLink", "Consulted", "ControllerRejected", "advertised_rate"]
