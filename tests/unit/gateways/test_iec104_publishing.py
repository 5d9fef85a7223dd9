"""The gateway's hot path (gateways/iec104/publishing.py) with fake SDK handles: measured values of
one ASDU in one publish_many, points one alert each, repeats left out, refusals and kinds counted."""

from __future__ import annotations

from typing import Any

from gridstat.client import AlertTooEarly
from gridstat.gateways.iec104 import PointMap, read_quality
from gridstat.gateways.iec104.asdu import IV, Kind, PointValue
from gridstat.gateways.iec104.publishing import PointPublishers
from gridstat.gateways.iec104.stats import GatewayStats

T0 = 1_795_810_899_287


class FakePublisher:
    def __init__(self) -> None:
        self.batches: list[tuple[list[tuple[Any, object]], int, tuple[Any, ...]]] = []

    def publish_many(self, items: list[tuple[Any, object]], ts_ms: int, *, options: tuple[Any, ...] = ()) -> int:
        self.batches.append((items, ts_ms, options))
        return ts_ms


class FakeHandle:
    def __init__(self, publisher: FakePublisher, min_interval_ms: int = 0) -> None:
        self.publisher = publisher
        self.min_interval_ms = min_interval_ms
        self.alerts: list[tuple[object, int, tuple[Any, ...]]] = []

    def publish(self, value: object, ts_ms: int, *, options: tuple[Any, ...] = ()) -> int:
        if self.alerts and ts_ms - self.alerts[-1][1] < self.min_interval_ms:
            raise AlertTooEarly("too early", field="ts_ms")
        self.alerts.append((value, ts_ms, options))
        return ts_ms


def setup(points: PointMap | None = None) -> tuple[PointPublishers, FakePublisher]:
    pp = PointPublishers("127.0.0.1:9", stats=GatewayStats(), points=points)
    return pp, FakePublisher()


def value(ioa: int, kind: Kind, v: object, *, quality: int = 0, time_ms: int | None = None, cot: int = 1,
          type_id: int = 13) -> PointValue:
    return PointValue(47, ioa, type_id, kind, v, quality, cot, time_ms)  # type: ignore[arg-type]


def test_measured_values_of_one_asdu_go_out_together_and_points_one_by_one() -> None:
    pp, pub = setup()
    a, b, brk = FakeHandle(pub), FakeHandle(pub), FakeHandle(pub, min_interval_ms=10)
    pp._handles.update({"ca47/ioa1": a, "ca47/ioa2": b, "ca47/ioa9": brk})  # type: ignore[dict-item]
    pp.publish([value(1, Kind.FLOAT, 1.5), value(2, Kind.FLOAT, 2.5),
                value(9, Kind.SINGLE, True, time_ms=T0, cot=3, type_id=30)], T0 + 100)
    ((items, ts, (opt,)),) = pub.batches
    assert [(h, v) for h, v in items] == [(a, 1.5), (b, 2.5)] and ts == T0 + 100
    q = read_quality([opt])
    assert q is not None and q.good and not q.device_time and q.type_id == 13
    ((v, ts, (opt,)),) = brk.alerts
    q = read_quality([opt])
    assert (v, ts) == (True, T0) and q is not None and q.cot == 3 and q.device_time
    st = pp.stats
    assert (st.events_published, st.alerts_published, st.events_unpublished) == (3, 1, 0)
    assert set(pp.wanted) == {"ca47/ioa1", "ca47/ioa2", "ca47/ioa9"}


def test_different_quality_or_time_splits_the_batch() -> None:
    pp, pub = setup()
    for ioa in (1, 2, 3):
        pp._handles[f"ca47/ioa{ioa}"] = FakeHandle(pub)  # type: ignore[assignment]
    pp.publish([value(1, Kind.FLOAT, 1.0, time_ms=T0, type_id=36), value(2, Kind.FLOAT, 2.0, time_ms=T0, type_id=36,
                                                                           quality=IV),
                value(3, Kind.FLOAT, 3.0, time_ms=T0 + 1, type_id=36)], T0 + 100)
    assert [(len(items), ts) for items, ts, _ in pub.batches] == [(1, T0), (1, T0), (1, T0 + 1)]


def test_repeats_too_early_unregistered_and_other_kinds_are_counted() -> None:
    pp, pub = setup()
    brk = FakeHandle(pub, min_interval_ms=10)
    pp._handles["ca47/ioa9"] = brk  # type: ignore[assignment]
    on = value(9, Kind.SINGLE, True, time_ms=T0, cot=3, type_id=30)
    pp.publish([on], T0)
    pp.publish([value(9, Kind.SINGLE, True, time_ms=T0, cot=20, type_id=30)], T0 + 5)  # the interrogation's answer
    pp.publish([value(9, Kind.SINGLE, False, time_ms=T0 + 3, cot=3, type_id=30)], T0 + 5)  # 3 ms later
    pp.publish([value(9, Kind.FLOAT, 1.0)], T0 + 6)  # the same address as another kind
    pp.publish([value(10, Kind.FLOAT, 1.0)], T0 + 6)  # not registered yet
    st = pp.stats
    assert (st.alerts_published, st.alerts_repeated, st.alerts_too_early, st.events_unpublished) == (1, 1, 1, 1)
    assert st.drops.as_dict() == {"kind_mismatch": 1}


def test_only_mapped_and_declared_points() -> None:
    points = PointMap.parse({"only_mapped": True, "points": [{"ca": 47, "ioa": 5, "name": "a/b", "kind": "double"}]})
    pp, _ = setup(points)
    assert set(pp.wanted) == {"a/b"}  # declared: registered before any value
    pp.publish([value(6, Kind.FLOAT, 1.0)], T0)
    assert pp.stats.drops.as_dict() == {"unmapped": 1}
