"""A condensation function in a router slot: routed to as "cf:<id>", output forwarded as a variable."""

from __future__ import annotations

import asyncio
import itertools
import socket
from types import SimpleNamespace

import pytest

from gridstat.condensation import Calculator, InputInfo, channel_name
from gridstat.condensation import calculators as calcs
from gridstat.condensation.spec import CondensationSpec
from gridstat.condensation.triggers import Trigger, TriggerKind
from gridstat.core import clock, wire
from gridstat.core.model import FLOAT
from gridstat.errors import NotFound, ValidationError
from gridstat.router.channels import ChannelKind
from gridstat.router.condensation import SlotSetup
from gridstat.router.process import RouteInstall, RouterConfig, StatusRouter
from gridstat.router.tables import Route

NOW = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000
PUB, OUT_SENDER, SUB_PORT = 100, 500, 40000
IN_A, IN_B, OUT = 7, 8, 9


def setup(calculator: str = "average", trigger: Trigger | None = None, **kw: object) -> SlotSetup:
    spec = CondensationSpec(calculator, trigger or Trigger(TriggerKind.EVENTS, 0, 2)).validate()
    base: dict[str, object] = {
        "function_id": "f1", "creator": "ops", "spec": spec, "output_variable_id": OUT,
        "output_pub_interval_ms": 10, "output_sender_id": OUT_SENDER,
        "inputs": (InputInfo(IN_A, "p1/a", "float", 10), InputInfo(IN_B, "p2/b", "float", 10))}
    base.update(kw)
    return SlotSetup(**base).validate()  # type: ignore[arg-type]


def event(var: int, ts: int, value: float) -> bytes:
    return wire.encode_event(wire.Event(ts, var, wire.encode_value(FLOAT, value)))


def router() -> tuple[StatusRouter, list[bytes]]:
    r = StatusRouter(RouterConfig(name="r", router_id=1))
    r.add_channel("pub", peer_id=PUB, kind=ChannelKind.PUBLISHER)
    r.add_channel("pub:cf", peer_id=OUT_SENDER, kind=ChannelKind.PUBLISHER)
    r.add_channel("sub", peer_id=200, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", SUB_PORT))
    sent: list[bytes] = []
    r._sendto = lambda data, addr: sent.append(data)  # type: ignore[attr-defined]
    return r, sent


def routes(r: StatusRouter, *specs: tuple[str, int, str, int]) -> None:
    r.install_routes([RouteInstall(Route(rid, var, 0, ch, sub, 1), 10) for rid, var, ch, sub in specs])


def received(sent: list[bytes]) -> list[tuple[int, int, float]]:
    return [(e.variable_id, e.timestamp_ms, wire.decode_value(FLOAT, e.value))  # type: ignore[misc]
            for data in sent for e in wire.decode_datagram(data).events]


def test_inputs_routed_to_the_slot_come_out_as_the_output_variable_rate_filtered() -> None:
    r, sent = router()
    assert r.condensations.setup(setup()) == "cf:f1"
    routes(r, ("a", IN_A, "cf:f1", 10), ("b", IN_B, "cf:f1", 10), ("o", OUT, "sub", 20))
    for i in range(4):
        ts = NOW + 10 * i
        r.forwarder.process(wire.encode_datagram(PUB, i + 1, [event(IN_A, ts, 1.0 + i), event(IN_B, ts, 3.0 + i)]),
                            NOW)
    r.condensations.get("cf:f1").drain()  # type: ignore[union-attr]  # the loop's call_soon, by hand
    r.flush()
    # Outputs at every input instant; the 20 ms subscription keeps every other one.
    assert received(sent) == [(OUT, NOW, 2.0), (OUT, NOW + 20, 4.0)]
    status = r.stats()["condensations"]
    assert status == [{"function_id": "f1", "inputs": 8, "input_filtered": 0, "triggers": 4, "outputs": 4,
                       "output_filtered": 0, "calculator_errors": 0, "last_error": "", "router": "r"}]
    assert r.channels["pub:cf"].stats.events_in == 4  # injected through the publisher's inbound channel


def test_setup_is_idempotent_and_a_new_setup_keeps_the_slot_its_routes_point_at() -> None:
    r, _ = router()
    r.condensations.setup(setup())
    slot = r.condensations.get("cf:f1")
    routes(r, ("a", IN_A, "cf:f1", 10))
    function = slot.function  # type: ignore[union-attr]
    assert r.condensations.setup(setup()) == "cf:f1" and r.condensations.get("cf:f1") is slot
    assert slot.function is function  # type: ignore[union-attr]  # the same setup: nothing restarts
    r.condensations.setup(setup("max"))
    assert r.condensations.get("cf:f1") is slot and slot.function.spec.calculator == "max"  # type: ignore[union-attr]


def test_routes_to_an_unknown_function_and_unknown_calculators_are_refused() -> None:
    r, _ = router()
    with pytest.raises(NotFound):
        routes(r, ("a", IN_A, "cf:nope", 10))
    with pytest.raises(NotFound) as info:
        r.condensations.setup(setup("no-such-calculator"))
    assert info.value.field == "spec.calculator" and len(r.condensations) == 0


@pytest.mark.parametrize(("kw", "field"), [
    ({"output_sender_id": 0}, "output_sender_id"),
    ({"output_variable_id": IN_A}, "output_variable_id"),
    ({"function_id": "a/b"}, "function_id"),
    ({"output_priority": 9}, "output_priority"),
])
def test_bad_setups_name_their_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        setup(**kw)
    assert info.value.field == field


def test_terminate_unloads_the_function_and_any_route_left_to_it() -> None:
    r, _ = router()
    r.condensations.setup(setup())
    routes(r, ("a", IN_A, "cf:f1", 10), ("d", IN_A, "sub", 10))
    assert r.condensations.terminate("f1") and not r.condensations.terminate("f1")
    assert [x.route_id for x in r.table.routes()] == ["d"]
    assert r.stats()["condensations"] == []


class Boom(Calculator):
    def calculate(self) -> float:
        raise RuntimeError("calculator bug")


def test_a_raising_calculator_is_counted_and_the_other_streams_keep_flowing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calcs, "entry_point", lambda name: SimpleNamespace(load=lambda: Boom, value="x:Boom"))
    r, sent = router()
    r.condensations.setup(setup("boom"))
    routes(r, ("a", IN_A, "cf:f1", 10), ("b", IN_B, "cf:f1", 10), ("o", OUT, "sub", 10), ("d", IN_A, "sub", 10))
    for i in range(3):
        ts = NOW + 10 * i
        r.forwarder.process(wire.encode_datagram(PUB, i + 1, [event(IN_A, ts, 1.0), event(IN_B, ts, 2.0)]), NOW)
    r.condensations.get(channel_name("f1")).drain()  # type: ignore[union-attr]
    r.flush()
    assert [v for v, _, _ in received(sent)] == [IN_A, IN_A, IN_A]  # the direct route is untouched
    (status,) = r.stats()["condensations"]
    assert status["calculator_errors"] == 3 and status["last_error"] == "RuntimeError: calculator bug"


def test_an_input_that_does_not_decode_is_a_counted_malformed_drop() -> None:
    r, _ = router()
    r.condensations.setup(setup())
    routes(r, ("a", IN_A, "cf:f1", 10))
    short = wire.encode_event(wire.Event(NOW, IN_A, b"\0\0\0\1"))
    r.forwarder.process(wire.encode_datagram(PUB, 1, [short]), NOW)
    r.condensations.get("cf:f1").drain()  # type: ignore[union-attr]
    assert r.drops["malformed"] == 1
    assert r.stats()["condensations"][0]["inputs"] == 0


async def test_a_time_trigger_runs_off_the_routers_loop_at_aligned_instants() -> None:
    sub = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sub.bind(("127.0.0.1", 0))
    sub.setblocking(False)
    pub = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r = StatusRouter(RouterConfig(name="r", router_id=1))
    await r.start()
    try:
        r.add_channel("pub", peer_id=PUB, kind=ChannelKind.PUBLISHER)
        r.add_channel("pub:cf", peer_id=OUT_SENDER, kind=ChannelKind.PUBLISHER)
        r.add_channel("sub", peer_id=200, kind=ChannelKind.SUBSCRIBER, address=sub.getsockname())
        r.condensations.setup(setup("sum", Trigger(TriggerKind.TIME, 50), output_pub_interval_ms=50))
        r.install_routes([RouteInstall(Route("a", IN_A, 0, "cf:f1", 10, 1), 10),
                          RouteInstall(Route("b", IN_B, 0, "cf:f1", 10, 1), 10),
                          RouteInstall(Route("o", OUT, 0, "sub", 50, 1), 50)])
        ts = clock.align_ms(clock.now_ms(), 10)
        pub.sendto(wire.encode_datagram(PUB, 1, [event(IN_A, ts, 1.5), event(IN_B, ts, 2.0)]), r.address)
        got: list[tuple[int, float]] = []
        for _ in range(100):
            await asyncio.sleep(0.01)
            try:
                got.extend((e.timestamp_ms, wire.decode_value(FLOAT, e.value))  # type: ignore[misc]
                           for e in wire.decode_datagram(sub.recv(65536)).events)
            except BlockingIOError:
                pass
            if len(got) >= 3:
                break
        assert len(got) >= 3
        assert all(t % 50 == 0 and v == 3.5 for t, v in got)
        assert [b - a for (a, _), (b, _) in itertools.pairwise(got)] == [50] * (len(got) - 1)
    finally:
        await r.stop()
        sub.close()
        pub.close()
