"""Prometheus metrics of every role, read from the role's own counters at scrape time.

Each collector turns a role's existing counters into metric families when Prometheus scrapes
(``prometheus_client`` custom collectors), so nothing is counted twice and the data plane is
not instrumented. Scrapes run on the role's event loop (``serving.MetricsServer``), so they see
a consistent state and need no locks.

Names follow Prometheus conventions: ``gridstat_<role>_<what>_<unit>``, counters end in
``_total``, times in seconds, sizes in events or bytes. Every series is labelled with the
role's name (``router``, ``broker``, ``subscriber``), so one Prometheus can scrape a utility.
The names are listed in docs/telemetry.md; deploy/prometheus and deploy/grafana use only these
(a test checks it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from gridstat.core.wire import DropReason

from .exporting import ExporterStats, LossReason
from .recording import BrokerRecorder
from .sampling import SubscriberLike

F = TypeVar("F", CounterMetricFamily, GaugeMetricFamily)

#: Drop reasons a router counts per channel, on the send side (``router/channels.py``): every channel's
#: series of these exist at 0 from the start. All the other reasons are counted before a channel is
#: known (``channel=""``) and exist at 0 there. Prometheus's ``rate()`` and ``increase()`` miss the first
#: event of a series born at 1, so the alerts on drops would not fire for the first drop of a kind
#: (docs/telemetry.md, "What is tested of the dashboards and alerts").
CHANNEL_DROP_REASONS = tuple(r.value for r in (DropReason.QUEUE_FULL, DropReason.LINK_OVERLOAD,
                                               DropReason.CPU_OVERLOAD, DropReason.LINK_DOWN,
                                               DropReason.SEND_ERROR))
ROUTER_DROP_REASONS = tuple(r.value for r in DropReason if r.value not in CHANNEL_DROP_REASONS)
#: What a subscriber counts as drops (``client/subscriber.py``), each from 0 at the start.
SUBSCRIBER_DROP_REASONS = tuple(r.value for r in (
    DropReason.TRUNCATED, DropReason.BAD_MAGIC, DropReason.BAD_VERSION, DropReason.BAD_KIND,
    DropReason.MALFORMED, DropReason.AUTH_FAILED, DropReason.REPLAYED, DropReason.UNKNOWN_VARIABLE,
    DropReason.SEND_ERROR))


def _from_zero(counts: Mapping[str, int], known: tuple[str, ...]) -> dict[str, int]:
    """``counts`` with every ``known`` key present (0 when not counted yet), the known ones first."""
    return {**dict.fromkeys(known, 0), **counts}

#: Latency quantiles exported per subscription (from the subscriber's last 4096 samples).
QUANTILES = (("0.5", 50.0), ("0.99", 99.0), ("0.999", 99.9))


def _counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=labels)


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def _one(family: F, labels: list[str], value: float) -> F:
    """``family`` with its one sample: ``value`` under ``labels``."""
    family.add_metric(labels, value)
    return family


class _Base(Collector):
    def describe(self) -> list[Metric]:
        return []  # no collect() at registration; names are checked by the tests instead


class RouterCollector(_Base):
    """``gridstat_router_*`` from ``StatusRouter.stats()`` (and each channel's queue capacity)."""

    def __init__(self, stats: Callable[[], Mapping[str, Any]],
                 capacities: Callable[[], Mapping[str, int]] | None = None) -> None:
        self._stats = stats
        self._capacities = capacities

    def collect(self) -> Iterator[Metric]:
        s = self._stats()
        r = str(s["router"])
        info = _gauge("gridstat_router_info", "A status router (always 1), with its role and table variant",
                      ["router", "role", "variant"])
        info.add_metric([r, str(s.get("role", "")), str(s.get("variant", ""))], 1)
        yield info
        for name, key, doc in (
            ("gridstat_router_datagrams_received_total", "datagrams_in", "Datagrams received on every channel"),
            ("gridstat_router_events_received_total", "events_in", "Status events received"),
            ("gridstat_router_events_forwarded_total", "events_forwarded", "Event copies queued to next hops"),
            ("gridstat_router_events_filtered_total", "events_filtered", "Events held back by the rate filter"),
        ):
            yield _one(_counter(name, doc, ["router"]), [r], float(s.get(key, 0)))
        yield _one(_counter("gridstat_router_cpu_seconds_total", "CPU time of the router process", ["router"]), [r],
                   float(s.get("cpu_seconds", 0.0)))
        for name, key, doc in (
            ("gridstat_router_uptime_seconds", "uptime_s", "Seconds since the router started"),
            ("gridstat_router_mode", "current_mode", "Current operating mode"),
            ("gridstat_router_table_version", "table_version", "Routing table version"),
        ):
            yield _one(_gauge(name, doc, ["router"]), [r], float(s.get(key, 0)))
        yield _one(_gauge("gridstat_router_flooded_variables", "Variables flooded through this router", ["router"]),
                   [r], float(len(s.get("flooded_variables", ()) or ())))
        drops = _counter("gridstat_router_drops_total",
                         "Events or datagrams dropped, by channel (\"\" = before a channel is known) and reason",
                         ["router", "channel", "reason"])
        for reason, count in _from_zero(dict(s.get("drops", {})), ROUTER_DROP_REASONS).items():
            drops.add_metric([r, "", str(reason)], float(count))
        caps = self._capacities() if self._capacities is not None else {}
        fams: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            "up": _gauge("gridstat_router_channel_up", "1 while the channel's neighbour answers liveness pings",
                         ["router", "channel"]),
            "events_in": _counter("gridstat_router_channel_events_received_total", "Events received on the channel",
                                  ["router", "channel"]),
            "events_sent": _counter("gridstat_router_channel_events_sent_total", "Events sent on the channel",
                                    ["router", "channel"]),
            "datagrams_in": _counter("gridstat_router_channel_datagrams_received_total",
                                     "Datagrams received on the channel", ["router", "channel"]),
            "datagrams_sent": _counter("gridstat_router_channel_datagrams_sent_total",
                                       "Datagrams sent on the channel", ["router", "channel"]),
            "filtered": _counter("gridstat_router_channel_filtered_events_total",
                                 "Events the rate filter held back from the channel", ["router", "channel"]),
            "queued": _gauge("gridstat_router_channel_queued_events", "Events waiting in the channel's send queues",
                             ["router", "channel"]),
            "capacity": _gauge("gridstat_router_channel_queue_capacity_events",
                               "Events the channel queues before dropping", ["router", "channel"]),
            "rtt": _gauge("gridstat_router_channel_rtt_seconds", "Last liveness round-trip time",
                          ["router", "channel"]),
        }
        for ch in s.get("channels", ()):
            n = str(ch["name"])
            fams["up"].add_metric([r, n], 1.0 if ch.get("up", True) else 0.0)
            for key in ("events_in", "events_sent", "datagrams_in", "datagrams_sent", "filtered", "queued"):
                fams[key].add_metric([r, n], float(ch.get(key, 0)))
            if n in caps:
                fams["capacity"].add_metric([r, n], float(caps[n]))
            if ch.get("rtt_ms") is not None:
                fams["rtt"].add_metric([r, n], float(ch["rtt_ms"]) / 1000)
            for reason, k in _from_zero(dict(ch.get("drops", {})), CHANNEL_DROP_REASONS).items():
                drops.add_metric([r, n, str(reason)], float(k))
        yield drops
        yield from fams.values()


class _BrokerBase(_Base):
    def __init__(self, broker: Any, recorder: BrokerRecorder | None = None) -> None:
        self.broker = broker
        self.recorder = recorder


class LeafBrokerCollector(_BrokerBase):
    """``gridstat_broker_*`` of a leaf QoS broker (its ``state`` and the ``BrokerRecorder``)."""

    def collect(self) -> Iterator[Metric]:
        b = self.broker
        name = str(b.name)
        st = b.state
        yield from _broker_metrics(name, "leaf", len(st.subscriptions), self.recorder)
        down = len(st.down & set(st.endpoints))
        routers = _gauge("gridstat_broker_routers", "Routers of the cloud, by state", ["broker", "state"])
        routers.add_metric([name, "up"], float(len(st.endpoints) - down))
        routers.add_metric([name, "down"], float(down))
        yield routers
        yield _variable_info(name, st.registry)
        yield _one(_gauge("gridstat_broker_mode", "Current operating mode of the cloud", ["broker"]), [name],
                   float(getattr(b, "current_mode", 0)))
        yield _one(_gauge("gridstat_broker_mode_changing", "1 while a mode change runs", ["broker"]), [name],
                   1.0 if getattr(b, "mode_changing", False) else 0.0)
        yield _one(_counter("gridstat_broker_router_rebuilds_total", "Restarted routers rebuilt from the state",
                            ["broker"]), [name], float(getattr(b, "rebuilds", 0)))
        healing = getattr(b, "healing", None)  # broker.healing (docs/redundancy.md, "Healing")
        if healing is not None:
            yield _one(_counter("gridstat_broker_paths_replanned_total",
                                "Subscriptions re-planned around a failed router or channel", ["broker"]), [name],
                       float(healing.repaired))
            yield _one(_gauge("gridstat_broker_subscriptions_unrepaired",
                              "Subscriptions left on a broken path (no replacement path)", ["broker"]), [name],
                       float(len(healing.unrepaired)))
            last = healing.last
            yield _one(_gauge("gridstat_broker_last_replan_seconds",
                              "Time of the last re-planning pass (planning and the routers' transaction)",
                              ["broker"]), [name], float(last.took_s) if last is not None else 0.0)
        gate = getattr(b, "gate", None)  # broker.gate: the bound on concurrent admissions
        if gate is not None:
            busy = _counter("gridstat_broker_admissions_refused_busy_total",
                            "Admissions refused as RESOURCE_EXHAUSTED at the broker's bound, by scope "
                            "(global: all callers', caller: the caller's own)", ["broker", "scope"])
            for scope in ("global", "caller"):
                busy.add_metric([name, scope], float(gate.refused[scope]))
            yield busy
            yield _one(_gauge("gridstat_broker_admissions_in_flight", "Admissions the broker is working on",
                              ["broker"]), [name], float(gate.in_flight))


#: The attributes ``gridstat_variable_info`` carries as labels: where a variable is (a topology file's
#: station, docs/topology.md) and what it measures (the C37.118 gateway's ``signal``), for map panels
#: and joins on ``variable``; a variable without one has it empty.
VARIABLE_INFO_ATTRIBUTES = ("station", "region", "owner", "voltage_kv", "latitude", "longitude", "signal")


def _variable_info(name: str, registry: Any) -> Metric:
    info = _gauge("gridstat_variable_info", "A registered status variable (always 1), with where it is and what it "
                  "measures (docs/telemetry.md)", ["broker", "variable", *VARIABLE_INFO_ATTRIBUTES])
    for var in registry:
        attrs = var.attributes
        info.add_metric([name, str(var.full_name), *(str(attrs.get(a, "")) for a in VARIABLE_INFO_ATTRIBUTES)], 1)
    return info


class ParentBrokerCollector(_BrokerBase):
    """``gridstat_broker_*`` of a parent QoS broker."""

    def collect(self) -> Iterator[Metric]:
        b = self.broker
        name = str(b.name)
        yield from _broker_metrics(name, "parent", len(getattr(b, "subs", {})), self.recorder)
        yield _one(_gauge("gridstat_broker_child_brokers", "Child brokers below this parent", ["broker"]), [name],
                   float(len(getattr(b, "children", {}))))


def _broker_metrics(name: str, role: str, subscriptions: int, recorder: BrokerRecorder | None) -> Iterator[Metric]:
    """What every QoS broker reports: its role, the subscriptions it holds, its recorder's decisions."""
    yield _one(_gauge("gridstat_broker_info", "A QoS broker (always 1), with its role", ["broker", "role"]),
               [name, role], 1)
    yield _one(_gauge("gridstat_broker_subscriptions", "Subscriptions the broker holds", ["broker"]), [name],
               float(subscriptions))
    if recorder is not None:
        yield from _recorder_metrics(name, recorder)


def _recorder_metrics(name: str, rec: BrokerRecorder) -> Iterator[Metric]:
    decisions = _counter("gridstat_broker_admission_decisions_total",
                         "Admission decisions, by decision (admitted, rejected, delegated) and reason",
                         ["broker", "decision", "reason"])
    for (decision, reason), n in rec.decisions.items():
        decisions.add_metric([name, decision, reason], float(n))
    yield decisions
    yield _one(_counter("gridstat_broker_admission_seconds_total", "Time spent deciding and installing subscriptions",
                        ["broker"]), [name], rec.decision_seconds)
    modes = _counter("gridstat_broker_mode_changes_total", "Mode changes, by outcome (committed, failed)",
                     ["broker", "outcome"])
    for outcome, n in rec.mode_changes.items():
        modes.add_metric([name, outcome], float(n))
    yield modes


class AdmissionCollector(_Base):
    """``gridstat_admission_*`` of the admission controller (its resource model and decisions)."""

    def __init__(self, name: str, controller: Any) -> None:
        self.name = name
        self.controller = controller

    def collect(self) -> Iterator[Metric]:
        c, n = self.controller, self.name
        info = _gauge("gridstat_admission_info", "The admission controller (always 1), with its policy",
                      ["admission", "policy"])
        info.add_metric([n, str(getattr(getattr(c, "policy", None), "value", ""))], 1)
        yield info
        decisions = _counter("gridstat_admission_decisions_total", "Admission decisions, by reason",
                             ["admission", "reason"])
        for reason, k in dict(getattr(c, "decisions", {})).items():
            decisions.add_metric([n, str(reason)], float(k))
        yield decisions
        for name, doc, value in (
            ("gridstat_admission_reservations", "Subscriptions holding reserved resources", len(c.admitted())),
            ("gridstat_admission_routers", "Routers with declared capacities", len(getattr(c, "routers", {}))),
            ("gridstat_admission_links", "Links with declared capacities", len(getattr(c, "links", {}))),
            ("gridstat_admission_covering_graph_nodes", "Nodes of the advertisements' covering graph",
             len(getattr(c, "graph", ()))),
        ):
            yield _one(_gauge(name, doc, ["admission"]), [n], float(value))


class PublisherCollector(_Base):
    """``gridstat_publisher_*`` of a ``client.Publisher``: what it sent, what it could not, and the
    instants of its periodic variables it skipped (docs/wire-format.md 3.4)."""

    def __init__(self, publisher: Any) -> None:
        self.publisher = publisher

    def collect(self) -> Iterator[Metric]:
        n = str(self.publisher.name)
        st = self.publisher.stats
        yield _one(_counter("gridstat_publisher_events_published_total", "Events handed to the socket",
                            ["publisher"]), [n], float(st.published))
        yield _one(_counter("gridstat_publisher_events_dropped_total",
                            "Events lost to a full socket buffer or a send error", ["publisher"]), [n],
                   float(st.dropped))
        yield _one(_counter("gridstat_publisher_instants_skipped_total",
                            "Instants of periodic variables never published (a late wake-up); the next events "
                            "say which", ["publisher"]), [n], float(st.skipped))


class SubscriberCollector(_Base):
    """``gridstat_subscriber_*`` and ``gridstat_subscription_*`` of a ``client.Subscriber``."""

    def __init__(self, subscriber: SubscriberLike, *, datagrams: Callable[[], int] | None = None,
                 events: Callable[[], int] | None = None) -> None:
        self.subscriber = subscriber
        self._datagrams = datagrams or (lambda: int(getattr(subscriber.stats, "datagrams", 0)))
        self._events = events or (lambda: int(getattr(subscriber.stats, "events", 0)))

    def collect(self) -> Iterator[Metric]:
        sub = self.subscriber
        n = sub.name
        yield _one(_counter("gridstat_subscriber_datagrams_received_total", "Datagrams received", ["subscriber"]),
                   [n], float(self._datagrams()))
        yield _one(_counter("gridstat_subscriber_events_received_total", "Events received (before filtering)",
                            ["subscriber"]), [n], float(self._events()))
        drops = _counter("gridstat_subscriber_drops_total", "Datagrams or events not delivered, by reason",
                         ["subscriber", "reason"])
        for reason, k in _from_zero(dict(sub.stats.drops), SUBSCRIBER_DROP_REASONS).items():
            drops.add_metric([n, str(reason)], float(k))
        drops.add_metric([n, "callback_error"], float(sub.stats.callback_errors))
        yield drops
        yield _one(_gauge("gridstat_subscriber_mode", "The subscriber's current operating mode", ["subscriber"]),
                   [n], float(sub.current_mode))
        labels = ["subscriber", "variable"]
        counts = {
            "delivered": _counter("gridstat_subscription_events_delivered_total",
                                  "Events delivered to the application", labels),
            "gaps": _counter("gridstat_subscription_gaps_total", "Expected timestamps never delivered", labels),
            # gaps = lost + unpublished (docs/wire-format.md 3.4: the publisher's SKIPPED note).
            "lost": _counter("gridstat_subscription_lost_total",
                             "Expected timestamps published but lost on the way", labels),
            "unpublished": _counter("gridstat_subscription_unpublished_total",
                                    "Expected timestamps the publisher never published (it skipped them)", labels),
            "duplicates": _counter("gridstat_subscription_duplicates_total",
                                   "Redundant copies dropped (disjoint paths)", labels),
            "violations": _counter("gridstat_subscription_violations_total",
                                   "QoS violations reported (late, gap, latency)", labels),
            "extrapolated": _counter("gridstat_subscription_extrapolated_total",
                                     "Missed instants filled by extrapolation", labels),
            # Gap recovery from the history service (docs/gap-recovery.md): lost instants found and not.
            "recovered": _counter("gridstat_subscription_recovered_total",
                                  "Lost instants recovered from the history service", labels),
            "unrecoverable": _counter("gridstat_subscription_unrecoverable_total",
                                      "Lost instants the history service did not have in time", labels),
        }
        latency = _gauge("gridstat_subscription_latency_seconds",
                         "Delivery latency quantiles over the last 4096 events", [*labels, "quantile"])
        bound = _gauge("gridstat_subscription_latency_bound_seconds", "The subscription's latency bound", labels)
        interval = _gauge("gridstat_subscription_interval_seconds", "The subscription's requested interval", labels)
        last = _gauge("gridstat_subscription_last_event_timestamp_seconds",
                      "Publication timestamp of the newest delivered event (Unix seconds)", labels)
        # 0 while the current operating mode is not one of the subscription's (docs/modes.md): nothing is
        # expected then, and the stall and rate alerts leave it alone.
        active = _gauge("gridstat_subscription_active",
                        "1 while the subscription expects events (it has QoS in the current mode), else 0", labels)
        for s in sub.subscriptions():
            lv = [n, s.variable.full_name]
            st = s.stats
            for key, fam in counts.items():
                fam.add_metric(lv, float(getattr(st, key)))
            ring: Any = st.latency
            for q, pct in QUANTILES:
                v = ring.percentile(pct)
                if v is not None:
                    latency.add_metric([*lv, q], float(v) / 1000)
            bound.add_metric(lv, float(s.latency_ms) / 1000)
            interval.add_metric(lv, float(s.interval_ms) / 1000)
            if s.holder is not None:
                last.add_metric(lv, s.holder.timestamp_ms / 1000)
            active.add_metric(lv, 1.0 if getattr(s, "active", True) and getattr(s, "in_mode", True) else 0.0)
        yield from counts.values()
        yield active
        yield latency
        yield bound
        yield interval
        yield last


#: Why a connection to Kafka failed (telemetry.exporting: ExporterStats.connect_failures).
KAFKA_CONNECT_FAILURES = ("unavailable", "authentication", "tls")


class ExporterCollector(_Base):
    """``gridstat_telemetry_*``: the exporter's own health (loss, buffer, Kafka connection)."""

    def __init__(self, role: str, source: str, stats: Callable[[], ExporterStats],
                 buffered: Callable[[], int], capacity: int) -> None:
        self.role, self.source = role, source
        self._stats = stats
        self._buffered = buffered
        self._capacity = capacity

    def collect(self) -> Iterator[Metric]:
        s = self._stats()
        lv = [self.role, self.source]
        labels = ["role", "source"]
        emitted = _counter("gridstat_telemetry_records_emitted_total", "Telemetry records emitted, by topic",
                           [*labels, "topic"])
        for topic, k in s.emitted.items():
            emitted.add_metric([*lv, topic], float(k))
        yield emitted
        sent = _counter("gridstat_telemetry_records_sent_total", "Telemetry records acknowledged by Kafka, by topic",
                        [*labels, "topic"])
        for topic, k in s.sent.items():
            sent.add_metric([*lv, topic], float(k))
        yield sent
        lost = _counter("gridstat_telemetry_records_lost_total", "Telemetry records not delivered, by reason",
                        [*labels, "reason"])
        for reason in LossReason:
            lost.add_metric([*lv, reason.value], float(s.lost.get(reason.value, 0)))
        yield lost
        # Why Kafka could not be reached (docs/telemetry.md, "Kafka security"): a wrong password or CA
        # is told apart from Kafka away; each reason served from 0.
        failures = _counter("gridstat_telemetry_kafka_connect_failures_total",
                            "Connections to Kafka that failed, by reason", [*labels, "reason"])
        for failure, k in _from_zero(dict(s.connect_failures), KAFKA_CONNECT_FAILURES).items():
            failures.add_metric([*lv, str(failure)], float(k))
        yield failures
        for name, doc, value in (
            ("gridstat_telemetry_buffered_records", "Records waiting for Kafka", float(self._buffered())),
            ("gridstat_telemetry_buffer_capacity_records", "Most records held while Kafka is away",
             float(self._capacity)),
            ("gridstat_telemetry_kafka_connected", "1 while the exporter is connected to Kafka",
             1.0 if s.connected else 0.0),
        ):
            yield _one(_gauge(name, doc, labels), lv, value)
        for name, doc, value in (
            ("gridstat_telemetry_sent_bytes_total", "Encoded record bytes acknowledged (before compression)",
             float(s.bytes_sent)),
            ("gridstat_telemetry_export_gaps_total", "Kafka outages the exporter lived through", float(s.gaps)),
        ):
            yield _one(_counter(name, doc, labels), lv, value)


class TlsRefusalsCollector(_Base):
    """``gridstat_tls_handshakes_refused_total``: connections gRPC refused in the TLS handshake (no or an
    untrusted client certificate, plaintext to a TLS port), counted by ``core.grpclog``'s stderr tap."""

    def __init__(self, role: str, source: str, counts: Callable[[], Mapping[str, int]]) -> None:
        self.role, self.source = role, source
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        refused = _counter("gridstat_tls_handshakes_refused_total",
                           "gRPC connections refused in the TLS handshake, by reason", ["role", "source", "reason"])
        for reason, n in sorted(self._counts().items()):
            refused.add_metric([self.role, self.source, reason], float(n))
        yield refused


class HistoryCollector(_Base):
    """``gridstat_history_*`` of a history service (``history.service.HistoryServicer.stats``,
    docs/history.md): queries answered and failed by reason, events sent. The known reasons are
    served at 0 from the start, so that ``increase()`` sees the first failure."""

    #: Reasons a query fails with (docs/history.md, "Errors").
    REASONS = ("InvalidArgument", "SpanTooLong", "TooManyEvents", "KafkaUnavailable")

    def __init__(self, name: str, stats: Callable[[], Any]) -> None:
        self.name = name
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        st, n = self._stats(), self.name
        yield _one(_counter("gridstat_history_queries_total", "Time-range queries asked", ["history"]), [n],
                   float(st.queries))
        failed = _counter("gridstat_history_queries_failed_total", "Time-range queries refused or failed, by reason",
                          ["history", "reason"])
        for reason in sorted({*self.REASONS, *st.failed_by_reason}):
            failed.add_metric([n, reason], float(st.failed_by_reason.get(reason, 0)))
        yield failed
        yield _one(_counter("gridstat_history_events_sent_total", "Archived events sent in answers", ["history"]),
                   [n], float(st.events_sent))


class RpcDenialsCollector(_Base):
    """``gridstat_rpc_denied_total``: gRPC calls refused as ``PERMISSION_DENIED`` because the caller's
    certificate has no role the method needs (``core.access``), by method and the caller's roles."""

    def __init__(self, role: str, source: str, counts: Callable[[], Mapping[tuple[str, str], int]]) -> None:
        self.role, self.source = role, source
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        denied = _counter("gridstat_rpc_denied_total", "gRPC calls refused for the caller's role (PERMISSION_DENIED)",
                          ["role", "source", "method", "caller_role"])
        for (method, caller), n in sorted(self._counts().items()):
            denied.add_metric([self.role, self.source, method, caller], float(n))
        yield denied
