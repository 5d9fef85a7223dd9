"""Healing and skipped instants in the metrics (docs/telemetry.md; docs/redundancy.md "Healing";
docs/wire-format.md 3.4)."""

from __future__ import annotations

from pathlib import Path

from gridstat.broker.healing import Repair
from gridstat.broker.leaf import LeafBroker
from gridstat.broker.store import BrokerStore
from gridstat.telemetry.metrics import LeafBrokerCollector


def test_replanned_unrepaired_and_the_last_pass_are_exported(tmp_path: Path) -> None:
    broker = LeafBroker("A", BrokerStore(str(tmp_path / "A.sqlite")))
    try:
        broker.healing.repaired = 7
        broker.healing.unrepaired = {"A-s1", "A-s2"}
        broker.healing.last = Repair("router i1 down", repaired=7, plan_s=0.25, install_s=0.5)
        samples = {s.name: s.value for family in LeafBrokerCollector(broker).collect() for s in family.samples}
        assert samples["gridstat_broker_paths_replanned_total"] == 7
        assert samples["gridstat_broker_subscriptions_unrepaired"] == 2
        assert samples["gridstat_broker_last_replan_seconds"] == 0.75
    finally:
        broker.store.close()


def test_a_publisher_exports_what_it_sent_dropped_and_skipped() -> None:
    from gridstat.client import Publisher
    from gridstat.core.model import FLOAT, StatusVariable
    from gridstat.telemetry.metrics import PublisherCollector

    pub = Publisher("pmu1", 11, ("127.0.0.1", 9))
    handle = pub.variable(StatusVariable("pmu1", "freq", FLOAT, 10, variable_id=7))
    for ts in (1000, 1010, 1050):  # 1020, 1030 and 1040 skipped
        handle.encode(60.0, ts)
    samples = {s.name: s.value for family in PublisherCollector(pub).collect() for s in family.samples}
    assert samples["gridstat_publisher_instants_skipped_total"] == 3
    assert samples["gridstat_publisher_events_published_total"] == 0  # encoded, never sent


def test_every_registered_variable_is_one_info_series_with_where_it_is(tmp_path: Path) -> None:
    """``gridstat_variable_info`` (docs/telemetry.md): a station's attributes as labels, empty when absent."""
    from gridstat.core.model import FLOAT

    broker = LeafBroker("A", BrokerStore(str(tmp_path / "A.sqlite")))
    try:
        registry = broker.state.registry
        registry.register("pmu1", "freq", FLOAT, interval_ms=20, attributes={
            "station": "MIDWAY", "region": "west", "voltage_kv": "500", "latitude": "35.1", "longitude": "-119.2",
            "signal": "FREQ", "units": "Hz"})
        registry.register("pmu2", "freq", FLOAT, interval_ms=20)
        (family,) = [f for f in LeafBrokerCollector(broker).collect() if f.name == "gridstat_variable_info"]
        labels = {s.labels["variable"]: s.labels for s in family.samples}
        assert set(labels) == {"pmu1/freq", "pmu2/freq"} and all(s.value == 1 for s in family.samples)
        assert labels["pmu1/freq"] == {"broker": "A", "variable": "pmu1/freq", "station": "MIDWAY", "region": "west",
                                       "owner": "", "voltage_kv": "500", "latitude": "35.1", "longitude": "-119.2",
                                       "signal": "FREQ"}
        assert labels["pmu2/freq"]["station"] == "" and "units" not in labels["pmu2/freq"]
    finally:
        broker.store.close()
