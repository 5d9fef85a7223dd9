"""``gateways:`` in topology files (docs/topology.md, "Gateways"): each kind's fields, the map files read
with the gateways' own loaders (relative to the topology file), the publisher names each gateway's
certificate carries, the variables declared for subscriptions, every mistake named by file:line: field,
and the command lines ``gridstat up`` starts (no process is started here)."""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path

import pytest
from cryptography import x509

from gridstat.demo import certs
from gridstat.demo.localtls import CertDir
from gridstat.demo.processes import GatewayProcess, gateway_command
from gridstat.demo.topology import Gateway, TopologyError, parse_topology

HEAD = textwrap.dedent("""\
    clouds: [{name: A}]
    routers:
      - {name: e1, role: edge, cloud: A}
      - {name: e2, role: edge, cloud: A}
      - {name: i1, role: internal, cloud: A}
    links: [{a: e1, b: i1, latency_ms: 1}, {a: i1, b: e2, latency_ms: 1}]
    stations: [{name: NORTH, router: e1, region: west}]
    publishers: [{name: pmu, edge: e1, variables: [{name: freq, type: float, interval_ms: 20}]}]
    """)
GATEWAYS = textwrap.dedent("""\
    gateways:
      - {name: north-rtu, kind: iec104, station: NORTH, outstation: 127.0.0.1:2404, common_addresses: [1, 2],
         map: maps/north.yaml, interval_ms: 500,
         variables: [{name: north/power, type: float, interval_ms: 500}, {name: ca2/ioa7, type: bool,
                                                                          interval_ms: 20}]}
      - {name: rtu7, kind: dnp3, edge: e2, outstation: 127.0.0.1:20000, address: 10, master_address: 3,
         event_poll_s: 0.5, integrity_poll_s: 60, unsolicited: true, priority: 2,
         variables: [{name: dnp10/ai0, type: float, interval_ms: 1000}]}
      - {name: bay1, kind: goose, edge: e1, interface: lo, map: /MAPS/bay1.yaml}
    subscriptions:
      - {name: ems, edge: e2, variable: north/power, interval_ms: 1000, latency_ms: 100}
      - {name: ems2, edge: e1, variable: dnp10/ai0, interval_ms: 1000, latency_ms: 100}
    """)
NORTH_MAP = "stations: {1: north}\npoints:\n  - {ca: 1, ioa: 11, variable: power}\n"
GOOSE_MAP = textwrap.dedent("""\
    subscribe:
      - appID: 1
        members:
          - {index: 0, variable: bay1_xcbr/pos, kind: boolean}
    """)


@pytest.fixture
def maps(tmp_path: Path) -> Path:
    (tmp_path / "maps").mkdir()
    (tmp_path / "maps" / "north.yaml").write_text(NORTH_MAP)
    (tmp_path / "bay1.yaml").write_text(GOOSE_MAP)
    return tmp_path


def parse(maps: Path, gateways: str = GATEWAYS) -> list[Gateway]:
    text = HEAD + gateways.replace("/MAPS", str(maps))
    if "subscriptions:" not in text:
        text += "subscriptions: []\n"
    return list(parse_topology(text, str(maps / "t.yaml")).gateways)


def error_of(maps: Path, gateways: str) -> str:
    with pytest.raises(TopologyError) as info:
        parse(maps, gateways)
    return str(info.value.args[0])


def test_gateways_parse_with_their_fields_publishers_and_variables(maps: Path) -> None:
    t = parse_topology(HEAD + GATEWAYS.replace("/MAPS", str(maps)), str(maps / "t.yaml"))
    north, rtu7, bay1 = t.gateways
    assert (north.kind, north.edge, north.station and north.station.name) == ("iec104", "e1", "NORTH")
    assert north.map_path == maps / "maps" / "north.yaml"  # relative to the topology file
    assert north.common_addresses == (1, 2) and north.interval_ms == 500
    # The map names CA 1's publisher; CA 2 keeps its default name.
    assert north.publishers == ("north", "ca2")
    assert [(v.full_name, v.priority) for v in north.variables] == [("north/power", 1), ("ca2/ioa7", 0)]
    assert rtu7.publishers == ("dnp10",) and rtu7.address == 10 and rtu7.unsolicited
    assert bay1.publishers == ("bay1_xcbr",) and bay1.target == "lo"
    assert t.variable("dnp10/ai0").interval_ms == 1000
    assert t.edge_of("north/power") == "e1" and t.gateway_of("north/power") is north
    assert not t.crosses_clouds(t.subscriptions[0])
    # Variable ids continue after the publishers'.
    assert [v.variable_id for g in t.gateways for v in g.variables] == [2, 3, 4]


@pytest.mark.parametrize(("entry", "line", "field", "message"), [
    ("{name: g, kind: modbus, edge: e1}", 2, "gateways[0].kind", "'modbus' is not one of iec104, dnp3, goose"),
    ("{name: g, kind: iec104, edge: e1}", 2, "gateways[0]", "missing field 'outstation'"),
    ("{name: g, kind: dnp3, edge: e1, outstation: 127.0.0.1:1}", 2, "gateways[0]", "missing field 'address'"),
    ("{name: g, kind: goose, edge: e1, interface: lo}", 2, "gateways[0]", "missing field 'map'"),
    ("{name: g, kind: iec104, edge: e1, outstation: 127.0.0.1:1, address: 3}", 2, "gateways[0].address",
     "a iec104 gateway has no 'address' (that is a field of dnp3 gateways)"),
    ("{name: g, kind: goose, edge: e1, interface: lo, map: x.yaml, outstation: 127.0.0.1:1}", 2,
     "gateways[0].outstation", "a goose gateway has no 'outstation'"),
    ("{name: g, kind: iec104, edge: i1, outstation: 127.0.0.1:1}", 2, "gateways[0].edge",
     "'i1' is an internal router; gateways attach to edge or edge-border routers"),
    ("{name: g, kind: iec104, edge: e9, outstation: 127.0.0.1:1}", 2, "gateways[0].edge", "unknown router 'e9'"),
    ("{name: g, kind: iec104, outstation: 127.0.0.1:1}", 2, "gateways[0]", "missing field 'edge'"),
    ("{name: g, kind: iec104, station: NORTH, edge: e2, outstation: 127.0.0.1:1}", 2, "gateways[0].edge",
     "is at station 'NORTH', attached to router 'e1', not 'e2'"),
    ("{name: g, kind: iec104, edge: e1, outstation: 10.1.2.3:2404}", 2, "gateways[0].outstation",
     "not on this host: add 'allow_remote: true'"),
    ("{name: g, kind: iec104, edge: e1, outstation: 127.0.0.1:99999}", 2, "gateways[0].outstation",
     "port 99999"),
    ("{name: g, kind: iec104, edge: e1, outstation: nowhere}", 2, "gateways[0].outstation", "HOST:PORT"),
    ("{name: g, kind: dnp3, edge: e1, outstation: 127.0.0.1:1, address: 70000}", 2, "gateways[0].address",
     "65519"),
    ("{name: g, kind: dnp3, edge: e1, outstation: 127.0.0.1:1, address: 1, priority: 0}", 2,
     "gateways[0].priority", "a dnp3 gateway's priority is 1..6, not 0"),
    ("{name: g, kind: dnp3, edge: e1, outstation: 127.0.0.1:1, address: 1, event_poll_s: 0}", 2,
     "gateways[0].event_poll_s", "unsolicited"),
    ("{name: g, kind: iec104, edge: e1, outstation: 127.0.0.1:1, map: missing.yaml}", 2, "gateways[0].map",
     "no map file"),
    ("{name: pmu, kind: iec104, edge: e1, outstation: 127.0.0.1:1}", 2, "gateways[0].name",
     "'pmu' is also the name of publisher 'pmu'"),
    ("{name: g, kind: dnp3, edge: e1, outstation: 127.0.0.1:1, address: 1,\n"
     "     variables: [{name: other/ai0, type: float, interval_ms: 1000}]}", 3, "gateways[0].variables[0].name",
     "gateway 'g' publishes as dnp1, not 'other'"),
    ("{name: g, kind: dnp3, edge: e1, outstation: 127.0.0.1:1, address: 1,\n"
     "     variables: [{name: ai0, type: float, interval_ms: 1000}]}", 3, "gateways[0].variables[0].name",
     "'publisher/variable'"),
])
def test_bad_gateway_entries_name_file_line_and_field(maps: Path, entry: str, line: int, field: str,
                                                     message: str) -> None:
    err = error_of(maps, f"gateways:\n  - {entry}\n")
    head = HEAD.count("\n")
    assert err.startswith(f"{maps / 't.yaml'}:{head + line}: {field}: "), err
    assert message in err, err


def test_duplicate_names_and_publisher_clashes(maps: Path) -> None:
    two = ("gateways:\n  - {name: g, kind: dnp3, edge: e1, outstation: 127.0.0.1:1, address: 1}\n"
           "  - {name: g, kind: dnp3, edge: e1, outstation: 127.0.0.1:2, address: 2}\n")
    assert "gateways[1].name: duplicate gateway 'g'" in error_of(maps, two)
    same = ("gateways:\n  - {name: g1, kind: dnp3, edge: e1, outstation: 127.0.0.1:1, address: 1}\n"
            "  - {name: g2, kind: dnp3, edge: e1, outstation: 127.0.0.1:2, address: 1}\n")
    assert "gateway 'g2' publishes as 'dnp1', which is also gateway 'g1'" in error_of(maps, same)
    sub = ("gateways:\n  - {name: g1, kind: dnp3, edge: e1, outstation: 127.0.0.1:1, address: 1}\n"
           "subscriptions:\n  - {name: g1, edge: e2, variable: pmu/freq, interval_ms: 100, latency_ms: 50}\n")
    assert "subscriptions[0].name: 'g1' is also a gateway's name" in error_of(maps, sub)
    undeclared = ("gateways:\n  - {name: g1, kind: dnp3, edge: e1, outstation: 127.0.0.1:1, address: 1}\n"
                  "subscriptions:\n  - {name: s, edge: e2, variable: dnp1/ai0, interval_ms: 100, latency_ms: 50}\n")
    assert "unknown status variable 'dnp1/ai0' (a gateway's variable must be declared in its 'variables')" \
        in error_of(maps, undeclared)


def test_a_bad_map_file_is_reported_at_the_map_field_with_the_maps_own_error(maps: Path) -> None:
    (maps / "bad.yaml").write_text("points:\n  - {index: 0, kind: ai, name: x/y}\n")
    err = error_of(maps, "gateways:\n  - {name: g, kind: dnp3, edge: e1, outstation: 127.0.0.1:1, address: 1,\n"
                         "     map: bad.yaml}\n")
    assert f"gateways[0].map: {maps / 'bad.yaml'}:2: points[0]: 'group' is missing" in err, err


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_the_command_lines_of_each_kind(maps: Path) -> None:
    north, rtu7, bay1 = parse(maps)
    c = CertDir(maps / "certs")
    cmd = gateway_command(north, "127.0.0.1:7901", c)
    assert cmd[1:4] == ["-m", "gridstat.cli.main", "iec104-gateway"]
    assert flag(cmd, "--name") == "north-rtu" and flag(cmd, "--edge") == "127.0.0.1:7901"
    assert flag(cmd, "--outstation") == "127.0.0.1:2404" and flag(cmd, "--interval-ms") == "500"
    assert [cmd[i + 1] for i, x in enumerate(cmd) if x == "--common-address"] == ["1", "2"]
    assert flag(cmd, "--map") == str(maps / "maps" / "north.yaml")
    assert flag(cmd, "--tls-cert") == str(c.cert("north-rtu")) and flag(cmd, "--tls-ca") == str(c.ca)
    assert flag(cmd, "-o") == "json" and "--exit-with-parent" in cmd and "--allow-remote" not in cmd
    cmd = gateway_command(rtu7, "127.0.0.1:7902")
    assert cmd[3] == "dnp3-gateway" and "--tls-cert" not in cmd
    for name, value in (("--address", "10"), ("--master-address", "3"), ("--event-poll-s", "0.5"),
                        ("--integrity-poll-s", "60"), ("--priority", "2")):
        assert flag(cmd, name) == value
    assert "--unsolicited" in cmd and "--map" not in cmd
    # GOOSE needs root and a raw socket: only the command line is checked here.
    cmd = GatewayProcess(bay1, "127.0.0.1:7901", maps / "bay1.log", certs=c).command()
    assert cmd[3] == "goose-gateway" and flag(cmd, "--interface") == "lo"
    assert flag(cmd, "--map") == str(maps / "bay1.yaml") and "--outstation" not in cmd


def test_a_gateways_certificate_carries_its_publisher_names(tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    first = certs.ensure(tmp_path, ["rtu7"], sans={"rtu7": ("dnp10", "north")}, now=now)
    cert = x509.load_pem_x509_certificate(first.certs.cert("rtu7").read_bytes())
    dns = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    assert {"rtu7", "dnp10", "north"} <= set(dns)
    assert certs.ensure(tmp_path, ["rtu7"], sans={"rtu7": ("dnp10",)}, now=now).reused == ["rtu7"]
    # A publisher name the certificate lacks: made again.
    assert certs.ensure(tmp_path, ["rtu7"], sans={"rtu7": ("dnp11",)}, now=now).created == ["rtu7"]
