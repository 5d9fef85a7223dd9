"""Reading archived measurements back without decoding every record (telemetry.archive_reading)."""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from gridstat.telemetry import records
from gridstat.telemetry.archive_reading import (
    ArchivedBatch,
    ArchiveParams,
    ArchiveReader,
    ReadStats,
    _FastValues,
    partition_of,
)


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


# -- the scan over fetched batches, without Kafka -----------------------------------------------------

class _Rec:
    def __init__(self, offset: int, key: bytes, timestamp: int, value: bytes) -> None:
        self.offset, self.key, self.timestamp, self.value = offset, key, timestamp, value


class _Batch(list):  # type: ignore[type-arg]
    @property
    def base_offset(self) -> int:
        return int(self[0].offset)

    @property
    def next_offset(self) -> int:
        return int(self[-1].offset) + 1


class _Consumer:
    def __init__(self, start: int) -> None:
        self.start = start

    async def position(self, tp: object) -> int:
        return self.start


def _scan(rows: list[_Rec], *, start: int, end: int, frm: int, to: int, choose: object,
          batch_size: int = 4) -> tuple[list[ArchivedBatch], ReadStats]:
    import asyncio

    reader = ArchiveReader("127.0.0.1:1")

    async def batches(consumer: object, tp: object, offset: int, stop: int):  # type: ignore[no-untyped-def]
        for i in range(0, len(rows), batch_size):
            yield _Batch(rows[i:i + batch_size])

    reader._batches = batches  # type: ignore[method-assign]
    stats = ReadStats()

    async def run() -> list[ArchivedBatch]:
        return [b async for b in reader._scan(_Consumer(start), None, b"pmu1/freq", end, frm, to, choose,  # type: ignore[arg-type]
                                              3, stats)]

    return asyncio.run(run()), stats


def _row(offset: int, ts: int, value: float, *, key: bytes = b"pmu1/freq", interval_ms: int = 100) -> _Rec:
    raw = archived(value, interval_ms=interval_ms)
    return _Rec(offset, key, ts, raw)


def test_the_scan_keeps_the_range_of_its_key_once_and_stops_past_it() -> None:
    rows = [_row(0, 900, 0.0), _row(1, 1000, 1.0), _row(2, 1000, 1.0),  # a copy
            _row(3, 1100, 9.0, key=b"pmu2/freq"), _row(4, 1100, 2.0), _row(5, 1200, 3.0), _row(6, 1300, 4.0),
            _row(7, 1400, 5.0), _row(8, 1500, 6.0)]
    out, stats = _scan(rows, start=1, end=9, frm=1000, to=1400, choose=lambda p: None)
    events = [(t, v) for b in out for t, v in zip(b.timestamps_ms, b.values, strict=True)]
    assert events == [(1000, 1.0), (1100, 2.0), (1200, 3.0), (1300, 4.0), (1400, 5.0)]
    assert [len(b) for b in out] == [3, 2]  # batches of at most batch_events
    assert stats.duplicates == 1 and stats.matched == 5 and stats.decoded == 5


def test_the_filter_is_decided_before_decoding() -> None:
    rows = [_row(i, 1000 + 100 * i, float(i)) for i in range(10)]
    out, stats = _scan(rows, start=0, end=10, frm=0, to=10**6,
                       choose=lambda p: (lambda ts: ts % 300 == 0))
    assert [t for b in out for t in b.timestamps_ms] == [1200, 1500, 1800]
    assert stats.matched == 10 and stats.decoded == 4  # the first (for the parameters) and the kept ones


def test_a_change_of_the_archives_subscription_chooses_again() -> None:
    chosen: list[int] = []

    def choose(p: ArchiveParams):  # type: ignore[no-untyped-def]
        chosen.append(p.interval_ms)
        return None

    rows = [_row(0, 1000, 1.0), _row(1, 1100, 2.0), _row(2, 1200, 3.0, interval_ms=200), _row(3, 1400, 4.0,
                                                                                              interval_ms=200)]
    out, _ = _scan(rows, start=0, end=4, frm=0, to=10**6, choose=choose)
    assert chosen == [100, 200]
    assert [(b.params.interval_ms, b.timestamps_ms) for b in out] == [(100, [1000, 1100]), (200, [1200, 1400])]


def test_the_end_offset_taken_at_the_start_bounds_the_scan() -> None:
    rows = [_row(i, 1000 + 100 * i, float(i)) for i in range(8)]
    out, _ = _scan(rows, start=2, end=5, frm=0, to=10**6, choose=lambda p: None)
    assert [t for b in out for t in b.timestamps_ms] == [1200, 1300, 1400]
