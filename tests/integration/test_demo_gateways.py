"""``gridstat up FILE`` with SCADA gateways in the topology file (docs/topology.md, "Gateways"): an
iec104 gateway in front of c104's outstation (in this process, as in test_iec104_gateway.py) and a dnp3
gateway in front of a dnp3py outstation (its own process, tests/integration/dnp3py_outstation.py), both
started by ``gridstat up`` as supervised children with certificates of their names that carry the
publisher names they use (mTLS, the default); a subscription in the file to one variable of each is
delivered, and the FINAL summary lists the gateways, stopped with exit 0. Everything on 127.0.0.1."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .test_dnp3_gateway import ADDRESS, start_outstation

pytestmark = pytest.mark.integration

c104 = pytest.importorskip("c104")

CA = 47
CYCLE_MS = 200
DURATION_S = 15


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


TOPOLOGY = """\
clouds: [{{name: A}}]
routers:
  - {{name: e1, role: edge, cloud: A}}
  - {{name: e2, role: edge, cloud: A}}
links: [{{a: e1, b: e2, latency_ms: 1}}]
publishers: []
gateways:
  - {{name: north-rtu, kind: iec104, edge: e1, outstation: "127.0.0.1:{iec_port}", common_addresses: [{ca}],
     interval_ms: {cycle}, map: north.yaml,
     variables: [{{name: north/power, type: float, interval_ms: {cycle}}}]}}
  - {{name: rtu7, kind: dnp3, edge: e2, outstation: "127.0.0.1:{dnp_port}", address: {address}, interval_ms: 200,
     event_poll_s: 0.2, variables: [{{name: dnp{address}/ai0, type: float, interval_ms: 200}}]}}
subscriptions:
  - {{name: ems-power, edge: e2, variable: north/power, interval_ms: {cycle}, latency_ms: 500}}
  - {{name: ems-ai0, edge: e1, variable: dnp{address}/ai0, interval_ms: 200, latency_ms: 500}}
"""


def test_gateways_in_the_topology_file_publish_to_its_subscriptions(tmp_path: Path) -> None:
    iec_port = free_port()
    server = c104.Server(ip="127.0.0.1", port=iec_port, tick_rate_ms=50)
    station = server.add_station(common_address=CA)
    power = station.add_point(io_address=11, type=c104.Type.M_ME_NC_1, report_ms=CYCLE_MS)
    power.value = 1.5
    server.start()
    dnp = start_outstation(tmp_path)
    try:
        # The map names the station's publisher: the certificate of north-rtu must carry "north".
        (tmp_path / "north.yaml").write_text(f"stations: {{{CA}: north}}\npoints:\n"
                                             f"  - {{ca: {CA}, ioa: 11, variable: power}}\n")
        topology = tmp_path / "scada.yaml"
        topology.write_text(TOPOLOGY.format(iec_port=iec_port, dnp_port=dnp.port, ca=CA, cycle=CYCLE_MS,
                                            address=ADDRESS))
        env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "xdg"), "COLUMNS": "200"}
        proc = subprocess.run([sys.executable, "-m", "gridstat.cli.main", "up", str(topology), "--plain",
                               "--duration", str(DURATION_S), "--summary-every", "600",
                               "--log-dir", str(tmp_path / "logs")],
                              capture_output=True, text=True, timeout=DURATION_S + 90, env=env)
    finally:
        dnp.stop()
        server.stop()
    out = proc.stdout
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((tmp_path / "logs").glob("*.log"))
                     if p.stat().st_size)
    assert proc.returncode == 0, f"{out}\n{proc.stderr}\n{logs}"
    assert re.search(r"^\s+gateway name=north-rtu kind=iec104 edge=e1 device=127\.0\.0\.1:\d+ pid=\d+ "
                     r"publishers=north map=", out, re.M), out
    assert re.search(rf"^\s+gateway name=rtu7 kind=dnp3 edge=e2 device=127\.0\.0\.1:\d+ pid=\d+ "
                     rf"publishers=dnp{ADDRESS}", out, re.M), out
    final = out.partition("FINAL (")[2]
    assert final, out
    for sub in ("ems-power", "ems-ai0"):
        m = re.search(rf"^\s+sub name={sub} .* status=admitted .* delivered=(\d+) ", final, re.M)
        assert m and int(m.group(1)) > 0, f"{sub}:\n{out}\n{logs}"
    for name, kind in (("north-rtu", "iec104"), ("rtu7", "dnp3")):
        m = re.search(rf"^\s+gateway name={name} kind={kind} edge=\S+ target=127\.0\.0\.1:\d+ pid=\d+ "
                      rf"state=stopped exit=0 restarts=0 link=(\S+) published=(\d+) variables=(\d+) drops=0$",
                      final, re.M)
        assert m, f"{name}:\n{final}"
        # link: the gateway's own state in its final stats line (disconnected once stopped)
        assert m.group(1) != "-" and int(m.group(2)) > 0 and int(m.group(3)) >= 1, m.group(0)
    assert "and 2 gateways" in out
    assert re.search(r"subscription name=ems-power var=north/power admitted paths: e1 -> e2$", out, re.M), out
    # Nothing left behind: no gateway process outlives gridstat up.
    time.sleep(0.2)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(topology.parent) not in "".join(line for line in ps.splitlines() if "-gateway" in line)
