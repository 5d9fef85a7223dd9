"""``gridstat_goose_*``: Prometheus metrics of ``gridstat goose-gateway`` and ``goose-publisher``, read
from the gateway's ``GooseStats`` at scrape time (docs/goose.md, "Counters"). Drop reasons are served
from 0 (docs/telemetry.md, "What is tested of the dashboards and alerts")."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

#: The gateway's drop reasons (gateways/goose/errors.py DropReason values).
DROP_REASONS = ("not_goose", "bad_length", "bad_ber", "bad_field", "entries_mismatch", "unmapped", "duplicate",
                "stale", "bad_member")
#: stats key -> (metric name, help)
COUNTERS = {
    "frames": ("gridstat_goose_frames_total", "Ethernet frames read (every copy)"),
    "states": ("gridstat_goose_states_total", "New states taken (the first frame of a stream, every stNum change)"),
    "state_changes": ("gridstat_goose_state_changes_total", "stNum changes taken"),
    "retransmissions": ("gridstat_goose_retransmissions_total", "Retransmissions taken (same stNum, higher sqNum)"),
    "st_num_gaps": ("gridstat_goose_stnum_gaps_total", "States skipped (stNum jumps)"),
    "sq_num_gaps": ("gridstat_goose_sqnum_gaps_total", "Retransmissions skipped (sqNum jumps)"),
    "ttl_expired": ("gridstat_goose_ttl_expired_total", "Streams whose timeAllowedtoLive ran out"),
    "points_published": ("gridstat_goose_points_published_total", "Member values handed to a publisher"),
    "points_unpublished": ("gridstat_goose_points_unpublished_total", "Member values with no registered variable"),
    "points_failed": ("gridstat_goose_points_failed_total", "Member values a publisher refused"),
    "frames_sent": ("gridstat_goose_frames_sent_total", "GOOSE frames sent (goose-publisher)"),
    "send_errors": ("gridstat_goose_send_errors_total", "GOOSE frames that could not be sent"),
    "alerts": ("gridstat_goose_alerts_total", "GridStat alerts received (goose-publisher)"),
}


class GooseCollector(Collector):
    def __init__(self, role: str, name: str, stats: Callable[[], Mapping[str, Any]]) -> None:
        self.role, self.name, self.stats = role, name, stats

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self.stats()
        labels = [self.role, self.name]
        for key, (metric, doc) in COUNTERS.items():
            family = CounterMetricFamily(metric, doc, labels=["role", "gateway"])
            family.add_metric(labels, float(s.get(key, 0)))
            yield family
        drops = CounterMetricFamily("gridstat_goose_drops_total", "Frames dropped, by reason",
                                    labels=["role", "gateway", "reason"])
        for reason, n in {**dict.fromkeys(DROP_REASONS, 0), **s.get("drops", {})}.items():
            drops.add_metric([*labels, reason], float(n))
        yield drops
        publishers = GaugeMetricFamily("gridstat_goose_variables", "Variables registered", labels=["role", "gateway"])
        publishers.add_metric(labels, float(s.get("registrations", 0)))
        yield publishers
