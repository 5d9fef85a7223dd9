"""``gridstat publish`` and ``gridstat subscribe``: options, validation and the pure accounting."""

from __future__ import annotations

import argparse
import random

import pytest

from gridstat.cli import main as cli_main
from gridstat.cli.publish import CATCH_UP_MS, PublishLoop, value_function
from gridstat.cli.subscribe import CountingSubscriber, listen_and_advertise
from gridstat.cli.traffic import (
    REJECTED,
    RETRY,
    USAGE,
    Backoff,
    DeliveryCounter,
    GiveUp,
    Runner,
    classify,
    parse_published_variables,
    parse_subscribed_variables,
    percentile,
)
from gridstat.client import SubscriptionRejected
from gridstat.core import wire
from gridstat.core.model import FLOAT, StatusVariable
from gridstat.errors import ChannelUnavailable, GridStatError, TypeMismatch, ValidationError


def parse(*argv: str) -> argparse.Namespace:
    args: argparse.Namespace = cli_main.build_parser(argv[0]).parse_args(list(argv))
    return args


# -- the accounting ------------------------------------------------------------------------------------
def test_in_order_events_without_gaps() -> None:
    c = DeliveryCounter(20)
    for i in range(50):
        assert c.observe(1000 + 20 * i, 1000 + 20 * i + 3)
    s = c.snapshot()
    assert (s["received"], s["distinct"], s["duplicates"], s["missing"], s["stale"]) == (50, 50, 0, 0, 0)
    assert (s["first_ts_ms"], s["last_ts_ms"], s["interval_ms"]) == (1000, 1980, 20.0)
    assert s["latency_ms"] == {"p50": 3, "p99": 3, "max": 3}


def test_duplicates_from_redundant_paths_are_counted_once_and_late_copies_too() -> None:
    c = DeliveryCounter(20)
    for ts in (0, 20, 40):
        c.observe(ts, ts + 1)
        c.observe(ts, ts + 5)  # the copy over the longer path
    c.observe(0, 100)  # a very late copy of an old timestamp, still remembered
    assert (c.received, c.distinct, c.duplicates, c.missing) == (7, 3, 4, 0)
    assert c.latency() == {"p50": 1, "p99": 1, "max": 1}  # first copies only


def test_missing_counts_gaps_between_first_and_last() -> None:
    c = DeliveryCounter(20)
    for ts in (0, 20, 100, 120, 200):  # 40, 60, 80, 140, 160, 180 missing
        c.observe(ts, ts)
    assert c.missing == 6 and c.distinct == 5 and c.interval_ms == 50.0
    assert c.snapshot()["gaps"] == [{"from_ts_ms": 40, "to_ts_ms": 80}, {"from_ts_ms": 140, "to_ts_ms": 180}]
    c.observe(60, 300)  # out of order: fills a gap
    assert c.missing == 5 and c.distinct == 6 and c.duplicates == 0


def test_only_the_newest_gaps_are_listed() -> None:
    c = DeliveryCounter(10)
    for i in range(100):
        c.observe(i * 20, i * 20)  # every other timestamp missing: a gap each time
    gaps = c.snapshot()["gaps"]
    assert len(gaps) == 32 and gaps[-1] == {"from_ts_ms": 1970, "to_ts_ms": 1970}


def test_a_slower_delivery_than_expected_shows_as_missing() -> None:
    c = DeliveryCounter(20)
    for i in range(11):
        c.observe(40 * i, 40 * i)  # delivered every 40 ms, 20 expected
    assert c.missing == 10 and c.interval_ms == 40.0
    assert DeliveryCounter(40).missing == 0  # nothing received: nothing missing


def test_latency_percentiles_nearest_rank() -> None:
    c = DeliveryCounter(1)
    latencies = list(range(1, 101))  # 1..100 ms
    random.Random(3).shuffle(latencies)
    for i, lat in enumerate(latencies):
        c.observe(i, i + lat)
    assert c.latency() == {"p50": 50, "p99": 99, "max": 100}
    assert percentile({}, 0, 50) is None
    assert percentile({5: 1}, 1, 99) == 5 and percentile({-2: 3, 7: 1}, 4, 50) == -2


def test_copies_older_than_the_window_are_stale() -> None:
    c = DeliveryCounter(10, window=4)
    for ts in range(0, 100, 10):
        c.observe(ts, ts)
    assert c.observe(90, 95) is False and c.duplicates == 1  # remembered
    assert c.observe(10, 95) is False and c.stale == 1  # forgotten: cannot tell, not distinct
    assert c.observe(100, 101) is True and c.distinct == 11 and c.missing == 0


def test_periods_are_deltas_of_the_cumulative_counts() -> None:
    c = DeliveryCounter(20)
    for ts in (0, 20, 20, 40):
        c.observe(ts, ts + 2)
    p1 = c.take_period()
    assert (p1["received"], p1["distinct"], p1["duplicates"], p1["missing"]) == (4, 3, 1, 0)
    assert p1["latency_ms"] == {"p50": 2, "p99": 2, "max": 2}
    assert c.take_period() == {"received": 0, "distinct": 0, "duplicates": 0, "missing": 0,
                               "latency_ms": {"p50": None, "p99": None, "max": None}}
    c.observe(100, 109)  # 60 and 80 missing
    p3 = c.take_period()
    assert (p3["received"], p3["missing"], p3["latency_ms"]["max"]) == (1, 2, 9)
    assert c.snapshot()["latency_ms"]["max"] == 9 and c.received == 5


def test_expected_interval_must_be_positive() -> None:
    with pytest.raises(ValidationError):
        DeliveryCounter(0)


# -- retries -----------------------------------------------------------------------------------------
def test_backoff_grows_and_is_bounded() -> None:
    b = Backoff(0.5, 5.0, rng=random.Random(1))
    delays = [b.next_delay() for _ in range(40)]
    assert delays[0] < 0.61 and delays[3] > 3.0 and max(delays) <= 5.0
    b.reset()
    assert b.next_delay() < 0.61


@pytest.mark.parametrize(("exc", "kind"), [
    (ChannelUnavailable("edge router unavailable"), RETRY),
    (GridStatError("no answer", reason="BrokerTimeout"), RETRY),
    (GridStatError("edge router unknown", reason="NotFound"), RETRY),
    (RuntimeError("anything else"), RETRY),
    (SubscriptionRejected("no publisher yet", reason="UnknownVariable"), RETRY),
    (SubscriptionRejected("too slow", reason="LatencyUnattainable"), REJECTED),
    (SubscriptionRejected("wrong type", reason="TypeMismatch"), REJECTED),
    (ValidationError("bad interval", field="interval_ms"), USAGE),
    (TypeMismatch("registered as int"), USAGE),
    (GridStatError("not yours", reason="Unauthorized"), USAGE),
])
def test_what_is_retried(exc: BaseException, kind: str) -> None:
    assert classify(exc) == kind


def test_unknown_variable_is_a_rejection_when_not_retrying() -> None:
    assert classify(SubscriptionRejected("x", reason="UnknownVariable"), retry_unknown_variable=False) == REJECTED


async def _connect_after_rejections(*argv: str, rejections: int) -> tuple[object, int]:
    """``Runner.connect`` over an attempt the broker refuses ``rejections`` times, then admits."""
    args = parse("subscribe", "--name", "pdc", "--edge", "127.0.0.1:7801", "--variable", "pmu1/freq",
                 "--retry-max-s", "0.01", *argv)
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        if calls <= rejections:
            raise SubscriptionRejected("no path yet", reason="NoFeasiblePath")
        return "admitted"

    try:
        result: object = await Runner("subscribe", args).connect(attempt, what="subscribing")
    except GiveUp as exc:
        result = exc
    return result, calls


async def test_a_refusal_exits_3_unless_retry_rejected_is_given() -> None:
    refused, calls = await _connect_after_rejections(rejections=2)
    assert isinstance(refused, GiveUp) and refused.exit_code == 3 and calls == 1
    admitted, calls = await _connect_after_rejections("--retry-rejected", rejections=2)
    assert admitted == "admitted" and calls == 3
    # --once still means one attempt: the refusal exits 3
    once, calls = await _connect_after_rejections("--retry-rejected", "--once", rejections=2)
    assert isinstance(once, GiveUp) and once.exit_code == 3 and calls == 1


# -- the publisher's schedule --------------------------------------------------------------------------
class _Sink:
    def __init__(self) -> None:
        self.sent: list[int] = []

    def publish_many(self, items: list[tuple[object, object]], ts_ms: int) -> int:
        self.sent.append(ts_ms)
        return ts_ms


def test_publish_loop_publishes_each_aligned_instant_once_and_catches_up() -> None:
    sink = _Sink()
    loop = PublishLoop(sink, [object()], 20, lambda ts: 60.0)
    assert loop.publish_due(1005) == 1 and sink.sent == [1000]
    assert loop.publish_due(1019) == 0  # same instant: nothing
    assert loop.publish_due(1020) == 1 and sink.sent[-1] == 1020
    assert loop.publish_due(1085) == 3 and sink.sent[-3:] == [1040, 1060, 1080]  # woke late: catch up
    assert (loop.instants, loop.late, loop.skipped) == (5, 2, 0)
    published = loop.publish_due(1080 + 3000)  # a 3 s stall: only the last second is published
    assert published == CATCH_UP_MS // 20 + 1 and published + loop.skipped == 3000 // 20
    assert sink.sent[-1] == 4080 and sink.sent[-CATCH_UP_MS // 20 - 1] == 4080 - CATCH_UP_MS
    assert len(set(sink.sent)) == len(sink.sent)


def test_synthetic_values_by_type() -> None:
    freq = value_function("float")
    assert all(59.9 < freq(ts) < 60.1 for ts in range(0, 20_000, 20))
    assert 59_900 < value_function("int")(1000) < 60_100
    assert value_function("bool")(0) is True and value_function("bool")(1000) is False


# -- options -------------------------------------------------------------------------------------------
def test_publish_options() -> None:
    args = parse("publish", "--name", "pmu1", "--edge", "127.0.0.1:7801", "--variable", "freq", "--variable", "angle",
                 "--type", "float", "--interval-ms", "20", "--priority", "2", "--duration-s", "5", "-o", "json",
                 "--tls-ca", "ca.pem")
    assert (args.name, args.edge, args.variable, args.value_type) == ("pmu1", "127.0.0.1:7801", ["freq", "angle"],
                                                                      "float")
    assert (args.interval_ms, args.priority, args.duration_s, args.stats_every_s) == (20, 2, 5.0, 1.0)
    assert (args.output, args.tls_ca, args.once, args.connect_timeout_s) == ("json", "ca.pem", False, None)


def test_subscribe_options() -> None:
    args = parse("subscribe", "--name", "ems", "--edge", "e2:7802", "--variable", "pmu1/freq", "--admit",
                 "--interval-ms", "40", "--latency-ms", "30", "--redundancy", "2", "--listen-host", "0.0.0.0",
                 "--advertise-host", "10.0.0.7", "--port", "5000", "--stats-every-s", "0.5", "--once")
    assert (args.variable, args.admit, args.interval_ms, args.latency_ms, args.redundancy) == (
        ["pmu1/freq"], True, 40, 30, 2)
    assert (args.listen_host, args.advertise_host, args.port, args.stats_every_s, args.once) == (
        "0.0.0.0", "10.0.0.7", 5000, 0.5, True)
    assert parse("subscribe", "--name", "s", "--edge", "h:1", "--variable", "p/v").admit is False


def test_also_edge_makes_a_multi_homed_client() -> None:
    for command, extra in (("publish", ("--variable", "freq")), ("subscribe", ("--variable", "pmu1/freq"))):
        args = parse(command, "--name", "c", "--edge", "e1:7800", "--also-edge", "e1b:7800", "--also-edge",
                     "e1c:7800", *extra)
        assert args.also_edge == ["e1b:7800", "e1c:7800"]
        assert parse(command, "--name", "c", "--edge", "e1:7800", *extra).also_edge == []


@pytest.mark.parametrize(("argv", "flag"), [
    (["publish", "--name", "pmu1", "--edge", "nohost", "--variable", "freq"], "--edge"),
    (["publish", "--name", "pmu 1", "--edge", "h:1", "--variable", "freq"], "--name"),
    (["publish", "--name", "pmu1", "--edge", "h:1", "--variable", "pmu1/freq"], "--variable"),
    (["publish", "--name", "pmu1", "--edge", "h:1", "--variable", "f", "--variable", "f"], "--variable"),
    (["publish", "--name", "pmu1", "--edge", "h:1", "--variable", "f", "--interval-ms", "0"], "--interval-ms"),
    (["publish", "--name", "pmu1", "--edge", "h:1", "--variable", "f", "--priority", "9"], "--priority"),
    (["publish", "--name", "pmu1", "--edge", "h:1", "--variable", "f", "--duration-s", "0"], "--duration-s"),
    (["publish", "--name", "pmu1", "--edge", "h:1", "--variable", "f", "--stats-every-s", "-1"], "--stats-every-s"),
    (["publish", "--name", "pmu1", "--edge", "h:1", "--variable", "f", "--tls-cert", "c.pem"], "--tls-key"),
    (["publish", "--name", "pmu1", "--edge", "h:1", "--variable", "f", "--tls-ca", "/nonexistent/ca.pem"],
     "--tls-ca"),
    (["subscribe", "--name", "ems", "--edge", "h:1", "--variable", "pmu1freq"], "--variable"),
    (["subscribe", "--name", "ems", "--edge", "h:1", "--variable", "p/v", "--variable", "p/v"], "--variable"),
    (["subscribe", "--name", "ems", "--edge", "h:1", "--variable", "p/v", "--latency-ms", "0"], "--latency-ms"),
    (["subscribe", "--name", "ems", "--edge", "h:1", "--variable", "p/v", "--redundancy", "0"], "--redundancy"),
    (["subscribe", "--name", "ems", "--edge", "h:1", "--variable", "p/v", "--port", "70000"], "--port"),
    (["subscribe", "--name", "ems", "--edge", "h:1", "--variable", "p/v", "--listen-host", "nowhere"],
     "--listen-host"),
    (["subscribe", "--name", "ems", "--edge", "h:1", "--variable", "p/v", "--advertise-host", " "],
     "--advertise-host"),
    (["subscribe", "--name", "ems", "--edge", "h:1:x", "--variable", "p/v"], "--edge"),
    (["subscribe", "--name", "ems", "--edge", "h:1", "--also-edge", "h2", "--variable", "p/v"], "--also-edge"),
    (["publish", "--name", "pmu1", "--edge", "h:1", "--also-edge", "h:1", "--variable", "f"], "--also-edge"),
    (["subscribe", "--name", "ems", "--edge", "h:1", "--variable", "p/v", "--connect-timeout-s", "0"],
     "--connect-timeout-s"),
])
def test_invalid_input_exits_2_naming_the_flag(argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(argv) == 2
    err = capsys.readouterr().err
    assert flag in err and f"gridstat {argv[0]}: error" in err


@pytest.mark.parametrize("argv", [
    ["publish", "--edge", "h:1", "--variable", "f"],  # no --name
    ["publish", "--name", "p", "--edge", "h:1"],  # no --variable
    ["publish", "--name", "p", "--edge", "h:1", "--variable", "f", "--type", "string"],
    ["subscribe", "--name", "s", "--variable", "p/v"],  # no --edge
    ["subscribe", "--name", "s", "--edge", "h:1", "--variable", "p/v", "--interval-ms", "x"],
    ["subscribe", "--name", "s", "--edge", "h:1", "--variable", "p/v", "-o", "yaml"],
])
def test_usage_errors_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli_main.main(argv)
    assert info.value.code == 2


def test_variable_lists() -> None:
    assert parse_published_variables(["freq", "angle"]) == ["freq", "angle"]
    assert parse_subscribed_variables(["pmu1/freq", "pmu2/freq"]) == ["pmu1/freq", "pmu2/freq"]


def test_listen_and_advertised_addresses() -> None:
    assert listen_and_advertise(None, None, {}) == ("127.0.0.1", "127.0.0.1")
    assert listen_and_advertise(None, None, {"POD_IP": "10.1.2.3"}) == ("0.0.0.0", "10.1.2.3")
    assert listen_and_advertise("0.0.0.0", None, {}) == ("0.0.0.0", "")  # the edge router takes the peer's
    assert listen_and_advertise("0.0.0.0", "ems.example", {"POD_IP": "10.1.2.3"}) == ("0.0.0.0", "ems.example")
    assert listen_and_advertise("127.0.0.1", None, {"POD_IP": ""}) == ("127.0.0.1", "127.0.0.1")


# -- the subscriber's hook ------------------------------------------------------------------------------
async def test_counting_subscriber_sees_every_copy_and_advertises_its_host() -> None:
    counter = DeliveryCounter(20)
    sub = CountingSubscriber("ems", 7, "127.0.0.1", 0, advertise_host="10.0.0.9",
                             counters={"pmu1/freq": counter})
    await sub.start()
    try:
        assert sub.address == ("10.0.0.9", sub.udp_port) and sub.udp_port > 0
        var = StatusVariable("pmu1", "freq", FLOAT, 20, variable_id=5)
        s = sub.subscribe(var, interval_ms=20, latency_ms=30)
        other = sub.subscribe(StatusVariable("pmu1", "angle", FLOAT, 20, variable_id=6), interval_ms=20,
                              latency_ms=30)
        events = [wire.encode_event(wire.Event(ts, 5, wire.encode_value(FLOAT, 60.0))) for ts in (1000, 1020)]
        for _ in range(2):  # two redundant paths
            sub.process(wire.encode_datagram(1, 1, events), 1025)
        assert (counter.received, counter.distinct, counter.duplicates) == (4, 2, 2)
        assert s.stats.delivered == 2 and s.stats.duplicates == 2  # the SDK still de-duplicates
        assert other.stats.delivered == 0 and type(other).__name__ == "Subscription"  # not counted: not asked for
    finally:
        await sub.stop()


def test_with_json_output_every_failure_is_a_json_object_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    """``-o json``: exit codes 2 and 4 print one JSON error object on stdout too, not only a stderr line."""
    import json

    assert cli_main.main(["sub", "add", "x", "--subscriber", "ems", "--edge", "e2", "--interval-ms", "20",
                          "--latency-ms", "5", "-o", "json"]) == 2
    out, err = capsys.readouterr()
    doc = json.loads(out)["error"]
    assert doc["exit_code"] == 2 and doc["reason"] == "InvalidArgument" and doc["field"] == "variable", doc
    assert "gridstat sub: error" in err
    assert cli_main.main(["sub", "list", "--broker", "127.0.0.1:1", "--timeout", "1", "-o", "json"]) == 4
    doc = json.loads(capsys.readouterr().out)["error"]
    assert doc["exit_code"] == 4 and doc["command"] == "sub list" and "127.0.0.1:1" in doc["message"], doc
    # the long-running clients too, when they give up
    assert cli_main.main(["publish", "--name", "p", "--edge", "127.0.0.1:1", "--variable", "f", "--once",
                          "--timeout", "1", "-o", "json"]) == 4
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [d["error"]["exit_code"] for d in lines if "error" in d] == [4], lines
    # without -o json stdout stays empty
    assert cli_main.main(["sub", "list", "--broker", "127.0.0.1:1", "--timeout", "1"]) == 4
    assert capsys.readouterr().out == ""
