"""The chaos suite (docs/chaos.md) against real routers, brokers (leaf and parent), an admission controller
and a standalone condensation host on 127.0.0.1.

Each scenario is bounded (about 3-10 s with a 1 s fault); its invariant table is printed (-s shows it)
and every invariant must hold. condensation-host-kill, parent-partition and broker-stop must also show
the invariants they exist for, so that a scenario cut short cannot pass on fewer rows.
"""

from __future__ import annotations

import pytest

from gridstat.chaos import checks, diamond, scenarios
from gridstat.cli.main import main

pytestmark = pytest.mark.integration

EXPECTED = {
    "condensation-host-kill": ["killed host: supervisor re-installs the function, output resumes",
                               "stopped host: output subscriber's violation callback fires within one interval",
                               "raw admitted stream never stops (redundancy 2, through kill and stop)",
                               "standalone host killed and restarted: its output resumes",
                               "nothing half-installed"],
    "parent-partition": ["new inter-cloud subscription during the partition fails, retriable, within its deadline",
                         "in-cloud stream flows through the partition",
                         "installed inter-cloud stream flows through the partition",
                         "after healing a new inter-cloud subscription is admitted", "nothing half-installed"],
    # Healing (docs/redundancy.md): the restore times are the invariants.
    "spare-path": ["the surviving path loses no event", "the broken path re-planned onto the spare",
                   "redundancy restored", "both paths deliver again", "nothing half-installed"],
    "router-down-long": ["path re-planned over i2", "i1 rebuilt after its long outage",
                         "no loss from the re-planned path on, through i1's return", "nothing half-installed"],
    "broker-stop": ["data plane keeps flowing while the broker is stopped",
                    "calls during the stop end at their deadline (no hang)", "nothing half-installed"],
    # Kernel faults between network namespaces (chaos.netns; tests/chaos/test_netns.py tests the faults alone).
    "netns-path-loss": ["broken path reported: e1's channel to i1 down after the cut",
                        "0 events lost (link cut, then degraded)",
                        "duplicates removed by the subscriber's de-duplication",
                        "kernel faults applied on e1->i1", "nothing half-installed"],
    "netns-degraded-link": ["degraded link reported to the subscriber",
                            "reported within one interval of the missed deadline", "nothing half-installed"],
}

#: Shorter faults for the long scenarios (router-down-long keeps its router dead 15 x N s: 7.5 s here).
SECONDS = {"router-down-long": 0.5}

#: Scenarios against a real kube-apiserver: run by tests/integration/k8s/test_operator_chaos.py on the
#: session's control plane (``gridstat chaos run operator-kill`` starts its own).
ON_KUBERNETES = {"operator-kill"}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", [n for n in scenarios.SCENARIOS if n not in EXPECTED and n not in ON_KUBERNETES])
def test_scenario_invariants_hold(name: str) -> None:
    outcome = scenarios.run(name, seconds=1.0)
    text = checks.table(outcome)
    print(text)
    assert outcome.checks, text
    assert outcome.ok, text


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(EXPECTED))
def test_new_fault_scenarios_check_what_they_exist_for(name: str) -> None:
    outcome = scenarios.run(name, seconds=SECONDS.get(name, 1.0))
    text = checks.table(outcome)
    print(text)
    assert [i for i in EXPECTED[name] if i not in {c.invariant for c in outcome.checks}] == [], text
    assert outcome.ok, text


def test_cli_lists_and_refuses_unknown_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", "list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in scenarios.SCENARIOS)
    assert main(["chaos", "run", "no-such-fault"]) == 2
    assert "unknown scenario" in capsys.readouterr().err
    assert main(["chaos", "run", "path-loss", "--seconds", "600"]) == 2


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["path-loss", "router-kill", "router-stop"])
def test_scenario_invariants_hold_with_authenticated_channels(name: str) -> None:
    outcome = scenarios.run(name, seconds=1.0, auth=True)
    text = checks.table(outcome)
    print(text)
    assert any(c.invariant == "every event channel authenticated" for c in outcome.checks), text
    assert outcome.ok, text


def test_broker_keys_channels_and_the_edge_refuses_forged_and_replayed_datagrams(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    import time

    from gridstat.chaos.procs import wait_for
    from gridstat.core import wire
    from gridstat.v1 import router_pb2 as rpb

    monkeypatch.setattr(diamond, "AUTH", True)
    with diamond.cloud() as c:
        c.register_publisher()
        assert len(c.publisher_key) == 32
        e1 = c.routers["e1"]
        assert e1.stub is not None
        assert wait_for(lambda: all(ch.authenticated for ch in e1.stub.ListChannels(  # type: ignore[union-attr]
            rpb.ListChannelsRequest(), timeout=2).channels), timeout_s=5)
        now = time.time_ns() // 1_000_000
        ev = wire.encode_event(wire.Event(now - now % 10, c.variable_id, b"\0" * 8))
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            good = wire.sign_datagram(c.publisher_key, wire.encode_datagram(c.publisher_id, 7, [ev]))
            for data in (wire.encode_datagram(c.publisher_id, 5, [ev]),                       # unsigned
                         wire.sign_datagram(b"x" * 32, wire.encode_datagram(c.publisher_id, 6, [ev])),  # wrong key
                         good, good):                                                        # replayed once
                sock.sendto(data, ("127.0.0.1", e1.port))
        finally:
            sock.close()

        def drops() -> dict[str, int]:
            return dict(e1.stub.GetStats(rpb.GetStatsRequest(), timeout=2).drops)  # type: ignore[union-attr]

        assert wait_for(lambda: drops().get("auth_failed") == 2 and drops().get("replayed") == 1, timeout_s=5), drops()
