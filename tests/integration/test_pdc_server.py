"""``gridstat pdc-server`` between real routers and a real PDC client (docs/pdc-server.md).

Two SDK publishers (stations sub1 and sub2) publish ``<station>/<channel>`` variables at 60 frames/s
with the DEVICE_TIME option, through a real leaf broker and two real edge routers; ``gridstat
pdc-server`` subscribes at e2 and serves them; synchrophasor (pypmu)'s ``Pdc``, in its own process
(pypmu_pdc_client.py), reads the stream over TCP. Every value and timestamp it reads equals what was
published, at full rate and filtered to 20 frames/s; a sample withheld shows as STAT data invalid and
NaN. pypmu's ``Pdc`` speaks TCP only, so UDP is not exercised here.

pypmu reads a float FREQ as a deviation from FNOM and refuses a frame whose FREQ is NaN or beyond
+/-32.767, or whose polar angle is NaN (docs/c37118.md, docs/pdc-server.md "PDCs tested"): so every
station here serves a ``freq`` variable of small values, and the sample withheld is an analog.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import struct
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gridstat.client import PublicationHandle, Publisher
from gridstat.core import clock, wire
from gridstat.core.model import FLOAT, INT
from gridstat.gateways.c37118 import Command, CommandFrame, ConfigFrame, DataFrame, StreamDecoder, build_frame
from gridstat.gateways.pdc import PHASOR_TYPE

from .brokerprocs import edge_pair

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
RATE = 60
BASE = 1_000_000
STAT_OK = 0x0000
#: The published frame whose sub2/p is withheld: frame 30 of the second second.
WITHHELD = (1, 30)


async def _line(stream: asyncio.StreamReader, timeout_s: float) -> str:
    raw = await asyncio.wait_for(stream.readline(), timeout_s)
    if not raw:
        raise EOFError("the process closed its stdout")
    return raw.decode().strip()


async def _until(stream: asyncio.StreamReader, prefix: str, timeout_s: float) -> str:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    for _ in range(1000):
        line = await _line(stream, max(0.1, end - loop.time()))
        if line.startswith(prefix):
            return line
    raise AssertionError(f"no {prefix} line")


@contextlib.asynccontextmanager
async def process(*argv: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """A child in its own process group, killed by group on the way out."""
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, start_new_session=True)
    try:
        yield proc
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if proc.returncode is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), 5.0)


def values_of(second: int, k: int) -> dict[str, Any]:
    """What frame ``k`` of ``second`` publishes: float32-exact values."""
    return {"sub1/va": {"magnitude": 230.0 + k / 64, "angle": (k % 7) / 8 - 0.5},
            "sub1/freq": (k - 30) / 1024, "sub2/freq": -k / 256, "sub2/p": 100.0 * second + k * 0.25,
            "sub2/brk": (k * 97) & 0xFFFF}


async def publish_frames(handles: dict[str, PublicationHandle], soc0: int, seconds: int) -> dict[tuple[int, int], Any]:
    """Publish every frame of ``seconds`` seconds from ``soc0``, each at its time: what was published,
    by (SOC, FRACSEC)."""
    published: dict[tuple[int, int], Any] = {}
    for s in range(seconds):
        for k in range(RATE):
            count = k * BASE // RATE
            ts = wire.device_timestamp_ms(soc0 + s, count, BASE)
            delay = (ts - clock.now_ms()) / 1000
            if delay > 0:
                await asyncio.sleep(delay)
            option = (wire.device_time(STAT_OK, count, BASE),)
            vals = values_of(s, k)
            for name, h in handles.items():
                if name == "sub2/p" and (s, k) == WITHHELD:
                    continue
                h.publish(vals[name], ts, options=option)
            published[(soc0 + s, count)] = (s, k)
    return published


def decoder_bytes(frame: DataFrame) -> bytes:
    return build_frame(frame)


def stat_words(raw: bytes) -> tuple[int, int]:
    """The two blocks' STAT words of a data frame of this stream (6.3, Table 5): sub1 has 1 phasor,
    FREQ, DFREQ (float polar: 8 + 4 + 4 bytes); sub2 a phasor-less block of 1 analog, 1 digital word."""
    first = struct.unpack_from(">H", raw, 14)[0]
    second = struct.unpack_from(">H", raw, 14 + 2 + 8 + 4 + 4)[0]
    return first, second


@pytest.mark.parametrize("served_rate", [60, 20])
async def test_pypmu_reads_every_published_value_and_timestamp(tmp_path: Path, served_rate: int) -> None:
    with edge_pair(tmp_path) as (_broker, routers):
        e1 = f"127.0.0.1:{routers['e1'].control_port}"
        e2 = f"127.0.0.1:{routers['e2'].control_port}"
        pub1 = await Publisher.connect("sub1", e1)
        pub2 = await Publisher.connect("sub2", e1)
        try:
            interval = 1000 // RATE
            handles = {
                "sub1/va": await pub1.register("va", PHASOR_TYPE, interval, frames_per_s=RATE,
                                               attributes={"idcode": "71", "units": "V", "station": "sub1"}),
                "sub1/freq": await pub1.register("freq", FLOAT, interval, frames_per_s=RATE,
                                                 attributes={"kind": "freq", "nominal_frequency_hz": "60"}),
                "sub2/freq": await pub2.register("freq", FLOAT, interval, frames_per_s=RATE,
                                                 attributes={"kind": "freq", "nominal_frequency_hz": "50"}),
                "sub2/p": await pub2.register("p", FLOAT, interval, frames_per_s=RATE, attributes={"units": "MW"}),
                "sub2/brk": await pub2.register("brk", INT, interval, frames_per_s=RATE,
                                                attributes={"kind": "digital"}),
            }
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            udp.bind(("127.0.0.1", 0))
            udp.setblocking(False)
            server_argv = [sys.executable, "-m", "gridstat.cli.main", "pdc-server", "--name", "pdc1", "--edge", e2,
                           "--variables", "sub1/va:phasor,sub1/freq,sub2/freq,sub2/p,sub2/brk:int",
                           "--frames-per-s", str(served_rate), "--listen", "127.0.0.1:0", "--idcode", "7",
                           "--wait-ms", "150", "--stats-every-s", "0", "--connect-timeout-s", "30",
                           "--udp-to", f"127.0.0.1:{udp.getsockname()[1]}", "--exit-with-parent"]
            async with process(*server_argv) as server:
                assert server.stdout is not None
                ready = await _until(server.stdout, "READY", 60)
                port = int(ready.split("listen=127.0.0.1:")[1].split()[0])
                udp_port = int(ready.split("udp_port=")[1].split()[0])
                udp.sendto(build_frame(CommandFrame(7, 0, 0, Command.SEND_CFG2)), ("127.0.0.1", udp_port))
                assert "stations=2 variables=5" in ready
                seconds = 3
                expected_frames = (seconds - 1) * served_rate  # from the first whole second the client sees
                client_argv = [sys.executable, str(HERE / "pypmu_pdc_client.py"), "--port", str(port), "--idcode",
                               "7", "--frames", str(seconds * served_rate + served_rate), "--timeout-s", "15"]
                async with process(*client_argv) as client:
                    assert client.stdout is not None
                    try:
                        cfg = json.loads(await _line(client.stdout, 30))
                    except EOFError:
                        assert client.stderr is not None
                        raise AssertionError((await client.stderr.read()).decode()) from None
                    assert [s.strip() for s in cfg["stations"]] == ["sub1", "sub2"] and cfg["idcodes"][0] == 71
                    assert cfg["data_rate"] == served_rate and cfg["time_base"] == BASE
                    assert await _line(client.stdout, 30) == "STARTED"
                    soc0 = clock.now_ms() // 1000 + 1
                    published = await publish_frames(handles, soc0, seconds)
                    frames: list[dict[str, Any]] = []
                    with contextlib.suppress(EOFError, asyncio.TimeoutError):
                        for _ in range(seconds * served_rate + served_rate):
                            frames.append(json.loads(await _line(client.stdout, 3)))
            datagrams = []
            for _ in range(100_000):
                try:
                    datagrams.append(udp.recv(65536))
                except BlockingIOError:
                    break
        finally:
            udp.close()
            await pub1.stop()
            await pub2.stop()
    # Spontaneous UDP: the CFG-2 asked over UDP, then every data frame the TCP client got, as datagrams.
    decoder = StreamDecoder()
    udp_frames = [decoder.receive_datagram(d) for d in datagrams]
    assert isinstance(udp_frames[0], ConfigFrame) and decoder.drops.total == 0
    by_time = {(f.soc, f.fracsec): f for f in udp_frames if isinstance(f, DataFrame)}
    assert all(bytes.fromhex(f["raw"]) == decoder_bytes(by_time[(f["soc"], f["fracsec"])]) for f in frames)
    times = [(f["soc"], f["fracsec"]) for f in frames]
    assert times == sorted(times) and len(set(times)) == len(times)
    step = RATE // served_rate
    wanted = sorted(t for t, (s, k) in published.items() if k % step == 0)
    # Every served instant after the first second arrived, none other (the first may start mid-second).
    got = [t for t in times if t[0] > soc0]
    assert got == [t for t in wanted if t[0] > soc0], f"{len(got)} of {expected_frames} frames"
    for f in frames:
        s, k = published[(f["soc"], f["fracsec"])]
        vals = values_of(s, k)
        (va,), (p_phasors) = f["phasors"]
        assert p_phasors == []
        assert va == [vals["sub1/va"]["magnitude"], vals["sub1/va"]["angle"]]
        assert f["freq"] == [vals["sub1/freq"], vals["sub2/freq"]] and all(math.isnan(x) for x in f["dfreq"])
        assert f["digital"] == [[], [vals["sub2/brk"]]]
        first, second = stat_words(bytes.fromhex(f["raw"]))
        if (s, k) == WITHHELD:
            assert math.isnan(f["analog"][1][0])
            assert second >> 14 == 0b10 and first == 0, hex(second)
            assert f["status"][1] != "ok"
        else:
            assert f["analog"] == [[], [vals["sub2/p"]]]
            assert (first, second) == (0, 0) and f["status"] == ["ok", "ok"]
    if served_rate == 60 or WITHHELD[1] % step == 0:
        assert any(published[(f["soc"], f["fracsec"])] == WITHHELD for f in frames)
