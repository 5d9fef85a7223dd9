"""``gridstat pmu-gateway`` between a real C37.118 device (synchrophasor/pypmu, its own process:
tests/integration/pypmu_device.py) and a real cloud (a leaf broker and two edge routers): an SDK
subscriber reads ``<station>/<channel>`` with the device's values, timestamps and STAT; over TCP and
UDP, one PMU and a stream of two; a configuration change picked up without a restart; a device killed
and restarted picked up again by itself. Everything talks to 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gridstat.client import Holder, Subscriber, Subscription
from gridstat.core import wire
from gridstat.core.model import FLOAT, INT, TypeSpec
from gridstat.errors import GridStatError
from gridstat.gateways.pmu import PHASOR

from . import brokerprocs
from . import pypmu_device as device

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
RATE = 30


@dataclass
class Proc:
    proc: subprocess.Popen[bytes]
    out: Path

    def stop(self) -> None:
        """Kill the whole process group (pypmu forks a child per connection)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


def start_device(tmp: Path, *args: str, port: int = 0, tag: str = "dev") -> tuple[Proc, int]:
    status = tmp / f"{tag}-{time.monotonic_ns()}.status"
    log = tmp / f"{tag}.log"
    proc = subprocess.Popen([sys.executable, str(HERE / "pypmu_device.py"), "--port", str(port), "--status",
                             str(status), "--rate", str(RATE), "--duration-s", "90", *args],
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    p = Proc(proc, log)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if status.exists() and status.read_text().startswith("READY"):
            return p, int(status.read_text().split("=")[1])
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    p.stop()
    raise RuntimeError(f"device did not start: {log.read_text()[-2000:]}")


@dataclass
class Gateway:
    proc: subprocess.Popen[bytes]
    out: Path
    lines: list[dict[str, Any]] = field(default_factory=list)

    def stats(self) -> dict[str, Any]:
        rows = [json.loads(x) for x in self.out.read_text().splitlines() if x.startswith("{")]
        return rows[-1] if rows else {}

    def stop(self) -> dict[str, Any]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        return self.stats()


def start_gateway(tmp: Path, device_port: int, edge_port: int, *extra: str) -> Gateway:
    out = tmp / f"gateway-{time.monotonic_ns()}.out"
    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "pmu-gateway", "--device",
                             f"127.0.0.1:{device_port}", "--idcode", str(device.STREAM_IDCODE), "--edge",
                             f"127.0.0.1:{edge_port}", "-o", "json", "--stats-every-s", "0.5", "--retry-initial-s",
                             "0.2", "--retry-max-s", "1", "--log-level", "INFO", *extra],
                            stdout=out.open("wb"), stderr=(tmp / "gateway.err").open("ab"), start_new_session=True)
    return Gateway(proc, out)


@contextlib.contextmanager
def running(*procs: Any) -> Iterator[None]:
    try:
        yield
    finally:
        for p in procs:
            p.stop()


async def until(predicate: Any, *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@dataclass
class Got:
    events: list[tuple[int, object, tuple[wire.DerivedValue, ...]]] = field(default_factory=list)

    def on_event(self, _s: Subscription, h: Holder) -> None:
        self.events.append((h.timestamp_ms, h.value, h.options))


async def subscribe(sub: Subscriber, name: str, type_: TypeSpec, *, timeout_s: float = 20.0) -> Got:
    """Subscribe once the gateway registered ``name`` (UnknownVariable until then)."""
    got = Got()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await sub.subscribe_remote(name, type_, interval_ms=1000 // RATE, latency_ms=5000, on_event=got.on_event)
            return got
        except GridStatError as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"could not subscribe to {name}: {exc}") from exc
            await asyncio.sleep(0.2)


def check_events(got: Got, pmu: int, channel: str, *, n_analogs: int = 1, at_least: int = 10) -> None:
    """Every event has the value the device sent at the device's time, its STAT and time quality."""
    assert len(got.events) >= at_least, f"{channel}: {len(got.events)} events"
    for ts, value, options in got.events:
        dt = wire.read_device_time(options)
        assert dt is not None, "no DEVICE_TIME option"
        stat, fracsec_raw, time_base = dt
        count = fracsec_raw & 0xFFFFFF
        assert time_base == device.TIME_BASE and fracsec_raw >> 24 == device.TIME_QUALITY
        assert ts == wire.device_timestamp_ms(ts // 1000, count, time_base)  # the device's time, floored
        assert count == round(round(count * RATE / time_base) * time_base / RATE)  # on the frame grid
        assert stat & ~device.FLAG_BIT == 0
        want = device.expected(pmu, device.frame_number(ts // 1000, count, RATE), n_analogs)[channel]
        if isinstance(want, dict):
            assert isinstance(value, dict)
            assert math.isclose(value["magnitude"], want["magnitude"], rel_tol=1e-6)
            assert math.isclose(value["angle"], want["angle"], abs_tol=1e-6)
        elif isinstance(want, float):
            assert math.isclose(value, want, rel_tol=1e-9, abs_tol=1e-9), (channel, value, want)  # type: ignore[arg-type]
        else:
            assert value == want


@pytest.fixture
async def cloud(tmp_path: Path) -> AsyncIterator[tuple[int, Subscriber]]:
    ctx = brokerprocs.edge_pair(tmp_path)
    _broker, routers = await asyncio.to_thread(ctx.__enter__)
    sub = None
    try:
        sub = await Subscriber.connect("ems", f"127.0.0.1:{routers['e2'].control_port}")
        yield routers["e1"].control_port, sub
    finally:
        if sub is not None:
            await sub.stop()
        await asyncio.to_thread(ctx.__exit__, None, None, None)


async def test_pypmu_over_tcp_values_device_time_and_reconnect(tmp_path: Path, cloud: tuple[int, Subscriber]) -> None:
    edge, sub = cloud
    dev, port = start_device(tmp_path, "--mode", "pypmu")
    gw = start_gateway(tmp_path, port, edge)
    with running(gw, dev):
        va = await subscribe(sub, "Station_A/VA", PHASOR)
        freq = await subscribe(sub, "Station_A/freq", FLOAT)
        brk = await subscribe(sub, "Station_A/BRK0_0", INT)
        analog = await subscribe(sub, "Station_A/ANALOG1", FLOAT)
        await until(lambda: min(len(g.events) for g in (va, freq, brk, analog)) >= 20, timeout_s=20,
                    what="20 events of each variable")
        check_events(va, 0, "VA")
        check_events(freq, 0, "freq")
        check_events(brk, 0, "BRK0_0")
        check_events(analog, 0, "ANALOG1")
        stats = gw.stats()
        assert stats["state"] == "streaming" and stats["frames"]["cfg2"] >= 1 and stats["drops"] == {}
        # The device goes away and comes back on the same port: the gateway reconnects by itself.
        dev.stop()
        await until(lambda: gw.stats().get("reconnects", 0) >= 1, timeout_s=15, what="the gateway to notice")
        before = len(va.events)
        dev, _ = start_device(tmp_path, "--mode", "pypmu", port=port)
        await until(lambda: len(va.events) >= before + 20, timeout_s=30, what="events after the device restarted")
        check_events(va, 0, "VA")
        assert gw.stats()["state"] == "streaming"
        dev.stop()
    final = gw.stop()
    assert final["final"] and final["connects"] >= 2 and final["events_failed"] == 0


async def test_two_pmus_over_udp(tmp_path: Path, cloud: tuple[int, Subscriber]) -> None:
    edge, sub = cloud
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        udp_port = s.getsockname()[1]
    dev, port = start_device(tmp_path, "--mode", "server", "--pmus", "2", "--data", "udp", "--udp-to", str(udp_port))
    gw = start_gateway(tmp_path, port, edge, "--data", "udp", "--udp-port", str(udp_port))
    with running(gw, dev):
        a = await subscribe(sub, "Station_A/VB", PHASOR)
        b = await subscribe(sub, "Station_B/VA", PHASOR)
        bf = await subscribe(sub, "Station_B/dfreq", FLOAT)
        ban = await subscribe(sub, "Station_B/ANALOG1", FLOAT)
        await until(lambda: min(len(g.events) for g in (a, b, bf, ban)) >= 15, timeout_s=20, what="both PMUs' events")
        check_events(a, 0, "VB")
        check_events(b, 1, "VA")
        check_events(bf, 1, "dfreq")
        check_events(ban, 1, "ANALOG1")
        await until(lambda: gw.stats().get("udp_datagrams", 0) >= 30, timeout_s=10, what="the stats line")
        stats = gw.stats()
        assert stats["frames"]["data"] >= 30 and stats["udp_foreign"] == 0 and stats["reconnects"] == 0
    gw.stop()


async def test_a_configuration_change_is_picked_up_without_a_restart(tmp_path: Path,
                                                                     cloud: tuple[int, Subscriber]) -> None:
    edge, sub = cloud
    dev, port = start_device(tmp_path, "--mode", "server", "--change-after-s", "4", "--flag-s", "1.5")
    gw = start_gateway(tmp_path, port, edge)
    with running(gw, dev):
        first = await subscribe(sub, "Station_A/ANALOG1", FLOAT)
        new = await subscribe(sub, "Station_A/ANALOG2", FLOAT, timeout_s=30)  # registered after the change
        await until(lambda: len(new.events) >= 15, timeout_s=20, what="events of the new channel")
        check_events(new, 0, "ANALOG2", n_analogs=2)
        after = [e for e in first.events if e[0] >= new.events[0][0]]
        check_events(Got(after), 0, "ANALOG1", n_analogs=2, at_least=5)
        flagged = [e for e in first.events if wire.read_device_time(e[2])[0] & device.FLAG_BIT]  # type: ignore[index]
        assert flagged, "no event carried the configuration-change bit in its STAT"
        stats = gw.stats()
        assert stats["config_changes"] == 1 and stats["reconnects"] == 0 and stats["config_change_flags"] > 0
    gw.stop()
