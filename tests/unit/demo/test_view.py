"""The runner's pure parts: rate meter, plain summary lines, rich view, docs in step with the default."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from gridstat.demo.endpoints import RateMeter, value_function
from gridstat.demo.topology import DEFAULT_TOPOLOGY_PATH, Variable
from gridstat.demo.view import RouterRow, Snapshot, SubRow, plain_lines, rich_view

DOCS = Path(__file__).parents[3] / "docs" / "topology.md"


def snapshot() -> Snapshot:
    sub = SubRow("s1", "pmu/freq", "e2", 2, 100, 68, 1000 / 68, 14.5, 40, 1.0, 3.0, 30, 0, 40, 1)
    router = RouterRow("e1", "edge", "A", 123, "up", 10, 9, 1, {"queue_full": 2, "link_down": 0}, 3, 3)
    return Snapshot(4.0, "close", "t.yaml", (sub,), (router,))


def test_plain_lines_are_key_value() -> None:
    lines = plain_lines(snapshot(), title="FINAL (duration reached)")
    assert lines[0] == ("FINAL (duration reached) t=4.0s topology=t.yaml variant=close routers=1 "
                        "subscriptions=1")
    assert lines[1] == ("  sub name=s1 var=pmu/freq edge=e2 paths=2 interval_ms=100 effective_ms=68 "
                        "expected_per_s=14.71 rate_per_s=14.50 delivered=40 p50_ms=1 p99_ms=3 bound_ms=30 "
                        "gaps=0 duplicates=40 violations=1")
    assert lines[2] == ("  router name=e1 role=edge cloud=A pid=123 state=up in=10 forwarded=9 filtered=1 "
                        "drops=queue_full:2 channels_up=3/3")


def test_rich_view_renders() -> None:
    console = Console(width=200, record=True, force_terminal=False)
    console.print(rich_view(snapshot()))
    text = console.export_text()
    assert "100->68" in text and "queue_full 2" in text and "s1" in text


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
    block = docs.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert block == DEFAULT_TOPOLOGY_PATH.read_text()
