"""A condensation function's host router and standalone host killed and stopped (docs/chaos.md)."""

from __future__ import annotations

import time

from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import condensation_pb2 as cpb

from .checks import Outcome, first_violation
from .diamond import FLOAT, PUB_INTERVAL_MS, REBUILD_BOUND_S, Cloud, cloud, count_lost, fmt_s
from .procs import CondenseHost, Router, wait_for
from .traffic import Feed, SdkSubscriber, Sink

CF_INTERVAL_MS = 100
#: The supervisor re-installs a restarted router's routes and function; its output must be back within this.
CF_RESUME_BOUND_S = REBUILD_BOUND_S + CF_INTERVAL_MS / 1000


def _router_functions(c: Cloud) -> dict[str, list[str]]:
    from gridstat.v1 import router_pb2 as rpb

    return {n: sorted(f.function_id for f in r.stub.GetStats(rpb.GetStatsRequest(), timeout=2).condensations)
            for n, r in c.routers.items() if r.running and r.stub is not None}


def condensation_host_kill(seconds: float) -> Outcome:
    """A condensation function (average of pmu1 on e1 and pmu2 on e2) placed by the leaf broker in a
    router slot: kill -9 its host router and restart it at the same ports, then SIGSTOP/SIGCONT it. The
    output resumes within a bound after the restart, the output subscriber is told of the stop within
    one interval, the redundancy-2 raw stream never stops, and nothing is half-installed."""
    out = Outcome("condensation-host-kill")
    latency_ms = 50
    with cloud() as c:
        raw, sdk = Sink(), SdkSubscriber("ems-cf", 902)
        feeds: list[Feed] = []
        try:
            c.register_publisher()
            pmu2 = c.stub.RegisterClient(bpb.RegisterClientRequest(
                name="pmu2", kind=bpb.CLIENT_KIND_PUBLISHER, edge_router="e2", first_time=True), timeout=5)
            var2 = c.stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
                publisher="pmu2", variable="freq", type=FLOAT, interval_ms=PUB_INTERVAL_MS, edge_router="e2")),
                timeout=5).publication.variable_id
            info = c.stub.CreateCondensation(bpb.CreateCondensationRequest(
                creator="ops", function_id="avg",
                output=bpb.Publication(publisher="cf", variable="avg", type=FLOAT, interval_ms=CF_INTERVAL_MS),
                inputs=[bpb.CondensationInputRequest(variable=v, latency_ms=latency_ms)
                        for v in ("pmu1/freq", "pmu2/freq")],
                spec=cpb.CondensationSpec(calculator="average", trigger=cpb.Trigger(
                    kind=cpb.TRIGGER_KIND_TIME, interval_ms=CF_INTERVAL_MS))), timeout=15)
            host, out_var = info.router, info.output.variable_id
            c.register_subscriber("ems", raw)
            c.register_subscriber("ems-cf", sdk)
            raw_reply = c.subscribe("ems", redundancy=2)
            cf_reply = c.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
                subscriber="ems-cf", variable="cf/avg", type=FLOAT, edge_router="e2",
                qos=[bpb.ModeQoS(mode=0, interval_ms=CF_INTERVAL_MS, latency_ms=latency_ms)])), timeout=10)
            ok = host in ("i1", "i2") and raw_reply.admitted and cf_reply.admitted
            out.check("function placed off the raw stream's edges; raw (redundancy 2) and output admitted",
                      "host i1/i2, both admitted", f"host {host} ({info.placement}), raw "
                      f"{'admitted' if raw_reply.admitted else raw_reply.rejection.reason}, output "
                      f"{'admitted' if cf_reply.admitted else cf_reply.rejection.reason}", ok)
            if not ok:
                return out
            sdk.subscribe("cf", "avg", out_var, pub_interval_ms=CF_INTERVAL_MS, interval_ms=CF_INTERVAL_MS,
                          latency_ms=latency_ms)
            feeds += [c.feed(), Feed(c.routers["e2"].port, pmu2.client_id, var2, PUB_INTERVAL_MS,
                                     key=pmu2.channel_key)]
            try:
                wait_for(lambda: len(sdk.events) >= 3 and len(raw.timestamps(c.variable_id)) > 20, timeout_s=5)
                # 1. kill -9 the host router, restart it at the same ports.
                c.routers[host].kill()
                time.sleep(max(0.5, seconds))
                restart_ms = int(time.time() * 1000)
                rebuild = c.restart_router(host)
                wait_for(lambda: any(ts > restart_ms for ts in sdk.events), timeout_s=5)
                after = [ts for ts in sdk.events if ts > restart_ms]
                resumed_s = (after[0] - restart_ms) / 1000 if after else float("inf")
                installed = wait_for(lambda: _router_functions(c).get(host) == ["avg"], timeout_s=2)
                out.check("killed host: supervisor re-installs the function, output resumes",
                          f"function back on {host}, output <= {CF_RESUME_BOUND_S:.1f} s after restart",
                          f"{'installed' if installed else 'NOT installed'} (routes {fmt_s(rebuild)}), output "
                          f"after {fmt_s(resumed_s)}", installed and resumed_s <= CF_RESUME_BOUND_S)
                # 2. SIGSTOP / SIGCONT the host.
                wait_for(lambda: sdk.count_after(restart_ms) >= 3, timeout_s=3)
                before = len(sdk.violations)
                stopped_ms, resumed_ms = c.routers[host].pause_for(max(1.0, seconds))
                wait_for(lambda: sdk.count_after(resumed_ms) >= 3, timeout_s=5)
            finally:
                stopped = [f.stop() for f in feeds]
            sent = stopped[0]
            time.sleep(0.2)
            late, first, lag = first_violation(sdk.violations, before, latency_ms)
            out.check("stopped host: output subscriber's violation callback fires within one interval",
                      f">= 1 late/gap, <= {CF_INTERVAL_MS} ms after the missed deadline",
                      f"{len(late)} violations, first {lag} ms" if lag is not None else "never",
                      lag is not None and lag <= CF_INTERVAL_MS)
            if first is not None:
                out.notes.append(f"first violation {first.kind} for ts {first.expected_ts_ms}, "
                                 f"{first.detected_ms - stopped_ms} ms after SIGSTOP")
            resumed = [ts for ts in sdk.events if ts > resumed_ms]
            out.check("output resumes after SIGCONT", "> 0 events", f"{len(resumed)} events", bool(resumed))
            lost, expected = count_lost(sent, raw.timestamps(c.variable_id))
            out.check("raw admitted stream never stops (redundancy 2, through kill and stop)", "0 lost",
                      f"{lost} lost of {expected}", lost == 0 and expected > 0)
            where = _router_functions(c)
            placed = {n: fs for n, fs in where.items() if fs}
            out.check("function installed once, on its host only", f"{host}: avg",
                      " ".join(f"{n}: {','.join(fs)}" for n, fs in placed.items()) or "nowhere",
                      placed == {host: ["avg"]})
            _standalone_host(c, out, seconds, latency_ms)
            c.check_nothing_half_installed(out)
        finally:
            raw.close()
            sdk.close()
    return out


HOST_SPEC = """function_id: host1
inputs:
  - {variable: pmu1/freq, latency_ms: 50}
output: {publisher: hostpub, variable: avg}
spec:
  calculator: average
  trigger: {kind: time, interval_ms: 100}
"""


def _standalone_host(c: Cloud, out: Outcome, seconds: float, latency_ms: int) -> None:
    """The standalone ``gridstat condense host`` through an edge router e3 (``--broker``, linked to i2):
    SIGSTOP/SIGCONT it (the output subscriber is told within one interval, the output recovers), then
    kill -9 and restart it (its output resumes for a subscriber that subscribes again)."""
    assert c.broker is not None
    e3 = c.routers["e3"] = Router("e3", router_id=5, role="edge", extra=("--broker", c.broker.address)).start()
    c.stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(
        name="e3", role="edge", capacity_eps=50_000, control_address=f"127.0.0.1:{e3.control_port}",
        event_address=f"127.0.0.1:{e3.port}", router_id=e3.router_id)), timeout=5)
    c.stub.AddChannel(bpb.AddTopologyChannelRequest(channel=bpb.TopologyChannel(
        a="e3", b="i2", bandwidth_bps=100_000_000, latency_ms=1.0, both_directions=True)), timeout=5)
    spec = c.workdir / "host1.yaml"
    spec.write_text(HOST_SPEC)
    host = CondenseHost("host1", edge_control_port=e3.control_port, spec=str(spec))
    sdk = SdkSubscriber("ems-host", 903)
    feed = c.feed()
    try:
        host.start()
        c.register_subscriber("ems-host", sdk)

        def subscribe_output() -> bool:
            reply = c.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
                subscriber="ems-host", variable="hostpub/avg", type=FLOAT, edge_router="e2",
                qos=[bpb.ModeQoS(mode=0, interval_ms=CF_INTERVAL_MS, latency_ms=latency_ms)])), timeout=10)
            sdk.subscribe("hostpub", "avg", host.variable_id, pub_interval_ms=CF_INTERVAL_MS,
                          interval_ms=CF_INTERVAL_MS, latency_ms=latency_ms)
            return bool(reply.admitted)

        admitted = subscribe_output()
        wait_for(lambda: len(sdk.events) >= 3, timeout_s=5)
        flowing = len(sdk.events)
        before = len(sdk.violations)
        _, resumed_ms = host.pause_for(max(1.0, seconds))
        wait_for(lambda: sdk.count_after(resumed_ms) >= 3, timeout_s=5)
        late = [v for _, v in sdk.violations[before:] if v.kind in ("late", "gap")]
        lag = (late[0].detected_ms - (late[0].expected_ts_ms + latency_ms)) if late else None
        recovered = sdk.count_after(resumed_ms)
        out.check("standalone host stopped: violation within one interval, output recovers after SIGCONT",
                  f"output flowing; >= 1 late/gap <= {CF_INTERVAL_MS} ms; > 0 events after",
                  f"{flowing} events, {'admitted' if admitted else 'REFUSED'}; {len(late)} violations, first "
                  f"{lag} ms; {recovered} events after", admitted and flowing > 0 and lag is not None
                  and lag <= CF_INTERVAL_MS and recovered > 0)
        old_id = host.variable_id
        host.kill()
        time.sleep(max(0.3, seconds / 2))
        restart_ms = int(time.time() * 1000)
        host.start()
        kept = any(s.subscription.subscriber == "ems-host" and s.admitted for s in c.stub.ListSubscriptions(
            bpb.ListSubscriptionsRequest(), timeout=5).subscriptions)
        again = kept or subscribe_output()
        wait_for(lambda: any(ts > restart_ms for ts in sdk.events), timeout_s=5)
        after = sorted(ts for ts in sdk.events if ts > restart_ms)
        resumed_s = (after[0] - restart_ms) / 1000 if after else float("inf")
        out.check("standalone host killed and restarted: its output resumes",
                  f"<= {CF_RESUME_BOUND_S:.1f} s after the restart", f"{fmt_s(resumed_s)}"
                  f"{'' if kept else ' (after subscribing again)'}", again and resumed_s <= CF_RESUME_BOUND_S)
        if not kept:
            out.notes.append(f"the restarted host registered its output afresh (variable id {old_id} -> "
                             f"{host.variable_id}) and the broker dropped the output's subscriptions with the old "
                             "publication: a subscriber must subscribe again")
    finally:
        feed.stop()
        host.stop()
        sdk.close()
