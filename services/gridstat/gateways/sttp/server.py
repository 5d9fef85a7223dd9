"""``SttpServer``: GridStat variables served to STTP subscribers (``gridstat sttp-server``, docs/sttp.md).

The front object owns its parts by name: ``subscriber`` (the SDK's: a query subscription for the
where-expression and one subscription per named variable, each admitted through the broker with the
interval, latency bound and redundancy asked), ``served`` (the pure mapping of each variable to its
STTP measurements, ``mapping.serve_variable``) and ``publisher`` (``library.ServingPublisher``: the
sttpapi publisher, its metadata, its clients and its sending thread).

Every served variable is subscribed to once, at ``interval_ms``, whatever the STTP clients select: the
library evaluates each client's filter expression against the ActiveMeasurements built from the
variables' attributes and routes to it only the measurements it selected; a throttled client gets
every ``publishInterval`` by GridStat's own rate filter (docs/sttp.md, "Filter expressions and
throttling"). Every ``follow_s`` the query subscription is refreshed: variables the broker admitted
or dropped since change the metadata, and the library tells the clients (CONFIGURATIONCHANGED).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gridstat.client import Holder, Subscriber, Subscription
from gridstat.client.querying import QuerySubscription
from gridstat.core.aio import cancelled, create_guarded_task
from gridstat.core.model import TypeSpec
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError, ValidationError
from gridstat.gateways.sttp import library, mapping

UNSUBSCRIBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class SttpServerOptions:
    """What ``SttpServer`` serves and how (``gridstat sttp-server``'s options)."""

    name: str
    edge: str
    interval_ms: int
    #: A where-expression over the variables' attributes (docs/queries.md), or "".
    where: str = ""
    #: (``publisher/variable``, type) subscribed to by name, besides those of ``where``.
    variables: Sequence[tuple[str, TypeSpec]] = ()
    latency_ms: int = 50
    redundancy: int = 1
    listen: tuple[str, int] = ("127.0.0.1", 7165)
    max_clients: int = 64
    #: Refresh the query subscription, and the metadata with it, every so many seconds (0: never).
    follow_s: float = 1.0
    tls: TlsFiles | None = None
    also_edges: Sequence[str] = ()
    subscriber_host: str = "127.0.0.1"
    subscriber_port: int = 0


def served_of(sub: Subscription) -> mapping.ServedVariable:
    """The measurements of a subscribed variable, from the broker's reply (type and attributes)."""
    var = sub.variable
    fields = tuple(n for n, _ in var.type.struct_type.fields) if var.type.struct_type is not None else ()
    return mapping.serve_variable(var.full_name, var.type.kind, attributes=dict(var.attributes),
                                  interval_ms=var.interval_ms, frames_per_s=var.frames_per_s,
                                  served_interval_ms=sub.interval_ms, struct_fields=fields)


class SttpServer:
    """One ``gridstat sttp-server``: subscribe, build the metadata, serve, stop."""

    def __init__(self, options: SttpServerOptions) -> None:
        if not options.where.strip() and not options.variables:
            raise ValidationError("an STTP server needs a where-expression or variables to serve",
                                  field="where")
        self.options = options
        self.subscriber: Subscriber | None = None
        self.query: QuerySubscription | None = None
        self.subscriptions: list[Subscription] = []
        #: Served variables by variable id.
        self.served: dict[int, mapping.ServedVariable] = {}
        #: Variables not served, by ``publisher/variable``: why (a struct that is not a phasor).
        self.unserved: dict[str, str] = {}
        self.publisher: library.ServingPublisher | None = None
        self.drops: Counter[str] = Counter()
        self.events = 0
        self.measurements = 0
        #: Times the metadata was defined again because the query's variables changed.
        self.metadata_changes = 0
        self._follow: asyncio.Task[None] | None = None

    # -- lifecycle ----------------------------------------------------------------------------------
    async def start(self) -> None:
        """Subscribe, build the metadata from what was admitted, listen. On failure everything started
        is stopped again and the error raised."""
        o = self.options
        library.load()  # fail before the broker is asked when sttpapi is missing
        try:
            self.subscriber = await Subscriber.connect(o.name, o.edge, tls=o.tls, first_time=True,
                                                       host=o.subscriber_host, port=o.subscriber_port,
                                                       also_edges=list(o.also_edges))
            if o.where.strip():
                # follow_s=None: the server refreshes the query itself, to redefine the metadata.
                self.query = await self.subscriber.subscribe_query(
                    o.where, interval_ms=o.interval_ms, latency_ms=o.latency_ms, redundancy=o.redundancy,
                    on_event=self._on_event, follow_s=None)
            for variable, type_ in o.variables:
                if self.query is not None and variable in self.query.members:
                    continue
                sub = await self.subscriber.subscribe_remote(variable, type_, interval_ms=o.interval_ms,
                                                             latency_ms=o.latency_ms, redundancy=o.redundancy,
                                                             on_event=self._on_event)
                self.subscriptions.append(sub)
            subs = self._current()
            served = self._map(subs)
            following = self.query is not None and o.follow_s > 0
            if not served and not following:  # a followed query may match variables registered later
                raise ValidationError(f"no variable to serve: {len(subs)} admitted, "
                                      f"{len(self.unserved)} of a type STTP cannot carry", field="where")
            publisher = library.ServingPublisher(served, max_connections=o.max_clients)
            try:
                publisher.start(*o.listen)
            except BaseException:
                publisher.stop()
                raise
            self.publisher = publisher
            if following:
                self._follow = create_guarded_task(self._follow_query(o.follow_s), name=f"sttp-server-{o.name}")
        except BaseException:
            await self.stop()
            raise

    def _current(self) -> list[Subscription]:
        """The subscriptions served: the query's members in name order, then those named."""
        subs = [self.query.members[n] for n in sorted(self.query.members)] if self.query is not None else []
        return subs + self.subscriptions

    def _map(self, subs: list[Subscription]) -> list[mapping.ServedVariable]:
        """``self.served`` and ``self.unserved`` for ``subs``; the served variables in order."""
        served: list[mapping.ServedVariable] = []
        by_id: dict[int, mapping.ServedVariable] = {}
        self.unserved = {}
        for sub in subs:
            try:
                s = served_of(sub)
            except ValidationError as exc:
                self.unserved[sub.variable.full_name] = str(exc.args[0])
                continue
            by_id[sub.variable.variable_id] = s
            served.append(s)
        self.served = by_id
        return served

    async def _follow_query(self, every_s: float) -> None:
        """Refresh the query; when its variables changed, define the metadata again (docs/sttp.md)."""
        while True:
            await asyncio.sleep(every_s)
            query, publisher = self.query, self.publisher
            if query is None or publisher is None:
                return
            try:
                changes = await query.refresh()
            except (GridStatError, OSError):
                self.drops["follow_failed"] += 1
                continue
            if changes.added or changes.dropped:
                served = self._map(self._current())
                await asyncio.to_thread(publisher.define, served)
                self.metadata_changes += 1

    async def stop(self) -> None:
        """Close every STTP client, remove the subscriptions at the broker."""
        await cancelled(self._follow)
        self._follow = None
        publisher, self.publisher = self.publisher, None
        if publisher is not None:
            await asyncio.to_thread(publisher.stop)
        subscriber, self.subscriber = self.subscriber, None
        if subscriber is not None:
            if self.query is not None:
                with contextlib.suppress(GridStatError, asyncio.TimeoutError, OSError):
                    await asyncio.wait_for(self.query.close(), UNSUBSCRIBE_TIMEOUT_S)
            for sub in self.subscriptions:
                with contextlib.suppress(GridStatError, asyncio.TimeoutError, OSError):
                    await asyncio.wait_for(subscriber.unsubscribe_remote(sub), UNSUBSCRIBE_TIMEOUT_S)
            await subscriber.stop()
        self.query = None
        self.subscriptions = []

    @property
    def port(self) -> int:
        if self.publisher is None:
            raise ValidationError("the STTP server is not started", field="state")
        return self.publisher.port

    @property
    def measurement_count(self) -> int:
        return sum(len(s.points) for s in self.served.values())

    # -- events -------------------------------------------------------------------------------------
    def _on_event(self, sub: Subscription, holder: Holder) -> None:
        publisher = self.publisher
        if publisher is None:
            self.drops["before_start"] += 1
            return
        served = self.served.get(sub.variable.variable_id)
        if served is None:
            self.drops["unserved_variable"] += 1
            return
        values = mapping.values_of(served, holder.value)
        if values is None:
            self.drops["bad_value"] += 1
            return
        # Whole milliseconds and no state flags: sttpapi's TSSC codec, every STTP subscriber's default,
        # drifts on sub-millisecond time steps and loses its place when a flag changes (docs/sttp.md,
        # "Values and timestamps").
        ticks = mapping.ticks_of_ms(holder.timestamp_ms)
        self.events += 1
        if publisher.offer([(p.signal_id, ticks, v, 0) for p, v in zip(served.points, values, strict=True)]):
            self.measurements += len(values)

    # -- reporting ----------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counts since the start (docs/sttp.md, "Counters")."""
        drops: dict[str, int] = dict(self.drops)
        p = self.publisher
        counts: dict[str, int] = {}
        clients = 0
        if p is not None:
            for k, n in p.drops.items():
                drops[k] = drops.get(k, 0) + n
            counts = dict(p.counts)
            clients = p.clients
        if self.subscriber is not None:
            for k, n in self.subscriber.stats.drops.items():
                drops[f"subscriber_{k}"] = n
        return {"clients": clients, "variables": len(self.served), "measurements_served": self.measurement_count,
                "unserved": len(self.unserved), "metadata_changes": self.metadata_changes,
                "events": self.events, "measurements": self.measurements,
                "sttp": counts, "drops": drops}

