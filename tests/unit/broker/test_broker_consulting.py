"""The leaf broker's side of the admission controller: advertised rates are validated before anything changes."""

from __future__ import annotations

import pytest

from gridstat.broker.consulting import AdmissionLink, advertised_rate
from gridstat.core.model import FLOAT, StatusVariable
from gridstat.errors import ValidationError

VAR = StatusVariable("pmu1", "freq", FLOAT, 20)
ALERT = StatusVariable("relay", "trip", FLOAT, 0, alert=True, min_interval_ms=100)


def test_default_rate_is_what_the_interval_publishes() -> None:
    assert advertised_rate(VAR, None) == 50
    assert advertised_rate(ALERT, None) == 10
    assert advertised_rate(VAR, 120.0) == 120


@pytest.mark.parametrize("bad", [-1.0, 0.0, float("nan"), float("inf"), 2e6, 10.0])
def test_negative_absurd_or_too_small_rates_are_refused(bad: float) -> None:
    with pytest.raises(ValidationError) as err:
        advertised_rate(VAR, bad)
    assert err.value.field == "publication.max_rate_eps"


async def test_controller_address_and_deadline_are_checked() -> None:
    with pytest.raises(ValidationError):
        AdmissionLink("nohost")
    with pytest.raises(ValidationError):
        AdmissionLink("127.0.0.1:1", deadline_s=0)
    link = AdmissionLink("127.0.0.1:1")
    await link.close()
