"""The alerts exporter's record parsing and bounded series (telemetry.qos_alerts; docs/telemetry.md,
"The QoS alerts on a dashboard")."""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gridstat.telemetry.qos_alerts import AlertSeries, BadRecord, InvalidAlert, parse_alert, registry


def alert(**over: Any) -> dict[str, Any]:
    """A record as spark/qos_alerts.py writes it (to_json of its alerts() columns)."""
    base: dict[str, Any] = {
        "schema": "gridstat.alerts.qos_violation", "version": 1, "ts_ms": 1_700_000_000_000,
        "alert_id": "role/ems:1:42:latency", "kind": "latency", "subscription": "ems/pmu1/freq",
        "subscriber": "ems", "variable": "pmu1/freq", "mode": 0, "observed": 150.0, "bound": 100.0,
        "sample_ts_ms": 1_699_999_999_000, "source_exporter": "role/ems", "source_epoch": 1,
        "source_sequence": 42, "message": "ems/pmu1/freq: latency 150.0 against 100.0 in mode 0"}
    base.update(over)
    return base


def raw(**over: Any) -> bytes:
    return json.dumps(alert(**over)).encode()


def test_a_job_record_is_parsed() -> None:
    a = parse_alert(raw())
    assert (a.subscriber, a.variable, a.mode, a.kind, a.observed, a.bound) == ("ems", "pmu1/freq", 0, "latency",
                                                                               150.0, 100.0)
    assert a.labels == ("ems", "pmu1/freq", "0", "latency") and a.ratio == 1.5
    assert parse_alert(raw(kind="interval", observed=300.0, bound=100.0)).ratio == 3.0
    # gaps and violations have a bound of 0: no ratio
    assert parse_alert(raw(kind="gaps", observed=3.0, bound=0.0)).ratio is None
    assert parse_alert(raw(kind="violations", observed=2.0, bound=0.0)).ratio is None


@pytest.mark.parametrize(("value", "reason"), [
    (None, BadRecord.NOT_JSON),
    (b"{not json", BadRecord.NOT_JSON),
    (b"\xff\xfe", BadRecord.NOT_JSON),
    (b"[1, 2]", BadRecord.NOT_AN_OBJECT),
    (raw(schema="gridstat.telemetry.delivery"), BadRecord.WRONG_SCHEMA),
    (json.dumps({k: v for k, v in alert().items() if k != "subscriber"}).encode(), BadRecord.MISSING_FIELD),
    (raw(bound=None), BadRecord.MISSING_FIELD),
    (raw(kind="weather"), BadRecord.UNKNOWN_KIND),
    (raw(observed="fast"), BadRecord.BAD_FIELD),
    (raw(observed=True), BadRecord.BAD_FIELD),
    (raw(mode=1.5), BadRecord.BAD_FIELD),
    (raw(mode=99), BadRecord.BAD_FIELD),
    (raw(subscriber=""), BadRecord.BAD_FIELD),
    (raw(variable="v" * 300), BadRecord.BAD_FIELD),
    (b" " * 70_000, BadRecord.TOO_LARGE),
])
def test_bad_records_have_a_reason(value: bytes | None, reason: BadRecord) -> None:
    with pytest.raises(InvalidAlert) as err:
        parse_alert(value)
    assert err.value.reason == reason


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def scrape(series: AlertSeries) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(generate_latest(registry(series)).decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


LAT = (("kind", "latency"), ("mode", "0"), ("subscriber", "ems"), ("variable", "pmu1/freq"))


def test_counts_ratio_repeats_and_bad_records_on_metrics() -> None:
    series = AlertSeries(clock=Clock())
    series.add_record(raw(alert_id="a1", ts_ms=1000, observed=150.0))
    series.add_record(raw(alert_id="a2", ts_ms=3000, observed=250.0))
    series.add_record(raw(alert_id="a0", ts_ms=2000, observed=120.0))  # late: counted, not the newest ratio
    series.add_record(raw(alert_id="a2", ts_ms=3000, observed=250.0))  # a repeat of the at-least-once sink
    series.add_record(raw(alert_id="g1", kind="gaps", observed=4.0, bound=0.0))
    series.add_record(b"garbage")
    m = scrape(series)
    assert m["gridstat_qos_alerts_total"][LAT] == 3
    assert m["gridstat_qos_alert_ratio"] == {LAT: 2.5}  # the gaps series has no ratio
    assert m["gridstat_qos_alert_last_timestamp_seconds"][LAT] == 3.0
    assert m["gridstat_qos_alerts_exporter_records_total"][()] == 6
    assert m["gridstat_qos_alerts_exporter_duplicates_total"][()] == 1
    bad = m["gridstat_qos_alerts_exporter_bad_records_total"]
    assert bad[(("reason", "not_json"),)] == 1 and sum(bad.values()) == 1
    assert set(bad) == {(("reason", r.value),) for r in BadRecord}  # every reason served from 0
    assert m["gridstat_qos_alerts_exporter_series"][()] == 2
    assert m["gridstat_qos_alerts_exporter_kafka_connected"][()] == 0


def test_stale_series_are_forgotten_and_the_number_is_capped() -> None:
    clock = Clock()
    series = AlertSeries(forget_after_s=3600, max_series=3, clock=clock)
    for i in range(3):
        series.add_record(raw(alert_id=f"x{i}", subscriber=f"s{i}"))
    clock.t += 1800
    series.add_record(raw(alert_id="x0b", subscriber="s0"))  # s0 updated: s1 and s2 are now the oldest
    clock.t += 1801
    assert series.forget_stale() == 2
    assert [k[0] for k, *_ in series.items()] == ["s0"]
    for i in range(5):
        series.add_record(raw(alert_id=f"y{i}", subscriber=f"t{i}"))
    assert len(series) == 3 and series.health.forgotten_limit == 3
    m = scrape(series)
    assert m["gridstat_qos_alerts_exporter_series_forgotten_total"] == {(("cause", "limit"),): 3,
                                                                        (("cause", "stale"),): 2}


def test_the_repeat_memory_is_bounded() -> None:
    series = AlertSeries(dedup_ids=2, clock=Clock())
    for i in (1, 2, 3, 1):
        series.add_record(raw(alert_id=f"id{i}"))
    # id1 was pushed out by id3: counted again (a repeat that far apart is rare and harmless)
    assert series.health.duplicates == 0 and next(iter(series.items()))[1] == 4
