"""An answer's chunks on the wire and back in the SDK (history.service.chunk_of, client.history.events_of)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridstat.client.history import HistoryEvent, events_of
from gridstat.errors import ValidationError
from gridstat.history.service import chunk_of
from gridstat.telemetry.archive_reading import ArchivedBatch, ArchiveParams
from gridstat.v1 import history_pb2 as pb


def roundtrip(value_type: str, values: list[object], flags: list[bool]) -> list[HistoryEvent]:
    batch = ArchivedBatch(ArchiveParams(value_type, 100, 20, 0), list(range(1000, 1000 + len(values))),
                          list(values), list(flags))
    wire = chunk_of(batch).SerializeToString()
    return events_of(pb.HistoryChunk.FromString(wire))


@given(st.lists(st.tuples(st.floats(allow_nan=False, allow_infinity=False), st.booleans()), max_size=50))
def test_floats_come_back_equal(items: list[tuple[float, bool]]) -> None:
    events = roundtrip("float", [v for v, _ in items], [f for _, f in items])
    assert events == [HistoryEvent(1000 + i, v, f) for i, (v, f) in enumerate(items)]


@given(st.lists(st.integers(-2**53, 2**53), max_size=50))
def test_ints_come_back_as_ints(values: list[int]) -> None:
    events = roundtrip("int", list(values), [False] * len(values))
    assert [e.value for e in events] == values and all(type(e.value) is int for e in events)


def test_bools_come_back_as_bools() -> None:
    assert [e.value for e in roundtrip("bool", [True, False], [False, False])] == [True, False]


def test_structs_and_nulls_travel_as_json() -> None:
    values: list[object] = [{"magnitude": 1.5, "angle": -0.25}, None]
    events = roundtrip("phasor", values, [False, True])
    assert [e.value for e in events] == values and [e.extrapolated for e in events] == [False, True]
    # a float variable with a non-finite (archived as null) value: that chunk goes as JSON too
    assert [e.value for e in roundtrip("float", [1.0, None], [False, False])] == [1.0, None]


def test_a_slice_of_a_batch_is_a_chunk() -> None:
    batch = ArchivedBatch(ArchiveParams("float", 100, 20, 0), [1, 2, 3], [0.5, 1.5, 2.5], [False, False, False])
    chunk = chunk_of(batch, 1, 3)
    assert list(chunk.timestamps_ms) == [2, 3] and list(chunk.values) == [1.5, 2.5] and not chunk.extrapolated


def test_a_malformed_chunk_is_an_error_not_a_crash() -> None:
    with pytest.raises(ValidationError):
        events_of(pb.HistoryChunk(timestamps_ms=[1, 2], values=[math.pi], value_type="float"))
    with pytest.raises(ValidationError):
        events_of(pb.HistoryChunk(timestamps_ms=[1, 2], values=[1.0, 2.0], extrapolated=[True], value_type="float"))


def test_ints_beyond_a_doubles_precision_travel_as_json() -> None:
    big = [2**60 + 1, -(2**60) - 3]
    assert [e.value for e in roundtrip("int", list(big), [False, False])] == big
