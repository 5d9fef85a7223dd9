"""The gateway's reconnect policy (core/backoff.py): exponential, capped, jittered, reset
after a healthy connection."""

from __future__ import annotations

import random

import pytest

from gridstat.errors import ValidationError
from gridstat.gateways.pmu import ReconnectPolicy


def test_delays_double_up_to_the_cap_without_jitter() -> None:
    p = ReconnectPolicy(initial_s=0.5, max_s=4.0, jitter=0.0)
    assert [p.failed(float(t)) for t in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_jitter_stays_within_its_band_and_under_the_cap() -> None:
    p = ReconnectPolicy(initial_s=1.0, max_s=8.0, jitter=0.2, rng=random.Random(1))
    for n in range(40):
        base = min(8.0, 2.0 ** min(n, 3))
        d = p.failed(0.0)
        assert 0.8 * base <= d <= min(8.0, 1.2 * base)
    spread = {round(ReconnectPolicy(initial_s=1.0, jitter=0.2, rng=random.Random(s)).failed(0.0), 6) for s in range(20)}
    assert len(spread) > 10  # jittered: attempts of many gateways do not line up


def test_a_healthy_connection_resets_the_series_a_short_one_does_not() -> None:
    p = ReconnectPolicy(initial_s=1.0, max_s=60.0, jitter=0.0, healthy_after_s=30.0)
    for _ in range(4):
        p.failed(0.0)
    p.connected(100.0)
    assert p.failed(105.0) == 16.0  # up 5 s only: the device is flapping, keep backing off
    p.connected(200.0)
    assert p.failed(230.0) == 1.0  # up 30 s: healthy, start over
    assert p.failed(231.0) == 2.0


@pytest.mark.parametrize("kwargs", [{"initial_s": 0.0}, {"initial_s": 5.0, "max_s": 1.0}, {"multiplier": 0.5},
                                    {"jitter": 1.0}, {"healthy_after_s": -1.0}])
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        ReconnectPolicy(**kwargs)  # type: ignore[arg-type]
