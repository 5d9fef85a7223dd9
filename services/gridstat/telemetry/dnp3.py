"""``gridstat_dnp3_*``: Prometheus metrics of ``gridstat dnp3-gateway``, read from the gateway's
``Dnp3Stats.as_dict()`` at scrape time (docs/dnp3.md, "Metrics"). Drop reasons, request kinds and internal
indications are served from 0 (docs/telemetry.md, "What is tested of the dashboards and alerts"); every
series carries the labels ``gateway`` (``--name``) and ``outstation`` (``host:port``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

#: The gateway's drop reasons (gateways/dnp3/drops.py DropReason values).
DROP_REASONS = ("bad_sync", "bad_header_crc", "bad_length", "bad_block_crc", "wrong_direction", "wrong_address",
                "link_function", "transport_no_fir", "transport_sequence", "fragment_too_large", "short_fragment",
                "unexpected_function", "unexpected_sequence", "duplicate_unsolicited", "unknown_object",
                "unsupported_qualifier", "truncated_object", "bad_range", "no_cto")
#: Requests the master sends (gateways/dnp3/session.py): ``integrity`` is the class 0/1/2/3 poll, ``events``
#: the class 1/2/3 event poll.
REQUEST_KINDS = ("integrity", "events", "clear_restart", "enable_unsolicited", "disable_unsolicited")
#: Internal indications (gateways/dnp3/application.py Iin, lower case).
IIN_NAMES = ("broadcast", "class_1_events", "class_2_events", "class_3_events", "need_time", "local_control",
             "device_trouble", "device_restart", "no_func_code_support", "object_unknown", "parameter_error",
             "event_buffer_overflow", "already_executing", "config_corrupt")
#: Points read: ``ai``/``bi`` and ``static``/``event`` (the stats' ``points`` keys, ``ai_static`` ...).
POINT_KEYS = ("ai_static", "ai_event", "bi_static", "bi_event")
#: stats key -> (metric name, help)
COUNTERS = {
    "events_published": ("gridstat_dnp3_events_published_total", "Values handed to a publisher"),
    "events_unpublished": ("gridstat_dnp3_events_unpublished_total", "Values with no registered variable yet"),
    "events_failed": ("gridstat_dnp3_events_failed_total", "Values a publisher refused"),
    "alerts_published": ("gridstat_dnp3_alerts_published_total", "Binary input changes sent as alerts"),
    "alerts_too_early": ("gridstat_dnp3_alerts_too_early_total", "Alerts closer than min_interval_ms to the last"),
    "points_unmapped": ("gridstat_dnp3_points_unmapped_total", "Points whose index has no variable (the map)"),
    "connects": ("gridstat_dnp3_connects_total", "TCP connections made to the outstation"),
    "connect_failures": ("gridstat_dnp3_connect_failures_total", "Connection attempts that failed"),
    "reconnects": ("gridstat_dnp3_reconnects_total", "Connections that ended and were tried again"),
    "responses": ("gridstat_dnp3_responses_total", "Response fragments used (solicited and unsolicited)"),
    "unsolicited": ("gridstat_dnp3_unsolicited_responses_total", "Unsolicited responses used"),
    "confirms_sent": ("gridstat_dnp3_confirms_sent_total", "Application CONFIRMs sent"),
    "response_timeouts": ("gridstat_dnp3_response_timeouts_total", "Requests unanswered within the response timeout"),
    "keepalive_timeouts": ("gridstat_dnp3_keepalive_timeouts_total", "Link status requests unanswered"),
    "registration_errors": ("gridstat_dnp3_registration_errors_total", "Variables the broker refused to register"),
    "discarded_bytes": ("gridstat_dnp3_discarded_bytes_total", "Octets discarded while looking for frames"),
}


def _point_labels(key: str) -> tuple[str, str]:
    """``ai_event`` -> (``ai``, ``event``); a key without ``_`` is its own type, source ``-``."""
    kind, _, source = key.partition("_")
    return kind, source or "-"


class Dnp3Collector(Collector):
    """The gateway ``name``'s counters for the outstation ``outstation`` (``host:port``)."""

    def __init__(self, name: str, outstation: str, stats: Callable[[], Mapping[str, Any]]) -> None:
        self.name, self.outstation, self.stats = name, outstation, stats

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self.stats()
        names = ["gateway", "outstation"]
        labels = [self.name, self.outstation]
        points = CounterMetricFamily("gridstat_dnp3_values_total", "Points read from responses, by type (ai, bi) "
                                     "and source (static: class 0, event: classes 1-3)",
                                     labels=[*names, "type", "source"])
        for key, n in {**dict.fromkeys(POINT_KEYS, 0), **s.get("points", {})}.items():
            points.add_metric([*labels, *_point_labels(key)], float(n))
        yield points
        for key, (metric, doc) in COUNTERS.items():
            family = CounterMetricFamily(metric, doc, labels=names)
            family.add_metric(labels, float(s.get(key, 0)))
            yield family
        polls = CounterMetricFamily("gridstat_dnp3_requests_total", "Requests sent, by kind (integrity: the "
                                    "class 0/1/2/3 poll; events: the class 1/2/3 poll)", labels=[*names, "kind"])
        for kind, n in {**dict.fromkeys(REQUEST_KINDS, 0), **s.get("requests", {})}.items():
            polls.add_metric([*labels, kind], float(n))
        yield polls
        iin = CounterMetricFamily("gridstat_dnp3_iin_total", "Responses carrying an internal indication, by "
                                  "indication", labels=[*names, "indication"])
        for name, n in {**dict.fromkeys(IIN_NAMES, 0), **s.get("iin", {})}.items():
            iin.add_metric([*labels, name], float(n))
        yield iin
        drops = CounterMetricFamily("gridstat_dnp3_drops_total", "Frames, segments and fragments dropped, by reason",
                                    labels=[*names, "reason"])
        for reason, n in {**dict.fromkeys(DROP_REASONS, 0), **s.get("drops", {})}.items():
            drops.add_metric([*labels, reason], float(n))
        yield drops
        up = GaugeMetricFamily("gridstat_dnp3_link_up", "1 while the master polls the outstation (state polling)",
                               labels=names)
        up.add_metric(labels, 1.0 if s.get("state") == "polling" else 0.0)
        yield up
        variables = GaugeMetricFamily("gridstat_dnp3_variables", "Variables registered", labels=names)
        variables.add_metric(labels, float(s.get("registrations", 0)))
        yield variables
        publishers = GaugeMetricFamily("gridstat_dnp3_publishers", "Publishers connected to the edge router",
                                       labels=names)
        publishers.add_metric(labels, float(s.get("publishers", 0)))
        yield publishers
