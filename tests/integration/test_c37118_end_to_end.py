"""IEEE C37.118 in and out through GridStat, with peers no one here wrote (docs/interop.md):

    pypmu device -> gridstat pmu-gateway -> e1 -> c1 -> e2 -> gridstat pdc-server -> pypmu Pdc

Two PMUs in one stream (float polar phasors, and 16-bit rectangular ones) at 30 frames/s; the device
sends data over TCP, or spontaneously over UDP. The PDC asks for every frame (30/s) or every third
(10/s): each frame it gets carries the device's own SOC and FRACSEC, the frames are consecutive on
the served grid, the STAT words are clean and every value equals what the device sent. Everything
talks to 127.0.0.1 only; every process is stopped on the way out."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from . import brokerprocs
from . import pypmu_device as device
from .test_pmu_gateway import running, start_device, start_gateway, until

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
RATE = 30
ROUTERS = [("e1", 1, "edge"), ("c1", 2, "internal"), ("e2", 3, "edge")]
LINKS = [("e1", "c1", 1.0), ("c1", "e2", 1.0)]
SERVED = ["Station_A/VA:phasor", "Station_A/VB:phasor", "Station_A/freq", "Station_A/dfreq", "Station_A/ANALOG1",
          "Station_B/VA:phasor", "Station_B/VB:phasor", "Station_B/freq", "Station_B/dfreq"]
FRAMES = 45


def f32(x: float) -> float:
    return float(struct.unpack(">f", struct.pack(">f", x))[0])


class PdcServer:
    def __init__(self, tmp: Path, edge_port: int, frames_per_s: int) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.out = tmp / f"pdc-server-{frames_per_s}.out"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gridstat.cli.main", "pdc-server", "--name", "cc", "--edge",
             f"127.0.0.1:{edge_port}", "--variables", ",".join(SERVED), "--frames-per-s", str(frames_per_s),
             "--latency-ms", "500", "--wait-ms", "300", "--freq-format", "int16", "--listen",
             f"127.0.0.1:{self.port}", "--idcode", "1", "-o", "json", "--stats-every-s", "0.5"],
            stdout=self.out.open("wb"), stderr=(tmp / "pdc-server.err").open("ab"), start_new_session=True)

    def stats(self) -> dict[str, Any]:
        rows = [json.loads(x) for x in self.out.read_text().splitlines() if x.startswith("{")]
        return rows[-1] if rows else {}

    def listening(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def read_pdc(port: int, frames: int, tmp: Path) -> list[dict[str, Any]]:
    """pypmu's Pdc (its own process group) reading ``frames`` data frames; its config line first."""
    out = subprocess.run([sys.executable, str(HERE / "pypmu_pdc_client.py"), "--port", str(port), "--idcode", "1",
                          "--frames", str(frames), "--timeout-s", "40"], capture_output=True, text=True,
                         timeout=90, start_new_session=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def check_frames(rows: list[dict[str, Any]], served_rate: int) -> None:
    config, *data = rows
    # The device's own station names (the gateway's `station` attribute), not the variable names' form.
    assert [n.strip() for n in config["stations"]] == list(device.STATIONS) and config["data_rate"] == served_rate
    assert len(data) == FRAMES
    step = RATE // served_rate
    numbers = [device.frame_number(r["soc"], r["fracsec"], RATE) for r in data]
    assert all(n % step == 0 for n in numbers), "frames off the served grid"
    assert numbers == list(range(numbers[0], numbers[0] + step * FRAMES, step)), "a frame missing or doubled"
    for r, n in zip(data, numbers, strict=True):
        # The device's own time: FRACSEC on its TIME_BASE grid, as it sent it.
        assert r["fracsec"] == round((n % RATE) * device.TIME_BASE / RATE)
        assert r["status"] == ["ok", "ok"], f"frame {n}: STAT {r['status']}"  # pypmu's name of data error 00
        a_ph, a_freq, a_dfreq, a_an, _ = device.raw_values(0, n, 1)
        b_ph, b_freq, b_dfreq, _, _ = device.raw_values(1, n, 1)
        (ra, rb), (fa, fb), (da, db) = r["phasors"], r["freq"], r["dfreq"]
        # Station A sent float polar phasors: the same float32 values arrive.
        assert [tuple(p) for p in ra] == [(f32(m), f32(a)) for m, a in a_ph]
        assert r["analog"][0] == [f32(a_an[0])]
        # Station B sent 16-bit rectangular ones (1 V per bit): served as float polar.
        for (mag, ang), (re, im) in zip(rb, b_ph, strict=True):
            assert math.isclose(mag, math.hypot(re, im), rel_tol=1e-6)
            assert math.isclose(ang, math.atan2(im, re), abs_tol=1e-6)
        # FREQ in mHz off 60 Hz, DFREQ in Hz/s x 100 (served 16-bit: --freq-format int16).
        assert (fa, fb, da, db) == (a_freq, b_freq, a_dfreq, b_dfreq)


@pytest.mark.parametrize(("data", "served_rate"), [("tcp", 30), ("udp", 10)])
async def test_pmu_to_pdc_through_three_routers(tmp_path: Path, data: str, served_rate: int) -> None:
    cloud = brokerprocs.cloud(tmp_path, ROUTERS, LINKS, proxied=("e1", "e2"))
    _broker, routers = await asyncio.to_thread(cloud.__enter__)
    try:
        extra: tuple[str, ...] = ()
        gw_extra: tuple[str, ...] = ()
        if data == "udp":
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind(("127.0.0.1", 0))
                udp_port = s.getsockname()[1]
            extra = ("--data", "udp", "--udp-to", str(udp_port))
            gw_extra = ("--data", "udp", "--udp-port", str(udp_port))
        dev, port = start_device(tmp_path, "--mode", "server", "--pmus", "2", *extra)
        gw = start_gateway(tmp_path, port, routers["e1"].control_port, *gw_extra)
        server = PdcServer(tmp_path, routers["e2"].control_port, served_rate)
        with running(server, gw, dev):
            # The server subscribes once the gateway registered the variables (it retries until then).
            await until(server.listening, timeout_s=40, what="the pdc-server to listen")
            rows = await asyncio.to_thread(read_pdc, server.port, FRAMES, tmp_path)
            check_frames(rows, served_rate)
            assert gw.stats()["drops"] == {}
            await until(lambda: server.stats().get("frames_sent", 0) > 0, timeout_s=5, what="a stats line")
    finally:
        await asyncio.to_thread(cloud.__exit__, None, None, None)

