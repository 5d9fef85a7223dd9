"""``gridstat_iec104_*``: Prometheus metrics of ``gridstat iec104-gateway``, read from the gateway's
``GatewayStats.as_dict()`` at scrape time (docs/iec104.md, "Counters"). Drop reasons are served from 0
(docs/telemetry.md, "What is tested of the dashboards and alerts"); the current connection's counts
are gauges, since they start again at each connect."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

#: The gateway's drop reasons (gateways/iec104/errors.py DropReason values).
DROP_REASONS = ("bad_start", "bad_length", "bad_control", "truncated", "bad_field", "bad_time", "unsupported_type",
                "bad_cause", "bad_sequence", "bad_ack", "kind_mismatch", "unmapped", "name_taken")
#: stats key -> (metric name, help)
COUNTERS = {
    "values": ("gridstat_iec104_values_total", "Information objects read from monitored ASDUs"),
    "events_published": ("gridstat_iec104_events_published_total", "Values handed to a publisher"),
    "events_unpublished": ("gridstat_iec104_events_unpublished_total", "Values with no registered variable yet"),
    "events_failed": ("gridstat_iec104_events_failed_total", "Values a publisher refused"),
    "alerts_published": ("gridstat_iec104_alerts_published_total", "Point changes sent as alerts"),
    "alerts_too_early": ("gridstat_iec104_alerts_too_early_total", "Alerts closer than min_interval_ms to the last"),
    "alerts_repeated": ("gridstat_iec104_alerts_repeated_total", "Point states received again unchanged: not sent"),
    "connects": ("gridstat_iec104_connects_total", "TCP connections made to the outstation"),
    "connect_failures": ("gridstat_iec104_connect_failures_total", "Connection attempts that failed"),
    "reconnects": ("gridstat_iec104_reconnects_total", "Connections that ended and were tried again"),
    "t1_timeouts": ("gridstat_iec104_t1_timeouts_total", "Connections closed by t1"),
    "tests_sent": ("gridstat_iec104_tests_sent_total", "TESTFR act sent after t3 of silence"),
    "interrogations": ("gridstat_iec104_interrogations_total", "General interrogations sent"),
    "interrogations_refused": ("gridstat_iec104_interrogations_refused_total", "Interrogations confirmed negatively"),
    "interrogations_completed": ("gridstat_iec104_interrogations_completed_total", "Interrogations terminated"),
    "end_of_initialization": ("gridstat_iec104_end_of_initialization_total", "M_EI_NA_1 received"),
}
#: The current connection's counts (stats["connection"]): (metric, help, direction, format).
CONNECTION = {
    "i_received": ("received", "I"), "s_received": ("received", "S"), "u_received": ("received", "U"),
    "i_sent": ("sent", "I"), "s_sent": ("sent", "S"), "u_sent": ("sent", "U"),
}


class Iec104Collector(Collector):
    def __init__(self, name: str, outstation: str, stats: Callable[[], Mapping[str, Any]]) -> None:
        self.name, self.outstation, self.stats = name, outstation, stats

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self.stats()
        names = ["gateway", "outstation"]
        labels = [self.name, self.outstation]
        for key, (metric, doc) in COUNTERS.items():
            family = CounterMetricFamily(metric, doc, labels=names)
            family.add_metric(labels, float(s.get(key, 0)))
            yield family
        drops = CounterMetricFamily("gridstat_iec104_drops_total", "Frames, ASDUs and values dropped, by reason",
                                    labels=[*names, "reason"])
        for reason, n in {**dict.fromkeys(DROP_REASONS, 0), **s.get("drops", {})}.items():
            drops.add_metric([*labels, reason], float(n))
        yield drops
        asdus = CounterMetricFamily("gridstat_iec104_asdus_total", "ASDUs read, by type identification",
                                    labels=[*names, "type"])
        for type_name, n in s.get("asdus", {}).items():
            asdus.add_metric([*labels, type_name], float(n))
        yield asdus
        up = GaugeMetricFamily("gridstat_iec104_link_up", "1 while data transfer is started (STARTDT con)",
                               labels=names)
        up.add_metric(labels, 1.0 if s.get("state") == "started" else 0.0)
        yield up
        variables = GaugeMetricFamily("gridstat_iec104_variables", "Variables registered", labels=names)
        variables.add_metric(labels, float(s.get("registrations", 0)))
        yield variables
        conn = s.get("connection", {})
        frames = GaugeMetricFamily("gridstat_iec104_connection_frames",
                                   "Frames of the current connection, by direction and format",
                                   labels=[*names, "direction", "format"])
        for key, (direction, fmt) in CONNECTION.items():
            frames.add_metric([*labels, direction, fmt], float(conn.get(key, 0)))
        yield frames
        full = GaugeMetricFamily("gridstat_iec104_connection_window_full",
                                 "Times the current connection waited for the outstation's acknowledgement (k)",
                                 labels=names)
        full.add_metric(labels, float(conn.get("window_full", 0)))
        yield full
