"""The chart's IEEE C37.118 roles running as pods on the real node (docs/kubernetes.md, "C37.118 roles in
the cluster"): the simulated device `pmu-sim` (two PMUs at 30 frames/s), the gateway `pmu-gateway` at
edge router e1 publishing its channels (docs/pmu-gateway.md) and the server `pdc-server` at e2 serving
four of them at 10 frames/s (docs/pdc-server.md), all from tests/integration/cluster/values-cluster.yaml.

This test is the PDC at the far end: from this host it connects to the server pod's address (the pod
network only, as the cluster's guard rule requires: docs/kubernetes.md#a-cluster-on-one-machine), asks
for CFG-2 and turns data on with our codec, and checks every value against the simulator's own
function of station and frame number (``SimulatedDevice.values``): device -> gateway -> three routers
-> server, each in its own pod, must change nothing.
"""

from __future__ import annotations

import ipaddress
import itertools
import math
import socket
import statistics
import time
from typing import Any

import pytest
import yaml

from gridstat.gateways.c37118 import (
    Command,
    CommandFrame,
    ConfigFrame,
    DataError,
    DataFrame,
    FrameType,
    StreamDecoder,
    build_frame,
)
from gridstat.gateways.simulated import SimulatedDevice

from .node import pod_ready
from .release import Release

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

#: The node's pod network (scripts/cluster.sh): the only addresses this test may send to besides 127.0.0.1.
POD_NETWORK = ipaddress.ip_network("10.244.0.0/24")
#: The chart's component label of each C37.118 role (templates/057-Deployment-c37118.yaml).
COMPONENTS = {"simulators": "pmu-simulator", "gateways": "pmu-gateway", "pdcServers": "pdc-server"}
#: Consecutive data frames on the served grid the stream must deliver, every value checked.
FRAMES = 20
#: How long the stream may take to deliver them, from DATA_ON (a fresh server waits for the gateway's
#: first samples; a busy node may be slow to start).
STREAM_DEADLINE_S = 120.0


def c37118(release: Release) -> dict[str, Any]:
    return yaml.safe_load(release.values.read_text())["c37118"]  # type: ignore[no-any-return]


def sim_phasor_names(phasors: int) -> list[str]:
    """The simulator's phasor channel names: V1..V3, then I1.. (gridstat.gateways.simulated)."""
    return [f"V{i + 1}" if i < 3 else f"I{i - 2}" for i in range(phasors)]


def frame_number(frame: DataFrame, time_base: int, device_rate: int) -> int:
    """The device's frame number k of a served frame's instant (its FRACSEC is the device's own,
    docs/pdc-server.md section 3)."""
    return int(frame.soc) * device_rate + round(int(frame.fracsec) * device_rate / time_base)


class PdcConnection:
    """A C37.118 PDC on TCP with our codec (as services/gridstat/bench/pmu.py's PdcClient): SEND_CFG2,
    DATA_ON, then the frames with their receive times (ns since the epoch)."""

    def __init__(self, host: str, port: int, idcode: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=5)
        self.sock.settimeout(1.0)
        self.decoder = StreamDecoder()
        now = int(time.time())
        self.sock.sendall(build_frame(CommandFrame(idcode, now, 0, Command.SEND_CFG2)))
        self.sock.sendall(build_frame(CommandFrame(idcode, now, 0, Command.DATA_ON)))

    def frames(self) -> list[tuple[Any, int]]:
        """The frames of what arrived within a second (none on a timeout)."""
        try:
            data = self.sock.recv(1 << 16)
        except TimeoutError:
            return []
        if not data:
            raise AssertionError(f"the PDC server closed the connection (codec drops: {self.decoder.drops.as_dict()})")
        now = time.time_ns()
        return [(f, now) for f in self.decoder.feed(data)]

    def close(self) -> None:
        self.sock.close()


def read_stream(conn: PdcConnection, frames_wanted: int, deadline_s: float
                ) -> tuple[ConfigFrame | None, list[tuple[DataFrame, int]], int]:
    """The CFG-2 and, once a frame arrived whose every block is good (the stream has started: a server
    that just subscribed may serve a partial first instant), the next ``frames_wanted`` data frames
    whatever they hold; and how many data frames came before that first good one."""
    config: ConfigFrame | None = None
    data: list[tuple[DataFrame, int]] = []
    skipped = 0
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and len(data) < frames_wanted:
        for frame, at in conn.frames():
            if isinstance(frame, ConfigFrame) and frame.frame_type is FrameType.CFG2:
                config = frame
            elif isinstance(frame, DataFrame):
                if data or all(p.stat.data_error is DataError.GOOD for p in frame.pmus):
                    data.append((frame, at))
                else:
                    skipped += 1
    return config, data[:frames_wanted], skipped


def test_a_pdc_reads_the_simulated_pmus_through_gateway_routers_and_pdc_server_pods(release: Release) -> None:
    node = release.node
    values = c37118(release)
    # -- the three roles' pods Ready (readiness: the simulator and the server listen on their port) --
    started = time.monotonic()
    for key, component in COMPONENTS.items():
        count = len(values.get(key) or ())
        assert count, f"values-cluster.yaml has no c37118.{key}: this test needs one of each role"
        selector = (f"app.kubernetes.io/instance={release.name}", f"app.kubernetes.io/component={component}")

        def ready(selector: tuple[str, ...] = selector, count: int = count) -> bool:
            return len([p for p in node.pods(release.namespace, *selector) if pod_ready(p)]) == count

        node.wait_until(f"{count} {component} pod(s) Ready", ready, 180)
    node.timings["C37.118: sim, gateway, pdc-server pods Ready after, s"] = time.monotonic() - started

    (sim,) = values["simulators"]
    (gateway,) = values["gateways"]
    (server,) = values["pdcServers"]
    assert gateway["simulator"] == sim["name"], "the gateway must read the simulator this test computes"
    device_rate, served_rate = int(sim["framesPerS"]), int(server["framesPerS"])
    assert device_rate % served_rate == 0, "the served rate divides the device's (docs/frame-rates.md)"
    prefix, stations, phasors = sim.get("prefix", "PMU"), int(sim["stations"]), int(sim["phasors"])
    sim_stations = [f"{prefix}{i + 1}" for i in range(stations)]
    first_idcode = int(sim.get("idcode", 1)) + (1 if stations > 1 else 0)  # `gridstat pmu-sim --idcode`
    # what the server serves, from its --variables: station -> phasor channels, and which have FREQ
    served: dict[str, list[str]] = {}
    with_freq: set[str] = set()
    for entry in server["variables"]:
        station, channel = entry.split(":")[0].split("/")
        served.setdefault(station, [])
        if channel == "freq":
            with_freq.add(station)
        elif entry.endswith(":phasor"):
            served[station].append(channel)

    (pod,) = node.pods(release.namespace, f"app.kubernetes.io/instance={release.name}",
                       "app.kubernetes.io/component=pdc-server")
    host = pod["status"]["podIP"]
    assert ipaddress.ip_address(host) in POD_NETWORK, f"the server pod's address {host} is not in {POD_NETWORK}"
    port = int(server.get("port", 4712))

    # -- the stream, read as a PDC --------------------------------------------------------------------
    conn = PdcConnection(host, port, int(server.get("idcode", 1)))
    asked = time.monotonic()
    try:
        cfg, frames, skipped = read_stream(conn, FRAMES, STREAM_DEADLINE_S)
    finally:
        conn.close()
    node.timings["C37.118: DATA_ON to 20 good frames, s"] = time.monotonic() - asked

    def logs() -> str:
        return "\n".join(node.logs(release.namespace, pod["metadata"]["name"]).splitlines()[-10:])

    assert cfg is not None, f"no CFG-2 from the PDC server in {STREAM_DEADLINE_S} s; its log:\n{logs()}"
    assert len(frames) == FRAMES, (f"{len(frames)} data frames after the first good one in {STREAM_DEADLINE_S} s "
                                   f"({skipped} partial before; codec drops {conn.decoder.drops.as_dict()}); "
                                   f"the server's log:\n{logs()}")

    # -- CFG-2: the stations and channels asked for, at the served rate (docs/pdc-server.md section 2) --
    assert cfg.idcode == int(server.get("idcode", 1)), f"stream IDCODE {cfg.idcode}"
    assert cfg.data_rate == served_rate, f"DATA_RATE {cfg.data_rate}, served {served_rate} frames/s"
    assert [p.station_name for p in cfg.pmus] == list(served), f"stations {[p.station_name for p in cfg.pmus]}"
    for p in cfg.pmus:
        assert list(p.phasor_names) == served[p.station_name], f"{p.station_name}: phasors {p.phasor_names}"
        # the gateway publishes each PMU's IDCODE as the attribute `idcode`; the server keeps it
        assert p.idcode == first_idcode + sim_stations.index(p.station_name), f"{p.station_name}: IDCODE {p.idcode}"
    time_base = cfg.time_base
    assert time_base % served_rate == 0, f"TIME_BASE {time_base} has no exact {served_rate} frames/s grid"
    step = device_rate // served_rate

    # -- data: consecutive on the served grid, STAT good, every value the simulator's -----------------
    numbers = [frame_number(f, time_base, device_rate) for f, _ in frames]
    off_grid = [(f.soc, f.fracsec) for f, _ in frames if f.fracsec % (time_base // served_rate)]
    assert not off_grid, f"FRACSEC not on the {served_rate}/s grid (TIME_BASE {time_base}): {off_grid}"
    gaps = [(a, b) for a, b in itertools.pairwise(numbers) if b - a != step]
    assert not gaps, f"frames not consecutive at {served_rate}/s (device frame numbers, step {step}): {gaps}"
    names = sim_phasor_names(phasors)
    latencies_ms: list[float] = []
    for (frame, received_ns), k in zip(frames, numbers, strict=True):
        assert frame.idcode == cfg.idcode
        latencies_ms.append((received_ns - frame.soc * 1_000_000_000 - frame.fracsec * 1_000_000_000 // time_base)
                            / 1e6)
        for block in frame.pmus:
            station = block.config.station_name
            assert block.stat.data_error is DataError.GOOD, f"frame {k} {station}: STAT {block.stat}"
            expected_phasors, freq_hz, _dfreq, _analogs = SimulatedDevice.values(
                sim_stations.index(station), k, phasors, 0)
            got = [tuple(ph) for ph in block.phasors]
            want = [expected_phasors[names.index(ch)] for ch in served[station]]
            assert got == want, f"frame {k} {station}: phasors (magnitude, angle) {got}, the simulator sent {want}"
            if station in with_freq:
                assert block.freq == freq_hz, f"frame {k} {station}: FREQ {block.freq} Hz, the simulator sent {freq_hz}"
            else:
                assert math.isnan(block.freq), f"frame {k} {station}: FREQ not served, {block.freq} instead of NaN"
            # DFREQ is not among the served variables: absent, NaN (docs/pdc-server.md section 2)
            assert math.isnan(block.dfreq), f"frame {k} {station}: DFREQ {block.dfreq}, not served"
    # each frame carries the device's own instant: it arrives after it, within the wait window and then some
    wait_ms = int(server.get("waitMs", 100))
    assert min(latencies_ms) > 0, f"a frame arrived before its device instant: {min(latencies_ms):.1f} ms"
    assert max(latencies_ms) < wait_ms + 2000, f"frames up to {max(latencies_ms):.0f} ms after their instant"
    node.timings["C37.118: device instant to PDC, median ms"] = statistics.median(latencies_ms)
    node.timings["C37.118: device instant to PDC, max ms"] = max(latencies_ms)
