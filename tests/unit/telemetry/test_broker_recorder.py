"""Admission decisions and mode changes are recorded by wrapping the broker's commands."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from gridstat.errors import GridStatError, UnknownVariable
from gridstat.telemetry import BrokerModeSampler, BrokerRecorder, records


@dataclass
class Q:
    mode: int = 0
    interval_ms: int = 20
    latency_ms: float = 30.0
    redundancy: int = 1


@dataclass
class Record:
    subscription_id: str


@dataclass
class Change:
    previous_mode: int
    current_mode: int
    changed: bool = True


class Broker:
    """The three commands of a leaf broker the recorder wraps, with canned outcomes."""

    def __init__(self) -> None:
        self.current_mode = 0
        self.uplink: object | None = None

    async def subscribe(self, subscriber: str, variable: str, type_spec: Any, qos: Any, *,
                        edge_router: str, subscription_id: str = "") -> Record:
        if variable == "pmu9/x":
            raise UnknownVariable(f"{variable!r} is not published here", field="variable")
        if qos[0].latency_ms < 1:
            raise GridStatError("no path within 0.5 ms", reason="LatencyUnattainable")
        return Record(subscription_id or "s7")

    async def change_mode(self, target: int) -> Change:
        previous, self.current_mode = self.current_mode, target
        return Change(previous, target)


class ListEmitter:
    def __init__(self) -> None:
        self.out: list[tuple[str, dict[str, Any]]] = []

    def emit(self, topic: str, record: dict[str, Any], *, key: str | bytes | None = None) -> bool:
        self.out.append((topic, record))
        return True


async def test_decisions_are_recorded_with_their_reason_and_errors_pass_through() -> None:
    broker, emitter = Broker(), ListEmitter()
    rec = BrokerRecorder("A", emitter)
    rec.attach(broker)
    assert (await broker.subscribe("ems", "pmu1/freq", None, [Q()], edge_router="e2")).subscription_id == "s7"
    with pytest.raises(GridStatError) as err:
        await broker.subscribe("ems", "pmu1/freq", None, [Q(latency_ms=0.5)], edge_router="e2")
    assert err.value.reason == "LatencyUnattainable"
    with pytest.raises(UnknownVariable):
        await broker.subscribe("ems", "pmu9/x", None, [Q()], edge_router="e2")
    broker.uplink = object()  # with a parent broker the unknown variable is asked of it
    with pytest.raises(UnknownVariable):
        await broker.subscribe("ems", "pmu9/x", None, [Q()], edge_router="e2")
    decisions = [(r["decision"], r["reason"]) for t, r in emitter.out if t == records.TOPICS.admission]
    assert decisions == [("admitted", ""), ("rejected", "LatencyUnattainable"), ("rejected", "UnknownVariable"),
                         ("delegated", "UnknownVariable")]
    assert rec.decisions[("rejected", "LatencyUnattainable")] == 1
    first = emitter.out[0][1]
    assert first["modes"] == [{"mode": 0, "interval_ms": 20, "latency_ms": 30.0, "redundancy": 1}]
    assert first["subscription_id"] == "s7" and first["duration_ms"] >= 0


async def test_a_committed_mode_change_is_recorded_once() -> None:
    broker, emitter = Broker(), ListEmitter()
    modes = BrokerModeSampler("A", lambda: broker.current_mode)
    modes.sample(0)
    BrokerRecorder("A", emitter, modes=modes).attach(broker)
    await broker.change_mode(3)
    assert modes.sample(1) == []  # the sampler does not report it again
    (topic, r), = emitter.out
    assert topic == records.TOPICS.modes and (r["previous_mode"], r["mode"], r["outcome"]) == (0, 3, "committed")
