"""``/metrics`` served on the event loop from a role's counters, in Prometheus's text format."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from gridstat.telemetry import MetricsServer
from gridstat.telemetry.metrics import RouterCollector

#: The ``http_get`` fixture (tests/conftest.py).
HttpGet = Callable[[int, str], Awaitable[tuple[str, str]]]


def stats() -> dict[str, Any]:
    return {
        "router": "e1", "role": "edge", "variant": "close", "events_in": 10, "events_forwarded": 8,
        "events_filtered": 2, "datagrams_in": 4, "drops": {"malformed": 1}, "current_mode": 0, "table_version": 3,
        "uptime_s": 5.0, "cpu_seconds": 0.25, "flooded_variables": [],
        "channels": [{"name": "sub-ems", "up": True, "events_in": 0, "datagrams_in": 0, "events_sent": 8,
                      "datagrams_sent": 4, "filtered": 2, "drops": {"queue_full": 5}, "queued": 7, "rtt_ms": 0.5}],
    }


async def test_router_metrics_are_served_with_conventional_names(http_get: HttpGet) -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RouterCollector(stats, lambda: {"sub-ems": 4096}))
    server = MetricsServer(registry)
    await server.start()
    try:
        status, body = await http_get(server.port, "/metrics")
        assert status == "HTTP/1.1 200 OK"
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for fam in text_string_to_metric_families(body) for s in fam.samples}
        assert samples[("gridstat_router_events_forwarded_total", (("router", "e1"),))] == 8
        assert samples[("gridstat_router_drops_total", (("channel", "sub-ems"), ("reason", "queue_full"),
                                                        ("router", "e1")))] == 5
        assert samples[("gridstat_router_channel_queue_capacity_events", (("channel", "sub-ems"),
                                                                         ("router", "e1")))] == 4096
        assert samples[("gridstat_router_channel_rtt_seconds", (("channel", "sub-ems"), ("router", "e1")))] == 0.0005
        assert (await http_get(server.port, "/nope"))[0] == "HTTP/1.1 404 Not Found"
        assert server.scrapes == 1
    finally:
        await server.stop()
