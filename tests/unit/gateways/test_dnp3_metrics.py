"""``gridstat_dnp3_*`` (telemetry/dnp3.py; docs/dnp3.md, "Metrics"): the gateway's counters as Prometheus
series, labelled by gateway and outstation, drop reasons, request kinds and indications served from 0."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gridstat.gateways.dnp3.application import IIN_NAMES
from gridstat.gateways.dnp3.drops import DropReason
from gridstat.gateways.dnp3.session import CLEAR_RESTART, DISABLE_UNSOLICITED, ENABLE_UNSOLICITED, EVENTS, INTEGRITY
from gridstat.gateways.dnp3.stats import Dnp3Stats
from gridstat.telemetry import dnp3 as metrics


def samples(stats: Dnp3Stats) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(metrics.Dnp3Collector("rtu7", "127.0.0.1:20000", stats.as_dict))
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def key(name: str, **extra: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted({"gateway": "rtu7", "outstation": "127.0.0.1:20000", **extra}.items()))


def test_the_lists_served_from_zero_are_the_gateways_own() -> None:
    assert set(metrics.DROP_REASONS) == {r.value for r in DropReason}
    assert set(metrics.IIN_NAMES) == set(IIN_NAMES.values())
    assert set(metrics.REQUEST_KINDS) == {INTEGRITY, EVENTS, CLEAR_RESTART, ENABLE_UNSOLICITED, DISABLE_UNSOLICITED}


def test_a_fresh_gateway_serves_every_series_at_zero() -> None:
    got = samples(Dnp3Stats())
    assert got[key("gridstat_dnp3_drops_total", reason="bad_block_crc")] == 0
    assert got[key("gridstat_dnp3_requests_total", kind="integrity")] == 0
    assert got[key("gridstat_dnp3_iin_total", indication="device_restart")] == 0
    assert got[key("gridstat_dnp3_values_total", type="ai", source="event")] == 0
    assert got[key("gridstat_dnp3_link_up")] == 0
    for metric, _ in metrics.COUNTERS.values():
        assert got[key(metric)] == 0, metric


def test_the_counts_of_a_polling_gateway() -> None:
    s = Dnp3Stats(state="polling", connects=2, connect_failures=1, reconnects=1, responses=9, unsolicited=3,
                  events_published=40, events_unpublished=2, events_failed=1, alerts_published=5, registrations=8,
                  publishers=1)
    s.drops.add(DropReason.BAD_BLOCK_CRC, 12)
    s.count_request(INTEGRITY)
    s.count_request(EVENTS)
    s.count_request(EVENTS)
    s.iin["need_time"] = 4
    s.points.update({"ai_static": 4, "bi_event": 6})
    got = samples(s)
    assert got[key("gridstat_dnp3_link_up")] == 1
    assert got[key("gridstat_dnp3_connects_total")] == 2
    assert got[key("gridstat_dnp3_connect_failures_total")] == 1
    assert got[key("gridstat_dnp3_reconnects_total")] == 1
    assert got[key("gridstat_dnp3_unsolicited_responses_total")] == 3
    assert got[key("gridstat_dnp3_events_published_total")] == 40
    assert got[key("gridstat_dnp3_events_unpublished_total")] == 2
    assert got[key("gridstat_dnp3_events_failed_total")] == 1
    assert got[key("gridstat_dnp3_alerts_published_total")] == 5
    assert got[key("gridstat_dnp3_discarded_bytes_total")] == 12
    assert got[key("gridstat_dnp3_drops_total", reason="bad_block_crc")] == 1
    assert got[key("gridstat_dnp3_drops_total", reason="bad_sync")] == 0
    assert got[key("gridstat_dnp3_requests_total", kind="integrity")] == 1
    assert got[key("gridstat_dnp3_requests_total", kind="events")] == 2
    assert got[key("gridstat_dnp3_iin_total", indication="need_time")] == 4
    assert got[key("gridstat_dnp3_values_total", type="ai", source="static")] == 4
    assert got[key("gridstat_dnp3_values_total", type="bi", source="event")] == 6
    assert got[key("gridstat_dnp3_variables")] == 8
    assert got[key("gridstat_dnp3_publishers")] == 1
