"""Limited flooding in the router (dissertation 5.3.2, Fig 5.1), driven with bytes through Forwarder.process.

Router ``r`` under test has a publisher channel, router channels ``n1``/``n2`` of level 1 (same
cloud), ``far`` of level 2 (an inter-cloud channel) and subscriber channels ``s`` (with a route
or not) and ``all`` (flood-all). Outgoing copies are read back from the fake ``sendto``.
"""

from __future__ import annotations

import pytest

from gridstat.core import wire
from gridstat.core.model import FLOAT
from gridstat.errors import NotFound, ValidationError
from gridstat.router.channels import ChannelKind
from gridstat.router.process import RouteInstall, RouterConfig, StatusRouter
from gridstat.router.tables import Route, Variant

NOW = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000
PUB, N1, N2, FAR = 100, 2, 3, 4
PORTS = {"n1": 41001, "n2": 41002, "far": 41003, "s": 41004, "all": 41005}
VAR = 7


def event(var: int, ts: int) -> bytes:
    return wire.encode_event(wire.Event(ts, var, wire.encode_value(FLOAT, 1.0)))


def datagram(*events: bytes, sender: int = PUB) -> bytes:
    return wire.encode_datagram(sender, 1, list(events))


class Harness:
    def __init__(self, variant: Variant = Variant.CLOSE, **config: int) -> None:
        self.r = StatusRouter(RouterConfig(name="r", router_id=1, variant=variant, **config))  # type: ignore[arg-type]
        r = self.r
        r.add_channel("pub", peer_id=PUB, kind=ChannelKind.PUBLISHER)
        r.add_channel("n1", peer_id=N1, kind=ChannelKind.ROUTER, address=("127.0.0.1", PORTS["n1"]))
        r.add_channel("n2", peer_id=N2, kind=ChannelKind.ROUTER, address=("127.0.0.1", PORTS["n2"]))
        r.add_channel("far", peer_id=FAR, kind=ChannelKind.ROUTER, address=("127.0.0.1", PORTS["far"]), level=2)
        r.add_channel("s", peer_id=200, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", PORTS["s"]))
        r.add_channel("all", peer_id=201, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", PORTS["all"]),
                      flood_all=True)
        self.sent: list[tuple[bytes, tuple[str, int]]] = []
        r._sendto = lambda data, addr: self.sent.append((data, addr))  # type: ignore[attr-defined]

    def feed(self, *timestamps: int, sender: int = PUB, var: int = VAR, now: int = NOW) -> dict[str, list[int]]:
        """Process one datagram, flush, and return the timestamps (minus NOW) each channel got."""
        self.sent.clear()
        self.r.forwarder.process(datagram(*(event(var, NOW + t) for t in timestamps), sender=sender), now)
        self.r.flush()
        out: dict[str, list[int]] = {}
        for data, addr in self.sent:
            name = next(n for n, p in PORTS.items() if p == addr[1])
            out.setdefault(name, []).extend(e.timestamp_ms - NOW for e in wire.decode_datagram(data).events)
        return out

    @property
    def drops(self) -> dict[str, int]:
        return dict(self.r.forwarder.drops)


@pytest.fixture(params=list(Variant))
def h(request: pytest.FixtureRequest) -> Harness:
    return Harness(request.param)


def test_first_copy_is_flooded_to_every_channel_in_scope_even_without_routes(h: Harness) -> None:
    h.r.flooding.set(VAR, pub_interval_ms=10, level=1, modes=[0])
    assert h.feed(0) == {"n1": [0], "n2": [0], "all": [0]}  # "far" is level 2; "s" has no route
    # The copies that come back from the neighbours are dropped: one flood per timestamp.
    assert h.feed(0, sender=N1) == {}
    assert h.feed(0, sender=N2) == {}
    assert h.drops["flood_duplicate"] == 2
    assert h.r.stats()["flooded_variables"] == 1


def test_a_copy_never_goes_back_to_the_channel_it_came_from(h: Harness) -> None:
    h.r.flooding.set(VAR, pub_interval_ms=10, level=1, modes=[0])
    assert h.feed(10, sender=N2) == {"n1": [10], "all": [10]}
    assert h.feed(20, sender=N1) == {"n2": [20], "all": [20]}


def test_older_timestamps_are_duplicates_and_later_ones_flood(h: Harness) -> None:
    h.r.flooding.set(VAR, pub_interval_ms=10, level=1, modes=[0])
    assert h.feed(0, 10, 20)["all"] == [0, 10, 20]
    assert h.feed(10, 30)["all"] == [30]
    assert h.drops["flood_duplicate"] == 1


def test_channels_above_the_level_keep_their_normal_rate_filtered_routes(h: Harness) -> None:
    h.r.install_routes([RouteInstall(Route("x", VAR, 0, "far", 20, 1), 10)])
    assert [h.feed(t).get("far", []) for t in (0, 10, 20)] == [[0], [], [20]]
    h.r.flooding.set(VAR, pub_interval_ms=10, level=1, modes=[0])
    got = [h.feed(t) for t in (30, 40, 50)]
    assert [g.get("far", []) for g in got] == [[], [40], []]  # still filtered at 20 ms
    assert [g["n1"] for g in got] == [[30], [40], [50]]  # flooded in the cloud
    # Level 2 takes "far" into the scope: every event, no filter.
    h.r.flooding.set(VAR, pub_interval_ms=10, level=2, modes=[0])
    assert h.feed(60)["far"] == [60] and h.feed(70)["far"] == [70]


def test_a_routed_subscriber_gets_every_event_while_flooded_then_its_stream_again(h: Harness) -> None:
    h.r.install_routes([RouteInstall(Route("sub", VAR, 0, "s", 20, 1), 10)])
    assert [h.feed(t).get("s", []) for t in (0, 10)] == [[0], []]
    h.r.flooding.set(VAR, pub_interval_ms=10, level=1, modes=[0])
    assert [h.feed(t).get("s", []) for t in (20, 30)] == [[20], [30]]  # flooded: all events, none lost
    assert h.r.flooding.remove(VAR, [0]) == 1
    assert [h.feed(t).get("s", []) for t in (40, 50, 60)] == [[40], [], [60]]  # the subscription as before
    assert "all" not in h.feed(80)


def test_removing_the_flooding_of_an_unrouted_variable_removes_its_entry(h: Harness) -> None:
    h.r.flooding.set(VAR, pub_interval_ms=10, level=1, modes=[0])
    assert h.r.table.entry(VAR) is not None
    h.r.flooding.remove(VAR)
    assert h.r.table.entry(VAR) is None
    assert h.feed(0) == {} and h.drops["unknown_variable"] == 1
    assert h.r.flooding.remove(VAR) == 0  # idempotent
    assert h.r.stats()["flooded_variables"] == 0


def test_flooding_is_per_mode(h: Harness) -> None:
    h.r.install_routes([RouteInstall(Route("sub", VAR, 0, "s", 20, 1), 10),
                        RouteInstall(Route("sub", VAR, 1, "s", 20, 1), 10)])
    h.r.flooding.set(VAR, pub_interval_ms=10, level=1, modes=[1])
    assert h.feed(10) == {}  # mode 0: routed, filtered at 20 ms
    h.r.set_mode(1)
    assert set(h.feed(30)) == {"n1", "n2", "s", "all"}
    h.r.set_mode(0)
    assert h.feed(40) == {"s": [40]}


def test_the_temporary_mode_slot_keeps_the_flood_plan_of_common_variables() -> None:
    h = Harness()
    h.r.flooding.set(VAR, pub_interval_ms=10, level=1, modes=[0, 2])
    assert h.r.table.prepare_temporary(2) == 1
    assert h.feed(0) == {"n1": [0], "n2": [0], "all": [0]}
    assert h.feed(0, sender=N1) == {}  # the same last-flooded timestamp as mode 0


def test_clock_check_rejects_a_forged_future_timestamp_without_blocking_the_variable(h: Harness) -> None:
    h.r.flooding.set(VAR, pub_interval_ms=10, level=1, modes=[0])
    tolerance = h.r.config.flood_tolerance_ms
    assert h.feed(tolerance + 1, sender=N1) == {}
    assert h.drops["flood_clock"] == 1
    assert h.feed(0)["all"] == [0]  # the real stream goes on
    assert h.feed(tolerance)["all"] == [tolerance]  # within the tolerance: flooded


def test_periodic_reset_undoes_a_poisoned_last_flood_timestamp_and_refloods_nothing() -> None:
    h = Harness(flood_tolerance_ms=60_000, flood_reset_ms=1_000)
    h.r.flooding.set(VAR, pub_interval_ms=10, level=1, modes=[0])
    assert h.feed(3_000, sender=N1)["all"] == [3_000]  # accepted: within this router's (loose) tolerance
    assert h.feed(10) == {}  # the real stream is blocked ...
    assert h.r.flooding.tick(NOW + 20) == 1  # ... until the reset brings m_lastFlood back to the clock
    assert h.feed(30)["all"] == [30]
    assert h.feed(20, sender=N1) == {}  # a copy of a past event is still a duplicate after a reset
    assert h.r.flooding.tick(NOW + 500) == 0  # not due yet
    assert h.r.flooding.resets == 1


def test_channels_added_removed_or_changed_later_join_or_leave_the_scope(h: Harness) -> None:
    h.r.flooding.set(VAR, pub_interval_ms=10, level=1, modes=[0])
    h.r.remove_channel("n2")
    assert h.feed(0) == {"n1": [0], "all": [0]}
    h.r.update_channel("all", level=1, flood_all=False)
    h.r.update_channel("far", level=1, flood_all=False)
    assert h.feed(10) == {"n1": [10], "far": [10]}
    h.r.add_channel("n3", peer_id=9, kind=ChannelKind.ROUTER, address=("127.0.0.1", PORTS["n2"]))
    assert h.feed(20) == {"n1": [20], "far": [20], "n2": [20]}  # n3 reuses n2's port here
    with pytest.raises(NotFound):
        h.r.update_channel("nope", level=1, flood_all=True)
    with pytest.raises(ValidationError):
        h.r.update_channel("n1", level=0, flood_all=False)


def test_changing_the_level_keeps_the_last_flooded_timestamp(h: Harness) -> None:
    h.r.flooding.set(VAR, pub_interval_ms=10, level=1, modes=[0])
    h.feed(0)
    h.r.flooding.set(VAR, pub_interval_ms=10, level=2, modes=[0])
    assert h.feed(0, sender=N1) == {}


def test_other_variables_in_the_same_datagram_are_routed_normally_and_counters_add_up(h: Harness) -> None:
    h.r.install_routes([RouteInstall(Route("sub", 8, 0, "s", 10, 1), 10)])
    h.r.flooding.set(VAR, pub_interval_ms=10, level=1, modes=[0])
    evs = [event(VAR, NOW), event(8, NOW), event(VAR, NOW), event(9, NOW), event(VAR, NOW + 10 ** 7)]
    h.r.forwarder.process(datagram(*evs), NOW)
    fw = h.r.forwarder
    assert fw.events_in == 5 and fw.events_forwarded == 2
    assert fw.events_in == (fw.events_forwarded + fw.events_filtered + fw.drops["unknown_variable"]
                            + fw.drops["future_timestamp"] + fw.drops["flood_duplicate"] + fw.drops["flood_clock"])


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"level": 0}, "level"),
    ({"level": 65}, "level"),
    ({"modes": [16]}, "modes"),
    ({"modes": []}, "modes"),
    ({"pub_interval_ms": 0}, "pub_interval_ms"),
    ({"pub_interval_ms": 20}, "pub_interval_ms"),  # routed here at 10 ms
])
def test_bad_settings_are_refused_whole_with_the_field_named(kwargs: dict[str, object], field: str) -> None:
    h = Harness()
    h.r.install_routes([RouteInstall(Route("sub", VAR, 0, "s", 10, 1), 10)])
    args: dict[str, object] = {"pub_interval_ms": 10, "level": 1, "modes": [0, 1], **kwargs}
    before = h.r.table.table_version
    with pytest.raises(ValidationError) as err:
        h.r.flooding.set(VAR, **args)  # type: ignore[arg-type]
    assert err.value.field == field
    assert h.r.flooding.flooded() == [] and h.r.table.table_version == before
    with pytest.raises(ValidationError):
        h.r.flooding.remove(VAR, [99])


def test_listing_groups_modes_by_level() -> None:
    h = Harness()
    h.r.flooding.set(VAR, pub_interval_ms=10, level=1, modes=[0, 3])
    h.r.flooding.set(VAR, pub_interval_ms=10, level=2, modes=[5])
    assert [(e.variable_id, e.level, e.modes) for e in h.r.flooding.entries()] == [(VAR, 1, (0, 3)), (VAR, 2, (5,))]
    assert [ch.name for ch in h.r.flooding.level_table[1]] == ["all", "n1", "n2", "s"]
    assert [ch.name for ch in h.r.flooding.level_table[2]] == ["far"]
