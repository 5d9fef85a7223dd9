"""IEC 61850 GOOSE in and out of GridStat with libiec61850 (pyiec61850-ng) as the peer (docs/goose.md):

    libiec61850 GoosePublisher on lo -> gridstat goose-gateway -> e1 -> e2 -> SDK Subscriber
    SDK Publisher (alert) -> e1 -> e2 -> gridstat goose-gateway -> GOOSE on lo -> libiec61850 GooseReceiver

Inbound: every state (stNum) arrives as an alert whose values and timestamp equal what libiec61850 sent,
with the member's quality and t's TimeQuality in DEVICE_TIME; each frame is taken once although lo
delivers every frame twice; retransmissions publish nothing. Outbound: each alert is a new state with
its value and t, followed by retransmissions with sqNum counting up. Raw frames go on ``lo`` only.
Needs root (AF_PACKET): skipped otherwise, with the reason."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gridstat.client import Holder, Publisher, Subscriber, Subscription
from gridstat.core import wire
from gridstat.core.model import BOOL, FLOAT, INT, TypeSpec
from gridstat.errors import GridStatError
from gridstat.gateways.goose import packet_sockets_available

from . import brokerprocs

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not packet_sockets_available(),
                                 reason="needs root or CAP_NET_RAW for AF_PACKET raw sockets on lo")]

pytest.importorskip("pyiec61850", reason="pyiec61850-ng (libiec61850), the GOOSE peer, is not installed")
from . import goose_peer as peer  # noqa: E402

GOCB = "IED1/LLN0$GO$gcbStatus"
APP_ID = 0x1001
OUT_GOCB = "GSTAT/LLN0$GO$gcbTrip"
OUT_APP_ID = 0x3001
MAP = {
    "subscribe": [{"gocbRef": GOCB, "appID": APP_ID, "members": [
        {"index": 0, "variable": "bay1/breaker_closed", "kind": "boolean", "quality": 1},
        {"index": 2, "variable": "bay1/position", "kind": "bitstring"},
        {"index": 3, "variable": "bay1/operations", "kind": "integer"},
        {"index": 4, "variable": "bay1/current_a", "kind": "float"},
        {"index": 5, "variable": "bay1/last_trip", "kind": "utc_time"}]}],
    "publish": [{"gocbRef": OUT_GOCB, "datSet": "GSTAT/LLN0$dsTrip", "appID": OUT_APP_ID, "min_time_ms": 4,
                 "max_time_ms": 200, "members": [{"variable": "prot/trip", "kind": "boolean"},
                                                 {"variable": "prot/trip_count", "kind": "integer"}]}],
}
TYPES: dict[str, TypeSpec] = {"bay1/breaker_closed": BOOL, "bay1/position": INT, "bay1/operations": INT,
                              "bay1/current_a": FLOAT, "bay1/last_trip": INT}


def state(k: int) -> list[peer.Member]:
    """The k-th data set: stVal, q, Dbpos, a counter, a float and a UtcTime, all changing with k."""
    return [peer.Member("boolean", k % 2 == 1), peer.Member("bitstring", 0x0040 if k % 3 == 0 else 0),
            peer.Member("bitstring", 1 + k % 2, bits=2), peer.Member("integer", 1000 + k),
            peer.Member("float", 100.0 + k * 0.25), peer.Member("utc_time", 1_700_000_000_000 + 1111 * k)]


def expected(k: int) -> dict[str, object]:
    return {"bay1/breaker_closed": k % 2 == 1, "bay1/position": 1 + k % 2, "bay1/operations": 1000 + k,
            "bay1/current_a": 100.0 + k * 0.25, "bay1/last_trip": 1_700_000_000_000 + 1111 * k}


@dataclass
class GatewayProc:
    proc: subprocess.Popen[bytes]
    out: Path

    def rows(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.out.read_text().splitlines() if x.startswith("{")]

    def stats(self) -> dict[str, Any]:
        rows = self.rows()
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


def start_gateway(tmp: Path, edge_port: int, goose_map: dict[str, Any]) -> GatewayProc:
    path = tmp / "goose.yaml"
    path.write_text(yaml.safe_dump(goose_map))
    out = tmp / "goose-gateway.out"
    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "goose-gateway", "--interface", "lo",
                             "--map", str(path), "--edge", f"127.0.0.1:{edge_port}", "--name", "goose1",
                             "-o", "json", "--stats-every-s", "0.2", "--log-level", "INFO", "--exit-with-parent"],
                            stdout=out.open("wb"), stderr=(tmp / "goose-gateway.err").open("ab"),
                            start_new_session=True)
    return GatewayProc(proc, out)


async def until(predicate: Any, *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@dataclass
class Got:
    events: dict[str, list[Holder]] = field(default_factory=dict)

    def on_event(self, s: Subscription, h: Holder) -> None:
        self.events.setdefault(s.variable.full_name, []).append(h)


@pytest.fixture
async def cloud(tmp_path: Path) -> AsyncIterator[dict[str, int]]:
    ctx = brokerprocs.edge_pair(tmp_path)
    _broker, routers = await asyncio.to_thread(ctx.__enter__)
    try:
        yield {"e1": routers["e1"].control_port, "e2": routers["e2"].control_port}
    finally:
        await asyncio.to_thread(ctx.__exit__, None, None, None)


async def subscribe_all(sub: Subscriber, got: Got, *, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    for name, type_ in TYPES.items():
        while True:
            try:
                await sub.subscribe_remote(name, type_, interval_ms=1, latency_ms=100, on_event=got.on_event)
                break
            except GridStatError as exc:  # UnknownVariable until the gateway registered it
                if time.monotonic() > deadline:
                    raise AssertionError(f"could not subscribe to {name}: {exc}") from exc
                await asyncio.sleep(0.2)


async def test_libiec61850_goose_to_alerts_once_each(tmp_path: Path, cloud: dict[str, int]) -> None:
    goose_map = {"subscribe": MAP["subscribe"]}
    gw = start_gateway(tmp_path, cloud["e1"], goose_map)
    pub = peer.Publisher("lo", GOCB, "IED1/LLN0$dsStatus", APP_ID, ttl_ms=3000)
    witness = peer.Subscriber("lo", GOCB, APP_ID, tmp_path / "witness.out")  # libiec61850's view of t
    sub = await Subscriber.connect("ems", f"127.0.0.1:{cloud['e2']}")
    try:
        await until(lambda: gw.stats().get("registrations", 0) == len(TYPES) and witness.ready(), timeout_s=30,
                    what="registrations")
        got = Got()
        await subscribe_all(sub, got)
        await asyncio.sleep(0.3)
        states, retransmissions = 6, 2
        for k in range(1, states + 1):
            pub.publish(state(k))  # a new state: stNum + 1, t stamped by libiec61850
            for _ in range(retransmissions):
                await asyncio.sleep(0.01)
                pub.publish(state(k), change=False)  # sqNum + 1, same t and values
            await asyncio.sleep(0.05)
        await until(lambda: all(len(got.events.get(n, [])) >= states for n in TYPES), timeout_s=10,
                    what="every state as an alert")
        await asyncio.sleep(0.3)
        sent = {r.st_num: r.t_ms for r in witness.snapshot()}
        assert len(sent) == states
        for name in TYPES:
            holders = got.events[name]
            assert len(holders) == states, f"{name}: {len(holders)} alerts for {states} states"
            for k, h in enumerate(holders, start=1):
                assert h.alert
                want = expected(k)[name]
                assert (math.isclose(h.value, want, rel_tol=1e-7) if isinstance(want, float)  # type: ignore[arg-type]
                        else h.value == want), (name, k, h.value, want)
                assert h.timestamp_ms == sorted(sent.values())[k - 1], (name, k)
                stat, fracsec, time_base = wire.read_device_time(h.options) or (-1, -1, -1)
                assert time_base == 1_000_000 and fracsec >> 24 == 0x0A  # libiec61850's TimeQuality
                assert ((fracsec & 0xFFFFFF) + 500) // 1000 % 1000 == h.timestamp_ms % 1000
                if name == "bay1/breaker_closed":
                    assert stat == (0x0040 if k % 3 == 0 else 0), (k, stat)  # its quality member
        s = gw.stats()
        frames_sent = states * (1 + retransmissions)
        # lo delivers every frame twice (outgoing and incoming copy): each taken once, the rest duplicates
        assert s["states"] == states and s["retransmissions"] == states * retransmissions
        assert s["drops"].get("duplicate", 0) == s["frames"] - frames_sent
        assert s["frames"] == 2 * frames_sent, s
        assert s["points_published"] == states * len(TYPES)
        assert {k: v for k, v in s["drops"].items() if k != "duplicate"} == {}
    finally:
        pub.stop()
        witness.stop()
        await sub.stop()
        final = gw.stop()
    assert final["final"] is True


async def test_alerts_to_goose_for_a_libiec61850_subscriber(tmp_path: Path, cloud: dict[str, int]) -> None:
    relay = peer.Subscriber("lo", OUT_GOCB, OUT_APP_ID, tmp_path / "relay.out")
    publisher = await Publisher.connect("prot", f"127.0.0.1:{cloud['e1']}")
    gw = None
    try:
        trip = await publisher.register("trip", BOOL, 0, alert=True, min_interval_ms=1)
        count = await publisher.register("trip_count", INT, 0, alert=True, min_interval_ms=1)
        gw = start_gateway(tmp_path, cloud["e2"], {"publish": MAP["publish"]})
        await until(lambda: gw.stats().get("registrations", 0) == 2 and relay.ready(), timeout_s=30,
                    what="the subscriptions")
        await asyncio.sleep(0.5)
        first = max([r.st_num for r in relay.snapshot()], default=0)
        assert first == 1, "the initial state (stNum 1) is sent at start"
        alerts = []
        for k in range(1, 4):
            ts = int(time.time() * 1000)
            trip.publish(k % 2 == 1, ts)
            alerts.append(("trip", k % 2 == 1, ts))
            await asyncio.sleep(0.3)
            ts2 = int(time.time() * 1000)
            count.publish(k, ts2)
            alerts.append(("trip_count", k, ts2))
            await asyncio.sleep(0.3)
        await asyncio.sleep(0.5)
        got = relay.snapshot()
        states: dict[int, list[peer.Received]] = {}
        seen: set[tuple[int, int]] = set()
        for r in got:  # libiec61850's receiver gets both copies lo delivers: each (stNum, sqNum) once here
            if (r.st_num, r.sq_num) not in seen:
                seen.add((r.st_num, r.sq_num))
                states.setdefault(r.st_num, []).append(r)
        assert sorted(states) == list(range(1, 2 + len(alerts))), sorted(states)
        values = [False, 0]
        for i, (name, value, ts) in enumerate(alerts):
            values[0 if name == "trip" else 1] = value
            frames = states[i + 2]
            assert frames[0].sq_num == 0 and frames[0].t_ms == ts and frames[0].values == values, (i, frames[0])
            sq = [f.sq_num for f in frames]
            assert sq == list(range(len(sq))) and len(sq) >= 4, sq  # 4, 8, 16, 32 ms ... retransmissions
            assert all(f.t_ms == ts and f.values == values and f.ttl_ms == 400 for f in frames)
        s = gw.stats()
        assert s["alerts"] == len(alerts) and s["send_errors"] == 0
    finally:
        relay.stop()
        await publisher.stop()
        if gw is not None:
            gw.stop()
