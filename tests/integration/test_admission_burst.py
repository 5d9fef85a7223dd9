"""A burst of Subscribe calls against a real leaf broker: every answer is a reply or RESOURCE_EXHAUSTED
with a retry hint, never CANCELLED, and another client's Subscribe during the burst is admitted within
2 s (broker.gate; docs/security.md, "Admission bound"; the 10,000-call run: docs/benchmarks.md)."""

from __future__ import annotations

import pytest

from gridstat.bench.burst import burst_in_cloud, report
from gridstat.chaos import diamond

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("parallelism", [500, 2_000])
def test_burst_is_answered_admitted_or_busy_and_a_legitimate_client_gets_through(parallelism: int) -> None:
    # 2,000 calls from one client, 500 in flight (four times the default bound: 128, 32 per caller), then
    # all at once: past gRPC core's default pending-call queue (1,000), whose excess it would CANCEL.
    r = burst_in_cloud(diamond.cloud, calls=2_000, parallelism=parallelism, deadline_s=20)
    table = report([("test", r)])
    assert sum(r.outcomes.values()) == 2_000, table
    assert r.outcomes["CANCELLED"] == 0, table
    allowed = {"admitted", "RESOURCE_EXHAUSTED"} | {k for k in r.outcomes if k.startswith("rejected:")}
    assert set(r.outcomes) <= allowed, table
    assert r.outcomes["RESOURCE_EXHAUSTED"] > 0, table  # the burst did overload the bound
    assert r.unhinted == 0 and len(r.hints_ms) == r.outcomes["RESOURCE_EXHAUSTED"], table
    assert r.outcomes["admitted"] > 0, table
    assert r.legit_outcome == "admitted" and r.legit_ms is not None and r.legit_ms < 2_000, table


def test_bound_is_a_broker_option() -> None:
    # A bound of 1 per caller: the flood gets one admission at a time, the rest are refused busy.
    r = burst_in_cloud(diamond.cloud, calls=300, parallelism=100, broker_extra=("--max-admissions-per-caller", "1"),
                       deadline_s=20)
    table = report([("per caller 1", r)])
    assert r.outcomes["CANCELLED"] == 0 and r.outcomes["RESOURCE_EXHAUSTED"] > r.outcomes["admitted"], table
    assert r.legit_outcome == "admitted", table
