"""The long-running clients' own /metrics (``--metrics-port``; docs/telemetry.md, "Subscribers").

``gridstat subscribe``, ``publish``, ``pdc-server`` and ``sttp-server`` take the telemetry options of
every role; once connected, their ``Runner`` serves the SDK subscriber's QoS metrics with the
telemetry package's own server and appends ``metrics_port=N`` to the READY line.
"""

from __future__ import annotations

import argparse
import asyncio
from types import SimpleNamespace
from urllib.request import urlopen

import pytest

from gridstat.cli import main as cli_main
from gridstat.cli.traffic import GiveUp, Runner, sdk_clients
from gridstat.client import Subscriber
from gridstat.core import wire
from gridstat.core.model import FLOAT, StatusVariable


def parse(*argv: str) -> argparse.Namespace:
    args: argparse.Namespace = cli_main.build_parser(argv[0]).parse_args(list(argv))
    return args


SUBSCRIBE = ("subscribe", "--name", "ems", "--edge", "127.0.0.1:7801", "--variable", "pmu1/freq")


def scrape(port: int) -> str:
    body: bytes = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    return body.decode()


@pytest.mark.parametrize("command", [
    SUBSCRIBE,
    ("publish", "--name", "pmu1", "--edge", "127.0.0.1:7801", "--variable", "freq"),
    ("pdc-server", "--name", "cc1", "--edge", "127.0.0.1:7801", "--variables", "pmu1/freq", "--frames-per-s", "10"),
])
def test_the_clients_take_the_telemetry_options_of_every_role(command: tuple[str, ...]) -> None:
    off = parse(*command)
    assert off.metrics_port == -1 and off.kafka == ""  # off unless asked ($GRIDSTAT_METRICS_PORT unset here)
    on = parse(*command, "--metrics-port", "9105", "--metrics-host", "0.0.0.0", "--kafka", "k:9092")
    assert (on.metrics_port, on.metrics_host, on.kafka) == (9105, "0.0.0.0", "k:9092")


def test_the_sdk_clients_are_found_in_what_a_connect_attempt_returns() -> None:
    sub = Subscriber("ems", 1, "127.0.0.1", 0)
    assert sdk_clients((object(), sub)) == ([sub], [])  # gridstat subscribe: (session, subscriber)
    assert sdk_clients(SimpleNamespace(subscriber=sub)) == ([sub], [])  # a server's subscriber
    assert sdk_clients(sub) == ([sub], [])
    assert sdk_clients(object()) == ([], [])


async def test_a_subscriber_serves_its_qos_metrics_and_says_where(capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRIDSTAT_KAFKA", raising=False)
    args = parse(*SUBSCRIBE, "--metrics-port", "0", "--stats-every-s", "0")
    sub = Subscriber("ems", 7, "127.0.0.1", 0)
    await sub.start()
    runner = Runner("subscribe", args)
    try:
        async def attempt() -> tuple[object, Subscriber]:
            return object(), sub

        connected = await runner.connect(attempt, what="registering")
        assert connected is not None and runner.telemetry is not None
        s = sub.subscribe(StatusVariable("pmu1", "freq", FLOAT, 20, variable_id=5), interval_ms=20, latency_ms=30)
        events = [wire.encode_event(wire.Event(ts, 5, wire.encode_value(FLOAT, 60.0))) for ts in (1000, 1020)]
        sub.process(wire.encode_datagram(1, 1, events), 1025)
        assert s.stats.delivered == 2
        runner.line("READY name=ems port=1")
        port = runner.telemetry.metrics_port
        assert port and f"READY name=ems port=1 metrics_port={port}" in capsys.readouterr().out
        text = await asyncio.to_thread(scrape, port)
        assert 'gridstat_subscription_events_delivered_total{subscriber="ems",variable="pmu1/freq"} 2.0' in text
        assert 'gridstat_subscription_latency_bound_seconds{subscriber="ems",variable="pmu1/freq"} 0.03' in text
        runner.stop.set()
        await runner.report_until_stopped(lambda: ({}, ""))  # stops the telemetry with the reports
        assert runner.telemetry is None
        with pytest.raises(OSError):
            await asyncio.to_thread(scrape, port)
    finally:
        await runner.stop_telemetry()
        await sub.stop()


async def test_without_the_options_nothing_is_served(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRIDSTAT_KAFKA", raising=False)
    sub = Subscriber("ems", 7, "127.0.0.1", 0)
    runner = Runner("subscribe", parse(*SUBSCRIBE))

    async def attempt() -> Subscriber:
        return sub

    assert await runner.connect(attempt, what="registering") is sub and runner.telemetry is None


async def test_a_metrics_port_in_use_exits_2_naming_it(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRIDSTAT_KAFKA", raising=False)
    first = Runner("subscribe", parse(*SUBSCRIBE, "--metrics-port", "0"))
    sub = Subscriber("ems", 7, "127.0.0.1", 0)

    async def attempt() -> Subscriber:
        return sub

    await first.connect(attempt, what="registering")
    try:
        assert first.telemetry is not None and first.telemetry.metrics_port
        second = Runner("subscribe", parse(*SUBSCRIBE, "--metrics-port", str(first.telemetry.metrics_port)))
        with pytest.raises(GiveUp) as raised:
            await second.connect(attempt, what="registering")
        assert raised.value.exit_code == 2 and second.telemetry is None
        assert "metrics" in capsys.readouterr().err
    finally:
        await first.stop_telemetry()
