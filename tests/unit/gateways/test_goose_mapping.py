"""The map file: YAML and JSON, kinds and types, and each mistake refused with the entry named."""

from __future__ import annotations

import json
from pathlib import Path

import goose_samples as s
import pytest

from gridstat.core.model import BOOL, FLOAT, INT
from gridstat.errors import ValidationError
from gridstat.gateways.goose import load_map, parse_map
from gridstat.gateways.goose.values import BitString, Unsigned, UtcTime

YAML = """
subscribe:
  - gocbRef: IED1/LLN0$GO$gcb1
    appID: 0x1000
    members:
      - {index: 0, variable: bay1/breaker_closed, kind: boolean, quality: 1, attributes: {station: bay1}}
      - {index: "3.0", variable: bay1/position, kind: bitstring, min_interval_ms: 5}
publish:
  - gocbRef: GSTAT/LLN0$GO$gcb1
    datSet: GSTAT/LLN0$ds1
    appID: 0x3001
    dst: 01:0c:cd:01:00:07
    vlan: 5
    members:
      - {variable: bay1/trip, kind: boolean}
      - {variable: bay1/pos, kind: bitstring, bits: 2}
"""


def test_yaml_and_json(tmp_path: Path) -> None:
    y = tmp_path / "m.yaml"
    y.write_text(YAML)
    m = load_map(y)
    (block,) = m.subscribe
    assert (block.gocb_ref, block.app_id) == ("IED1/LLN0$GO$gcb1", 0x1000)
    closed, pos = block.points
    assert (closed.path, closed.quality_path, closed.type, closed.attributes) == ((0,), (1,), BOOL,
                                                                                 (("station", "bay1"),))
    assert (pos.path, pos.type, pos.min_interval_ms, pos.publisher, pos.variable) == ((3, 0), INT, 5, "bay1",
                                                                                      "position")
    (pub,) = m.publish
    assert (pub.dst_mac.hex(), pub.vlan_id, pub.go_id, pub.time_allowed_to_live_ms) == ("010ccd010007", 5,
                                                                                        "GSTAT/LLN0$GO$gcb1", 2000)
    j = tmp_path / "m.json"
    j.write_text(json.dumps(s.MAP))
    assert [p.type for p in load_map(j).subscribe[0].points] == [BOOL, FLOAT, INT, INT, INT]


def test_published_members_convert_values() -> None:
    m = parse_map({"publish": [{"gocbRef": "a", "datSet": "b", "appID": 1, "members": [
        {"variable": "x/a", "kind": "bitstring", "bits": 2}, {"variable": "x/b", "kind": "unsigned"},
        {"variable": "x/c", "kind": "utc_time"}, {"variable": "x/d", "kind": "float"}]}]})
    a, b, c, d = m.publish[0].members
    assert a.mms_value(7) == BitString(3, 2) and b.mms_value(5) == Unsigned(5)
    assert c.mms_value(1_700_000_000_123) == UtcTime.from_ms(1_700_000_000_123) and d.mms_value(2) == 2.0
    with pytest.raises(ValueError):
        a.mms_value(1.5)


@pytest.mark.parametrize(("doc", "message"), [
    ([], "top level: must be a mapping"),
    ({"subscribe": [{"members": []}]}, "subscribe[0]: needs gocbRef, appID or both"),
    ({"subscribe": [{"appID": 70000, "members": [{}]}]}, "subscribe[0].appID: must be an integer 0..65535"),
    ({"subscribe": [{"appID": 1, "members": [{"index": 0, "variable": "a/b", "kind": "dbl"}]}]},
     "subscribe[0].members[0].kind: 'dbl' is not one of boolean"),
    ({"subscribe": [{"appID": 1, "members": [{"index": "x", "variable": "a/b", "kind": "boolean"}]}]},
     "subscribe[0].members[0].index: must be a member index"),
    ({"subscribe": [{"appID": 1, "members": [{"index": 0, "variable": "nope", "kind": "boolean"}]}]},
     "subscribe[0].members[0].variable"),
    ({"subscribe": [{"appID": 1, "members": [{"index": 0, "variable": "a/b", "kind": "boolean"},
                                             {"index": 1, "variable": "a/b", "kind": "boolean"}]}]},
     "subscribe[0].members[1].variable: a/b is mapped twice"),
    ({"subscribe": [{"appID": 1, "members": [{"index": 0, "variable": "a/b", "kind": "boolean", "typo": 1}]}]},
     "unknown key 'typo'"),
    ({"publish": [{"gocbRef": "a", "datSet": "b", "appID": 1, "dst": "01:02", "members": [
        {"variable": "x/a", "kind": "boolean"}]}]}, "publish[0].dst: must be a MAC address"),
    ({"publish": [{"gocbRef": "a", "datSet": "b", "appID": 1, "min_time_ms": 50, "max_time_ms": 10, "members": [
        {"variable": "x/a", "kind": "boolean"}]}]}, "publish[0].min_time_ms: 50 is above max_time_ms 10"),
    ({"publish": [{"gocbRef": "a", "appID": 1, "members": []}]}, "publish[0]: datSet is missing"),
])
def test_mistakes_name_the_entry(doc: object, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_map(doc, "m.yaml")
    assert "m.yaml: " in str(info.value) and message in str(info.value)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="No such file"):
        load_map(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("subscribe: [")
    with pytest.raises(ValidationError, match="not valid YAML"):
        load_map(bad)
