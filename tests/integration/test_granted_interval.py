"""What a subscriber is granted is what it is told (dissertation 4.2): an interval shorter than the
publication interval, or not a multiple of it, is rounded down to a multiple of it (at least the
publication interval) and the reply says so per mode; the SDK filters at the granted interval and
``gridstat sub list`` shows both. Real router and broker processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gridstat.client import Publisher, Subscriber
from gridstat.core.model import FLOAT

from .brokerprocs import edge_pair


async def test_the_reply_states_the_granted_interval_and_the_sdk_uses_it(tmp_path: Path) -> None:
    with edge_pair(tmp_path) as (broker, routers):
        e1, e2 = routers["e1"], routers["e2"]
        pub = await Publisher.connect("pmu1", f"127.0.0.1:{e1.control_port}")
        sub = await Subscriber.connect("ems", f"127.0.0.1:{e2.control_port}")
        try:
            await pub.register("freq", FLOAT, 10)
            fast = await sub.subscribe_remote("pmu1/freq", FLOAT, interval_ms=5, latency_ms=50)
            assert fast.interval_ms == 10  # the publication interval, as granted
            result = (await sub.session.list_subscriptions("ems"))[0]  # type: ignore[union-attr]
            assert result.granted_interval_ms == {0: 10} and result.qos[0].interval_ms == 5
            await pub.register("volt", FLOAT, 10)
            odd = await sub.subscribe_remote("pmu1/volt", FLOAT, interval_ms=25, latency_ms=50)
            assert odd.interval_ms == 20  # not a multiple of 10: rounded down
            listed = subprocess.run([sys.executable, "-m", "gridstat.cli.main", "sub", "list", "--broker",
                                     broker.address, "-o", "json"], capture_output=True, text=True, timeout=60)
            assert listed.returncode == 0, listed.stderr
            rows = {s["variable"]: s for s in json.loads(listed.stdout)}
            assert [a["granted_interval_ms"] for a in rows["pmu1/freq"]["allocations"]] == [10]
            assert [a["granted_interval_ms"] for a in rows["pmu1/volt"]["allocations"]] == [20]
            text = subprocess.run([sys.executable, "-m", "gridstat.cli.main", "sub", "list", "--broker",
                                   broker.address], capture_output=True, text=True, timeout=60).stdout
            assert "5 ms asked, 10 ms granted" in text and "25 ms asked, 20 ms granted" in text, text
        finally:
            await pub.stop()
            await sub.stop()
