"""Topology files that describe a real grid: stations, router metadata and a broker tree of any depth
(docs/topology.md, "Stations" and "Broker hierarchy")."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from gridstat.core import expressions
from gridstat.demo.topology import TopologyError, parse_topology

GRID = textwrap.dedent("""\
    clouds:
      - {name: A, broker: west}
      - {name: B, broker: west}
      - {name: C, broker: east}
    routers:
      - {name: eA, role: edge-border, cloud: A, site: Grizzly, owner: BPA, latitude: 45.1, longitude: -121.2}
      - {name: eB, role: edge-border, cloud: B}
      - {name: eC, role: edge-border, cloud: C}
    links:
      - {a: eA, b: eB, latency_ms: 2}
      - {a: eB, b: eC, latency_ms: 2}
    stations:
      - {name: GRIZZLY, router: eA, latitude: 45.1, longitude: -121.2, voltage_kv: 500, owner: BPA,
         region: west, description: 500 kV switchyard}
      - {name: MIDWAY, router: eC, voltage_kv: 345.5, region: east}
    brokers:
      - {name: root, description: the interconnection}
      - {name: west, parent: root, owner: BPA}
      - {name: east, parent: root}
    publishers:
      - name: pmu
        station: GRIZZLY
        variables:
          - {name: freq, type: float, interval_ms: 20}
      - name: pmu2
        edge: eC
        station: MIDWAY
        variables:
          - {name: freq, type: float, interval_ms: 20}
    subscriptions:
      - {name: s1, edge: eC, variable: pmu/freq, interval_ms: 100, latency_ms: 50}
    """)


def error_of(text: str) -> str:
    with pytest.raises(TopologyError) as info:
        parse_topology(text, "g.yaml")
    return str(info.value.args[0])


def test_stations_give_their_publishers_variables_attributes_where_expressions_select() -> None:
    t = parse_topology(GRID, "g.yaml")
    pub = t.publishers[0]
    assert pub.edge == "eA"  # the station's router
    assert pub.attributes == {"station": "GRIZZLY", "router": "eA", "region": "west", "owner": "BPA",
                              "voltage_kv": "500", "latitude": "45.1", "longitude": "-121.2",
                              "description": "500 kV switchyard"}
    assert t.publishers[1].attributes["voltage_kv"] == "345.5"
    expr = expressions.parse("region = 'west' and voltage_kv >= 345")
    assert [p.name for p in t.publishers if expressions.matches(expr, p.attributes)] == ["pmu"]


def test_router_metadata_is_kept_as_text() -> None:
    t = parse_topology(GRID, "g.yaml")
    assert t.router("eA").metadata == {"latitude": "45.1", "longitude": "-121.2", "owner": "BPA", "site": "Grizzly"}
    assert t.router("eB").metadata == {}


def test_the_broker_tree_is_ordered_parents_first_with_each_clouds_parent() -> None:
    t = parse_topology(GRID, "g.yaml")
    assert [(b.name, b.parent) for b in t.brokers] == [("root", None), ("west", "root"), ("east", "root")]
    assert t.brokers[0].metadata == {"description": "the interconnection"}
    assert t.cloud_brokers == {"A": "west", "B": "west", "C": "east"}
    assert [t.broker_depth(n) for n in ("root", "west", "A", "C")] == [0, 1, 2, 2]


def test_without_brokers_there_is_no_tree_and_a_cloud_may_not_name_one() -> None:
    text = GRID.replace("brokers:\n  - {name: root, description: the interconnection}\n"
                        "  - {name: west, parent: root, owner: BPA}\n  - {name: east, parent: root}\n", "")
    assert "brokers:" not in text
    assert error_of(text) == ("g.yaml:2: clouds[0].broker: there is no brokers list: name the cloud's parent "
                              "broker there, or leave 'broker' out (one parent broker over every cloud)")
    plain = text.replace(", broker: west}", "}").replace(", broker: east}", "}")
    t = parse_topology(plain, "g.yaml")
    assert t.brokers == () and t.cloud_brokers == {}


def test_a_cloud_without_broker_goes_under_the_root() -> None:
    t = parse_topology(GRID.replace("{name: C, broker: east}", "{name: C}").replace(
        "  - {name: east, parent: root}\n", ""), "g.yaml")
    assert t.cloud_brokers["C"] == "root"


@pytest.mark.parametrize(("old", "new", "message"), [
    ("{name: east, parent: root}", "{name: east}",
     "g.yaml:19: brokers[2].parent: brokers 'root' and 'east' both have no parent: the hierarchy has one root"),
    ("{name: east, parent: root}", "{name: east, parent: nowhere}",
     "g.yaml:19: brokers[2].parent: unknown broker 'nowhere'"),
    ("{name: root, description: the interconnection}", "{name: root, parent: west}",
     "g.yaml:17: brokers[0].parent: the brokers form a cycle, not a tree: root -> west -> root"),
    ("{name: east, parent: root}", "{name: A, parent: root}",
     "g.yaml:19: brokers[2].name: 'A' is a cloud: a cloud's leaf broker is named as the cloud and is not "
     "listed in brokers"),
    ("{name: east, parent: root}", "{name: west, parent: root}", "g.yaml:19: brokers[2].name: duplicate broker 'west'"),
    ("{name: C, broker: east}", "{name: C, broker: north}", "g.yaml:4: clouds[2].broker: unknown broker 'north'"),
    ("{name: C, broker: east}", "{name: C, broker: west}",
     "g.yaml:19: brokers[2].name: broker 'east' has no children: no broker names it as parent and no cloud as "
     "broker"),
    ("{name: MIDWAY, router: eC,", "{name: MIDWAY, router: nowhere,",
     "g.yaml:15: stations[1].router: unknown router 'nowhere'"),
    ("{name: MIDWAY, router: eC,", "{name: GRIZZLY, router: eC,",
     "g.yaml:15: stations[1].name: duplicate station 'GRIZZLY'"),
    ("voltage_kv: 345.5", "voltage_kv: 0", "g.yaml:15: stations[1].voltage_kv: 0 is out of range"),
    ("voltage_kv: 345.5", "voltage_kv: 345.5, latitude: 91, longitude: 0",
     "g.yaml:15: stations[1].latitude: 91 is out of range"),
    ("voltage_kv: 345.5", "voltage_kv: 345.5, latitude: 40",
     "g.yaml:15: stations[1].longitude: station 'MIDWAY' has a latitude: give both latitude and longitude, or "
     "neither"),
    ("voltage_kv: 345.5", "voltage_kv: 345.5, colour: red", "g.yaml:15: stations[1].colour: unknown field 'colour'"),
    ("site: Grizzly,", "site: '',", "g.yaml:6: routers[0].site: '' is not printable text of 1-256 characters"),
    ("station: GRIZZLY", "station: NOWHERE", "g.yaml:22: publishers[0].station: unknown station 'NOWHERE'"),
    ("edge: eC\n    station: MIDWAY", "edge: eB\n    station: MIDWAY",
     "g.yaml:26: publishers[1].edge: publisher 'pmu2' is at station 'MIDWAY', attached to router 'eC', not 'eB' "
     "(leave out 'edge': it is the station's router)"),
    ("    station: GRIZZLY\n", "",
     "g.yaml:21: publishers[0]: missing field 'edge' (or a 'station', whose router it then attaches to)"),
])
def test_errors_name_the_file_line_and_field(old: str, new: str, message: str) -> None:
    assert old in GRID
    assert error_of(GRID.replace(old, new, 1)).startswith(message)


def test_a_station_attaches_to_an_edge_router() -> None:
    text = GRID.replace("{name: eB, role: edge-border, cloud: B}",
                        "{name: eB, role: edge-border, cloud: B}\n  - {name: iB, role: internal, cloud: B}")
    text = text.replace("{name: MIDWAY, router: eC,", "{name: MIDWAY, router: iB,")
    assert error_of(text) == ("g.yaml:16: stations[1].router: 'iB' is an internal router; stations attach to "
                              "edge or edge-border routers")


def test_gridstat_topology_stations_lists_a_files_stations_by_where_expression(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gridstat.cli.main import main

    path = tmp_path / "g.yaml"
    path.write_text(GRID)
    assert main(["topology", "stations", str(path), "--where", "region = 'west' and voltage_kv >= 345",
                 "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(s["station"], s["publishers"]) for s in data["stations"]] == [("GRIZZLY", ["pmu"])]
    assert data["stations"][0]["latitude"] == "45.1"
    assert main(["topology", "stations", str(path), "-o", "json"]) == 0
    assert [s["station"] for s in json.loads(capsys.readouterr().out)["stations"]] == ["GRIZZLY", "MIDWAY"]
    path.write_text(GRID.replace("voltage_kv: 500", "voltage_kv: high"))
    assert main(["topology", "stations", str(path)]) == 2
    assert "g.yaml:13: stations[0].voltage_kv: expected a number" in capsys.readouterr().err
