"""The chaos scenarios: a real cloud on 127.0.0.1, one fault each, invariants checked (docs/chaos.md).

The registry of every scenario and ``run``; the scenarios live by what they fail (``router_faults``,
``broker_faults``, ``hierarchy_faults``, ``condensation_faults``; kernel faults in ``netns_scenarios``,
the Kubernetes operator in ``kube_operator``), on the shared set-up of ``diamond``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from . import diamond
from .broker_faults import admission_kill, broker_kill, broker_stop, mode_switch_router_down
from .checks import Outcome
from .condensation_faults import condensation_host_kill
from .hierarchy_faults import parent_partition
from .router_faults import degraded_channel, path_loss, router_down_long, router_kill, router_stop, spare_path


def _operator_kill(seconds: float) -> Outcome:
    """chaos.kube_operator (imported here: it builds on this module); needs scripts/k8s-tools.sh."""
    from .kube_operator import operator_kill

    return operator_kill(seconds)


def _netns(name: str) -> Callable[[float], Outcome]:
    """A scenario of chaos.netns_scenarios (kernel faults between network namespaces; root and
    scripts/netns-tools.sh), imported when run: it builds on this module."""
    def go(seconds: float) -> Outcome:
        from . import netns_scenarios

        fn: Callable[[float], Outcome] = getattr(netns_scenarios, name)
        return fn(seconds)

    return go


#: name -> (function(seconds) -> Outcome, one-line description)
SCENARIOS: dict[str, tuple[Callable[[float], Outcome], str]] = {
    "path-loss": (path_loss, "redundancy 2, kill -9 a path router: 0 events lost, rebuilt within 2 s"),
    "router-kill": (router_kill, "redundancy 1, kill -9 the path router and restart it: re-planned around it, "
                    "rebuilt within 2 s"),
    "spare-path": (spare_path, "redundancy 2 with a spare, kill -9 a path router: 0 lost, the spare takes over "
                   "within 2 s, both paths deliver again"),
    "router-down-long": (router_down_long, "redundancy 1, a path router dead 15 x N s: re-planned at once; back, it "
                         "announces itself and is rebuilt within 1 s"),
    "router-stop": (router_stop, "SIGSTOP/SIGCONT a path router: violation reported within one interval"),
    "broker-kill": (broker_kill, "kill -9 the leaf broker: data plane never stops, state recovered"),
    "mode-switch-router-down": (mode_switch_router_down,
                                "ChangeMode while a path router is dead: completes or rolls back cleanly"),
    "admission-kill": (admission_kill, "kill -9 / SIGSTOP the admission controller: broker falls back, says so"),
    "degraded-channel": (degraded_channel, "one path lossy, delayed, reordered, duplicated: redundancy 2 loses 0"),
    "condensation-host-kill": (condensation_host_kill,
                               "kill -9 / SIGSTOP a condensation function's router and standalone host: output back"),
    "broker-stop": (broker_stop, "SIGSTOP the leaf broker during subscription churn: data flows, calls hit deadlines"),
    "parent-partition": (parent_partition,
                         "SIGSTOP the parent of two clouds: streams lose 0, new inter-cloud calls end at the deadline"),
    "netns-path-loss": (_netns("path_loss"), "routers in network namespaces, redundancy 2: one veth link cut, then "
                        "lossy, duplicating, delayed/reordered, rate-limited (kernel): 0 lost, the cut reported"),
    "netns-degraded-link": (_netns("degraded_link"), "routers in network namespaces, redundancy 1: the path's link "
                            "loses 50 % (nftables): violation reported within one interval"),
    "operator-kill": (_operator_kill,
                      "kill -9 / SIGSTOP the Kubernetes operator during churn: resources settle, streams lose 0"),
}


def run(name: str, seconds: float = 2.0, *, auth: bool = False) -> Outcome:
    fn, _ = SCENARIOS[name]
    t0 = time.monotonic()
    diamond.AUTH = auth
    try:
        out = fn(seconds)
    finally:
        diamond.AUTH = False
    if auth:
        out.scenario += " (authenticated channels)"
    out.seconds = time.monotonic() - t0
    return out

