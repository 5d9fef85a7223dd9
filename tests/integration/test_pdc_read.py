"""``gridstat pdc-read`` against a simulated device (docs/interop.md): the configuration, then one line
per data frame with the device's values; an address beyond 127.0.0.1 refused with the field named."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from gridstat.gateways.simulated import TIME_BASE, DeviceServer, SimulatedDevice, stations

pytestmark = pytest.mark.integration


async def pdc_read(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "gridstat.cli.main", "pdc-read", *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_it_prints_the_devices_configuration_and_frames() -> None:
    server = DeviceServer(SimulatedDevice(stations(2, phasors=2), idcode=7, frames_per_s=50))
    await server.start()
    try:
        code, out, err = await pdc_read(f"127.0.0.1:{server.port}", "--idcode", "7", "--frames", "5", "-o", "json")
    finally:
        await server.stop()
    assert code == 0, err
    config, *frames = [json.loads(line) for line in out.splitlines()]
    assert config["data_rate"] == 50 and [s["station"] for s in config["stations"]] == ["PMU1", "PMU2"]
    assert len(frames) == 5
    for f in frames:
        k = f["soc"] * 50 + round(f["fracsec"] * 50 / TIME_BASE)
        phasors, freq, _dfreq, _ = SimulatedDevice.values(1, k, 2, 0)
        assert f["stations"][1]["phasors"] == [[round(m, 6), round(a, 6)] for m, a in phasors]
        assert f["stations"][1]["freq_hz"] == round(freq, 6) and f["stations"][1]["stat"] == 0


async def test_nothing_to_read_or_a_remote_address_is_a_clear_error() -> None:
    code, _, err = await pdc_read("10.1.2.3:4712", "--idcode", "1")
    assert code == 2 and "beyond 127.0.0.1" in err and "--allow-remote" in err
    code, _, err = await pdc_read("127.0.0.1:9", "--idcode", "1", "--duration-s", "2")
    assert code == 1 and "cannot connect" in err
