"""The archiver's records: event-time Kafka timestamps and the publication's phase parameters (docs/history.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import jsonschema

from gridstat.core.model import FLOAT, StatusVariable
from gridstat.telemetry import records
from gridstat.telemetry.archiving import Archiver
from gridstat.telemetry.buffering import Pending, RecordBuffer


@dataclass
class _Sub:
    variable: StatusVariable
    interval_ms: int


@dataclass
class _Holder:
    value: Any
    timestamp_ms: int
    received_ms: int
    extrapolated: bool = False


class _Emitter:
    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict[str, Any], str | bytes | None, int | None]] = []

    def emit(self, topic: str, record: dict[str, Any], *, key: str | bytes | None = None,
             timestamp_ms: int | None = None) -> bool:
        self.emitted.append((topic, record, key, timestamp_ms))
        return True


def test_a_measurement_carries_its_event_time_and_the_publications_parameters() -> None:
    emitter = _Emitter()
    archiver = Archiver(emitter)
    var = StatusVariable("pmu1", "freq", FLOAT, 16, variable_id=3, frames_per_s=60)
    archiver.on_event(_Sub(var, 100), _Holder(59.98, 1_795_000_000_017, 1_795_000_000_020))
    ((topic, record, key, ts),) = emitter.emitted
    assert topic == records.TOPICS.measurements and key == "pmu1/freq" and ts == 1_795_000_000_017
    assert record["pub_interval_ms"] == 16 and record["frames_per_s"] == 60 and record["interval_ms"] == 100
    record.update(role="archive", source="a", exporter="archive/a", epoch=1, sequence=1)  # the exporter's stamps
    schema = json.loads(records.schema_path("measurement").read_text())
    jsonschema.Draft202012Validator(schema).validate(record)


def test_the_new_fields_are_optional() -> None:
    record = records.measurement(variable="p/v", variable_id=1, event_ts_ms=1, value=1.0, value_type="float",
                                 received_ms=2, interval_ms=100)
    assert "pub_interval_ms" not in record and "frames_per_s" not in record
    schema = json.loads(records.schema_path("measurement").read_text())
    assert "pub_interval_ms" not in schema["required"] and "frames_per_s" not in schema["required"]


def test_a_buffered_record_keeps_its_timestamp() -> None:
    buf = RecordBuffer(2)
    buf.put(Pending("t", b"k", {"n": 1}, 1_795_000_000_000))
    buf.put(Pending("t", b"k", {"n": 2}))
    first, second = buf.take(2)
    assert first.timestamp_ms == 1_795_000_000_000 and second.timestamp_ms is None
