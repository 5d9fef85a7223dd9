"""``gridstat iec104-gateway`` between a real IEC 60870-5-104 outstation (c104's ``Server``, a C++
library over lib60870 that no one here wrote, in this process) and a real cloud (a leaf broker and
two edge routers, brokerprocs.edge_pair), read by an SDK subscriber: values, device timestamps
(CP56Time2a) and quality descriptors arrive as sent; a single point's spontaneous change arrives as
an alert; the outstation stopped and started again is reconnected to by itself, with a general
interrogation again. Everything talks to 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gridstat.client import Holder, Subscriber, Subscription
from gridstat.core import wire
from gridstat.core.model import BOOL, FLOAT, INT, TypeSpec
from gridstat.errors import GridStatError
from gridstat.gateways.iec104 import read_quality
from gridstat.gateways.iec104.asdu import IV, OV

from . import brokerprocs

c104 = pytest.importorskip("c104")

pytestmark = pytest.mark.integration

CA = 47
CYCLE_MS = 200


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ms(t: datetime.datetime | None) -> int:
    """A c104 time as CP56Time2a carries it: whole milliseconds (the microseconds cut off)."""
    assert t is not None
    if t.tzinfo is None:  # c104 hands out naive datetimes in UTC
        t = t.replace(tzinfo=datetime.UTC)
    return (t - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) // datetime.timedelta(milliseconds=1)


class Outstation:
    """c104's server with one station: three measured values reported every CYCLE_MS and two points."""

    def __init__(self, port: int) -> None:
        self.server = c104.Server(ip="127.0.0.1", port=port, tick_rate_ms=50)
        st = self.server.add_station(common_address=CA)
        self.power = st.add_point(io_address=11, type=c104.Type.M_ME_NC_1, report_ms=CYCLE_MS)
        self.power.value = 1.5
        self.norm = st.add_point(io_address=13, type=c104.Type.M_ME_TD_1, report_ms=CYCLE_MS)
        self.norm.value = c104.NormalizedFloat(0.25)
        self.scaled = st.add_point(io_address=15, type=c104.Type.M_ME_TE_1, report_ms=CYCLE_MS)
        self.scaled.value = c104.Int16(-1234)
        self.scaled.quality = c104.Quality.Invalid | c104.Quality.Overflow
        self.breaker = st.add_point(io_address=12, type=c104.Type.M_SP_TB_1)
        self.breaker.value = True
        self.isolator = st.add_point(io_address=14, type=c104.Type.M_DP_TB_1)
        self.isolator.value = c104.Double.ON

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()


@dataclass
class Gateway:
    proc: subprocess.Popen[bytes]
    out: Path

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


def start_gateway(tmp: Path, port: int, edge_port: int, *extra: str) -> Gateway:
    out = tmp / f"gateway-{time.monotonic_ns()}.out"
    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "iec104-gateway", "--outstation",
                             f"127.0.0.1:{port}", "--edge", f"127.0.0.1:{edge_port}", "-o", "json",
                             "--stats-every-s", "0.5", "--retry-initial-s", "0.2", "--retry-max-s", "1",
                             "--log-level", "INFO", *extra],
                            stdout=out.open("wb"), stderr=(tmp / "gateway.err").open("ab"), start_new_session=True)
    return Gateway(proc, out)


def scrape(gw: Gateway) -> str:
    """The gateway's /metrics (its READY line says the port)."""
    ready = next(x for x in gw.out.read_text().splitlines() if x.startswith("READY "))
    port = int(ready.split("metrics_port=")[1].split()[0])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return str(r.read().decode())


@contextlib.contextmanager
def stopping(*things: Any) -> Iterator[None]:
    try:
        yield
    finally:
        for t in things:
            t.stop()


async def until(predicate: Any, *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@dataclass
class Got:
    events: list[tuple[int, object, tuple[wire.DerivedValue, ...]]] = field(default_factory=list)

    def on_event(self, _s: Subscription, h: Holder) -> None:
        self.events.append((h.timestamp_ms, h.value, h.options))


async def subscribe(sub: Subscriber, name: str, type_: TypeSpec, interval_ms: int, *,
                    timeout_s: float = 20.0) -> Got:
    """Subscribe once the gateway registered ``name`` (UnknownVariable until then)."""
    got = Got()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await sub.subscribe_remote(name, type_, interval_ms=interval_ms, latency_ms=5000, on_event=got.on_event)
            return got
        except GridStatError as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"could not subscribe to {name}: {exc}") from exc
            await asyncio.sleep(0.2)


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


async def test_c104_outstation_values_time_quality_alerts_and_reconnect(
        tmp_path: Path, cloud: tuple[int, Subscriber]) -> None:
    edge, sub = cloud
    port = free_port()
    station = Outstation(port)
    station.start()
    names = tmp_path / "points.yaml"
    names.write_text(f"stations: {{{CA}: sub{CA}}}\n"
                     "points:\n"
                     f"  - {{ca: {CA}, ioa: 11, name: feeder/p_mw, kind: float, attributes: {{units: MW}}}}\n"
                     f"  - {{ca: {CA}, ioa: 12, variable: breaker, kind: single, min_interval_ms: 1}}\n")
    gw = start_gateway(tmp_path, port, edge, "--map", str(names), "--interval-ms", str(CYCLE_MS),
                       "--common-address", str(CA), "--metrics-port", "0")
    with stopping(gw):
        try:
            power = await subscribe(sub, "feeder/p_mw", FLOAT, CYCLE_MS)
            norm = await subscribe(sub, f"sub{CA}/ioa13", FLOAT, CYCLE_MS)
            scaled = await subscribe(sub, f"sub{CA}/ioa15", INT, CYCLE_MS)
            breaker = await subscribe(sub, f"sub{CA}/breaker", BOOL, 1)
            isolator = await subscribe(sub, f"sub{CA}/ioa14", INT, 1)
            # c104 repeats a time-tagged value every cycle with the time it was set: the subscriber has it
            # once (one sample, one timestamp); a new value has a new time.
            await until(lambda: len(power.events) >= 3 and norm.events and scaled.events, timeout_s=20,
                        what="cyclic measured values")
            station.norm.value = c104.NormalizedFloat(-0.5)
            await until(lambda: norm.events[-1][1] == -0.5, timeout_s=10, what="a new normalized value")
            # Measured values: as sent, with the device's time when the type has a CP56Time2a.
            for ts, value, options in power.events:
                q = read_quality(options)
                assert value == 1.5 and q is not None and q.good and not q.device_time and q.type_id == 13
                assert q.common_address == CA and q.cot in (1, 20)
                assert abs(ts - time.time() * 1000) < 30_000  # the gateway's reception time
            for ts, value, options in norm.events:
                q = read_quality(options)
                assert value in (0.25, -0.5) and q is not None and q.good and q.device_time and q.type_id == 34
                assert value == 0.25 or ts == ms(station.norm.recorded_at)
            assert len({ts for ts, _, _ in norm.events}) == len(norm.events) == len({v for _, v, _ in norm.events})
            for ts, value, options in scaled.events:
                q = read_quality(options)
                assert value == -1234 and q is not None and q.quality == IV | OV and str(q) == "IV|OV"
                assert ts == ms(station.scaled.recorded_at) and q.type_id == 35
            # A spontaneous change of a single point is an alert with its own time.
            station.breaker.value = False
            assert station.breaker.transmit(cause=c104.Cot.SPONTANEOUS)
            changed_at = ms(station.breaker.recorded_at)
            await until(lambda: any(v is False for _, v, _ in breaker.events), timeout_s=10, what="the alert")
            ts, value, options = next(e for e in breaker.events if e[1] is False)
            q = read_quality(options)
            assert ts == changed_at and q is not None and q.cot == 3 and q.device_time and q.good
            # A double point (not in the map: registered at its first value) changes: DPI OFF = 1.
            station.isolator.value = c104.Double.OFF
            assert station.isolator.transmit(cause=c104.Cot.SPONTANEOUS)
            await until(lambda: any(v == 1 for _, v, _ in isolator.events), timeout_s=10, what="the double point")
            ts, value, options = next(e for e in isolator.events if e[1] == 1)
            q = read_quality(options)
            assert ts == ms(station.isolator.recorded_at) and q is not None and q.type_id == 31 and q.cot == 3
            await until(lambda: gw.stats().get("alerts_published", 0) >= 2, timeout_s=5, what="a stats line")
            stats = gw.stats()
            assert stats["state"] == "started" and stats["drops"] == {} and stats["interrogations_completed"] == 1
            # /metrics (--metrics-port): the same counts, drop reasons from 0, the link up.
            metrics = await asyncio.to_thread(scrape, gw)
            assert f'gridstat_iec104_link_up{{gateway="iec104-gateway",outstation="127.0.0.1:{port}"}} 1.0' in metrics
            assert 'reason="bad_sequence"} 0.0' in metrics and 'type="M_SP_TB_1"}' in metrics
            assert "gridstat_iec104_alerts_published_total{" in metrics
            # The outstation goes away; the point changes meanwhile; it comes back on the same port.
            station.stop()
            await until(lambda: gw.stats().get("reconnects", 0) >= 1, timeout_s=15, what="the gateway to notice")
            station.breaker.value = True
            restarted_at = ms(station.breaker.recorded_at)
            station.start()
            await until(lambda: gw.stats().get("interrogations_completed", 0) >= 2, timeout_s=20,
                        what="a general interrogation after the reconnect")
            await until(lambda: any(t == restarted_at for t, _, _ in breaker.events), timeout_s=10,
                        what="the point's new state from the interrogation")
            ts, value, options = next(e for e in breaker.events if e[0] == restarted_at)
            q = read_quality(options)
            assert value is True and q is not None and q.cot == 20
            before = len(power.events)
            await until(lambda: len(power.events) >= before + 3, timeout_s=10, what="cyclic values again")
        finally:
            station.stop()
        final = gw.stop()
    assert final["final"] and final["connects"] >= 2 and final["drops"] == {}
    assert final["connection"]["i_received"] > 0
