"""``gridstat dnp3-gateway`` between a real DNP3 outstation (dnp3py, its own process:
tests/integration/dnp3py_outstation.py) and a real cloud (a leaf broker and two edge routers, e1 and e2),
read by an SDK subscriber at e2: an analog input's value, flags and device time arrive on its periodic
variable; a binary input's change arrives as an alert stamped with its device time; the outstation killed
and started again on the same port is reconnected to and polled for integrity again. Everything talks to
127.0.0.1 only (docs/dnp3.md, "Tests")."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gridstat.client import Holder, Subscriber, Subscription
from gridstat.core.model import BOOL, FLOAT, TypeSpec
from gridstat.errors import GridStatError
from gridstat.gateways.dnp3 import Flags, TimeSource, read_quality

from .test_pmu_gateway import Gateway, cloud, running, until

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
ADDRESS = 10
INTERVAL_MS = 100
MIN_INTERVAL_MS = 20

__all__ = ["cloud"]  # the fixture, shared with test_pmu_gateway


@dataclass
class Outstation:
    proc: subprocess.Popen[bytes]
    port: int

    def send(self, line: str) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        stdin.write(f"{line}\n".encode())
        stdin.flush()

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


def start_outstation(tmp: Path, *, port: int = 0) -> Outstation:
    status = tmp / f"outstation-{time.monotonic_ns()}.status"
    log: IO[bytes] = (tmp / "outstation.log").open("ab")
    proc = subprocess.Popen([sys.executable, str(HERE / "dnp3py_outstation.py"), "--port", str(port), "--address",
                             str(ADDRESS), "--status", str(status)], stdin=subprocess.PIPE, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if status.exists() and status.read_text().startswith("READY"):
            return Outstation(proc, int(status.read_text().split("=")[1]))
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    Outstation(proc, 0).stop()
    raise RuntimeError(f"outstation did not start: {(tmp / 'outstation.log').read_text()[-2000:]}")


def start_gateway(tmp: Path, port: int, edge_port: int) -> Gateway:
    out = tmp / f"dnp3-gateway-{time.monotonic_ns()}.out"
    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "dnp3-gateway", "--outstation",
                             f"127.0.0.1:{port}", "--address", str(ADDRESS), "--edge", f"127.0.0.1:{edge_port}",
                             "--event-poll-s", "0.1", "--integrity-poll-s", "0", "--interval-ms", str(INTERVAL_MS),
                             "--min-interval-ms", str(MIN_INTERVAL_MS), "--response-timeout-s", "1", "-o", "json",
                             "--stats-every-s", "0.3", "--retry-initial-s", "0.2", "--retry-max-s", "1",
                             "--metrics-port", "0", "--log-level", "INFO"],
                            stdout=out.open("wb"), stderr=(tmp / "dnp3-gateway.err").open("ab"), start_new_session=True)
    return Gateway(proc, out)


def scrape(gw: Gateway) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The gateway's /metrics (its READY line says the port): each sample's value by name and labels."""
    ready = next(x for x in gw.out.read_text().splitlines() if x.startswith("READY "))
    port = int(ready.split("metrics_port=")[1].split()[0])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@dataclass
class Got:
    events: list[Holder] = field(default_factory=list)

    def on_event(self, _s: Subscription, h: Holder) -> None:
        self.events.append(h)


async def subscribe(sub: Subscriber, name: str, type_: TypeSpec, interval_ms: int, *, timeout_s: float = 20.0) -> Got:
    """Subscribe once the gateway registered ``name`` (UnknownVariable until then)."""
    got = Got()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await sub.subscribe_remote(name, type_, interval_ms=interval_ms, latency_ms=2000, on_event=got.on_event)
            return got
        except GridStatError as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"could not subscribe to {name}: {exc}") from exc
            await asyncio.sleep(0.2)


async def test_values_flags_device_times_alerts_and_reconnect(tmp_path: Path, cloud: tuple[int, Subscriber]) -> None:
    edge, sub = cloud
    station = start_outstation(tmp_path)
    gw = start_gateway(tmp_path, station.port, edge)
    with running(gw):
        try:
            ai0 = await subscribe(sub, f"dnp{ADDRESS}/ai0", FLOAT, INTERVAL_MS)
            bi1 = await subscribe(sub, f"dnp{ADDRESS}/bi1", BOOL, MIN_INTERVAL_MS)
            await until(lambda: len(ai0.events) >= 3, timeout_s=15, what="ai0's periodic events")
            # Static data from the integrity poll: dnp3py starts its points with RESTART and no time.
            first = ai0.events[0]
            assert first.value == 0.0 and not first.alert
            assert read_quality(first.options) == (Flags.RESTART, TimeSource.NONE, 0)
            assert first.timestamp_ms % INTERVAL_MS == 0  # on the variable's grid

            # An analog input event with time (g32v7) and flags ONLINE | OVER_RANGE.
            t_ai = int(time.time() * 1000) - 1500
            station.send(f"ai 0 230.5 {int(Flags.ONLINE | Flags.OVER_RANGE)} {t_ai}")
            await until(lambda: any(h.value == 230.5 for h in ai0.events), timeout_s=10, what="ai0 = 230.5")
            after = [h for h in ai0.events if h.value == 230.5]
            assert read_quality(after[0].options) == (Flags.ONLINE | Flags.OVER_RANGE, TimeSource.ABSOLUTE, t_ai)
            await until(lambda: len([h for h in ai0.events if h.value == 230.5]) >= 3, timeout_s=10,
                        what="230.5 published at every interval")
            stamps = [h.timestamp_ms for h in ai0.events if h.value == 230.5]
            assert all(b - a == INTERVAL_MS for a, b in itertools.pairwise(stamps)), stamps

            # A binary input change (g2v2): an alert at the event's device time, its state and flags kept.
            t_bi = int(time.time() * 1000) - 700
            station.send(f"bi 1 1 {int(Flags.ONLINE)} {t_bi}")
            await until(lambda: any(h.value is True for h in bi1.events), timeout_s=10, what="bi1's alert")
            alert = next(h for h in bi1.events if h.value is True)
            assert alert.alert and alert.timestamp_ms == t_bi
            assert read_quality(alert.options) == (Flags.ONLINE | Flags.STATE, TimeSource.ABSOLUTE, t_bi)

            await until(lambda: gw.stats().get("alerts_published", 0) >= 1, timeout_s=5, what="the stats line")
            stats = gw.stats()
            assert stats["state"] == "polling" and stats["drops"] == {}, stats
            assert stats["requests"]["integrity"] == 1
            # /metrics (--metrics-port, docs/dnp3.md "Metrics"): the same counts, drop reasons from 0, the link up.
            metrics = await asyncio.to_thread(scrape, gw)
            labels = {"gateway": "dnp3-gateway", "outstation": f"127.0.0.1:{station.port}"}
            assert metrics[("gridstat_dnp3_link_up", frozenset(labels.items()))] == 1
            assert metrics[("gridstat_dnp3_requests_total", frozenset({**labels, "kind": "integrity"}.items()))] == 1
            assert metrics[("gridstat_dnp3_drops_total", frozenset({**labels, "reason": "bad_block_crc"}.items()))] == 0
            assert metrics[("gridstat_dnp3_alerts_published_total", frozenset(labels.items()))] >= 1
            assert metrics[("gridstat_dnp3_values_total",
                            frozenset({**labels, "type": "bi", "source": "event"}.items()))] >= 1

            # The outstation goes away and comes back on the same port: reconnect, integrity poll again.
            station.stop()
            await until(lambda: gw.stats().get("reconnects", 0) >= 1, timeout_s=15, what="the gateway to notice")
            station = start_outstation(tmp_path, port=station.port)
            await until(lambda: gw.stats().get("requests", {}).get("integrity", 0) >= 2, timeout_s=20,
                        what="a second integrity poll")
            # The new outstation's static value (0, RESTART) is what ai0 carries again, then a new event.
            await until(lambda: ai0.events[-1].value == 0.0, timeout_s=10, what="ai0 read again after the restart")
            t2 = int(time.time() * 1000) - 300
            station.send(f"ai 0 -17.25 {int(Flags.ONLINE)} {t2}")
            await until(lambda: ai0.events[-1].value == -17.25, timeout_s=10, what="ai0 = -17.25 after the restart")
            assert read_quality(ai0.events[-1].options) == (Flags.ONLINE, TimeSource.ABSOLUTE, t2)
            final = gw.stop()
            assert final["connects"] >= 2 and final["drops"] == {}, final
        finally:
            station.stop()
