"""Which path a subscription takes, bad declarations, and relay plans (GridStat fit of seed 004)."""

from __future__ import annotations

import pytest

from gridstat.errors import ValidationError
from gridstat.granularity import accuracy, serving
from gridstat.granularity.space import Attribute, AttributeSpace

SPACE = AttributeSpace((
    Attribute("region", "category", categories=("north", "south", "east", "west")),
    Attribute("type", "category", categories=("voltage", "current", "frequency", "breaker")),
))
CATALOGUE = accuracy.CatalogueRates(tuple(
    (SPACE.point({"region": r, "type": t}), 30.0) for r in SPACE.attributes[0].categories
    for t in SPACE.attributes[1].categories))


def test_hard_subscriptions_stay_on_router_paths() -> None:
    d = serving.declare(SPACE, name="protection", constraints={"region": "west", "type": "breaker"},
                        guarantee="hard", delay_tolerance_ms=5, bandwidth_eps=1000)
    assert d.path == serving.PATH_ROUTER
    assert d.budget is None


def test_best_effort_delay_tolerant_subscriptions_take_the_overlay() -> None:
    d = serving.declare(SPACE, name="dash", constraints={"region": "west"}, delay_tolerance_ms=9,
                        bandwidth_eps=600, out_degree=2, hop_delay_ms=2)
    assert d.path == serving.PATH_OVERLAY
    assert d.delta_hops == pytest.approx(4.5)
    assert d.budget is not None and d.budget.incoming_eps == pytest.approx(200)


@pytest.mark.parametrize("tolerance", [0.0, -3.0, 1.0, float("nan")])
def test_impossible_delay_tolerances(tolerance: float) -> None:
    with pytest.raises(ValidationError) as err:
        serving.declare(SPACE, name="dash", constraints={}, delay_tolerance_ms=tolerance, bandwidth_eps=600,
                        hop_delay_ms=2)
    assert err.value.reason == "ImpossibleDelayTolerance"
    assert err.value.field == "delay_tolerance_ms"


def test_bandwidth_below_one_event() -> None:
    with pytest.raises(accuracy.BandwidthTooLow) as err:
        serving.declare(SPACE, name="dash", constraints={}, delay_tolerance_ms=10, bandwidth_eps=2, out_degree=4)
    assert err.value.reason == "BandwidthBelowOneEvent"


def test_missing_parameters_and_unknown_attributes() -> None:
    with pytest.raises(ValidationError) as err:
        serving.declare(SPACE, name="dash", constraints={}, delay_tolerance_ms=10)
    assert err.value.reason == "MissingParameter"
    with pytest.raises(ValidationError):
        serving.declare(SPACE, name="dash", constraints={"voltage": [1, 2]}, delay_tolerance_ms=10, bandwidth_eps=99)
    with pytest.raises(ValidationError):
        serving.declare(SPACE, name="dash", constraints={}, guarantee="gold")


def test_a_budget_below_the_subscription_itself() -> None:
    d = serving.declare(SPACE, name="dash", constraints={"region": "west"}, delay_tolerance_ms=10,
                        bandwidth_eps=100, out_degree=1)                    # west = 4 x 30 events/s
    with pytest.raises(accuracy.BandwidthTooLow) as err:
        serving.plan_relays(SPACE, [d], CATALOGUE, feeds={"feed": frozenset({""})}, feed_out_degree=2, max_depth=4)
    assert err.value.reason == "BandwidthBelowSubscription"


def test_plan_serves_every_dashboard_within_its_tolerance() -> None:
    subs = [serving.declare(SPACE, name=n, constraints=c, delay_tolerance_ms=t, bandwidth_eps=2000, out_degree=2)
            for n, c, t in (("archive", {}, 3.0), ("west", {"region": "west"}, 6.0),
                            ("west-v", {"region": "west", "type": "voltage"}, 9.0),
                            ("east", {"region": "east"}, 7.0),
                            ("east-f", {"region": "east", "type": "frequency"}, 11.0))]
    subs.append(serving.declare(SPACE, name="protection", constraints={"type": "breaker"}, guarantee="hard"))
    plan = serving.plan_relays(SPACE, subs, CATALOGUE, feeds={"feed": frozenset({""})}, feed_out_degree=2,
                               max_depth=4)
    assert "protection" not in plan.peers
    assert plan.unserved() == ()
    assert len(plan.peers["feed"].child_peers) <= 2
