"""Information objects to status variables (gateways/iec104/mapping.py, quality.py): default names,
the map file and its errors (which entry, which field), the IEC104 option."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridstat.core.model import BOOL, FLOAT, INT
from gridstat.errors import ValidationError
from gridstat.gateways.iec104 import PointMap, load_point_map, read_quality
from gridstat.gateways.iec104.asdu import IV, NT, Kind, PointValue
from gridstat.gateways.iec104.quality import option

MAP = """\
defaults: {interval_ms: 2000, attributes: {region: west}}
stations: {47: north}
points:
  - {ca: 47, ioa: 100, name: feeder1/p_mw, kind: float, interval_ms: 500, attributes: {units: MW}}
  - {ca: 47, ioa: 200, variable: breaker1, kind: single, min_interval_ms: 10}
  - {ca: 48, ioa: 1, publisher: south}
"""


def test_default_names_types_and_attributes() -> None:
    points = PointMap()
    spec = points.spec(3, 1001, Kind.SCALED)
    assert spec is not None and spec.full_name == "ca3/ioa1001" and spec.type == INT and not spec.alert
    assert spec.interval_ms == 1000 and spec.attributes_dict == {
        "protocol": "iec104", "common_address": "3", "ioa": "1001", "kind": "scaled"}
    point = points.spec(3, 5, Kind.SINGLE)
    assert point is not None and point.alert and point.type == BOOL and point.min_interval_ms == 1
    assert points.spec(3, 6, Kind.DOUBLE).type == INT  # type: ignore[union-attr]


def test_the_map_file(tmp_path: Path) -> None:
    f = tmp_path / "points.yaml"
    f.write_text(MAP)
    points = load_point_map(f)
    p = points.spec(47, 100, Kind.FLOAT)
    assert p is not None and p.full_name == "feeder1/p_mw" and p.interval_ms == 500 and p.type == FLOAT
    assert p.attributes_dict["units"] == "MW" and p.attributes_dict["region"] == "west"
    b = points.spec(47, 200, Kind.SINGLE)
    assert b is not None and b.full_name == "north/breaker1" and b.min_interval_ms == 10
    assert points.spec(47, 300, Kind.FLOAT).full_name == "north/ioa300"  # type: ignore[union-attr]
    assert points.spec(48, 1, Kind.FLOAT).full_name == "south/ioa1"  # type: ignore[union-attr]
    assert points.spec(49, 1, Kind.FLOAT).interval_ms == 2000  # type: ignore[union-attr]
    assert sorted(s.full_name for s in points.declared()) == ["feeder1/p_mw", "north/breaker1"]
    assert points.expected_kind(47, 100) is Kind.FLOAT


def test_only_mapped_leaves_the_others_out() -> None:
    points = PointMap.parse({"only_mapped": True, "points": [{"ca": 1, "ioa": 2}]})
    assert points.spec(1, 2, Kind.FLOAT) is not None and points.spec(1, 3, Kind.FLOAT) is None


@pytest.mark.parametrize(("text", "where"), [
    ("points:\n  - {ca: 1, ioa: 2, kind: analog}\n", "points[0].kind"),
    ("points:\n  - {ca: 1}\n", "points[0].ioa"),
    ("points:\n  - {ca: 0, ioa: 2}\n", "points[0].ca"),
    ("points:\n  - {ca: 1, ioa: 16777216}\n", "points[0].ioa"),
    ("points:\n  - {ca: 1, ioa: 2}\n  - {ca: 1, ioa: 3, interval_ms: 0}\n", "points[1].interval_ms"),
    ("points:\n  - {ca: 1, ioa: 2, name: no_slash}\n", "points[0].name"),
    ("points:\n  - {ca: 1, ioa: 2, name: a/b, publisher: c}\n", "points[0].name"),
    ("points:\n  - {ca: 1, ioa: 2}\n  - {ca: 1, ioa: 2}\n", "points[1]"),
    ("points:\n  - {ca: 1, ioa: 2, name: a/b}\n  - {ca: 1, ioa: 3, name: a/b}\n", "points[1]"),
    ("points:\n  - {ca: 1, ioa: 2, colour: red}\n", "points[0].colour"),
    ("points:\n  - {ca: 1, ioa: 2, attributes: {units: [a]}}\n", "points[0].attributes.units"),
    ("stations: {1: 'bad name'}\n", "stations.1"),
    ("defaults: {interval_ms: fast}\n", "defaults.interval_ms"),
    ("only_mapped: 3\n", "only_mapped"),
    ("pointz: []\n", "pointz"),
    ("- 1\n", "(document)"),
])
def test_errors_name_the_entry_and_the_field(tmp_path: Path, text: str, where: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ValidationError) as exc:
        load_point_map(f)
    assert exc.value.field == where
    message = exc.value.args[0]
    assert message.startswith(f"{f}:") and f": {where}: " in message


def test_the_option_carries_quality_cause_type_and_time_flags() -> None:
    timed = PointValue(47, 12, 30, Kind.SINGLE, True, IV | NT, 3, 1_795_810_899_287, 0x02)
    q = read_quality([option(timed)])
    assert q is not None and (q.quality, q.cot, q.type_id, q.common_address) == (IV | NT, 3, 30, 47)
    assert q.device_time and not q.time_invalid and q.summer_time and str(q) == "IV|NT" and not q.good
    plain = read_quality([option(PointValue(1, 1, 13, Kind.FLOAT, 1.0, 0, 1))])
    assert plain is not None and plain.good and not plain.device_time and str(plain) == "good"
    assert read_quality([]) is None
