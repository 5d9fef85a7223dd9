"""The five-phase mode change of the leaf broker (dissertation 6.3.2) against fake router links."""

from __future__ import annotations

import asyncio
from fractions import Fraction
from typing import Any

import pytest

from gridstat.broker import modes
from gridstat.broker.cloud import Cloud
from gridstat.broker.modes import ModeChange, ModeCoordinator, check_switch
from gridstat.broker.resources import ChannelDelta, Reservations
from gridstat.broker.state import CloudState
from gridstat.broker.store import BrokerStore
from gridstat.broker.topology import RouterRole, Topology
from gridstat.errors import CapacityExhausted, DuplicateName, ModeChangeInProgress, NotFound, ValidationError
from gridstat.v1 import router_pb2 as rpb


class FakeStub:
    def __init__(self, name: str, calls: list[tuple[str, str, int]], fail: set[tuple[str, str]],
                 delay_s: float) -> None:
        self.name, self.calls, self.fail, self.delay_s = name, calls, fail, delay_s

    async def _record(self, method: str, mode: int) -> Any:
        await asyncio.sleep(self.delay_s)
        if (self.name, method) in self.fail:
            raise ValidationError(f"{self.name} refuses {method}")
        self.calls.append((self.name, method, mode))
        return None

    async def NotifyMode(self, request: rpb.NotifyModeRequest, timeout: float) -> Any:
        return await self._record(f"Notify{rpb.ModePhase.Name(request.phase)[11:].title()}", request.mode)

    async def PrepareMode(self, request: rpb.SetModeRequest, timeout: float) -> Any:
        return await self._record("PrepareMode", request.mode)

    async def SetMode(self, request: rpb.SetModeRequest, timeout: float) -> Any:
        return await self._record("SetMode", request.mode)


class FakeLink:
    def __init__(self, stub: FakeStub) -> None:
        self.stub = stub


class FakeSupervisor:
    def __init__(self) -> None:
        self.dirty: list[str] = []

    def mark_dirty(self, name: str) -> None:
        self.dirty.append(name)


class Broker:
    """A ModeCoordinator over fake router links, with the leaf broker's mode commands."""

    def __init__(self, *, fail: set[tuple[str, str]] = frozenset(), delay_s: float = 0.0) -> None:  # type: ignore[assignment]
        self.name = "A"
        topo = Topology()
        for name, role in (("e1", RouterRole.EDGE), ("i1", RouterRole.INTERNAL), ("b1", RouterRole.BORDER),
                           ("e2", RouterRole.EDGE)):
            topo.add_router(name, role)
        topo.add_link("e1", "i1", bandwidth_bps=1e8, latency_ms=1)
        self.state = CloudState("A", topology=topo)
        self.calls: list[tuple[str, str, int]] = []
        self.links = {n: FakeLink(FakeStub(n, self.calls, set(fail), delay_s)) for n in topo.routers}
        self.lock = asyncio.Lock()
        self.store = BrokerStore(":memory:")
        self.supervisor = FakeSupervisor()
        cloud = Cloud(self.state, self.store, self.links, self.lock, self.supervisor)  # type: ignore[arg-type]
        self.modes = ModeCoordinator(cloud)
        self.modes.load()

    @property
    def current_mode(self) -> int:
        return self.modes.current

    def define_mode(self, mode: int, name: str) -> tuple[int, str]:
        return self.modes.define(mode, name)

    async def change_mode(self, target: int) -> ModeChange:
        return await self.modes.change(target)

    def phases(self) -> list[tuple[str, set[str]]]:
        """The calls grouped into consecutive runs of the same method."""
        out: list[tuple[str, set[str]]] = []
        for router, method, _ in self.calls:
            if out and out[-1][0] == method:
                out[-1][1].add(router)
            else:
                out.append((method, {router}))
        return out


async def test_five_phases_in_order_edges_and_inner_routers_separately() -> None:
    b = Broker()
    b.define_mode(1, "contingency")
    change = await b.change_mode(1)
    assert change.changed and (change.previous_mode, change.current_mode) == (0, 1)
    assert b.phases() == [("NotifyPrepare", {"e1", "e2"}), ("PrepareMode", {"e1", "e2"}),
                          ("SetMode", {"i1", "b1"}), ("SetMode", {"e1", "e2"}), ("NotifyCommit", {"e1", "e2"})] \
        or b.phases() == [("NotifyPrepare", {"e1", "e2"}), ("PrepareMode", {"e1", "e2"}),
                          ("SetMode", {"i1", "b1", "e1", "e2"}), ("NotifyCommit", {"e1", "e2"})]
    # Phase 3 finishes on every inner router before phase 4 touches an edge.
    set_calls = [r for r, m, _ in b.calls if m == "SetMode"]
    assert set(set_calls[:2]) == {"i1", "b1"} and set(set_calls[2:]) == {"e1", "e2"}
    assert [p.name for p in change.phases] == ["warn", "prepare", "switch-internal", "switch-edge", "commit"]
    assert b.current_mode == 1 and b.store.get_meta("current_mode") == "1"


async def test_the_current_mode_is_a_no_op() -> None:
    b = Broker()
    change = await b.change_mode(0)
    assert not change.changed and b.calls == []


async def test_an_undefined_mode_is_refused_before_any_router_is_called() -> None:
    b = Broker()
    with pytest.raises(NotFound) as err:
        await b.change_mode(5)
    assert err.value.reason == "UnknownMode" and err.value.field == "mode"
    with pytest.raises(ValidationError):
        await b.change_mode(16)
    assert b.calls == []


async def test_a_second_change_while_one_runs_is_refused_and_retriable() -> None:
    b = Broker(delay_s=0.02)
    b.define_mode(1, "contingency")
    b.define_mode(2, "summer")
    first = asyncio.create_task(b.change_mode(1))
    await asyncio.sleep(0.005)
    with pytest.raises(ModeChangeInProgress) as err:
        await b.change_mode(2)
    assert err.value.retriable
    assert (await first).current_mode == 1


async def test_a_failure_before_the_point_of_no_return_is_undone() -> None:
    b = Broker(fail={("e2", "PrepareMode")})
    b.define_mode(1, "contingency")
    with pytest.raises(Exception) as err:
        await b.change_mode(1)
    assert "abandoned" in str(err.value) and err.value.retriable  # type: ignore[attr-defined]
    assert b.current_mode == 0
    # The edge that prepared goes back to mode 0 and subscribers are told the change is off.
    assert ("e1", "SetMode", 0) in b.calls
    assert {r for r, m, _ in b.calls if m == "NotifyAbort"} == {"e1", "e2"}
    assert not any(m == "SetMode" and mode == 1 for _, m, mode in b.calls)


async def test_a_failure_after_the_point_of_no_return_rolls_forward_and_rebuilds() -> None:
    b = Broker(fail={("i1", "SetMode")})
    b.define_mode(1, "contingency")
    change = await b.change_mode(1)
    assert b.current_mode == 1 and change.lagging == ("i1",)
    assert "i1" in b.supervisor.dirty  # type: ignore[attr-defined]


async def test_down_routers_are_skipped_and_rebuilt_later() -> None:
    b = Broker()
    b.define_mode(1, "contingency")
    b.state.down.add("b1")
    await b.change_mode(1)
    assert "b1" not in {r for r, _, _ in b.calls}
    assert "b1" in b.supervisor.dirty  # type: ignore[attr-defined]


def test_mode_registry_names_are_unique_and_checked() -> None:
    reg = modes.define(dict(modes.DEFAULT_MODES), 1, "contingency")
    assert modes.resolve(reg, mode=0, name="contingency") == 1
    assert modes.resolve(reg, mode=1) == 1
    with pytest.raises(DuplicateName):
        modes.define(reg, 2, "contingency")
    with pytest.raises(ValidationError) as err:
        modes.define(reg, 2, "bad name!")
    assert err.value.field == "name"
    with pytest.raises(NotFound) as nf:
        modes.resolve(reg, mode=0, name="winter")
    assert "contingency (1)" in str(nf.value)
    assert modes.define(reg, 1, "n-1")[1] == "n-1"  # renaming keeps the id


def test_check_switch_reports_capacity_lost_since_admission_and_down_routers() -> None:
    topo = Topology()
    topo.add_router("a", RouterRole.EDGE, capacity_eps=1000)
    topo.add_router("b", RouterRole.EDGE, capacity_eps=1000)
    topo.add_channel("a", "b", bandwidth_bps=1e9, latency_ms=1, event_capacity_eps=100, name="a>b")
    res = Reservations(topo)
    res.commit("s1", [ChannelDelta("a>b", "a", 7, 10, (10,), Fraction(0))])  # 100 events/s
    assert check_switch(topo, res, ()) == []
    assert check_switch(topo, res, {"b"}) == ["router b is down and carries paths of this mode"]
    topo.remove_channel("a>b")
    topo.add_channel("a", "b", bandwidth_bps=1e9, latency_ms=1, event_capacity_eps=50, name="a>b")
    problems = check_switch(topo, res, ())
    assert len(problems) == 1 and "channel a>b would carry 100.0 events/s, capacity 50.0" in problems[0]


async def test_a_switch_to_a_mode_that_lost_capacity_is_refused_before_any_call() -> None:
    b = Broker()
    b.define_mode(1, "contingency")
    b.state.down.add("i1")
    b.state.reservations(1).commit("s1", [ChannelDelta(b.state.topology.channel_between("e1", "i1").name, "e1", 7,
                                                       10, (10,), Fraction(0))])
    with pytest.raises(CapacityExhausted) as err:
        await b.change_mode(1)
    assert "router i1 is down" in str(err.value)
    assert b.calls == [] and b.current_mode == 0
