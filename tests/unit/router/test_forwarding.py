"""The router's forwarding path with real channels: multicast, priorities, variants, modes."""

from __future__ import annotations

import pytest

from gridstat.core import wire
from gridstat.core.model import FLOAT
from gridstat.router.channels import ChannelKind
from gridstat.router.process import RouteInstall, RouterConfig, StatusRouter
from gridstat.router.tables import Route, Variant

NOW = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000  # aligned to every interval used
PUB = 100


def event(var: int, ts: int, flags: int = 0) -> bytes:
    return wire.encode_event(wire.Event(ts, var, wire.encode_value(FLOAT, float(ts)), flags))


def datagram(*events: bytes, sender: int = PUB) -> bytes:
    return wire.encode_datagram(sender, 1, list(events))


def router(variant: Variant, *subs: str) -> tuple[StatusRouter, list[tuple[bytes, tuple[str, int]]]]:
    r = StatusRouter(RouterConfig(name="r", router_id=1, variant=variant))
    r.add_channel("pub", peer_id=PUB, kind=ChannelKind.PUBLISHER)
    for i, name in enumerate(subs):
        r.add_channel(name, peer_id=200 + i, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", 40000 + i))
    sent: list[tuple[bytes, tuple[str, int]]] = []
    r._sendto = lambda data, addr: sent.append((data, addr))  # type: ignore[attr-defined]
    return r, sent


def received(sent: list[tuple[bytes, tuple[str, int]]], port: int) -> list[tuple[int, int]]:
    out = []
    for data, addr in sent:
        if addr[1] == port:
            out.extend((e.variable_id, e.timestamp_ms) for e in wire.decode_datagram(data).events)
    return out


@pytest.mark.parametrize("variant", list(Variant))
def test_filter_and_multicast_one_copy_per_channel(variant: Variant) -> None:
    r, sent = router(variant, "s20", "s30")
    r.install_routes([RouteInstall(Route("a", 1, 0, "s20", 20, 1), 10),
                      RouteInstall(Route("b", 1, 0, "s30", 30, 1), 10),
                      RouteInstall(Route("c", 1, 0, "s30", 60, 1), 10)])
    r.forwarder.process(datagram(*(event(1, NOW + t) for t in range(0, 70, 10))), NOW)
    r.flush()
    assert [ts - NOW for _, ts in received(sent, 40000)] == [0, 20, 40, 60]
    assert [ts - NOW for _, ts in received(sent, 40001)] == [0, 30, 60]  # one copy at 0 and 60
    stats = {c["name"]: c for c in r.stats()["channels"]}
    assert stats["s20"]["events_sent"] == 4 and stats["s20"]["filtered"] == 3
    assert stats["s30"]["events_sent"] == 3 and stats["s30"]["filtered"] == 4
    assert r.forwarder.events_forwarded == 5 and r.forwarder.events_filtered == 2


@pytest.mark.parametrize("variant", list(Variant))
def test_alerts_leave_before_queued_periodic_events(variant: Variant) -> None:
    r, sent = router(variant, "s")
    r.install_routes([RouteInstall(Route("p", 1, 0, "s", 10, 6), 10),
                      RouteInstall(Route("a", 2, 0, "s", 10, 1), 10, alert=True)])
    r.forwarder.process(datagram(event(1, NOW), event(1, NOW + 10), event(2, NOW, wire.FLAG_ALERT)), NOW)
    r.flush()
    assert received(sent, 40000)[0] == (2, NOW)


def test_packing_respects_the_mtu() -> None:
    r = StatusRouter(RouterConfig(name="r", router_id=1, mtu=wire.HEADER_SIZE + 3 * 24))
    r.add_channel("pub", peer_id=PUB, kind=ChannelKind.PUBLISHER)
    r.add_channel("s", peer_id=2, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", 40000))
    sent: list[bytes] = []
    r._sendto = lambda data, addr: sent.append(data)  # type: ignore[attr-defined]
    r.install_routes([RouteInstall(Route("p", 1, 0, "s", 10, 1), 10)])
    r.forwarder.process(datagram(*(event(1, NOW + 10 * i) for i in range(10))), NOW)
    r.flush()
    assert [len(wire.decode_datagram(d).events) for d in sent] == [3, 3, 3, 1]
    assert all(len(d) <= r.config.mtu for d in sent)


def test_mode_switch_changes_forwarding_at_once() -> None:
    r, sent = router(Variant.CLOSE, "a", "b")
    r.install_routes([RouteInstall(Route("x", 1, 0, "a", 10, 1), 10),
                      RouteInstall(Route("x", 1, 1, "b", 10, 1), 10)])
    r.forwarder.process(datagram(event(1, NOW)), NOW)
    assert r.set_mode(1) == 0
    r.forwarder.process(datagram(event(1, NOW + 10)), NOW)
    r.flush()
    assert received(sent, 40000) == [(1, NOW)] and received(sent, 40001) == [(1, NOW + 10)]


def test_install_batch_is_all_or_nothing() -> None:
    r, _ = router(Variant.CLOSE, "a")
    with pytest.raises(Exception) as err:
        r.install_routes([RouteInstall(Route("ok", 1, 0, "a", 10, 1), 10),
                          RouteInstall(Route("bad", 2, 0, "missing", 10, 1), 10)])
    assert "missing" in str(err.value)
    assert len(r.table) == 0


def test_link_down_drops_are_counted_and_other_channels_unaffected() -> None:
    r, sent = router(Variant.CLOSE, "a", "b")
    r.install_routes([RouteInstall(Route("x", 1, 0, "a", 10, 1), 10),
                      RouteInstall(Route("y", 1, 0, "b", 10, 1), 10)])
    r.channels["a"].up = False
    r.forwarder.process(datagram(event(1, NOW)), NOW)
    r.flush()
    assert received(sent, 40001) == [(1, NOW)] and received(sent, 40000) == []
    assert r.channels["a"].stats.drops["link_down"] == 1


def test_remove_channel_removes_its_routes() -> None:
    r, _ = router(Variant.SPARSE, "a", "b")
    r.install_routes([RouteInstall(Route("x", 1, 0, "a", 10, 1), 10),
                      RouteInstall(Route("y", 1, 0, "b", 10, 1), 10)])
    removed = r.remove_channel("a")
    assert [x.route_id for x in removed] == ["x"] and [x.route_id for x in r.table.routes()] == ["y"]
