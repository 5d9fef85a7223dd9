"""The standalone condensation host role: ``gridstat condense host --edge HOST:PORT --spec FILE.yaml``.

The same ``CondensationFunction`` a router slot runs, in a process of its own (DESIGN.md's
condensation host role): for a calculator too heavy for a router's loop, or one the routers'
operator does not install. It is an ordinary client of an edge router:

* a ``Subscriber`` subscribes to every input through the edge router (the leaf broker admits
  the paths with the document's interval and latency) and feeds each event to the function;
* a ``Publisher`` registers the output variable and publishes what the function outputs, at
  the aligned instants of a time trigger or right away for an events or alerts trigger.

Prints ``READY name=<name> output=<publisher/variable> variable_id=<id>`` once running, the
counters every ``--status-interval-s`` on stderr, and a final ``STATUS {json}`` line on stdout
when SIGTERM or SIGINT stops it; it then removes its subscriptions and its publication.
A calculator that raises is counted like in a router (``calculator_errors``, ``last_error``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
from typing import Any

from gridstat.cli.condense import FunctionDoc
from gridstat.client import Holder, PublicationHandle, Publisher, Subscriber, Subscription
from gridstat.condensation import CondensationFunction, InputInfo, Output, calculators
from gridstat.core import clock, serving
from gridstat.core.aio import create_guarded_task
from gridstat.core.model import TypeSpec
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError, ValidationError
from gridstat.telemetry import roles as telemetry

log = logging.getLogger(__name__)


class CondensationHost:
    """One function, fed by a Subscriber and published by a Publisher, both through one edge router."""

    def __init__(self, doc: FunctionDoc, edge_control: str, *, name: str = "", tls: TlsFiles | None = None,
                 status_interval_s: float = 10.0) -> None:
        self.doc = doc
        self.edge_control = edge_control
        self.name = name or doc.function_id or doc.output.publisher
        if not self.name:
            raise ValidationError("the host needs a name: --name, function_id or output.publisher", field="name")
        self.tls = tls
        self.status_interval_s = status_interval_s
        self.function: CondensationFunction | None = None
        self.publisher: Publisher | None = None
        self.subscriber: Subscriber | None = None
        self.output: PublicationHandle | None = None
        self.subscriptions: list[Subscription] = []
        #: Outputs the publisher could not send (a full socket buffer, an alert too early).
        self.publish_errors = 0
        self._tasks: list[asyncio.Task[None]] = []

    def _input_interval(self, i: int) -> int:
        interval = self.doc.inputs[i].interval_ms or self.doc.spec.trigger.interval_ms
        if not interval:
            raise ValidationError("the host needs an interval for each input (interval_ms) unless the trigger is "
                                  "a time trigger", field=f"inputs[{i}].interval_ms")
        return interval

    async def start(self) -> None:
        doc = self.doc
        factory = calculators.load(doc.spec.calculator)  # NotFound before any registration
        output_type = doc.output.type or doc.spec.output_type or calculators.default_output_type(factory)
        for i, inp in enumerate(doc.inputs):
            self._input_interval(i)
            if not inp.latency_ms:
                raise ValidationError("each input needs latency_ms", field=f"inputs[{i}].latency_ms")
        publisher = doc.output.publisher or self.name
        out_interval = doc.output.interval_ms or doc.spec.trigger.interval_ms
        self.publisher = await Publisher.connect(publisher, self.edge_control, tls=self.tls)
        self.output = await self.publisher.register(
            doc.output.variable, TypeSpec.parse(output_type), out_interval, priority=doc.output.priority,
            alert=doc.output.alert, min_interval_ms=doc.output.min_interval_ms or (out_interval if doc.output.alert
                                                                                   else 0))
        self.subscriber = await Subscriber.connect(self.name, self.edge_control, tls=self.tls)
        infos = []
        for i, inp in enumerate(doc.inputs):
            sub = await self.subscriber.subscribe_remote(
                inp.variable, TypeSpec.parse(inp.type), interval_ms=self._input_interval(i),
                latency_ms=inp.latency_ms, on_event=self._on_event)
            self.subscriptions.append(sub)
            v = sub.variable
            infos.append(InputInfo(v.variable_id, v.full_name, inp.type, v.effective_interval_ms, v.alert))
        spec = doc.spec if doc.spec.output_type else dataclasses.replace(doc.spec, output_type=output_type)
        self.function = CondensationFunction(
            spec, infos, function_id=self.name,
            output_min_interval_ms=self.output.variable.min_interval_ms if doc.output.alert else 0)
        if self.function.next_tick_ms(clock.now_ms()) is not None:
            self._tasks.append(create_guarded_task(self._ticks(), name=f"{self.name}-ticks"))
        if self.status_interval_s > 0:
            self._tasks.append(create_guarded_task(self._report(), name=f"{self.name}-status"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks.clear()
        if self.subscriber is not None:
            for sub in self.subscriptions:
                with contextlib.suppress(GridStatError):
                    await self.subscriber.unsubscribe_remote(sub)
            await self.subscriber.stop()
        if self.publisher is not None:
            if self.output is not None and self.publisher.session is not None:
                with contextlib.suppress(GridStatError):
                    await self.publisher.session.unregister_publication(self.publisher.name,
                                                                        self.output.variable.name)
            await self.publisher.stop()

    def status(self) -> dict[str, Any]:
        base = self.function.status() if self.function is not None else {"function_id": self.name}
        return {**base, "publish_errors": self.publish_errors}

    # -- the pipeline -----------------------------------------------------------------------------
    def _on_event(self, sub: Subscription, holder: Holder) -> None:
        f = self.function
        value = holder.value
        if f is None or not isinstance(value, int | float):
            return  # events that arrive before the last input is subscribed
        self._publish(f.feed(sub.variable.variable_id, holder.timestamp_ms, value, holder.alert))

    async def _ticks(self) -> None:
        f = self.function
        assert f is not None
        instant = clock.now_ms()
        while True:
            due = f.next_tick_ms(max(clock.now_ms(), instant))
            assert due is not None
            await asyncio.sleep(max(0.0, (due - clock.now_ms()) / 1000))
            instant = due
            self._publish(f.tick(max(clock.now_ms(), due)))

    def _publish(self, outputs: list[Output]) -> None:
        handle = self.output
        if handle is None:
            return
        for o in outputs:
            try:
                handle.publish(o.value, o.timestamp_ms)
            except GridStatError as exc:
                self.publish_errors += 1
                log.warning("host %s: output at %d not published: %s", self.name, o.timestamp_ms, exc)

    async def _report(self) -> None:
        while True:
            await asyncio.sleep(self.status_interval_s)
            log.warning("host %s: %s", self.name, json.dumps(self.status()))


async def _run(args: argparse.Namespace, doc: FunctionDoc) -> int:
    tls = None
    if args.tls_ca or args.tls_cert or args.tls_key:
        if bool(args.tls_cert) != bool(args.tls_key):
            raise ValidationError("--tls-cert and --tls-key go together", field="tls_key")
        tls = TlsFiles(args.tls_cert, args.tls_key, args.tls_ca)
    host = CondensationHost(doc, args.edge, name=args.name, tls=tls, status_interval_s=args.status_interval_s)
    stop = serving.stop_signals()
    tel: telemetry.RoleTelemetry | None = None
    try:
        await host.start()
        tel = telemetry.for_condensation_host(host, args)  # --kafka / --metrics-port: its inputs' samples
        await tel.start()
        assert host.output is not None
        var = host.output.variable
        print(f"READY name={host.name} output={var.full_name} variable_id={var.variable_id}{tel.ready_suffix()}",
              flush=True)
        await stop.wait()
    finally:
        if tel is not None:
            await tel.stop()
        await host.stop()
        print(f"STATUS {json.dumps(host.status())}", flush=True)
    return 0


def run(args: argparse.Namespace, doc: FunctionDoc) -> int:
    return serving.run(args, lambda: _run(args, doc), fast_loop=False)
