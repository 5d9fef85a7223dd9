"""Condensation functions at the leaf broker: validation, placement and setup (dissertation 7.3).

``CondensationCoordinator.create`` follows GridStat's creation order (7.3.2):

1. validate the request: the inputs are variables of this cloud (``UnknownVariable``
   naming ``inputs[i].variable`` otherwise) of a numeric scalar type, the specification
   is well formed (``ValidationError`` naming ``spec.trigger.count`` ...), the output is a
   new variable;
2. place the function (``placement.plan_placement``): the inputs' shared edge router,
   else a brute-force search for a router that keeps every input's QoS;
3. under the broker lock, admit one subscription per input whose last hop is the
   function's pseudo channel ``cf:<function_id>`` on that router (``CloudState.admit_path``
   with that channel as the exit), register the output publication with a publisher of
   the function at that router, so that ordinary subscribers can subscribe to it;
4. outside the lock, open the output publisher's inbound channel on the router, load the
   function there (``SetupCondensation``), then install the input routes through the
   group commit, like a subscription's (``admitting``);
5. write everything through to the store (table ``condensations``) and answer.

If any step fails, what was done is undone (the reservations, the output, the
publisher, the slot), so a function is created whole or not at all. Only the creator
may remove one; removing it drops the output publication (and its subscribers), the
input subscriptions, the publisher of the function if no other function uses it, and
the router slot.

Restarts: the function, its input subscriptions, its output publication and its
publisher are durable, so a restarted broker restores them. Routers hold hard state and
keep running their functions meanwhile. Before the supervisor reconciles a router
(first contact after a broker restart, a router restart, a dirty mark) it makes the
router's slots match the functions placed there (``CondensationCoordinator.prepare_router``): it loads
the missing ones (a restarted router comes back empty; ``SetupCondensation`` is
idempotent) and unloads the ones the broker no longer knows, then the reconcile puts the
routes back. A restarted function starts with empty input values and zero counters.

The output publisher is a pseudo client of kind ``publisher`` at the function's router:
its client id is the sender id the router injects the output with (the inbound channel
``pub:<publisher>``). Its name is the request's ``output.publisher`` (default: the
function id); it may be shared by several functions placed on the same router, but not
with a real publisher.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import json_format

from gridstat import condensation
from gridstat.broker import installer
from gridstat.broker.placement import PlacementInput, plan_placement
from gridstat.broker.state import Client, DesiredChannel, ModeQoS, SubscriptionRecord
from gridstat.condensation import calculators
from gridstat.condensation.calculators import InputInfo
from gridstat.condensation.spec import check_inputs, spec_from_message
from gridstat.condensation.triggers import TriggerKind
from gridstat.core import rpc
from gridstat.core.model import MAX_MODES, StatusVariable, TypeSpec, ValueType, check_name
from gridstat.core.protoconv import priority_of, type_from_pb
from gridstat.errors import (
    DuplicateName,
    GridStatError,
    NotFound,
    TypeMismatch,
    Unauthorized,
    UnknownVariable,
    ValidationError,
    strip_reason,
)
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import condensation_pb2 as cpb
from gridstat.v1 import router_pb2 as rpb

if TYPE_CHECKING:
    from gridstat.broker.admitting import SubscriptionCoordinator
    from gridstat.broker.cloud import Cloud
    from gridstat.broker.installer import RouterChange, RouterLink
    from gridstat.broker.modes import ModeCoordinator

log = logging.getLogger(__name__)

#: Deadline of a status query to a router for ListCondensations.
STATUS_TIMEOUT_S = 2.0
_SCALARS = {ValueType.INT: "int", ValueType.FLOAT: "float", ValueType.BOOL: "bool"}
_TYPE_NAMES = {"int": TypeSpec(ValueType.INT), "float": TypeSpec(ValueType.FLOAT), "bool": TypeSpec(ValueType.BOOL)}


@dataclass(frozen=True)
class FunctionInput:
    """One input of a placed function and the subscription that feeds it."""

    variable: str
    variable_id: int
    value_type: str
    pub_interval_ms: int
    alert: bool
    publisher_router: str
    interval_ms: int
    latency_ms: float
    subscription_id: str


@dataclass(frozen=True)
class CondensationRecord:
    """A placed condensation function as the leaf broker keeps (and stores) it."""

    function_id: str
    creator: str
    router: str
    placement: str
    mode: int
    output: str  # "publisher/variable"
    output_variable_id: int
    output_pub_interval_ms: int
    output_alert: bool
    output_priority: int
    output_sender_id: int
    inputs: tuple[FunctionInput, ...]
    #: The normalized ``CondensationSpec`` message in its JSON form.
    spec: dict[str, Any]

    @property
    def output_publisher(self) -> str:
        return self.output.split("/", 1)[0]

    @property
    def channel(self) -> str:
        return condensation.channel_name(self.function_id)

    def spec_pb(self) -> cpb.CondensationSpec:
        return json_format.ParseDict(self.spec, cpb.CondensationSpec())

    def setup_pb(self) -> cpb.CondensationSetup:
        return cpb.CondensationSetup(
            function_id=self.function_id, creator=self.creator,
            inputs=[cpb.CondensationInput(variable_id=i.variable_id, variable=i.variable, value_type=i.value_type,
                                          pub_interval_ms=i.pub_interval_ms, alert=i.alert) for i in self.inputs],
            spec=self.spec_pb(), output_variable_id=self.output_variable_id,
            output_pub_interval_ms=self.output_pub_interval_ms, output_alert=self.output_alert,
            output_priority=self.output_priority, output_sender_id=self.output_sender_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "function_id": self.function_id, "creator": self.creator, "router": self.router,
            "placement": self.placement, "mode": self.mode, "output": self.output,
            "output_variable_id": self.output_variable_id, "output_pub_interval_ms": self.output_pub_interval_ms,
            "output_alert": self.output_alert, "output_priority": self.output_priority,
            "output_sender_id": self.output_sender_id,
            "inputs": [{"variable": i.variable, "variable_id": i.variable_id, "value_type": i.value_type,
                        "pub_interval_ms": i.pub_interval_ms, "alert": i.alert,
                        "publisher_router": i.publisher_router, "interval_ms": i.interval_ms,
                        "latency_ms": i.latency_ms, "subscription_id": i.subscription_id} for i in self.inputs],
            "spec": self.spec,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CondensationRecord:
        return cls(d["function_id"], d["creator"], d["router"], d["placement"], d["mode"], d["output"],
                   d["output_variable_id"], d["output_pub_interval_ms"], d["output_alert"], d["output_priority"],
                   d["output_sender_id"], tuple(FunctionInput(**i) for i in d["inputs"]), d["spec"])


@dataclass(frozen=True)
class _Output:
    publisher: str
    variable: str
    type: TypeSpec
    interval_ms: int
    priority: int
    alert: bool
    min_interval_ms: int


def _router_error(exc: grpc.aio.AioRpcError, router: str) -> GridStatError:
    """A router's refusal as the broker's own error (its reason and field kept)."""
    md = {str(k): str(v) for k, v in (exc.trailing_metadata() or ())}
    reason, fld = md.get(rpc.REASON_KEY, ""), md.get(rpc.FIELD_KEY) or None
    details = strip_reason(exc.details() or "", reason)
    if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return installer.RouterUnavailable(f"router {router!r} did not answer: {details}", field="router")
    text = f"router {router!r} refused the function: {details}"
    if reason == "NotFound" or exc.code() == grpc.StatusCode.NOT_FOUND:
        return NotFound(text, field=fld)
    if reason == "InvalidArgument":
        return ValidationError(text, field=fld)
    return GridStatError(text, reason=reason or "RouterRefused", field=fld)


def _output(request: bpb.CreateCondensationRequest, spec: cpb.CondensationSpec, function_id: str,
            inputs: list[FunctionInput]) -> _Output:
    """The output publication, its gaps filled from the trigger; normalizes ``spec`` in place."""
    out = request.output
    publisher = check_name(out.publisher or function_id, what="output.publisher")
    if not out.variable:
        raise ValidationError("the output needs a variable name (output.variable)", field="output.variable")
    variable = check_name(out.variable, what="output.variable")
    declared = type_from_pb(out.type, field="output.type")
    if declared is not None and declared.kind not in _SCALARS:
        raise TypeMismatch(f"a condensation output is int, float or bool, not {declared.name!r}",
                           field="output.type")
    if spec.output_type and declared is not None and _SCALARS[declared.kind] != spec.output_type:
        raise TypeMismatch(f"output.type {declared.name!r} differs from spec.output_type {spec.output_type!r}",
                           field="output.type")
    if not spec.output_type:
        builtin = calculators.BUILTINS.get(spec.calculator)
        spec.output_type = _SCALARS[declared.kind] if declared is not None else (
            builtin.default_output_type if builtin is not None else "float")
    kind = TriggerKind.parse(int(spec.trigger.kind), field="spec.trigger.kind")
    interval = int(out.interval_ms)
    alert = bool(out.alert)
    min_interval = int(out.min_interval_ms)
    if kind is TriggerKind.TIME:
        if not spec.trigger.interval_ms:
            spec.trigger.interval_ms = interval
        if interval and interval != spec.trigger.interval_ms:
            raise ValidationError(f"a time-triggered output is published every spec.trigger.interval_ms "
                                  f"({spec.trigger.interval_ms} ms), not {interval} ms", field="output.interval_ms")
        interval = spec.trigger.interval_ms
    elif kind is TriggerKind.EVENTS:
        interval = interval or max(i.pub_interval_ms for i in inputs)
    else:  # an alert trigger's output is aperiodic: an alert variable (2.1.3)
        alert = True
    if alert and not min_interval:
        min_interval = interval or min(i.pub_interval_ms for i in inputs)
    return _Output(publisher, variable, _TYPE_NAMES[spec.output_type], interval, priority_of(out),
                   alert, min_interval)


class CondensationCoordinator:
    """The leaf broker's condensation functions: it owns the placed functions and the ones being
    created; their input subscriptions are admitted on the ``CloudState`` and installed and removed
    through the ``SubscriptionCoordinator``, in modes the ``ModeCoordinator`` defines."""

    def __init__(self, cloud: Cloud, subscriptions: SubscriptionCoordinator, modes: ModeCoordinator) -> None:
        self.cloud = cloud
        self.subscriptions = subscriptions
        self.modes = modes
        #: The placed functions by id.
        self.functions: dict[str, CondensationRecord] = {}
        #: Functions being set up on their router: a reconcile meanwhile must not unload their slot.
        self.creating: set[str] = set()

    def load(self) -> None:
        """Restore the placed functions from the store (their subscriptions, output and publisher are
        restored with the other subscriptions, publications and clients)."""
        for d in self.cloud.store.all("condensations"):
            record = CondensationRecord.from_json(d)
            self.functions[record.function_id] = record
        if self.functions:
            log.info("broker %s restored %d condensation functions", self.cloud.name, len(self.functions))

    def publishes(self, name: str) -> bool:
        """Whether ``name`` is the publisher of a condensation function's output (a pseudo client)."""
        return any(r.output_publisher == name for r in self.functions.values())

    def refuse_publisher(self, name: str, kind: str) -> None:
        """A real publisher may not register under a condensation function's publisher name."""
        if kind == "publisher" and self.publishes(name):
            raise DuplicateName(f"publisher {name!r} publishes the output of a condensation function",
                                field="name")

    # -- commands ------------------------------------------------------------------------------------
    async def create(self, request: bpb.CreateCondensationRequest) -> CondensationRecord:
        """Validate, place, set up and admit a function (module docstring); all or nothing."""
        creator = check_name(request.creator, what="creator")
        mode = int(request.mode)
        if not 0 <= mode < MAX_MODES:
            raise ValidationError(f"mode {mode} is outside 0..{MAX_MODES - 1}", field="mode")
        try:
            self.modes.check_defined((mode,))
        except GridStatError as exc:
            exc.field = "mode"
            raise
        spec_msg = cpb.CondensationSpec()
        spec_msg.CopyFrom(request.spec)
        async with self.cloud.lock:
            st = self.cloud.state
            function_id = request.function_id or self._new_function_id()
            check_name(function_id, what="function_id")
            if function_id in self.functions or function_id in self.creating:
                raise DuplicateName(f"condensation function {function_id!r} exists", field="function_id")
            inputs = self._resolve_inputs(request.inputs, function_id)
            out = _output(request, spec_msg, function_id, inputs)
            spec = spec_from_message(spec_msg)
            check_inputs([InputInfo(i.variable_id, i.variable, i.value_type, i.pub_interval_ms, i.alert)
                          for i in inputs], spec)
            full = f"{out.publisher}/{out.variable}"
            if any(v.full_name == full for v in st.registry):
                raise DuplicateName(f"status variable {full!r} is already registered", field="output.variable")
            existing = st.clients.get(("publisher", out.publisher))
            if existing is not None and not self.publishes(out.publisher):
                raise DuplicateName(f"{out.publisher!r} is a registered publisher; a function's output needs a "
                                    "publisher name of its own", field="output.publisher")
            placement = plan_placement(
                st.topology, st.reservations(mode),
                [PlacementInput(i.variable_id, i.publisher_router, i.pub_interval_ms, i.interval_ms, i.latency_ms)
                 for i in inputs],
                requested=request.placement_router, down=st.down, forwarding_ms=st.forwarding_ms,
                allowed=lambda inp, router: st.allowed(mode, inp.variable_id, inp.publisher_router, router, 1))
            router = placement.router
            if existing is not None and existing.edge_router != router:
                raise ValidationError(f"publisher {out.publisher!r} publishes from router {existing.edge_router!r}; "
                                      f"this function is placed at {router!r}: name another output.publisher",
                                      field="output.publisher")
            admitted, var, client = self._admit_locked(function_id, mode, router, inputs, out, existing)
            self.creating.add(function_id)
        record = CondensationRecord(
            function_id, creator, router, placement.reason, mode, var.full_name, var.variable_id,
            var.effective_interval_ms, var.alert, var.priority, client.client_id, tuple(inputs),
            json_format.MessageToDict(spec_msg, preserving_proto_field_name=True))
        try:
            await self._install(record, admitted, new_publisher=existing is None)
        except BaseException:
            async with self.cloud.lock:
                await self._undo_locked(record, admitted, new_publisher=existing is None)
            self.creating.discard(function_id)
            await self._terminate(record)
            self.cloud.supervisor.mark_dirty(router)
            raise
        async with self.cloud.lock:
            self.creating.discard(function_id)
            self.functions[function_id] = record
            with self.cloud.store.transaction():
                for sub in admitted:
                    self.cloud.store.put_subscription(sub)
                self.cloud.store.put_publication(var)
                self.cloud.store.put_client(client)
                self.cloud.store.put("condensations", function_id, record.to_json())
                self.cloud.save_counters()
        log.info("broker %s: condensation function %s (%s) placed at %s (%s), output %s", self.cloud.name, function_id,
                 spec.calculator, router, placement.reason, var.full_name)
        return record

    async def remove(self, function_id: str, creator: str) -> int:
        """Remove a function; only its creator may. Returns the subscriptions removed (its inputs and the
        subscriptions to its output)."""
        async with self.cloud.lock:
            record = self.functions.get(function_id)
            if record is None:
                raise NotFound(f"no condensation function {function_id!r}", field="function_id")
            if creator != record.creator:
                raise Unauthorized(f"only its creator may remove condensation function {function_id!r}",
                                   field="creator")
            removed = 0
            if any(v.full_name == record.output for v in self.cloud.state.registry):
                removed += await self.subscriptions.unregister_publication_locked(record.output)
            for inp in record.inputs:
                if inp.subscription_id in self.cloud.state.subscriptions:
                    await self.subscriptions.unsubscribe_locked(inp.subscription_id)
                    removed += 1
            del self.functions[function_id]
            with self.cloud.store.transaction():
                self.cloud.store.delete("condensations", function_id)
                if not self.publishes(record.output_publisher):
                    self.cloud.state.clients.pop(("publisher", record.output_publisher), None)
                    self.cloud.store.delete("clients", f"publisher/{record.output_publisher}")
        await self._terminate(record)
        await self.cloud.supervisor.reconcile_now(record.router)  # closes the publisher's channel if it went
        return removed

    async def statuses(self, records: Iterable[CondensationRecord]) -> dict[str, cpb.CondensationStatus]:
        """The routers' reports of the given functions, by id (a router that does not answer: no entry)."""
        wanted = list(records)
        routers = sorted({r.router for r in wanted})

        async def stats(name: str) -> list[cpb.CondensationStatus]:
            link = self.cloud.links.get(name)
            if link is None:
                return []
            try:
                reply = await link.stub.GetStats(rpb.GetStatsRequest(), timeout=STATUS_TIMEOUT_S)
            except grpc.aio.AioRpcError:
                return []
            return list(reply.condensations)

        out: dict[str, cpb.CondensationStatus] = {}
        for statuses in await asyncio.gather(*(stats(n) for n in routers)):
            for s in statuses:
                out[s.function_id] = s
        return out

    # -- internals -----------------------------------------------------------------------------------
    def _new_function_id(self) -> str:
        n = self._next_condensation()
        self.cloud.store.set_meta("next_condensation", n + 1)
        return f"{self.cloud.name}-cf{n}"

    def _next_condensation(self) -> int:
        return int(self.cloud.store.get_meta("next_condensation") or 1)

    def _resolve_inputs(self, requests: Iterable[bpb.CondensationInputRequest],
                        function_id: str) -> list[FunctionInput]:
        st = self.cloud.state
        out: list[FunctionInput] = []
        for i, inp in enumerate(requests):
            where = f"inputs[{i}]"
            try:
                var = st.registry.lookup(inp.variable)
            except UnknownVariable as exc:
                raise UnknownVariable(f"input {i}: {exc.args[0]}", field=f"{where}.variable") from None
            except ValidationError as exc:
                raise ValidationError(f"input {i}: {exc.args[0]}", field=f"{where}.variable") from None
            if var.type.kind not in _SCALARS:
                raise TypeMismatch(f"input {inp.variable!r} is of type {var.type.name!r}; condensation inputs are "
                                   "int, float or bool", field=f"{where}.variable")
            pub = var.effective_interval_ms
            interval = int(inp.interval_ms) or pub
            if interval < pub:
                raise ValidationError(f"input {inp.variable!r}: interval {interval} ms is shorter than its "
                                      f"publication interval {pub} ms", field=f"{where}.interval_ms")
            if not inp.latency_ms > 0:
                raise ValidationError(f"input {inp.variable!r} needs a latency bound (latency_ms > 0)",
                                      field=f"{where}.latency_ms")
            publisher = st.client("publisher", var.publisher)
            out.append(FunctionInput(var.full_name, var.variable_id, _SCALARS[var.type.kind], pub, var.alert,
                                     publisher.edge_router, interval, float(inp.latency_ms),
                                     f"cf.{function_id}.{i}"))
        return out

    def _admit_locked(self, function_id: str, mode: int, router: str, inputs: list[FunctionInput], out: _Output,
                      existing: Client | None) -> tuple[list[SubscriptionRecord], StatusVariable, Client]:
        """Reserve the input paths, register the output and its publisher (state only); undone on failure."""
        st = self.cloud.state
        channel = condensation.channel_name(function_id)
        admitted: list[SubscriptionRecord] = []
        var: StatusVariable | None = None
        try:
            for inp in inputs:
                qos = ModeQoS(mode, inp.interval_ms, inp.latency_ms)
                admitted.append(st.admit_path(inp.subscription_id, channel, inp.variable, inp.variable_id,
                                              inp.pub_interval_ms, inp.alert, [qos], inp.publisher_router, router,
                                              exit_channel=channel,
                                              frames_per_s=st.registry.lookup(inp.variable).frames_per_s))
            var = st.registry.register(out.publisher, out.variable, out.type, interval_ms=out.interval_ms,
                                       priority=out.priority, alert=out.alert, min_interval_ms=out.min_interval_ms)
            client = existing
            if client is None:
                client = Client(out.publisher, "publisher", st.next_client_id, router)
                st.next_client_id += 1
                st.clients[("publisher", out.publisher)] = client
        except GridStatError:
            for sub in admitted:
                st.remove(sub.subscription_id)
            if var is not None:
                st.registry.unregister(var.full_name)
            raise
        return admitted, var, client

    async def _install(self, record: CondensationRecord, admitted: list[SubscriptionRecord], *,
                       new_publisher: bool) -> None:
        """The router side: the output publisher's channel, the slot, then the input routes (group commit)."""
        link = self.cloud.links.get(record.router)
        if link is None or record.router in self.cloud.state.down:
            raise installer.RouterUnavailable(f"router {record.router!r} does not answer", field="router")
        try:
            if new_publisher:
                client = self.cloud.state.clients[("publisher", record.output_publisher)]
                await installer.ensure_channel(link, DesiredChannel(client.channel, client.client_id, "publisher"))
            await link.stub.SetupCondensation(record.setup_pb(), timeout=installer.RPC_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            raise _router_error(exc, record.router) from None
        changes: dict[str, RouterChange] = {}
        for sub in admitted:
            for name, change in self.subscriptions.changes_of(sub, install=True).items():
                before = changes.get(name)
                changes[name] = change if before is None else installer.RouterChange(
                    before.install + change.install, before.remove + change.remove)
        await self.subscriptions.install(changes)

    async def _undo_locked(self, record: CondensationRecord, admitted: list[SubscriptionRecord], *,
                           new_publisher: bool) -> None:
        st = self.cloud.state
        if any(v.full_name == record.output for v in st.registry):
            await self.subscriptions.unregister_publication_locked(record.output)  # and whoever subscribed meanwhile
        for sub in admitted:
            if sub.subscription_id in st.subscriptions:
                st.remove(sub.subscription_id)
        if new_publisher:
            st.clients.pop(("publisher", record.output_publisher), None)

    async def _terminate(self, record: CondensationRecord) -> None:
        """Unload the slot; a router that misses it is put right when it is next reconciled."""
        link = self.cloud.links.get(record.router)
        if link is None:
            return
        try:
            await link.stub.TerminateCondensation(rpb.TerminateCondensationRequest(function_id=record.function_id),
                                                  timeout=installer.RPC_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            log.warning("unloading condensation function %s from %s: %s; it will be reconciled",
                        record.function_id, record.router, exc.code())
            self.cloud.supervisor.mark_dirty(record.router)

    async def prepare_router(self, router: str, link: RouterLink) -> None:
        """Before a router is reconciled (under the lock): its slots are the functions placed there."""
        want = {r.function_id: r for r in self.functions.values() if r.router == router}
        reply = await link.stub.GetStats(rpb.GetStatsRequest(), timeout=installer.RPC_TIMEOUT_S)
        for status in reply.condensations:
            if status.function_id not in want and status.function_id not in self.creating:
                await link.stub.TerminateCondensation(
                    rpb.TerminateCondensationRequest(function_id=status.function_id), timeout=installer.RPC_TIMEOUT_S)
                log.info("router %s: unloaded condensation function %s the broker no longer holds", router,
                         status.function_id)
        for record in want.values():
            try:
                await link.stub.SetupCondensation(record.setup_pb(), timeout=installer.RPC_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise
                # E.g. its calculator is no longer installed there. Its input routes cannot go back
                # without the slot, and a reconcile that fails would leave the whole router empty:
                # the function loses its inputs (it stays listed, for its creator to remove).
                log.error("router %s refuses condensation function %s (%s); removing its input subscriptions",
                          router, record.function_id, exc.details())
                for inp in record.inputs:
                    if inp.subscription_id in self.cloud.state.subscriptions:
                        await self.subscriptions.unsubscribe_locked(inp.subscription_id)
