"""The ``kube-*`` chaos scenarios: one fault each against a Helm release's pods, invariants checked.

Each scenario sets up, in the release's namespace, a publisher pod ``chaos-pmu`` at edge router e1
(``gridstat publish``, variables ``freq`` and ``angle`` every 20 ms), a subscriber pod ``chaos-ems`` at
e2 (``gridstat subscribe``: cumulative JSON stats lines) and a Subscription ``chaos-ems-freq`` of
``chaos-pmu/freq`` with redundancy 2, which the release's operator admits on two node-disjoint paths
(e1-i1-e2, e1-i2-e2). Once events flow it injects its fault on one path's interior router (or the
broker, or the operator), waits for recovery and checks, from the subscriber's stats (``kubectl
logs``) and the cluster: 0 events lost, the fault seen (e1's channel to the router down, from e1's
own /metrics read by a ``kubectl exec`` watcher), the pod back, the router's table rebuilt by its
broker. Everything it created is deleted afterwards, on failure too. Every wait has a deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .checks import Outcome
from .kube import (
    LINK_WATCH,
    METRICS_PORT,
    Delivery,
    KubeTarget,
    Names,
    channel_up_samples,
    choose_victim,
    container_id,
    container_init_pid,
    delivery,
    device_of_ip,
    disjoint,
    down_interval,
    last_stats,
    leader_operator,
    need_root,
    normal_paths,
    pod_netns,
    pod_ready,
    publisher_pod,
    ready_now,
    restart_count,
    routes_mention,
    subscriber_pod,
    subscription,
    subscription_ids,
    wait_until,
)
from .procs import ChaosError

INTERVAL_MS = 20
LATENCY_MS = 50
PUBLISHER_EDGE, SUBSCRIBER_EDGE = "e1", "e2"
#: Bounds of the waits (a 2-core node shared with other work: pods start in a few seconds).
START_S = 90.0
ADMIT_S = 60.0
RECREATE_S = 90.0
REBUILD_S = 60.0
#: Events the subscriber must count before a fault, and after recovery before the verdict.
WARMUP_EVENTS = 25
AFTER_EVENTS = 50
NFT_TABLE = "gridstat_chaos_kube"


def _fmt(s: float | None) -> str:
    return "never" if s is None else f"{s:.1f} s"


@dataclass
class Flow:
    """The scenario's clients and Subscription, admitted and flowing."""

    target: KubeTarget
    names: Names
    cloud: str
    paths: list[list[str]] = field(default_factory=list)

    def stats(self) -> dict[str, Any] | None:
        return last_stats(self.target.kubectl.logs(self.names.subscriber))

    def delivered(self, variable: str = "") -> Delivery:
        return delivery(self.stats(), variable or self.names.full_variable)

    def wait_more(self, base: int, more: int, timeout_s: float = 60.0, variable: str = "") -> Delivery:
        """Wait until ``more`` events beyond ``base`` were received."""
        def enough() -> Delivery | None:
            d = self.delivered(variable)
            return d if d.received >= base + more else None

        return wait_until(f"{more} more events at {self.names.subscriber}", enough, timeout_s)


def _cleanup(target: KubeTarget, names: Names, *, wait: bool) -> None:
    k = target.kubectl
    # Subscriptions first, while the subscriber is registered: the operator's finalizer removes them
    # from the broker.
    with contextlib.suppress(ChaosError):
        k.delete("subscriptions.gridstat.io", names.subscription, names.extra_subscription, wait=wait, timeout_s=45)
    with contextlib.suppress(ChaosError):
        k.delete("pod", names.publisher, names.subscriber, wait=wait, timeout_s=45)


@contextlib.contextmanager
def flow(target: KubeTarget, out: Outcome, names: Names | None = None) -> Iterator[Flow]:
    """Publisher and subscriber pods and a k=2 Subscription, admitted, events flowing; all deleted at the end."""
    names = names or Names()
    k = target.kubectl
    _cleanup(target, names, wait=True)  # leftovers of a run that was killed
    cloud = target.router(PUBLISHER_EDGE).cloud
    try:
        k.apply(publisher_pod(names, target.namespace, target.control_address(PUBLISHER_EDGE), INTERVAL_MS,
                              tls_secret=target.client_certificate(names.publisher)),
                subscriber_pod(names, target.namespace, target.control_address(SUBSCRIBER_EDGE), INTERVAL_MS,
                               tls_secret=target.client_certificate(names.subscriber)))
        for pod in (names.publisher, names.subscriber):
            wait_until(f"{pod} Ready", lambda p=pod: pod_ready(target.pod(p)), START_S)  # type: ignore[misc]
            wait_until(f"{pod} registered", lambda p=pod: "READY" in k.logs(p), START_S)  # type: ignore[misc]
        k.apply(subscription(names.subscription, target.namespace, names.full_variable, subscriber=names.subscriber,
                             edge=SUBSCRIBER_EDGE, cloud=cloud, interval_ms=INTERVAL_MS, latency_ms=LATENCY_MS,
                             redundancy=2))
        started = time.monotonic()
        try:
            body = wait_until(f"Subscription {names.subscription} Ready",
                              lambda: b if ready_now(b := k.get("subscriptions.gridstat.io", names.subscription))
                              else None, ADMIT_S)
            paths = normal_paths(body, names.full_variable)
        except ChaosError as exc:
            paths, body = [], {"error": str(exc)}
        f = Flow(target, names, cloud, paths)
        out.check("redundancy-2 Subscription admitted on node-disjoint paths", f"2 disjoint paths <= {ADMIT_S:.0f} s",
                  (" | ".join("-".join(p) for p in paths) + f" in {time.monotonic() - started:.1f} s") if paths
                  else str(body)[:120], len(paths) == 2 and disjoint(paths))
        if len(paths) != 2:
            raise _Abort
        wait_until("events flowing", lambda: f.delivered().received >= WARMUP_EVENTS, 60)
        yield f
    finally:
        _cleanup(target, names, wait=False)


class _Abort(Exception):
    """The set-up's own invariant failed: the outcome says why; nothing more to check."""


class LinkWatch:
    """e1's channel to ``peer``, sampled every 0.1 s from e1's /metrics by a ``kubectl exec`` in its pod."""

    def __init__(self, target: KubeTarget, router: str, peer: str, duration_s: float) -> None:
        script = LINK_WATCH.replace("%d/metrics", f"{METRICS_PORT}/metrics")
        self.proc = target.kubectl.popen_exec(target.router(router).pod, "router", "python3", "-c", script, peer,
                                              str(int(duration_s)))
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, name="chaos-linkwatch", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_first(self, timeout_s: float = 15.0) -> bool:
        return wait_until("link watch sampling", lambda: bool(channel_up_samples(self.lines)) or None, timeout_s,
                          0.1) is True

    def stop(self) -> list[tuple[int, int]]:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # a watcher that will not die is killed
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.thread.join(timeout=5)
        return channel_up_samples(self.lines)


def _timed(what: str, predicate: Callable[[], Any], timeout_s: float, since: float) -> tuple[float | None, Any]:
    """(seconds from ``since`` until ``predicate`` held, its value), or (None, None) past the deadline."""
    try:
        value = wait_until(what, predicate, timeout_s)
    except ChaosError:
        return None, None
    return time.monotonic() - since, value


def _check_reported(out: Outcome, samples: list[tuple[int, int]], fault_ms: int, victim: str, edge: str) -> None:
    down = next((t for t, up in samples if t >= fault_ms and up == 0), None)
    back = next((t for t, up in samples if down is not None and t > down and up == 1), None)
    out.check(f"broken path reported: {edge}'s channel to {victim} down", "down during the fault",
              (f"down {(down - fault_ms) / 1000:.2f} s after the fault; "
               + (f"up again {(back - down) / 1000:.1f} s later" if back else "not up again yet"))
              if down is not None else f"never down ({len(samples)} samples)", down is not None)


def _check_rebuilt(out: Outcome, f: Flow, victim: str, since: float) -> None:
    t = f.target
    took, _ = _timed(f"{victim} rebuilt", lambda: routes_mention(t.gridstat(f.cloud, "routes", victim), None,
                                                                f.names.full_variable), REBUILD_S, since)
    out.check(f"{victim}'s table rebuilt by its broker (gridstat routes {victim})", f"route back <= {REBUILD_S:.0f} s",
              f"after {_fmt(took)}", took is not None)


def _check_lost(out: Outcome, f: Flow, before: Delivery, during: Delivery, what: str) -> None:
    try:
        final = f.wait_more(during.received, AFTER_EVENTS)
    except ChaosError:
        final = f.delivered()
    moved = during.received > before.received
    out.check(f"0 events lost ({what})", "0 lost, events during the fault",
              f"{final.missing} lost of {final.distinct + final.missing}; {during.received - before.received} "
              f"received during the fault, {final.duplicates} duplicates dropped",
              final.missing == 0 and moved and final.received >= during.received + AFTER_EVENTS)


def _scenario(name: str) -> Callable[[Callable[[KubeTarget, float, Outcome], None]],
                                     Callable[[KubeTarget, float], Outcome]]:
    """A scenario body filling an Outcome; a ChaosError (a cluster call failing, a set-up step past its
    deadline) ends it as one more failed invariant, keeping what was checked before."""
    def wrap(body: Callable[[KubeTarget, float, Outcome], None]) -> Callable[[KubeTarget, float], Outcome]:
        def scenario(target: KubeTarget, seconds: float) -> Outcome:
            out = Outcome(name)
            t0 = time.monotonic()
            try:
                body(target, seconds, out)
            except ChaosError as exc:
                out.check("scenario ran to its end", "no cluster error, every wait within its deadline",
                          str(exc)[:240], False)
            out.seconds = time.monotonic() - t0
            return out

        scenario.__doc__, scenario.__name__ = body.__doc__, body.__name__
        return scenario

    return wrap


def _victim(f: Flow) -> str:
    victim = choose_victim(f.paths, prefer="i1")
    if not victim:
        raise ChaosError(f"no interior router on only one path of {f.paths}")
    return victim


@_scenario("kube-router-delete")
def router_delete(target: KubeTarget, seconds: float, out: Outcome) -> None:
    """k=2; delete the pod of an interior router on one path: 0 lost, pod back Ready, table rebuilt."""
    with contextlib.suppress(_Abort), flow(target, out) as f:
        victim = _victim(f)
        rp = target.router(victim)
        uid = (target.pod(rp.pod) or {}).get("metadata", {}).get("uid")
        watch = LinkWatch(target, f.paths[0][0], victim, seconds + RECREATE_S + REBUILD_S)
        try:
            watch.wait_first()
            before = f.delivered()
            fault_ms, t0 = int(time.time() * 1000), time.monotonic()
            target.kubectl.run("delete", "pod", rp.pod, "--wait=false")
            time.sleep(seconds)
            during = f.delivered()
            took, _ = _timed(f"{rp.pod} recreated Ready",
                             lambda: (p := target.pod(rp.pod)) and p["metadata"]["uid"] != uid and pod_ready(p),
                             RECREATE_S, t0)
            out.check(f"router pod {rp.pod} ({victim}) recreated and Ready", f"new pod Ready <= {RECREATE_S:.0f} s",
                      _fmt(took), took is not None)
            _check_rebuilt(out, f, victim, t0)
            time.sleep(1.0)
        finally:
            samples = watch.stop()
        _check_reported(out, samples, fault_ms, victim, f.paths[0][0])
        _check_lost(out, f, before, during, f"k=2, {victim}'s pod deleted")


@_scenario("kube-router-kill")
def router_kill(target: KubeTarget, seconds: float, out: Outcome) -> None:
    """k=2; SIGKILL the router container's process from the node: restarted in place, 0 lost, rebuilt."""
    need_root("kube-router-kill")
    with contextlib.suppress(_Abort), flow(target, out) as f:
        victim = _victim(f)
        rp = target.router(victim)
        pod = target.pod(rp.pod)
        uid, restarts, cid = (pod or {}).get("metadata", {}).get("uid"), restart_count(pod, "router"), \
            container_id(pod, "router")
        pid = container_init_pid(cid) if cid else 0
        if not pid:
            raise ChaosError(f"the router container of {rp.pod} ({cid or 'no id'}) has no process on this node")
        watch = LinkWatch(target, f.paths[0][0], victim, seconds + RECREATE_S + REBUILD_S)
        try:
            watch.wait_first()
            before = f.delivered()
            fault_ms, t0 = int(time.time() * 1000), time.monotonic()
            os.kill(pid, signal.SIGKILL)
            time.sleep(seconds)
            during = f.delivered()
            took, p = _timed(f"{rp.pod} restarted", lambda: (p := target.pod(rp.pod)) and p["metadata"]["uid"] == uid
                             and restart_count(p, "router") > restarts and pod_ready(p) and p, RECREATE_S, t0)
            now = restart_count(p, "router") if p else restart_count(target.pod(rp.pod), "router")
            out.check(f"container {victim} killed (SIGKILL, pid {pid} on the node): kubelet restarts it in place",
                      f"restartCount {restarts} -> {restarts + 1}, same pod, Ready <= {RECREATE_S:.0f} s",
                      f"restartCount {now}, Ready after {_fmt(took)}", took is not None and now == restarts + 1)
            _check_rebuilt(out, f, victim, t0)
            time.sleep(1.0)
        finally:
            samples = watch.stop()
        # The kubelet restarts a killed container in place, at the same address, often before the edge's
        # sampled view of the channel shows the outage: said as a note, not held as an invariant.
        down, back = down_interval(samples, fault_ms)
        out.notes.append(f"{f.paths[0][0]}'s channel to {victim}: " + (
            f"down {(down - fault_ms) / 1000:.2f} s after the kill" + (f", up {(back - down) / 1000:.1f} s later"
                                                                       if back else "") if down is not None
            else f"not seen down in {len(samples)} samples"))
        _check_lost(out, f, before, during, f"k=2, {victim}'s container killed")


@_scenario("kube-broker-delete")
def broker_delete(target: KubeTarget, seconds: float, out: Outcome) -> None:
    """Delete the leaf broker's pod: the data plane delivers meanwhile with 0 lost; the broker comes back
    with its subscriptions from its volume."""
    with contextlib.suppress(_Abort), flow(target, out) as f:
        pod = target.broker_pod(f.cloud)
        held = subscription_ids(target.gridstat(f.cloud, "sub", "list"))
        uid = (target.pod(pod) or {}).get("metadata", {}).get("uid")
        before = f.delivered()
        t0 = time.monotonic()
        target.kubectl.run("delete", "pod", pod, "--wait=false")
        time.sleep(seconds)
        away = wait_until("broker pod away", lambda: not pod_ready(target.pod(pod)) or None, 30, 0.2)
        during = f.delivered()
        took, _ = _timed(f"{pod} recreated Ready", lambda: (p := target.pod(pod)) and p["metadata"]["uid"] != uid
                         and pod_ready(p), RECREATE_S, t0)
        out.check(f"data plane delivers while {pod} is away", "events flow",
                  f"{during.received - before.received} events in the {seconds:.1f} s after the delete"
                  + ("" if away else " (pod never seen away)"), during.received > before.received and bool(away))
        out.check(f"broker pod {pod} recreated and Ready", f"new pod Ready <= {RECREATE_S:.0f} s", _fmt(took),
                  took is not None)
        after = subscription_ids(wait_until("broker answers", lambda: target.gridstat(f.cloud, "sub", "list"), 60))
        out.check("broker back with its subscriptions (from its volume)", f"{len(held)} held before, all back",
                  f"{len(held & after)} of {len(held)} back", bool(held) and held <= after)
        body = target.kubectl.get("subscriptions.gridstat.io", f.names.subscription)
        out.check("the Subscription stays Ready and Admitted", "Ready", "Ready" if ready_now(body) else "not Ready",
                  ready_now(body))
        _check_lost(out, f, before, during, "k=2, leaf broker pod deleted")


@_scenario("kube-path-loss")
def path_loss(target: KubeTarget, seconds: float, out: Outcome) -> None:
    """k=2; 100 % kernel loss (nftables) on a path router pod's eth0 in its network namespace: 0 lost, the
    broken path seen by e1, the fault undone."""
    from .netns_faults import delete_table, loss_rule, replace_table, table_counter

    need_root("kube-path-loss")
    with contextlib.suppress(_Abort), flow(target, out) as f:
        victim = _victim(f)
        rp = target.router(victim)
        ip = ((target.pod(rp.pod) or {}).get("status") or {}).get("podIP", "")
        ns = pod_netns(ip)
        from .netns import run

        dev = device_of_ip(run("ip", "-n", ns, "-o", "-4", "addr", "show"), ip) or "eth0"
        watch = LinkWatch(target, f.paths[0][0], victim, seconds + 90)
        dropped, removed = 0, False
        try:
            watch.wait_first()
            before = f.delivered()
            fault_ms = int(time.time() * 1000)
            try:
                # Both directions: e1 counts its channel up while it hears i1's own pings.
                replace_table(ns, NFT_TABLE, "prerouting", loss_rule(dev, 1.0))
                replace_table(ns, NFT_TABLE + "_out", "postrouting", f"oifname \"{dev}\" meta l4proto udp counter drop")
                time.sleep(seconds)
                dropped = table_counter(ns, NFT_TABLE) + table_counter(ns, NFT_TABLE + "_out")
                during = f.delivered()
            finally:
                delete_table(ns, NFT_TABLE)
                delete_table(ns, NFT_TABLE + "_out")
                removed = NFT_TABLE not in run("nft", "list", "tables", ns=ns)
            healed_ms = int(time.time() * 1000)
            wait_until("channel up again", lambda: any(t > healed_ms and up for t, up in
                                                       channel_up_samples(watch.lines)) or None, 20, 0.2)
        except ChaosError:
            removed = removed or NFT_TABLE not in run("nft", "list", "tables", ns=ns)
            raise
        finally:
            samples = watch.stop()
        out.check(f"kernel loss applied on {victim}'s {dev} ({ns}, pod {ip})",
                  "100 % UDP dropped both ways, > 0 packets",
                  f"nft {dropped} dropped in {seconds:.1f} s", dropped > 0)
        _check_reported(out, samples, fault_ms, victim, f.paths[0][0])
        up_after = [t for t, up in samples if t > healed_ms and up]
        out.check("fault undone", "nft table gone, channel up again",
                  ("table gone" if removed else "TABLE LEFT") + (
                      f"; up {(up_after[0] - healed_ms) / 1000:.1f} s after healing" if up_after else "; never up"),
                  removed and bool(up_after))
        _check_lost(out, f, before, during, f"k=2, {victim} cut off for {seconds:.1f} s")


@_scenario("kube-operator-delete")
def operator_delete(target: KubeTarget, seconds: float, out: Outcome) -> None:
    """Delete the leader operator pod: a Subscription applied meanwhile is admitted by the standby."""
    with contextlib.suppress(_Abort), flow(target, out) as f:
        k = target.kubectl
        ops = [p["metadata"]["name"] for p in k.items("pods", *target.selector("operator")) if pod_ready(p)]
        leader = leader_operator(k.get("kopfpeering", target.fullname), ops)
        out.check("leader operator found (KopfPeering's highest priority)", f"1 of {len(ops)} Ready pods",
                  leader or "none", bool(leader) and len(ops) >= 2)
        if not leader:
            return
        before = f.delivered()
        t0 = time.monotonic()
        k.run("delete", "pod", leader, "--wait=false")
        wait_until(f"{leader} gone", lambda: target.pod(leader) is None, 60)
        k.apply(subscription(f.names.extra_subscription, target.namespace, f.names.full_extra_variable,
                             subscriber=f.names.subscriber, edge=SUBSCRIBER_EDGE, cloud=f.cloud,
                             interval_ms=INTERVAL_MS, latency_ms=LATENCY_MS, redundancy=1))
        took, _ = _timed("admitted during the takeover", lambda: ready_now(
            k.get("subscriptions.gridstat.io", f.names.extra_subscription)), ADMIT_S + 30, t0)
        standby = [p for p in ops if p != leader]
        out.check("a Subscription applied while the leader goes is admitted by the standby",
                  f"Ready <= {ADMIT_S + 30:.0f} s", f"after {_fmt(took)} ({', '.join(standby)} standing by)",
                  took is not None)
        flowing, _ = _timed("its events arrive", lambda: f.delivered(f.names.full_extra_variable).received >= 10,
                            30, t0)
        extra = f.delivered(f.names.full_extra_variable)
        out.check(f"its events reach {f.names.subscriber}", ">= 10 events",
                  f"{extra.received} events, {extra.missing} lost", flowing is not None and extra.missing == 0)
        time.sleep(seconds)
        _check_lost(out, f, before, f.delivered(), "k=2 stream, operator leader deleted")


#: name -> (function(target, seconds) -> Outcome, one-line description)
SCENARIOS: dict[str, tuple[Callable[[KubeTarget, float], Outcome], str]] = {
    "kube-router-delete": (router_delete, "k=2, delete an interior router's pod on one path: 0 lost, pod back "
                                          "Ready, its table rebuilt by the broker"),
    "kube-router-kill": (router_kill, "k=2, SIGKILL a path router's container from the node (root): restartCount "
                                      "+1, 0 lost, rebuilt"),
    "kube-broker-delete": (broker_delete, "delete the leaf broker's pod: data plane delivers meanwhile, 0 lost; "
                                          "broker back with its subscriptions"),
    "kube-path-loss": (path_loss, "k=2, 100 % nftables loss on a path router pod's eth0 in its netns for --seconds "
                                  "(root): 0 lost, reported, undone"),
    "kube-operator-delete": (operator_delete, "delete the leader operator pod: a Subscription applied meanwhile is "
                                              "admitted by the standby"),
}


def run(name: str, target: KubeTarget, seconds: float = 2.0) -> Outcome:
    """One scenario against ``target``; never raises ChaosError (it becomes a failed invariant)."""
    fn, _ = SCENARIOS[name]
    return fn(target, seconds)
