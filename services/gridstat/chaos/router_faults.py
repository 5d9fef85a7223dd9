"""Chaos scenarios that fail routers: killed, stopped, a degraded channel (docs/chaos.md)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from gridstat.v1 import broker_pb2 as bpb

from . import diamond
from .checks import Outcome, check_reported, first_violation
from .diamond import LINKS, PUB_INTERVAL_MS, REBUILD_BOUND_S, ROUTERS, Cloud, cloud, count_lost, fmt_s
from .procs import Broker, Router, wait_for
from .traffic import ImpairedLink, SdkSubscriber, Sink


def path_loss(seconds: float) -> Outcome:
    """Redundancy 2; kill -9 a router on one path, restart it: 0 events lost, rebuilt within 2 s."""
    out = Outcome("path-loss")
    with cloud() as c:
        sink = Sink()
        try:
            c.register_publisher()
            c.register_subscriber("ems", sink)
            reply = c.subscribe("ems", redundancy=2)
            paths = sorted(tuple(p.routers) for p in reply.allocations[0].paths) if reply.admitted else []
            out.check("redundancy-2 admitted on disjoint paths", "2 node-disjoint paths",
                      " | ".join("-".join(p) for p in paths) or reply.rejection.reason, len(paths) == 2)
            if len(paths) != 2:
                return out
            feed = c.feed()
            try:
                wait_for(lambda: len(sink.timestamps(c.variable_id)) > 20, timeout_s=5)
                c.routers["i1"].kill()
                time.sleep(max(0.5, seconds))
                rebuild = c.restart_router("i1")
                time.sleep(0.5)
            finally:
                sent = feed.stop()
            time.sleep(0.2)
            lost, expected = count_lost(sent, sink.timestamps(c.variable_id))
            out.check("redundancy-2 loses no event when one path fails", "0 lost",
                      f"{lost} lost of {expected}", lost == 0 and expected > 0)
            out.check("restarted router rebuilt", f"<= {REBUILD_BOUND_S:.0f} s", fmt_s(rebuild),
                      rebuild <= REBUILD_BOUND_S)
            c.check_nothing_half_installed(out)
        finally:
            sink.close()
    return out


def router_kill(seconds: float) -> Outcome:
    """Redundancy 1; kill -9 the path's interior router, restart it: rebuilt within 2 s, the stream resumes."""
    out = Outcome("router-kill")
    with cloud() as c:
        sink = Sink()
        try:
            c.register_publisher()
            c.register_subscriber("ems", sink)
            reply = c.subscribe("ems")
            path = list(reply.allocations[0].paths[0].routers) if reply.admitted else []
            victim = path[1] if len(path) > 2 else "i1"
            feed = c.feed()
            try:
                wait_for(lambda: len(sink.timestamps(c.variable_id)) > 20, timeout_s=5)
                c.routers[victim].kill()
                killed_ms = int(time.time() * 1000)
                time.sleep(max(0.5, seconds))
                restart_ms = int(time.time() * 1000)
                rebuild = c.restart_router(victim)
                time.sleep(0.5)
            finally:
                sent = feed.stop()
            time.sleep(0.2)
            got = sink.timestamps(c.variable_id)
            out.check(f"restarted router {victim} rebuilt", f"<= {REBUILD_BOUND_S:.0f} s", fmt_s(rebuild),
                      rebuild <= REBUILD_BOUND_S)
            after = sorted(ts for ts in got if ts > restart_ms)
            restored_s = (after[0] - restart_ms) / 1000 if after else float("inf")
            out.check("delivery restored after the restart", f"<= {REBUILD_BOUND_S:.0f} s", fmt_s(restored_s),
                      restored_s <= REBUILD_BOUND_S)
            lost, expected = count_lost(sent, got, since=after[0] if after else None)
            out.check("no loss once restored", "0 lost", f"{lost} lost of {expected}", lost == 0 and bool(after))
            rebuilt_ms = after[0] if after else restart_ms
            outage = [ts for ts in sent if killed_ms <= ts <= rebuilt_ms and ts not in got]
            out.notes.append(f"redundancy 1: {len(outage)} events lost while {victim} was dead (expected; "
                             f"redundancy 2 covers this, see path-loss)")
            c.check_nothing_half_installed(out)
        finally:
            sink.close()
    return out


def router_stop(seconds: float) -> Outcome:
    """SIGSTOP the path's router: the SDK subscriber is told of the broken guarantee within one
    interval of the missed deadline; SIGCONT: the stream resumes."""
    out = Outcome("router-stop")
    interval_ms, latency_ms = 100, 50
    with cloud() as c:
        sdk = SdkSubscriber("ems", 900)
        try:
            c.register_publisher()
            c.register_subscriber("ems", sdk)
            reply = c.subscribe("ems", interval_ms=interval_ms, latency_ms=latency_ms)
            path = list(reply.allocations[0].paths[0].routers) if reply.admitted else []
            victim = path[1] if len(path) > 2 else "i1"
            sdk.subscribe("pmu1", "freq", c.variable_id, pub_interval_ms=PUB_INTERVAL_MS, interval_ms=interval_ms,
                          latency_ms=latency_ms)
            feed = c.feed()
            try:
                wait_for(lambda: len(sdk.events) > 5, timeout_s=5)
                before = len(sdk.violations)
                stopped_ms = int(time.time() * 1000)
                c.routers[victim].pause()
                time.sleep(max(1.0, seconds))
                c.routers[victim].resume()
                resumed_ms = int(time.time() * 1000)
                wait_for(lambda: sum(1 for ts in sdk.events if ts > resumed_ms) >= 5, timeout_s=5)
            finally:
                feed.stop()
            # The first expected event the stop kept back, and its deadline.
            late, first, lag = first_violation(sdk.violations, before, latency_ms)
            check_reported(out, late, lag, interval_ms, "broken guarantee reported to the subscriber")
            if first is not None:
                out.notes.append(f"first violation {first.kind} for ts {first.expected_ts_ms}, "
                                 f"{first.detected_ms - stopped_ms} ms after SIGSTOP")
            resumed = [ts for ts in sdk.events if ts > resumed_ms]
            out.check("stream resumes after SIGCONT", "> 0 events", f"{len(resumed)} events", bool(resumed))
            c.check_nothing_half_installed(out)
        finally:
            sdk.close()
    return out



def degraded_channel(seconds: float) -> Outcome:
    """One path's event channel degraded (20 % loss, 5+-4 ms delay so reordering, 5 % duplication) by a
    user-space relay: a redundancy-2 subscriber loses nothing and its application sees each instant once,
    in order."""
    out = Outcome("degraded-channel")
    with tempfile.TemporaryDirectory(prefix="gridstat-chaos-") as tmp:
        c = Cloud(Path(tmp))
        sdk = SdkSubscriber("ems", 901)
        relay: ImpairedLink | None = None
        try:
            # Start i1 first to know its event port, put the relay in front of it, and tell the broker
            # that i1's event address is the relay: e1 -> i1 traffic crosses the impaired channel.
            for name, rid, role in ROUTERS:
                c.routers[name] = Router(name, router_id=rid, role=role).start()
            relay = ImpairedLink(c.routers["i1"].port, loss=0.2, delay_ms=5, jitter_ms=4, duplicate=0.05)
            routers, c.routers = c.routers, {}
            _start_broker_over(c, routers, {"i1": relay.port})
            c.register_publisher()
            c.register_subscriber("ems", sdk)
            reply = c.subscribe("ems", redundancy=2)
            out.check("redundancy-2 admitted", "2 paths", f"{len(reply.allocations[0].paths) if reply.admitted else 0}",
                      reply.admitted and len(reply.allocations[0].paths) == 2)
            sdk.subscribe("pmu1", "freq", c.variable_id, pub_interval_ms=PUB_INTERVAL_MS, interval_ms=10,
                          latency_ms=200)
            feed = c.feed()
            try:
                wait_for(lambda: len(sdk.events) > 10, timeout_s=5)
                time.sleep(max(1.0, seconds))
            finally:
                sent = feed.stop()
            time.sleep(0.3)
            got = list(sdk.events)
            lost, expected = count_lost(sent, set(got))
            out.check("no event lost with one path degraded", "0 lost", f"{lost} lost of {expected}",
                      lost == 0 and expected > 0)
            out.check("application sees each instant once, in order", "no duplicate, increasing",
                      f"{len(got) - len(set(got))} duplicates, {'ordered' if got == sorted(got) else 'REORDERED'}",
                      len(got) == len(set(got)) and got == sorted(got))
            out.notes.append("impaired relay: " + ", ".join(f"{k} {v}" for k, v in relay.counts.items()))
            c.check_nothing_half_installed(out)
        finally:
            sdk.close()
            if relay is not None:
                relay.close()
            c.close()
    return out


def _start_broker_over(c: Cloud, routers: dict[str, Router], event_ports: dict[str, int]) -> None:
    """Cloud.start with routers already running (so a relay can sit in front of one)."""
    c.routers = routers
    extra = ("--channel-auth", "all") if diamond.AUTH else ()
    c.broker = Broker("A", state=str(c.workdir / "A.sqlite"), extra=extra).start()
    for name, _, role in ROUTERS:
        r = c.routers[name]
        port = event_ports.get(name, r.port)
        c.stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(
            name=name, role=role, capacity_eps=50_000, control_address=f"127.0.0.1:{r.control_port}",
            event_address=f"127.0.0.1:{port}", router_id=r.router_id)), timeout=5)
    for a, b, lat in LINKS:
        c.stub.AddChannel(bpb.AddTopologyChannelRequest(channel=bpb.TopologyChannel(
            a=a, b=b, bandwidth_bps=100_000_000, latency_ms=lat, both_directions=True)), timeout=5)
