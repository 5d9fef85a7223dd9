"""Pure helpers of ``gridstat bench shapes``: route planning for filt=f and condensation, the report."""

from __future__ import annotations

from typing import Any

import pytest

from gridstat.bench import shape_plans, shapes
from gridstat.bench.shape_plans import (
    COND_CHAIN,
    FILTER_CHAIN,
    FILTER_SUBS,
    MAX_FILT,
    condensation_routes,
    condensation_setup,
    filter_routes,
    filtering_point,
    link_intervals,
    rotated,
    sub_intervals,
    sub_tp_model,
)
from gridstat.bench.shape_rig import ShapeTrial
from gridstat.bench.shape_runs import CondResult, FilterResult
from gridstat.bench.shapes import nearest_tlv
from gridstat.v1 import condensation_pb2 as cpb

LOAD = [10_001, 10_002, 10_003]
REF = 19_999


def test_sub_intervals_put_the_last_f_subscribers_at_2_ms() -> None:
    assert sub_intervals(0) == [1, 1, 1, 1]
    assert sub_intervals(1) == [1, 1, 1, 2]
    assert sub_intervals(3) == [1, 2, 2, 2]
    assert sub_intervals(4) == [2, 2, 2, 2]
    with pytest.raises(ValueError):
        sub_intervals(5)
    with pytest.raises(ValueError):
        sub_intervals(-1)


@pytest.mark.parametrize("f", range(MAX_FILT + 1))
def test_filtering_moves_toward_the_source_as_f_grows(f: int) -> None:
    links = link_intervals(filter_routes(f, LOAD, REF))
    n = len(FILTER_CHAIN) - 1
    # chain links: e -> i1 is link 0, i3 -> i4 is link 3; the last f links carry 2 ms
    for k in range(n):
        want = 2 if k >= n - f else 1
        assert links[(FILTER_CHAIN[k], FILTER_CHAIN[k + 1])] == want, (f, k)
    # subscriber links: i_k -> s_k at s_k's interval
    for k, (sub, iv) in enumerate(zip(FILTER_SUBS, sub_intervals(f), strict=True), start=1):
        assert links[(FILTER_CHAIN[k], sub)] == iv
    # the filtering point is the first link at 2 ms
    first = next((k for k in range(n) if links[(FILTER_CHAIN[k], FILTER_CHAIN[k + 1])] == 2), None)
    if f == 0:
        assert first is None and filtering_point(0) == "-"
    else:
        assert filtering_point(f) == f"{FILTER_CHAIN[first]} -> {FILTER_CHAIN[first + 1]}"
    assert filtering_point(4) == "e -> i1"


def test_filter_routes_are_one_per_path_hop_and_the_reference_runs_the_chain() -> None:
    routes = filter_routes(2, LOAD, REF)
    load = [r for r in routes if r.variable_id != REF]
    # path of s_k has k + 1 hops: 2 + 3 + 4 + 5 per variable
    assert len(load) == 14 * len(LOAD)
    assert {r.route_id for r in load} == set(FILTER_SUBS)
    assert all(r.pub_interval_ms == 1 for r in load)
    ref = [r for r in routes if r.variable_id == REF]
    assert [(r.router, r.channel) for r in ref] == [("e", "i1"), ("i1", "i2"), ("i2", "i3"), ("i3", "i4"),
                                                    ("i4", "ref")]
    assert all(r.sub_interval_ms == r.pub_interval_ms == 50 for r in ref)
    # every (route_id, variable, router) is installed once: no route replaces another
    keys = [(r.router, r.route_id, r.variable_id) for r in routes]
    assert len(keys) == len(set(keys))
    m = routes[0].message()
    assert m.mode == 0 and m.priority == 1 and m.channel == routes[0].channel


def test_sub_tp_model_is_the_dissertations() -> None:
    assert sub_tp_model(10.0, 0) == 40.0
    assert sub_tp_model(10.0, 2) == 30.0
    assert sub_tp_model(10.0, 4) == 20.0


def test_condensation_routes_without_and_with_the_function() -> None:
    out_var = 25_000
    without = condensation_routes(False, LOAD, REF, out_var)
    hops = {(r.router, r.channel) for r in without if r.variable_id in LOAD}
    assert hops == {("i0", "i1"), ("i1", "i2"), ("i2", "s3"), ("i2", "s4")}
    assert not any(r.variable_id == out_var for r in without)
    with pytest.raises(ValueError):
        condensation_routes(True, LOAD, REF, out_var)
    with_fn = condensation_routes(True, LOAD, REF, out_var, function_channel="cf:avg", out_interval_ms=1)
    inputs = [r for r in with_fn if r.variable_id in LOAD]
    assert {(r.router, r.channel, r.route_id) for r in inputs} == {("i0", "cf:avg", "cf")}
    assert len(inputs) == len(LOAD)
    outs = {(r.router, r.channel) for r in with_fn if r.variable_id == out_var}
    assert outs == {("i0", "i1"), ("i1", "i2"), ("i2", "s3"), ("i2", "s4")}
    for routes in (without, with_fn):
        refs = {(r.router, r.channel) for r in routes if r.variable_id == REF}
        assert refs == {("i0", "ref1"), ("i0", "i1"), ("i1", "i2"), ("i2", "ref2")}


def test_condensation_setup_is_an_average_on_a_time_trigger() -> None:
    m = condensation_setup("avg", LOAD, 25_000, trigger_ms=10)
    assert m.spec.calculator == "average"
    assert m.spec.trigger.kind == cpb.TRIGGER_KIND_TIME and m.spec.trigger.interval_ms == 10
    assert [i.variable_id for i in m.inputs] == LOAD
    assert all(i.value_type == "int" and i.pub_interval_ms == 1 for i in m.inputs)
    assert m.output_variable_id == 25_000 and m.output_pub_interval_ms == 10
    assert m.output_sender_id == shape_plans.CF_SENDER_ID and m.output_priority == 1


def test_loads_map_to_the_dissertations_rows() -> None:
    assert nearest_tlv(250_000, shape_plans.DISS_FILTER) == 40
    assert nearest_tlv(500_000, shape_plans.DISS_FILTER) == 80
    assert nearest_tlv(750_000, shape_plans.DISS_FILTER) == 80
    assert nearest_tlv(750_000, shape_plans.DISS_COND) == 120


def test_rotated() -> None:
    assert rotated([0, 1, 2], 0) == [0, 1, 2]
    assert rotated([0, 1, 2], 4) == [1, 2, 0]
    assert rotated([], 3) == []


def _trial(routers: tuple[str, ...], subs: tuple[str, ...], cpu: float, received: int, lost: int = 0,
           **kw: Any) -> ShapeTrial:
    return ShapeTrial(label="t", offered=100_000, elapsed=1.0, sent_load=100_000, sent=100_020,
                      cpu_pct={n: cpu for n in routers}, events_in={n: 0 for n in routers},
                      counted_drops={n: 0 for n in routers}, link_lost={"pub->x": lost},
                      received={s: received for s in subs}, ref={"ref": {"n": 20, "mean": 150.0}}, **kw)


def test_reports_render_from_trials() -> None:
    filt = FilterResult([100_000], 1, 1.0)
    for f in range(MAX_FILT + 1):
        filt.trials[(100_000, f)] = [_trial(FILTER_CHAIN, FILTER_SUBS, 30.0 - 3 * f,
                                            round(100_000 * (1 - f / 8)), lost=100 * (4 - f))]
    body, notes = shapes.filtering_report(filt)
    assert "| 4 | e -> i1 |" in body
    assert any("goes from 150 % (f=0) to 90 % (f=4)" in n and "falling monotonically" in n for n in notes)
    assert any("drops 0.400 / 0.300 / 0.200 / 0.100 / 0.000 %" in n and "**falling" in n for n in notes)
    cond = CondResult([100_000], 1, 1.0, 1)
    cond.trials[(100_000, False)] = [_trial(COND_CHAIN, ("s3", "s4"), 20.0, 100_000)]
    cond.trials[(100_000, True)] = [_trial(COND_CHAIN, ("s3", "s4"), 2.0, 1_000, function={"outputs": 1_000})]
    body, notes = shapes.condensation_report(cond)
    assert "200.0 -> 2.0" in body
    assert any("falls to near idle" in n for n in notes)
    failed = CondResult([100_000], 1, 1.0, 1, error="SetupCondensation on i0 failed: UNIMPLEMENTED")
    body, notes = shapes.condensation_report(failed)
    assert "Not measured" in body and "UNIMPLEMENTED" in notes[0]
    md = shapes.report(filt, cond, facts_line="facts.", quick=True, wall_s=1.0, background=0.0)
    assert md.startswith("## Shapes") and "### Shapes: what matches and what does not" in md
