"""Topology files: the built-in default loads, and every error names file:line: field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gridstat.demo.topology import (
    DEFAULT_CAPACITY_EPS,
    DEFAULT_TOPOLOGY_PATH,
    PUBLISHER_ID_BASE,
    SUBSCRIBER_ID_BASE,
    TopologyError,
    effective_interval_ms,
    field_name,
    load_topology,
    parse_topology,
)
from gridstat.errors import ValidationError

GOOD = textwrap.dedent("""\
    clouds:
      - name: A
      - name: B
    routers:
      - {name: e1, role: edge, cloud: A}
      - {name: i1, role: internal, cloud: A, capacity_eps: 2000}
      - {name: b1, role: border, cloud: A}
      - {name: b2, role: border, cloud: B}
      - {name: e2, role: edge, cloud: B}
    links:
      - {a: e1, b: i1, latency_ms: 1, bandwidth_kbps: 1000}
      - {a: i1, b: b1, latency_ms: 1}
      - {a: b1, b: b2, latency_ms: 5}
      - {a: b2, b: e2, latency_ms: 1}
    publishers:
      - name: pmu
        edge: e1
        variables:
          - {name: freq, type: float, interval_ms: 17}
          - {name: ok, type: bool, interval_ms: 34, priority: 3}
    subscriptions:
      - {name: s1, edge: e2, variable: pmu/freq, interval_ms: 100, latency_ms: 50}
    """)


def error_of(text: str, source: str = "t.yaml") -> str:
    with pytest.raises(TopologyError) as info:
        parse_topology(text, source)
    assert isinstance(info.value, ValidationError)
    return str(info.value.args[0])


def test_good_topology_parses_with_ids_in_file_order() -> None:
    t = parse_topology(GOOD, "t.yaml")
    assert t.clouds == ("A", "B")
    assert [r.router_id for r in t.routers] == [1, 2, 3, 4, 5]
    assert t.links[1].bandwidth_kbps == 100_000  # default
    assert t.publishers[0].publisher_id == PUBLISHER_ID_BASE + 1
    assert [v.variable_id for v in t.publishers[0].variables] == [1, 2]
    assert t.variable("pmu/ok").priority == 3
    sub = t.subscriptions[0]
    assert (sub.redundancy, sub.subscriber_id) == (1, SUBSCRIBER_ID_BASE + 1)
    assert t.publisher_of("pmu/freq").edge == "e1"
    assert [r.capacity_eps for r in t.routers][:2] == [DEFAULT_CAPACITY_EPS, 2000]


def test_expected_rate_and_cloud_crossing() -> None:
    t = parse_topology(GOOD, "t.yaml")
    sub = t.subscriptions[0]
    assert effective_interval_ms(100, 17) == 85  # rounded down to a multiple of the publication interval
    assert t.expected_rate(sub) == pytest.approx(1000 / 85)
    assert t.crosses_clouds(sub)  # pmu at e1 (cloud A), the subscriber at e2 (cloud B)


def test_default_topology_loads() -> None:
    t = load_topology()
    assert t.source == DEFAULT_TOPOLOGY_PATH.name
    assert set(t.clouds) == {"A", "B"}
    for cloud in t.clouds:
        members = [r for r in t.routers if r.cloud == cloud]
        assert len(members) == 5
        assert {r.role for r in members} == {"edge", "internal", "border"}
    intervals = {(v.interval_ms, v.frames_per_s) for p in t.publishers for v in p.variables}
    assert intervals == {(16, 60), (34, 0)}  # C37.118 PMUs at 60 frames/s, an SDK one every 34 ms
    assert [p.name for p in t.publishers if p.device is not None] == ["pmu-a1", "pmu-b1"]
    assert any(s.redundancy == 2 for s in t.subscriptions)
    assert {s.interval_ms for s in t.subscriptions} >= {17, 100, 1000, 1020}
    assert {t.expected_rate(s) for s in t.subscriptions if s.variable.startswith("pmu-a1/")} == {60.0, 10.0}


C37118 = GOOD.replace("""    variables:
      - {name: freq, type: float, interval_ms: 17}
      - {name: ok, type: bool, interval_ms: 34, priority: 3}""",
                      """    c37118: {frames_per_s: 30, phasors: 2, analogs: [vmag]}""")


def test_a_c37118_publisher_has_its_channels_as_variables() -> None:
    t = parse_topology(C37118.replace("interval_ms: 100,", "interval_ms: 67,"), "t.yaml")
    (pub,) = t.publishers
    assert pub.device is not None and (pub.device.frames_per_s, pub.device.phasors, pub.device.analogs) == (
        30, 2, ("vmag",))
    assert [(v.name, v.type, v.interval_ms, v.frames_per_s) for v in pub.variables] == [
        ("freq", "float", 33, 30), ("dfreq", "float", 33, 30), ("vmag", "float", 33, 30)]
    assert t.expected_rate(t.subscriptions[0]) == 15.0  # 67 ms at 30 frames/s: every 2nd frame


@pytest.mark.parametrize(("change", "message"), [
    ("analogs: [vmag]", "publishers[0].c37118.analogs: analog names of 'pmu' must be distinct and not freq or dfreq"),
    ("frames_per_s: 30", "publishers[0].c37118.frames_per_s"),
])
def test_c37118_publisher_errors_name_the_field(change: str, message: str) -> None:
    bad = C37118.replace(change, {"analogs: [vmag]": "analogs: [vmag, freq]",
                                  "frames_per_s: 30": "frames_per_s: 401"}[change])
    assert message in error_of(bad)


def test_unknown_router_in_link_names_file_line_and_field() -> None:
    bad = GOOD.replace("{a: b2, b: e2, latency_ms: 1}", "{a: b2, b: r9, latency_ms: 1}")
    assert error_of(bad) == "t.yaml:14: links[3].b: unknown router 'r9'"


def test_load_topology_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(GOOD.replace("cloud: B}\n    links", "cloud: C}\n    links").replace(
        "{name: e2, role: edge, cloud: B}", "{name: e2, role: edge, cloud: C}"))
    with pytest.raises(TopologyError, match=r"topology\.yaml:9: routers\[4\]\.cloud: unknown cloud 'C'"):
        load_topology(path)


def test_missing_file() -> None:
    with pytest.raises(TopologyError, match=r"nope\.yaml: cannot read"):
        load_topology("nope.yaml")


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("role: internal", "role: core",
     "t.yaml:6: routers[1].role: 'core' is not one of edge, internal, border, edge-border"),
    ("{a: i1, b: b1, latency_ms: 1}", "{a: i1, b: i1, latency_ms: 1}",
     "t.yaml:12: links[1].b: a link must join two different routers"),
    ("{a: b1, b: b2, latency_ms: 5}", "{a: i1, b: b2, latency_ms: 5}",
     "t.yaml:13: links[2].a: link joins clouds A and B but 'i1' is an internal router, not a border or edge-border "
     "router"),
    ("{a: b1, b: b2, latency_ms: 5}", "{a: e2, b: b2, latency_ms: 5}",
     "t.yaml:14: links[3]: duplicate link between 'b2' and 'e2'"),
    ("latency_ms: 5}", "latency_ms: fast}", "t.yaml:13: links[2].latency_ms: expected a number, got a string"),
    ("bandwidth_kbps: 1000", "bandwidth_kbps: 0", "t.yaml:11: links[0].bandwidth_kbps: 0 is out of range"),
    ("capacity_eps: 2000", "capacity_eps: 0", "t.yaml:6: routers[1].capacity_eps: 0 is out of range"),
    ("capacity_eps: 2000", "capacity_eps: lots", "t.yaml:6: routers[1].capacity_eps: expected an integer"),
    ("{a: e1, b: i1,", "{a: e1, c: i1,", "t.yaml:11: links[0].c: unknown field 'c'"),
    ("edge: e1", "edge: i1", "t.yaml:17: publishers[0].edge: 'i1' is an internal router; publishers and "
     "subscribers attach to edge or edge-border routers"),
    ("type: float", "type: double", "t.yaml:19: publishers[0].variables[0].type: 'double' is not one of"),
    ("interval_ms: 17", "interval_ms: 0", "t.yaml:19: publishers[0].variables[0].interval_ms: 0 is out of range"),
    ("priority: 3", "priority: 0", "t.yaml:20: publishers[0].variables[1].priority: 0 is out of range (1..6)"),
    ("variable: pmu/freq", "variable: pmu/angle", "t.yaml:22: subscriptions[0].variable: unknown status "
     "variable 'pmu/angle'"),
    ("variable: pmu/freq", "variable: freq", "t.yaml:22: subscriptions[0].variable: 'freq' is not of the form"),
    ("latency_ms: 50}", "latency_ms: 50, redundancy: 3}", "t.yaml:22: subscriptions[0].redundancy: 3 is out "
     "of range (1..2)"),
    ("{name: s1, edge: e2,", "{edge: e2,", "t.yaml:22: subscriptions[0]: missing field 'name'"),
    ("  - name: B\n", "  - name: A\n", "t.yaml:3: clouds[1].name: duplicate cloud 'A'"),
    ("  - {name: e2, role: edge, cloud: B}", "  - {name: e1, role: edge, cloud: B}",
     "t.yaml:9: routers[4].name: duplicate router 'e1'"),
])
def test_errors_name_line_and_field(old: str, new: str, expected: str) -> None:
    assert old in GOOD
    assert error_of(GOOD.replace(old, new, 1)).startswith(expected)


def test_duplicate_yaml_key_is_an_error() -> None:
    bad = GOOD.replace("{a: e1, b: i1, latency_ms: 1,", "{a: e1, b: i1, b: e1, latency_ms: 1,")
    assert error_of(bad).startswith("t.yaml:11: links[0].b: duplicate key 'b'")


def test_unknown_top_level_key_and_shapes() -> None:
    assert error_of(GOOD + "regions: []\n").startswith("t.yaml:23: regions: unknown field 'regions'")
    assert error_of("- 1\n") == "t.yaml:1: (document): expected a mapping, got a list"
    assert error_of("clouds: [{name: A}]\nrouters: 3\nlinks: []\npublishers: []\nsubscriptions: []\n") == \
        "t.yaml:2: routers: expected a list, got an integer"
    assert error_of("").endswith("the file is empty")


def test_invalid_yaml_reports_the_line() -> None:
    assert error_of("clouds:\n  - name: A\n routers: [\n").startswith("t.yaml:3: (document): not valid YAML")


def test_field_name() -> None:
    assert field_name(("links", 2, "b")) == "links[2].b"
    assert field_name(()) == "(document)"


def test_a_value_its_tag_rejects_is_a_topology_error_not_a_crash() -> None:
    # '!!int x' made yaml raise a bare ValueError past the topology parser (core.yamldoc now reads both
    # topology and analysis files).
    assert error_of("clouds: !!int x\n").startswith("t.yaml:1: (document): not valid YAML:")
    assert error_of("a: =\n").startswith("t.yaml:1: (document): not valid YAML:")
