"""The runner's pure parts: rate meter, plain summary lines, rich view, docs in step with the default."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from gridstat.client import Offer
from gridstat.demo.endpoints import RateMeter, format_offer, value_function
from gridstat.demo.topology import DEFAULT_TOPOLOGY_PATH, Variable
from gridstat.demo.view import BrokerRow, RouterRow, Snapshot, SubRow, plain_lines, rich_view

DOCS = Path(__file__).parents[3] / "docs" / "topology.md"


def snapshot() -> Snapshot:
    sub = SubRow("s1", "pmu/freq", "e2", "admitted", ("e1>i1>e2", "e1>i2>e2"), 100, 68, 1000 / 68, 14.5, 40,
                 1.0, 3.0, 30, 0, 40, 0, 1, "A")
    refused = SubRow("s2", "pmu/vmag", "e2", "rejected", (), 34, 34, 1000 / 34, None, 0, None, None, 5, 0, 0,
                     0, 0, "-", "LatencyUnattainable", "best_latency_ms=7")
    router = RouterRow("e1", "edge", "A", 123, "up", 10, 9, 1, {"queue_full": 2, "link_down": 0}, 3, 3)
    broker = BrokerRow("A", "leaf", 99, "up", 2, 5, 0, ("s1",), 1)
    return Snapshot(4.0, "close", "t.yaml", (sub, refused), (router,), (broker,), ("no parent",))


def test_plain_lines_are_key_value() -> None:
    lines = plain_lines(snapshot(), title="FINAL (duration reached)")
    assert lines[0] == ("FINAL (duration reached) t=4.0s topology=t.yaml variant=close brokers=1 routers=1 "
                        "subscriptions=2 admitted=1")
    assert lines[1] == ("  sub name=s1 var=pmu/freq edge=e2 status=admitted paths=2 interval_ms=100 effective_ms=68 "
                        "expected_per_s=14.71 rate_per_s=14.50 delivered=40 p50_ms=1 p99_ms=3 bound_ms=30 "
                        "gaps=0 lost=0 unpublished=0 duplicates=40 drops=0 violations=1 held_by=A "
                        "route=e1>i1>e2|e1>i2>e2")
    assert lines[2].endswith("held_by=- route=- reason=LatencyUnattainable offer=best_latency_ms=7")
    assert " status=rejected paths=0 " in lines[2]
    assert lines[3] == ("  router name=e1 role=edge cloud=A pid=123 state=up exit=- restarts=0 in=10 forwarded=9 "
                        "filtered=1 "
                        "drops=queue_full:2 channels_up=3/3")
    assert lines[4] == ("  broker name=A role=leaf pid=99 state=up exit=- restarts=0 subscriptions=2 routers_up=5 "
                        "routers_down=0 "
                        "held=s1 segments=1")
    assert lines[5] == "  note no parent"


def test_rich_view_renders() -> None:
    console = Console(width=220, record=True, force_terminal=False)
    console.print(rich_view(snapshot()))
    text = console.export_text()
    assert "100->68" in text and "queue_full 2" in text and "s1" in text
    assert "e1 > i2 > e2" in text and "REJECTED LatencyUnattainable; offer best_latency_ms=7" in text
    assert "QoS brokers" in text and "no parent" in text


def test_format_offer() -> None:
    assert format_offer(None) == "-"
    assert format_offer(Offer()) == "-"
    assert format_offer(Offer(best_latency_ms=12.5, max_redundancy=1)) == "best_latency_ms=12.5,max_redundancy=1"


def test_rate_meter() -> None:
    m = RateMeter()
    assert m.run_rate() is None and m.live_rate(0) is None
    for i in range(11):
        m.add(1_000 + i * 100)
    assert m.run_rate() == 10.0
    assert m.live_rate(2_000) == 10.0
    assert m.live_rate(3_000) == 5.0          # nothing for a second: the live rate decays
    assert m.live_rate(10_000) == 0.0         # the window is empty


def test_value_functions_match_types() -> None:
    for vtype, cls in (("float", float), ("int", int), ("bool", bool)):
        for name in ("freq", "vmag", "vangle", "other"):
            fn = value_function(Variable("p", name, vtype, 17, 1, 1), seed=1)
            assert isinstance(fn(1_700_000_000_017), cls)
    freq = value_function(Variable("p", "freq", "float", 17, 1, 1), seed=1)
    assert 59.9 < float(freq(0)) < 60.1  # type: ignore[arg-type]


def test_docs_show_the_default_topology_verbatim() -> None:
    docs = DOCS.read_text()
    section = docs.split("\n## The built-in topology\n", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert block == DEFAULT_TOPOLOGY_PATH.read_text()
