"""The leaf broker's healing in its metrics (docs/telemetry.md, docs/redundancy.md "Healing")."""

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
