"""Every record builder's output is valid against its published JSON Schema, and the schemas are valid."""

from __future__ import annotations

import json

import jsonschema
import pytest

from gridstat.telemetry import records

SAMPLES = {
    "counters": lambda: records.counters(
        period_ms=1000, channel="e1-r2", events_in=10, events_out=9, datagrams_in=3, datagrams_out=3, filtered=1,
        dropped=0, events_in_total=100, events_out_total=90, dropped_total=0, up=True, queued=0,
        queue_capacity=4096, rtt_ms=0.21, ts_ms=1),
    "delivery": lambda: records.delivery(
        subscriber="ems", variable="pmu1/freq", variable_id=7, mode=0, period_ms=1000, requested_interval_ms=20,
        latency_bound_ms=30.0, delivered=50, gaps=0, duplicates=2, stale=0, violations=0, extrapolated=0,
        latency_ms=[1, 2, 3], delivered_interval_ms=20.0, previous_ts_ms=1000, last_ts_ms=2000),
    "drops": lambda: records.drops(channel="", reason="unknown_variable", count=3, total=10),
    "admission": lambda: records.admission(
        subscription_id="s1", subscriber="ems", variable="pmu1/freq", action="subscribe", decision="rejected",
        reason="LatencyUnattainable", message="no path within 1 ms",
        modes=[{"mode": 0, "interval_ms": 20, "latency_ms": 1.0, "redundancy": 1}], duration_ms=0.8),
    "mode_change": lambda: records.mode_change(mode=1, previous_mode=0, outcome="committed", duration_ms=31.0),
    "gap": lambda: records.gap(from_ms=1, to_ms=5001, lost={"buffer_full": 12, "rejected": 0}),
    "measurement": lambda: records.measurement(
        variable="pmu1/freq", variable_id=7, event_ts_ms=1000, value=60.01, value_type="float", received_ms=1003,
        interval_ms=100),
}


def stamped(record: dict) -> dict:  # type: ignore[type-arg]
    """What the exporter adds to every record."""
    return {**record, "role": "router", "source": "e1", "exporter": "router/e1", "epoch": 1_764_230_000_000_000,
            "sequence": 1}


@pytest.mark.parametrize("version", records.SCHEMA_VERSIONS)
@pytest.mark.parametrize("kind", sorted(records.KINDS))
def test_schema_files_are_valid_json_schema(kind: str, version: int) -> None:
    schema = json.loads(records.schema_path(kind, version).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema"]["const"] == records.KINDS[kind][0]
    assert schema["properties"]["version"]["const"] == version


@pytest.mark.parametrize("kind", sorted(set(records.KINDS) - {"qos_alert"}))
def test_every_record_carries_its_key_from_version_2_on(kind: str) -> None:
    current = json.loads(records.schema_path(kind).read_text())
    assert records.SCHEMA_VERSION == 2 and set(records.RECORD_KEY) <= set(current["required"])
    # version 1 stays as it was, for the records still in Kafka
    old = json.loads(records.schema_path(kind, 1).read_text())
    assert {"instance", "seq"} <= set(old["required"]) and "exporter" not in old["properties"]
    v1 = {**SAMPLES.get(kind, lambda: {})(), "version": 1, "role": "router", "source": "e1", "instance": "abc",
          "seq": 1}
    if kind in SAMPLES:
        jsonschema.validate(v1, old)
        with pytest.raises(jsonschema.ValidationError):  # a version 1 record is no version 2 record
            jsonschema.validate(v1, current)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_builders_produce_valid_records(kind: str) -> None:
    schema = json.loads(records.schema_path(kind).read_text())
    record = stamped(SAMPLES[kind]())
    jsonschema.validate(record, schema)
    # every property the builder writes is documented in the schema
    assert set(record) <= set(schema["properties"]), set(record) - set(schema["properties"])


def test_a_record_missing_a_required_field_is_invalid() -> None:
    schema = json.loads(records.schema_path("delivery").read_text())
    bad = stamped(SAMPLES["delivery"]())
    del bad["latency_ms"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_values_json_cannot_carry_are_dropped() -> None:
    m = records.measurement(variable="p/x", variable_id=1, event_ts_ms=1, value=float("nan"), value_type="float",
                            received_ms=2, interval_ms=10)
    assert m["value"] is None and m["value_num"] is None
    json.dumps(m, allow_nan=False)
    d = SAMPLES["delivery"]()
    assert d["expected"] == 50.0 and d["interval_deviation_ms"] == 0.0


def test_delivery_caps_latency_samples_and_counts_the_rest() -> None:
    d = records.delivery(subscriber="s", variable="p/x", variable_id=1, mode=0, period_ms=1000,
                         requested_interval_ms=1, latency_bound_ms=5, delivered=1500, gaps=0, duplicates=0, stale=0,
                         violations=0, extrapolated=0, latency_ms=list(range(1500)), delivered_interval_ms=None,
                         previous_ts_ms=None, last_ts_ms=None)
    assert len(d["latency_ms"]) == records.MAX_LATENCY_SAMPLES
    assert d["latency_samples_omitted"] == 1500 - records.MAX_LATENCY_SAMPLES
    assert d["latency_ms"][-1] == 1499
