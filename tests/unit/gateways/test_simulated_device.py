"""The simulated C37.118 device (gridstat.gateways.simulated): its frames parse with our codec and
with pypmu, data frames sit on the time grid, values are the documented function, and the TCP
server answers commands as a device does (127.0.0.1 only)."""

from __future__ import annotations

import asyncio
import time

from c37118_pypmu import pypmu

from gridstat.gateways.c37118 import (
    Command,
    CommandFrame,
    ConfigFrame,
    DataFrame,
    FrameType,
    HeaderFrame,
    StreamDecoder,
    build_frame,
    parse_frame,
)
from gridstat.gateways.simulated import TIME_BASE, DeviceServer, SimulatedDevice, stations


def test_frames_parse_and_carry_the_documented_values() -> None:
    device = SimulatedDevice(stations(3, phasors=4, analogs=2, digitals=1), idcode=900, frames_per_s=30)
    cfg = parse_frame(device.config())
    assert isinstance(cfg, ConfigFrame) and cfg.frame_type is FrameType.CFG2 and len(cfg.pmus) == 3
    assert cfg.data_rate == 30 and cfg.time_base == TIME_BASE
    k = 1_795_000_000 * 30 + 7
    frame = parse_frame(device.data(k), config=cfg)
    assert isinstance(frame, DataFrame)
    assert frame.soc == 1_795_000_000 and frame.fracsec == 7 * TIME_BASE // 30
    for index, pmu in enumerate(frame.pmus):
        phasors, freq, dfreq, analogs = SimulatedDevice.values(index, k, 4, 2)
        assert list(pmu.phasors) == phasors and pmu.freq == freq and pmu.dfreq == dfreq
        assert list(pmu.analogs) == analogs and pmu.digitals == (k & 0xFFFF,)
    # pypmu reads the same configuration (not its float FREQ: it takes a float FREQ for a deviation
    # from FNOM, which Table 6 does not; docs/c37118.md).
    p_cfg = pypmu.CommonFrame.convert2frame(device.config())
    assert p_cfg.get_num_pmu() == 3 and p_cfg.get_data_rate() == 30


def test_a_configuration_change_adds_a_phasor_and_counts() -> None:
    device = SimulatedDevice(stations(1), idcode=1)
    device.change_config()
    cfg = parse_frame(device.config())
    assert isinstance(cfg, ConfigFrame)
    assert len(cfg.pmus[0].phasor_names) == 4 and cfg.pmus[0].config_count == 1
    assert isinstance(parse_frame(device.header()), HeaderFrame)


async def test_the_server_answers_commands_and_streams_on_the_grid() -> None:
    server = DeviceServer(SimulatedDevice(stations(2), idcode=77, frames_per_s=50))
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        decoder = StreamDecoder()

        def command(cmd: Command) -> bytes:
            return build_frame(CommandFrame(77, int(time.time()), 0, cmd))

        writer.write(command(Command.SEND_CFG2) + command(Command.SEND_HEADER) + b"garbage" +
                     command(Command.DATA_ON))
        frames: list[object] = []
        deadline = time.monotonic() + 5
        while sum(isinstance(f, DataFrame) for f in frames) < 30 and time.monotonic() < deadline:
            frames += decoder.feed(await asyncio.wait_for(reader.read(65536), 5))
        data = [f for f in frames if isinstance(f, DataFrame)]
        assert isinstance(frames[0], ConfigFrame) and isinstance(frames[1], HeaderFrame)
        assert len(data) >= 30
        ks = [(f.soc * TIME_BASE + f.fracsec) * 50 // TIME_BASE for f in data]
        assert all(f.fracsec == (k % 50) * TIME_BASE // 50 for f, k in zip(data, ks, strict=True))
        assert ks == list(range(ks[0], ks[0] + len(ks)))  # every frame, in order, across seconds
        writer.write(command(Command.DATA_OFF))
        await writer.drain()
        writer.close()
        for _ in range(100):  # the server reads DATA_OFF
            if server.stats.commands == 4:
                break
            await asyncio.sleep(0.01)
        assert server.stats.commands == 4
    finally:
        await server.stop()
    assert server.drops  # the garbage bytes were counted, not fatal
