"""Reading archived measurements back without decoding every record (telemetry.archive_reading)."""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from gridstat.telemetry import records
from gridstat.telemetry.archive_reading import ArchiveParams, _FastValues, partition_of


def archived(value: object, *, extrapolated: bool = False, interval_ms: int = 100, pub: int | None = 20,
             fps: int | None = 0, value_type: str = "float") -> bytes:
    rec = records.measurement(variable="pmu1/freq", variable_id=7, event_ts_ms=1_795_000_000_000, value=value,
                              value_type=value_type, received_ms=1_795_000_000_004, interval_ms=interval_ms,
                              extrapolated=extrapolated, pub_interval_ms=pub, frames_per_s=fps)
    # what TelemetryExporter.emit stamps, then how it encodes
    rec.update(role="archive", source="a1", exporter="archive/a1", epoch=17, sequence=99)
    return json.dumps(rec, separators=(",", ":"), allow_nan=False).encode()


def fast_for(raw: bytes) -> _FastValues:
    fast = _FastValues.of(raw, ArchiveParams.of(json.loads(raw)))
    assert fast is not None
    return fast


finite = st.floats(allow_nan=False, allow_infinity=False)


@given(value=finite, extrapolated=st.booleans())
def test_a_float_value_reads_as_json_would(value: float, extrapolated: bool) -> None:
    raw = archived(value, extrapolated=extrapolated)
    assert fast_for(archived(1.0)).extract(raw) == (json.loads(raw)["value"], extrapolated)


@given(value=st.one_of(st.integers(-2**62, 2**62), st.booleans(),
                       st.dictionaries(st.text(max_size=8), st.one_of(finite, st.text(max_size=8)), max_size=4)))
def test_other_values_read_as_json_would(value: object) -> None:
    value_type = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "phasor"
    raw = archived(value, value_type=value_type)
    got = fast_for(archived(value, value_type=value_type)).extract(raw)
    assert got == (json.loads(raw)["value"], False)


def test_a_non_finite_value_is_null() -> None:
    raw = archived(math.inf)
    assert fast_for(archived(1.0)).extract(raw) == (None, False)


def test_other_parameters_are_not_read_fast() -> None:
    fast = fast_for(archived(1.0, interval_ms=100, pub=20, fps=0))
    assert fast.extract(archived(1.0, interval_ms=200, pub=20, fps=0)) is None
    assert fast.extract(archived(1.0, interval_ms=100, pub=10, fps=0)) is None
    assert fast.extract(archived(1.0, interval_ms=100, pub=16, fps=60)) is None
    # a record written before pub_interval_ms / frames_per_s were archived
    assert fast.extract(archived(1.0, pub=None, fps=None)) is None


def test_another_key_order_is_decoded_whole() -> None:
    doc = json.loads(archived(1.5))
    reordered = json.dumps(dict(reversed(list(doc.items()))), separators=(",", ":")).encode()
    assert fast_for(archived(1.5)).extract(reordered) is None


def test_the_partition_is_the_exporters_whatever_the_order_of_partitions() -> None:
    from aiokafka.partitioner import DefaultPartitioner

    key = b"pmu1/freq"
    expected = DefaultPartitioner()(key, list(range(6)), list(range(6)))
    assert partition_of(key, [5, 3, 1, 0, 2, 4]) == expected
    assert {partition_of(f"pmu{i}/freq".encode(), list(range(6))) for i in range(40)} == set(range(6))
