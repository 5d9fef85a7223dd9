"""The pure parts of the live run (``gridstat.analysis.live_routing``, ``live.plan``): no processes, no sockets."""

from __future__ import annotations

import json
import random
from pathlib import Path

import jsonschema
import pytest

from gridstat.analysis import live, loading, model
from gridstat.analysis import live_routing as lr
from gridstat.analysis.trees import paper_tree
from gridstat.analysis.workloads import uniform_workload
from gridstat.cli import main as cli
from gridstat.errors import ValidationError
from gridstat.telemetry import records

SMALL = "generate: {brokers: 7, max_per_level: 4}\nuniform: {subscriptions: 42, classes: 20, lifetime_s: 30, " \
        "publication_rate: 4}\n"


def test_identity_forwards_only_changes_of_the_entry_set() -> None:
    r = lr.Router("identity", 2, root=False)
    assert r.subscribe(7, lr.LOCAL) == [lr.PARENT]       # 0 -> 1: tell the parent
    assert r.subscribe(7, 0) == []                       # already told
    assert r.subscribe(7, lr.LOCAL) == []
    assert r.entries == 1
    assert r.unsubscribe(7, lr.LOCAL) == []
    assert r.unsubscribe(7, lr.LOCAL) == []              # child 0 still has one
    assert r.unsubscribe(7, 0) == [lr.PARENT]            # 1 -> 0
    assert r.entries == 0 and not r.kids and not r.told and r.local_total == 0


def test_simple_forwards_every_one_and_counts_entries_per_child() -> None:
    r = lr.Router("simple", 2, root=False)
    assert r.subscribe(1, 0) == [lr.PARENT]
    assert r.subscribe(1, 0) == [lr.PARENT]
    assert r.entries == 1                                # one (class, child) entry, two subscriptions behind it
    assert r.unsubscribe(1, 0) == [lr.PARENT] and r.entries == 1
    assert r.unsubscribe(1, 0) == [lr.PARENT] and r.entries == 0
    root = lr.Router("simple", 1, root=True)
    assert root.subscribe(1, 0) == []


def test_notifications_go_up_always_and_down_where_an_entry_is() -> None:
    r = lr.Router("identity", 3, root=False)
    r.subscribe(5, 1)
    r.subscribe(5, 2)
    assert sorted(r.notify(5, lr.LOCAL)) == sorted([lr.PARENT, 1, 2])
    assert sorted(r.notify(5, 1)) == sorted([lr.PARENT, 2])
    assert sorted(r.notify(5, lr.PARENT)) == [1, 2]
    assert r.notify(6, lr.PARENT) == []
    f = lr.Router("flooding", 3, root=True)
    assert f.subscribe(5, lr.LOCAL) == [] and f.entries == 0
    assert f.notify(5, 0) == [1, 2]


def test_local_events_follow_the_workload() -> None:
    classes = [lr.ClassParams(c, 2.0, 0.5, 3.0, "exponential") for c in range(10)]
    events = list(lr.local_events(classes, random.Random(3), 200.0))
    assert [t for t, _, _ in events] == sorted(t for t, _, _ in events)
    arrivals = sum(1 for t, k, _ in events if k == lr.ARRIVE and t > 0)
    pubs = sum(1 for _, k, _ in events if k == lr.PUBLISH)
    assert arrivals == pytest.approx(2.0 * 10 * 200, rel=0.05)
    assert pubs == pytest.approx(3.0 * 10 * 200, rel=0.05)
    # time-averaged population = lambda / mu per class = 1 (M/G/inf, started in equilibrium)
    level, area, last = 0, 0.0, 0.0
    for t, k, _ in events:
        area += level * (t - last)
        last = t
        level += {lr.ARRIVE: 1, lr.DEPART: -1, lr.PUBLISH: 0}[k]
    assert area / last == pytest.approx(10.0, rel=0.05)


def test_meter_averages_exactly_and_resets_per_period() -> None:
    m = lr.Meter(0.0)
    m.level(0.0, 2, 1)
    m.level(1.0, 4, 1)
    m.count("control_sent", 3)
    p = m.period(2.0)
    assert p["period_ms"] == 2000 and p["entries_avg"] == pytest.approx(3.0) and p["control_sent"] == 3
    assert p["entries"] == 4
    q = m.period(3.0)
    assert q["entries_avg"] == pytest.approx(4.0) and q["control_sent"] == 0


def test_time_scaling_keeps_tables_and_scales_rates() -> None:
    w = uniform_workload(paper_tree(2, 15), subscriptions=300, classes=50, lifetime_s=60, publication_rate=10)
    a, b = model.analyze(w), model.analyze(lr.time_scaled(w, 30.0))
    assert b.totals.remote_entries == pytest.approx(a.totals.remote_entries)
    assert b.totals.b_c == pytest.approx(30 * a.totals.b_c)
    assert b.totals.notification_rate == pytest.approx(30 * a.totals.notification_rate)
    assert lr.default_time_scale(w, 40.0) == pytest.approx(30.0)
    with pytest.raises(ValidationError):
        lr.time_scaled(w, 0.0)


@pytest.mark.parametrize("strategy", lr.STRATEGIES)
def test_predictions_add_up_to_the_models_totals(strategy: str) -> None:
    w = uniform_workload(paper_tree(2, 15), subscriptions=300, classes=50, lifetime_s=60, publication_rate=10)
    a = model.analyze(w)
    preds = lr.predictions(a, strategy)
    sent = sum(p["notifications_sent_per_s"] for p in preds)
    assert sent == pytest.approx(sum(p["notifications_received_per_s"] for p in preds))
    assert sum(p["control_sent_per_s"] for p in preds) == pytest.approx(
        sum(p["control_received_per_s"] for p in preds))
    t = a.totals
    if strategy == "flooding":
        assert sent == pytest.approx(t.b_f) and all(p["table_entries"] == 0 for p in preds)
    else:
        assert sent == pytest.approx(t.notification_rate)
        assert sum(p["table_entries"] for p in preds) == pytest.approx(t.remote_entries)
        ctl = sum(p["control_sent_per_s"] for p in preds)
        assert ctl == pytest.approx(t.b_c if strategy == "identity" else t.b_cs)


def test_within_rule() -> None:
    assert lr.within(10.9, 10.0, 0.1, 0.0) and not lr.within(11.1, 10.0, 0.1, 0.0)
    assert lr.within(0.4, 0.0, 0.1, 0.5) and not lr.within(0.6, 0.0, 0.1, 0.5)


def test_plan_and_its_predictions_file(tmp_path: Path) -> None:
    f = tmp_path / "t.yaml"
    f.write_text(SMALL)
    p = live.plan(f, seconds=30, strategy="simple", run="r1")
    assert p.time_scale == pytest.approx(20.0) and len(p.predictions) == 7
    data = json.loads(json.dumps(p.data()))
    assert data["run"] == "r1" and data["metrics"] == list(lr.METRICS)
    assert {b["broker"] for b in data["brokers"]} == {f"B{i}" for i in range(7)}
    with pytest.raises(ValidationError, match="messages/s"):
        live.plan(f, seconds=30, time_scale=1e6)
    with pytest.raises(ValidationError, match="strategy"):
        live.plan(f, seconds=30, strategy="covering")


def test_compare_marks_a_wrong_figure() -> None:
    pred = [{"broker": "a", **dict.fromkeys(lr.METRICS, 10.0)}]
    meas = [{"broker": "a", **dict.fromkeys(lr.METRICS, 10.5)}]
    assert all(r["within"] for r in live.compare(pred, meas, rel_tol=0.1, abs_tol=0.0))
    meas[0]["table_entries"] = 15.0
    bad = [r for r in live.compare(pred, meas, rel_tol=0.1, abs_tol=0.0) if not r["within"]]
    assert [r["metric"] for r in bad] == ["table_entries"] and bad[0]["rel_error"] == pytest.approx(0.5)


def test_model_broker_record_is_valid_against_its_schema() -> None:
    rec = records.model_broker(run="r", strategy="identity", broker="B1", parent="B0", depth=1, time_scale=20.0,
                               period_ms=1000, entries=3, entries_avg=2.5, local_subscriptions_avg=1.25,
                               control_sent=4, control_received=2, notifications_sent=30, notifications_received=20,
                               notifications_published=10, subscriptions_started=3)
    schema = json.loads(records.schema_path("model_broker").read_text())
    stamped = {**rec, "role": "model_broker", "source": "B1", "exporter": "model_broker/B1", "epoch": 1, "sequence": 1}
    jsonschema.validate(stamped, schema)
    assert set(stamped) == set(schema["properties"])


@pytest.mark.parametrize(("text", "reason", "words"), [
    ("brokers:\n  - name: a\n  - name: b\n    parent: c\n  - name: c\n    parent: b\nuniform: {subscriptions: 1}\n",
     "CyclicTopology", "b -> c -> b"),
    ("brokers:\n  - name: a\nclasses:\n  - name: x\n    default: {arrival_per_s: 0.1}\n", "MissingParameter",
     "no lifetime"),
])
def test_bad_input_gets_the_same_errors_as_analyze(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                                   reason: str, words: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(loading.TopologyFileError) as direct:
        live.plan(f, seconds=10)
    assert direct.value.reason == reason and words in str(direct.value)
    assert cli.main(["analyze", str(f)]) == 2
    plain = capsys.readouterr().err
    assert cli.main(["analyze", str(f), "--live", "10", "--strategy", "simple"]) == 2
    assert capsys.readouterr().err == plain and words in plain
