"""Points to variables (docs/dnp3.md, "Variables" and "The map file"): default names, the map file and
its errors (file, line, entry, field), the periodic grid, alerts on change, and the quality option."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridstat.core import wire
from gridstat.core.model import BOOL, FLOAT
from gridstat.errors import ValidationError
from gridstat.gateways.dnp3 import (
    DNP3_QUALITY,
    Flags,
    Point,
    PointKind,
    PointMap,
    PointTable,
    TimeSource,
    flag_names,
    load_point_map,
    quality_option,
    read_quality,
)

AI, BI = PointKind.ANALOG_INPUT, PointKind.BINARY_INPUT


def point(kind: PointKind, index: int, value: float | bool, flags: int = 1, time_ms: int = 0,
          event: bool = False) -> Point:
    return Point(kind, index, value, flags, time_ms, TimeSource.ABSOLUTE if time_ms else TimeSource.NONE, event)


def test_default_names_kinds_and_attributes() -> None:
    ai = PointMap().spec(10, AI, 3)
    bi = PointMap().spec(10, BI, 0)
    assert ai is not None and bi is not None
    assert (ai.full_name, ai.type, ai.alert, ai.interval_ms) == ("dnp10/ai3", FLOAT, False, 1000)
    assert (bi.full_name, bi.type, bi.alert, bi.min_interval_ms) == ("dnp10/bi0", BOOL, True, 100)
    assert dict(ai.attributes) == {"protocol": "dnp3", "outstation": "10", "point": "ai3", "group": "30",
                                   "index": "3", "kind": "analog_input"}


def write(tmp: Path, text: str) -> Path:
    p = tmp / "points.yaml"
    p.write_text(text)
    return p


def test_map_file(tmp_path: Path) -> None:
    names = load_point_map(write(tmp_path, """\
publisher: sub_north
interval_ms: 500
attributes: {station: north}
others: skip
points:
  - {group: 30, index: 0, name: bus1_kv, attributes: {units: kV}}
  - {group: 32, index: 1, name: grid/f_north, interval_ms: 100}
  - {group: 1, index: 4, name: brk4, min_interval_ms: 20}
  - {group: 2, index: 5, kind: periodic, interval_ms: 1000}
"""))
    a = names.spec(10, AI, 0)
    assert a is not None and (a.full_name, a.interval_ms) == ("sub_north/bus1_kv", 500)
    assert dict(a.attributes)["units"] == "kV" and dict(a.attributes)["station"] == "north"
    f = names.spec(10, AI, 1)
    assert f is not None and (f.full_name, f.interval_ms) == ("grid/f_north", 100)
    b = names.spec(10, BI, 4)
    assert b is not None and (b.full_name, b.alert, b.min_interval_ms) == ("sub_north/brk4", True, 20)
    c = names.spec(10, BI, 5)
    assert c is not None and (c.full_name, c.alert) == ("sub_north/bi5", False)
    assert names.spec(10, AI, 2) is None  # others: skip


@pytest.mark.parametrize(("text", "where"), [
    ("points:\n  - {group: 31, index: 0}\n", r"points.yaml:2: points\[0\].group: must be 1 or 2"),
    ("points:\n  - {group: 30, index: -1}\n", r":2: points\[0\].index: must be an integer 0..65535"),
    ("points:\n  - {group: 30}\n", r":2: points\[0\]: 'index' is missing"),
    ("points:\n  - {group: 30, index: 0, interval_ms: 0}\n", r":2: points\[0\].interval_ms: must be an integer"),
    ("points:\n  - {group: 30, index: 0, kind: sometimes}\n", r"points\[0\].kind: must be 'periodic' or 'alert'"),
    ("points:\n  - {group: 30, index: 0, name: 'a b'}\n", r"points\[0\].name: "),
    ("points:\n  - {group: 30, index: 0, colour: red}\n", r"points\[0\].colour: unknown field"),
    ("points:\n  - {group: 30, index: 0}\n  - {group: 32, index: 0}\n", r":3: points\[1\]: ai0 is listed twice"),
    ("points:\n  - {group: 30, index: 0, name: x}\n  - {group: 30, index: 1, name: x}\n",
     r"points\[1\]: \*/x is also the name of points\[0\]"),
    ("others: maybe\n", r":1: others: must be 'publish' or 'skip'"),
    ("- 1\n", r"\(document\): a map is a mapping"),
])
def test_map_file_errors_name_the_entry_and_field(tmp_path: Path, text: str, where: str) -> None:
    with pytest.raises(ValidationError, match=where):
        load_point_map(write(tmp_path, text))


def test_periodic_values_on_their_grid_with_quality() -> None:
    table = PointTable(PointMap(interval_ms=100), 10)
    assert table.update([point(AI, 0, 1.5, flags=0x21, time_ms=123_456), point(AI, 1, 2.0)], 1_000_050) == []
    assert [s.full_name for s in table.take_new()] == ["dnp10/ai0", "dnp10/ai1"]
    (ts, items), = table.due(1_000_050)
    assert ts == 1_000_000 and [(s.variable, v) for s, v, _ in items] == [("ai0", 1.5), ("ai1", 2.0)]
    assert read_quality([items[0][2]]) == (0x21, TimeSource.ABSOLUTE, 123_456)
    assert read_quality([items[1][2]]) == (0x01, TimeSource.NONE, 0)
    assert table.due(1_000_099) == []
    table.update([point(AI, 0, 3.0)], 1_000_120)
    (ts, items), = table.due(1_000_250)  # one instant missed by a late tick: the newest is published
    assert ts == 1_000_200 and items[0][1] == 3.0


def test_binary_changes_are_alerts() -> None:
    table = PointTable(PointMap(), 10)
    first = table.update([point(BI, 0, False, flags=0x01)], 5_000)
    assert [(a.spec.full_name, a.value, a.ts_ms) for a in first] == [("dnp10/bi0", False, 5_000)]
    assert table.update([point(BI, 0, False, flags=0x01)], 6_000) == []  # an integrity poll, unchanged
    changed = table.update([point(BI, 0, True, flags=0x81, time_ms=5_500, event=True)], 6_000)
    assert [(a.value, a.ts_ms) for a in changed] == [(True, 5_500)]  # the event's device time
    assert read_quality([changed[0].option]) == (0x81, TimeSource.ABSOLUTE, 5_500)
    # An event of the same state is still a report of the device's, and a flag change alone is a change.
    assert len(table.update([point(BI, 0, True, flags=0x81, event=True)], 7_000)) == 1
    assert len(table.update([point(BI, 0, True, flags=0x85)], 8_000)) == 1
    assert table.due(9_000) == []  # alerts are not periodic


def test_unmapped_points_are_counted() -> None:
    table = PointTable(PointMap(others=False), 10)
    assert table.update([point(AI, 0, 1.0)], 0) == [] and table.stats.points_unmapped == 1


def test_quality_option_and_flag_names() -> None:
    opt = quality_option(0x61, 2**47 + 1, TimeSource.RELATIVE)
    assert opt.kind == DNP3_QUALITY == 0x1815
    encoded = wire.encode_event(wire.Event(0, 1, b"\0" * 8, 0, (opt,)))
    assert len(encoded) == wire.EVENT_HEAD_SIZE + 8 + wire.OPTION_SIZE
    assert read_quality([opt]) == (0x61, TimeSource.RELATIVE, 2**47 + 1)
    assert read_quality([wire.DerivedValue(DNP3_QUALITY, 1, float("nan"), 1)]) is None
    assert read_quality([]) is None
    assert flag_names(AI, Flags.ONLINE | Flags.OVER_RANGE | Flags.REFERENCE_ERR) == ["ONLINE", "OVER_RANGE",
                                                                                   "REFERENCE_ERR"]
    assert flag_names(BI, 0x81) == ["ONLINE", "STATE"]
