"""Overload handling inside a status router: shaped channels, link shedding, shed notices and their relay."""

from __future__ import annotations

import pytest

from gridstat.core import wire
from gridstat.router.channels import ChannelKind
from gridstat.router.process import RouteInstall, RouterConfig, StatusRouter
from gridstat.router.shaping import DropPolicy, ShapingConfig
from gridstat.router.shedding import OverloadConfig, Trigger
from gridstat.router.tables import Route

PUB = 1000
NOW = 1_700_000_000_000
HI, LO = 40000, 40001


def event(var: int, ts: int) -> bytes:
    return wire.encode_event(wire.Event(ts, var, (1).to_bytes(8, "big")))


def datagram(*events: bytes, sender: int = PUB) -> bytes:
    return wire.encode_datagram(sender, 1, list(events))


def router(**config: object) -> tuple[StatusRouter, list[tuple[bytes, tuple[str, int]]]]:
    r = StatusRouter(RouterConfig(name="r", router_id=1, **config))  # type: ignore[arg-type]
    r.add_channel("pub", peer_id=PUB, kind=ChannelKind.PUBLISHER)
    r.add_channel("sub:hi", peer_id=200, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", HI))
    r.add_channel("sub:lo", peer_id=201, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", LO))
    sent: list[tuple[bytes, tuple[str, int]]] = []
    r._sendto = lambda data, addr: sent.append((data, addr))  # type: ignore[attr-defined]
    r.install_routes([RouteInstall(Route("hi/0", 1, 0, "sub:hi", 10, 1, price=10.0), 10),
                      RouteInstall(Route("lo/0", 2, 0, "sub:lo", 10, 1, price=0.5, best_effort=True), 10)])
    return r, sent


def to(sent: list[tuple[bytes, tuple[str, int]]], port: int) -> list[wire.Datagram]:
    return [wire.decode_datagram(d) for d, a in sent if a[1] == port]


def test_cpu_overload_sheds_the_cheap_best_effort_link_and_tells_its_subscriber() -> None:
    r, sent = router(overload=OverloadConfig(enabled=True, trigger=Trigger.LOAD, weight=1.0, drop_load=0.9,
                                             reintegrate_load=0.3, min_timeout_s=1.0, cost_per_copy_s=1e-3))
    r._tick_at = 0.0
    for i in range(100):  # 100 events + 100 copies at 1 ms each in 0.1 s: load 2
        r.forwarder.process(datagram(event(1 + i % 2, NOW + 10 * i)), NOW)
    r.flush()
    action = r.overload_tick(0.1)
    assert action is not None and action.shed and action.unit == ("sub:lo", True)
    notices = [d.shed_notice for d in to(sent, LO) if d.shed_notice is not None]
    assert len(notices) == 1 and notices[0].reason_name == "cpu_overload" and notices[0].action_name == "shed"
    assert notices[0].entries == ((2, 0),)
    assert not [d for d in to(sent, HI) if d.shed_notice is not None]  # the guaranteed subscriber is untouched
    sent.clear()
    for i in range(10):
        r.forwarder.process(datagram(event(1, NOW + 2000 + 10 * i), event(2, NOW + 2000 + 10 * i)), NOW)
    r.flush()
    assert len([e for d in to(sent, HI) for e in d.events]) == 10
    assert not [e for d in to(sent, LO) for e in d.events]
    stats = r.stats()
    lo = next(c for c in stats["channels"] if c["name"] == "sub:lo")
    assert lo["drops"]["cpu_overload"] == 10
    assert stats["shed_units"] == 1 and stats["sheds"]["shed"] == 1
    assert stats["shed_gain"] == pytest.approx(0.5 / 10.5)
    # Calm again: after the timeout the link comes back and the subscriber is told.
    assert r.overload_tick(0.6) is None  # no events: load 0, but within the 1 s timeout
    back = r.overload_tick(1.2)
    assert back is not None and not back.shed
    notices = [d.shed_notice for d in to(sent, LO) if d.shed_notice is not None]
    assert notices[-1] is not None and notices[-1].action_name == "restored"


def test_the_default_trigger_is_the_weighted_delay_per_event() -> None:
    # 100 us per event and per copy: 200 us per event, a fifth of the CPU at 100 events in 0.1 s. The load
    # rule would hold; HAPS's delay trigger sheds above its threshold whatever the arrival rate.
    r, _ = router(overload=OverloadConfig(enabled=True, weight=1.0, drop_delay_s=150e-6, reintegrate_delay_s=50e-6,
                                             min_timeout_s=1.0, cost_per_copy_s=1e-4))
    r._tick_at = 0.0
    for i in range(100):
        r.forwarder.process(datagram(event(1 + i % 2, NOW + 10 * i)), NOW)
    r.flush()
    action = r.overload_tick(0.1)
    assert action is not None and action.shed and action.unit == ("sub:lo", True)
    assert action.delay_s == pytest.approx(200e-6) and action.load == pytest.approx(0.2)
    assert r.stats()["processing_delay_us"] == pytest.approx(200)


def test_a_shaped_channel_with_a_message_strategy_from_the_router_flags() -> None:
    from gridstat.router.main import parse_shape
    from gridstat.router.shaping import MessageStrategy

    r, _ = router(notice_interval_ms=1, shaping=(parse_shape("sub:lo=2000:value", 0, 500, MessageStrategy.COUNT),))
    r.install_routes([RouteInstall(Route("lo/1", 1, 0, "sub:lo", 10, 1, price=100.0, best_effort=True), 10),
                      RouteInstall(Route("lo/3", 3, 0, "sub:lo", 10, 1, price=0.1, best_effort=True), 10),
                      RouteInstall(Route("lo/3b", 3, 0, "sub:lo", 20, 1, price=0.1, best_effort=True), 10)])
    ch = r.channels["sub:lo"]
    assert ch.shaper is not None and ch.shaper.config.strategy is MessageStrategy.COUNT
    for i in range(60):
        r.forwarder.process(datagram(event(1, NOW + 10 * i), event(3, NOW + 10 * i)), NOW)
    r.flush()
    # COUNT keeps variable 3 (two routes, 0.2 in all) before variable 1 (one route worth 100): the
    # paper's COUNT ranks by matching subscriptions, not by their prices.
    assert ch.shaper.dropped_vars[1] > ch.shaper.dropped_vars[3]


def test_a_shaped_channel_sheds_low_values_and_reports_the_drops() -> None:
    r, sent = router(notice_interval_ms=1)
    r.install_routes([RouteInstall(Route("lo/1", 1, 0, "sub:lo", 10, 1, price=100.0), 10)])
    r.shape_channel("sub:lo", ShapingConfig(2_000, DropPolicy.VALUE, 0, 500))  # 250 bytes/s
    assert r.stats()["channels"][2]["shaped"]
    for i in range(60):
        r.forwarder.process(datagram(event(1, NOW + 10 * i), event(2, NOW + 10 * i)), NOW)
    r.flush()
    ch = r.channels["sub:lo"]
    assert ch.shaper is not None
    assert ch.stats.drops["link_overload"] > 50
    # Every best-effort event went before any guaranteed one: what left is all variable 1.
    assert ch.shaper.dropped_vars[2] == 60
    assert {e.variable_id for d in to(sent, LO) for e in d.events} == {1}
    r.overload_tick(10.0)
    notices = [d.shed_notice for d in to(sent, LO) if d.shed_notice is not None]
    assert notices and notices[0].reason_name == "link_overload" and notices[0].action_name == "dropped"
    assert sum(n for _, n in notices[0].entries) == ch.stats.drops["link_overload"]
    stats = next(c for c in r.stats()["channels"] if c["name"] == "sub:lo")
    assert stats["queue_delay_ms"] <= 500 + 100 and stats["drop_policy"] == "value"
    r.shape_channel("sub:lo", None)
    assert r.channels["sub:lo"].shaper is None and "shaped" not in r.stats()["channels"][2]


def test_shaping_from_the_config_applies_when_the_channel_appears() -> None:
    r = StatusRouter(RouterConfig(name="r", router_id=1, shaping=(("x", ShapingConfig(1e5)),)))
    r.add_channel("x", peer_id=7, kind=ChannelKind.ROUTER, address=("127.0.0.1", 9))
    assert r.channels["x"].shaper is not None
    r.remove_channel("x")
    assert not r._shaped


def test_a_downstream_router_relays_shed_notices_to_the_affected_subscribers() -> None:
    r, sent = router()
    r.add_channel("up", peer_id=77, kind=ChannelKind.ROUTER, address=("127.0.0.1", 40100))
    notice = wire.encode_shed_notices(77, 0, reason=wire.SHED_CPU_OVERLOAD, action=wire.SHED_ACTION_SHED,
                                      entries=[(2, 0), (99, 0)], hops=1)[0]
    r.forwarder.process(notice, NOW)
    relayed = [d.shed_notice for d in to(sent, LO) if d.shed_notice is not None]
    assert len(relayed) == 1 and relayed[0].entries == ((2, 0),) and relayed[0].hops == 2
    assert not to(sent, HI)
    assert r.stats()["sheds"]["notices:cpu_overload/shed"] == 1
    # A notice that has been relayed too often stops here; a malformed one is a counted drop.
    sent.clear()
    r.forwarder.process(wire.encode_shed_notices(77, 0, reason=1, action=1, entries=[(2, 0)],
                                                 hops=wire.MAX_SHED_HOPS)[0], NOW)
    assert not sent
    r.forwarder.process(notice[:-1], NOW)
    assert r.forwarder.drops["malformed"] == 1


def test_shaping_an_unknown_or_inbound_channel_is_refused() -> None:
    from gridstat.errors import NotFound, ValidationError

    r, _ = router()
    with pytest.raises(NotFound):
        r.shape_channel("nope", ShapingConfig(1e3))
    with pytest.raises(ValidationError):
        r.shape_channel("pub", ShapingConfig(1e3))
