"""A simulated C37.118.2 device: a PMU, or a PDC's stream of several PMUs (docs/interop.md).

It answers command frames on TCP as a device does (CFG-1, CFG-2, CFG-3, header, data on and off)
and sends data frames at its reporting rate, stamped with the frame's own instant on the time grid
(frame k of the epoch at ``SOC = k // R``, ``FRACSEC = (k % R)·TIME_BASE // R``), over the same TCP
connection or, spontaneously, over UDP to a destination. Values are a pure function of the station,
the channel and the frame (``SimulatedDevice.values``), so a test or a benchmark at the far end
knows what was sent. It is what ``gridstat up`` feeds the demo utility with, what
``gridstat bench pmu`` loads the gateway with, and ``gridstat pmu-sim`` runs it on its own.

The device (``SimulatedDevice``) is sans-I/O, as the codec is: frames in, frames out, ``now`` passed
in. ``DeviceServer`` is the asyncio transport: one ticker for every connection, so the cost is per
frame, not per listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from gridstat.gateways.c37118 import (
    AnalogUnit,
    Command,
    CommandFrame,
    ConfigFrame,
    DataFormat,
    DigitalUnit,
    FrameType,
    HeaderFrame,
    PhasorKind,
    PhasorUnit,
    PmuConfig,
    StreamDecoder,
    build_cfg3_frames,
    build_frame,
)
from gridstat.gateways.c37118.framing import seal

log = logging.getLogger(__name__)

#: Fraction-of-second counts per second the simulated device stamps with: microseconds.
TIME_BASE = 1_000_000
_F32 = struct.Struct(">f")
_STAT_GOOD = 0
#: The STAT word's data-error bits, "PMU error, no information about data" (Table 6).
STAT_PMU_ERROR = 0x4000
#: How long before a frame's instant a precise device stops sleeping and polls the clock.
PRECISE_SPIN_S = 0.002


@dataclass(frozen=True)
class Station:
    """One simulated PMU: its name, IDCODE and how many channels of each kind it measures."""

    name: str
    idcode: int
    phasors: int = 3
    analogs: int = 0
    digitals: int = 0
    nominal_frequency_hz: int = 60
    #: The analog channels' names (CHNAM); A1, A2 ... where not given.
    analog_names: tuple[str, ...] = ()


@dataclass
class SimulatedDevice:
    """A device's state and its frames; nothing here reads a clock or opens a socket."""

    stations: Sequence[Station]
    #: The stream's IDCODE: the PMU's for one station, the PDC's for several (6.2, Table 2).
    idcode: int
    frames_per_s: int = 60
    #: The data format of every station: float polar phasors, float FREQ/DFREQ, float analogs.
    data_format: DataFormat = field(default_factory=lambda: DataFormat(True, True, True, True))
    config_count: int = 0

    def __post_init__(self) -> None:
        if not self.stations:
            raise ValueError("a simulated device needs at least one station")
        self._cfg = self._config(FrameType.CFG2)
        self._data_head = struct.Struct(">HHHII")

    # -- configuration --------------------------------------------------------------------------
    def _config(self, frame_type: FrameType, soc: int = 0, fracsec: int = 0) -> ConfigFrame:
        pmus = tuple(PmuConfig(
            station_name=s.name, idcode=s.idcode, data_format=self.data_format,
            phasor_names=tuple(f"V{i + 1}" if i < 3 else f"I{i - 2}" for i in range(s.phasors)),
            analog_names=tuple(s.analog_names[i] if i < len(s.analog_names) else f"A{i + 1}"
                               for i in range(s.analogs)),
            digital_names=tuple(f"D{w + 1}.{b}" for w in range(s.digitals) for b in range(16)),
            phasor_units=tuple(PhasorUnit(PhasorKind.VOLTAGE if i < 3 else PhasorKind.CURRENT)
                               for i in range(s.phasors)),
            analog_units=tuple(AnalogUnit() for _ in range(s.analogs)),
            digital_units=tuple(DigitalUnit(0, 0xFFFF) for _ in range(s.digitals)),
            nominal_frequency_hz=s.nominal_frequency_hz, config_count=self.config_count)
            for s in self.stations)
        return ConfigFrame(frame_type, self.idcode, soc, fracsec, TIME_BASE, pmus, self.frames_per_s)

    def config(self, frame_type: FrameType = FrameType.CFG2, now_ns: int = 0) -> bytes:
        soc, ns = divmod(now_ns, 1_000_000_000)
        frame = self._config(frame_type, soc, ns * TIME_BASE // 1_000_000_000)
        if frame_type is FrameType.CFG3:
            return b"".join(build_cfg3_frames(frame))
        return build_frame(frame)

    def header(self, now_ns: int = 0) -> bytes:
        soc = now_ns // 1_000_000_000
        text = (f"GridStat simulated device: {len(self.stations)} station(s) at {self.frames_per_s} frames/s; "
                "values are gridstat.gateways.simulated.SimulatedDevice.values")
        return build_frame(HeaderFrame(self.idcode, soc, 0, text))

    def change_config(self) -> None:
        """A new configuration (CFGCNT + 1): one more phasor at the first station."""
        first, *rest = self.stations
        self.stations = [Station(first.name, first.idcode, first.phasors + 1, first.analogs, first.digitals,
                                 first.nominal_frequency_hz, first.analog_names), *rest]
        self.config_count += 1
        self._cfg = self._config(FrameType.CFG2)

    # -- data -----------------------------------------------------------------------------------
    def instant(self, k: int) -> tuple[int, int]:
        """(SOC, FRACSEC count) of frame ``k`` of the epoch."""
        soc, i = divmod(k, self.frames_per_s)
        return soc, i * TIME_BASE // self.frames_per_s

    @staticmethod
    def values(station: int, k: int, phasors: int, analogs: int
               ) -> tuple[list[tuple[float, float]], float, float, list[float]]:
        """What station ``station`` measures at frame ``k``: polar phasors (magnitude, angle in rad),
        FREQ (Hz), DFREQ (Hz/s) and analogs, each exactly representable as float32."""
        def f32(x: float) -> float:
            return float(_F32.unpack(_F32.pack(x))[0])

        step = k % 600
        mags = [f32((120_000.0 if i < 3 else 500.0) * (1 + station / 1000) + step / 8) for i in range(phasors)]
        angles = [f32(((k * 0.01 + i * 2.0943951) % (2 * math.pi)) - math.pi) for i in range(phasors)]
        return (list(zip(mags, angles, strict=True)), f32(60.0 + ((k % 200) - 100) / 10_000),
                f32(((k % 20) - 10) / 100), [f32(station + i + step / 4) for i in range(analogs)])

    def data(self, k: int, *, stat: int = _STAT_GOOD) -> bytes:
        """The data frame of frame ``k``, every station's block with STAT ``stat``."""
        soc, count = self.instant(k)
        body = bytearray()
        for index, station in enumerate(self.stations):
            phasors, freq, dfreq, analogs = self.values(index, k, station.phasors, station.analogs)
            body += struct.pack(">H", stat)
            for mag, ang in phasors:
                body += struct.pack(">ff", mag, ang)
            body += struct.pack(">ff", freq, dfreq)
            for a in analogs:
                body += _F32.pack(a)
            for w in range(station.digitals):
                body += struct.pack(">H", (k >> w) & 0xFFFF)
        return seal(FrameType.DATA, version=1, idcode=self.idcode, soc=soc, fracsec=count,
                    time_quality=self._cfg.time_quality, body=bytes(body))


@dataclass
class DeviceStats:
    connections: int = 0
    commands: int = 0
    frames_sent: int = 0
    late_ticks: int = 0


class _Client:
    __slots__ = ("data_on", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.data_on = False


class DeviceServer:
    """A ``SimulatedDevice`` on TCP (commands, and data unless ``udp_to``), bound to 127.0.0.1 unless
    told otherwise; data frames go out at their instants, whoever asked for them."""

    def __init__(self, device: SimulatedDevice, *, host: str = "127.0.0.1", port: int = 0,
                 udp_to: tuple[str, int] | None = None, precise: bool = False) -> None:
        self.device = device
        #: Send each frame at its instant to within microseconds: the loop's timers wake up to a
        #: millisecond late, so the last PRECISE_SPIN_S before an instant are spent polling the clock
        #: (a benchmark's device: what it measures starts at the instant, as a real PMU's frame does).
        self.precise = precise
        self.host, self.port = host, port
        self.udp_to = udp_to
        self.stats = DeviceStats()
        #: What clients sent that was not a frame, by reason (the codec's counts), over all connections.
        self.drops: dict[str, int] = {}
        self._clients: set[_Client] = set()
        self._server: asyncio.base_events.Server | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._udp: socket.socket | None = None
        #: True after DATA_ON over TCP when the data goes by UDP.
        self._udp_on = False
        #: Frames of these numbers go out with the config-change bit (a test's configuration change).
        self.stat_override: dict[int, int] = {}

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        if self.udp_to is not None:
            self._udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._udp.setblocking(False)
        self._ticker = asyncio.create_task(self._tick(), name="pmu-sim-ticker")

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self._server is not None:
            self._server.close()
        for c in list(self._clients):
            c.writer.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        if self._udp is not None:
            self._udp.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = _Client(writer)
        self._clients.add(client)
        self.stats.connections += 1
        decoder = StreamDecoder()
        try:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    if isinstance(frame, CommandFrame):
                        self.stats.commands += 1
                        self._command(client, frame)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            for reason, n in decoder.drops.as_dict().items():
                self.drops[reason] = self.drops.get(reason, 0) + n
            self._clients.discard(client)
            writer.close()

    def _command(self, client: _Client, frame: CommandFrame) -> None:
        now_ns = time.time_ns()
        device = self.device
        match frame.command:
            case Command.DATA_ON:
                if self.udp_to is not None:
                    self._udp_on = True
                else:
                    client.data_on = True
            case Command.DATA_OFF:
                client.data_on = False
                self._udp_on = False
            case Command.SEND_CFG1:
                client.writer.write(device.config(FrameType.CFG1, now_ns))
            case Command.SEND_CFG2:
                client.writer.write(device.config(FrameType.CFG2, now_ns))
            case Command.SEND_CFG3:
                client.writer.write(device.config(FrameType.CFG3, now_ns))
            case Command.SEND_HEADER:
                client.writer.write(device.header(now_ns))
            case _:
                pass  # an extended frame or a user-defined command: nothing to do

    async def _tick(self) -> None:
        device = self.device
        rate = device.frames_per_s
        k = time.time_ns() * rate // 1_000_000_000 + 1
        while True:
            due_ns = k * 1_000_000_000 // rate
            # Built ahead of its instant, so it leaves at the instant (a 100-PMU frame takes ~1 ms).
            frame = device.data(k, stat=self.stat_override.get(k, _STAT_GOOD)) \
                if self._udp_on or any(c.data_on for c in self._clients) else None
            delay = (due_ns - time.time_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(max(0.0, delay - PRECISE_SPIN_S) if self.precise else delay)
                while self.precise and time.time_ns() < due_ns:
                    pass  # the last stretch to the instant, polled (bounded by PRECISE_SPIN_S)
            elif delay < -1.0:  # a second behind (a stopped process): skip ahead, counted
                self.stats.late_ticks += 1
                k = time.time_ns() * rate // 1_000_000_000 + 1
                continue
            receivers = [c for c in self._clients if c.data_on]
            if receivers or self._udp_on:
                if frame is None:
                    frame = device.data(k, stat=self.stat_override.get(k, _STAT_GOOD))
                for c in receivers:
                    if not c.writer.is_closing():
                        c.writer.write(frame)
                        self.stats.frames_sent += 1
                if self._udp_on and self._udp is not None and self.udp_to is not None:
                    with contextlib.suppress(OSError):
                        self._udp.sendto(frame, self.udp_to)
                        self.stats.frames_sent += 1
            k += 1


def stations(count: int, *, phasors: int = 3, analogs: int = 0, digitals: int = 0, first_idcode: int = 1,
             prefix: str = "PMU", nominal_frequency_hz: int = 60) -> list[Station]:
    """``count`` stations named ``<prefix>1``, ``<prefix>2`` ... with IDCODEs from ``first_idcode``."""
    return [Station(f"{prefix}{i + 1}", first_idcode + i, phasors, analogs, digitals, nominal_frequency_hz)
            for i in range(count)]


__all__ = ["STAT_PMU_ERROR", "TIME_BASE", "DeviceServer", "DeviceStats", "SimulatedDevice", "Station", "stations"]
