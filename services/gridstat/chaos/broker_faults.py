"""Chaos scenarios that fail the leaf broker and the admission controller (docs/chaos.md)."""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from pathlib import Path

import grpc

from gridstat.v1 import broker_pb2 as bpb

from .checks import Outcome
from .diamond import FLOAT, REBUILD_BOUND_S, Cloud, check_flowing, cloud, fmt_s
from .procs import Admission, wait_for
from .traffic import Sink


def broker_kill(seconds: float) -> Outcome:
    """kill -9 the leaf broker: the data plane never stops; restarted on its state, it recovers everything."""
    out = Outcome("broker-kill")
    with cloud() as c:
        c.register_publisher()
        sink = c.sink("ems")
        reply = c.subscribe("ems", redundancy=2)
        before = [(s.subscription.subscription_id, sorted(tuple(p.routers) for a in s.allocations for p in a.paths))
                  for s in c.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions]
        feed = c.feed()
        assert c.broker is not None
        try:
            wait_for(lambda: len(sink.timestamps(c.variable_id)) > 20, timeout_s=5)
            c.broker.kill()
            down_ms = int(time.time() * 1000)
            time.sleep(max(0.5, seconds))
            up_ms = int(time.time() * 1000)
            c.broker.start()
            time.sleep(0.5)
        finally:
            sent = feed.stop()
        time.sleep(0.2)
        check_flowing(out, "data plane never stops while the broker is down", sent, sink.timestamps(c.variable_id),
                      (down_ms, up_ms), fault="down")
        after = [(s.subscription.subscription_id, sorted(tuple(p.routers) for a in s.allocations for p in a.paths))
                 for s in c.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions]
        out.check("broker recovers its subscriptions", "same ids and paths",
                  f"{len(after)} subscriptions, {'same' if after == before else 'DIFFERENT'}",
                  after == before and reply.admitted)
        health = c.stub.Health(bpb.BrokerHealthRequest(), timeout=5)
        out.check("broker recovers its topology", "4 routers up", f"{health.routers_up} up, "
                  f"{health.routers_down} down", health.routers_up == 4)
        c.register_subscriber("ems2", sink)
        again = c.subscribe("ems2", interval_ms=20)
        out.check("recovered broker admits", "new subscription admitted",
                  "admitted" if again.admitted else again.rejection.reason, again.admitted)
        c.check_nothing_half_installed(out)
    return out


def mode_switch_router_down(seconds: float) -> Outcome:
    """ChangeMode while a path router is dead (kill -9): the change completes or rolls back, never
    half; the restarted router is rebuilt into the broker's current mode."""
    out = Outcome("mode-switch-router-down")
    with cloud() as c:
        c.register_publisher()
        sink = c.sink("ems")
        c.stub.DefineMode(bpb.DefineModeRequest(mode=1, name="contingency"), timeout=5)
        reply = c.subscribe("ems", modes=(0, 1))
        out.check("subscription admitted in modes 0 and 1", "admitted", "admitted" if reply.admitted
                  else reply.rejection.reason, reply.admitted)
        feed = c.feed()
        try:
            wait_for(lambda: len(sink.timestamps(c.variable_id)) > 10, timeout_s=5)
            c.routers["i1"].kill()
            t0 = time.monotonic()
            try:
                change = c.stub.ChangeMode(bpb.ChangeModeRequest(name="contingency"), timeout=15)
                result = f"completed ({change.duration_ms:.0f} ms)"
            except grpc.RpcError as exc:
                result = f"refused: {exc.code().name}"
            took = time.monotonic() - t0
            modes = c.stub.ListModes(bpb.ListModesRequest(), timeout=5)
            target = 1 if result.startswith("completed") else 0
            out.check("mode change completes or rolls back", "current == 1 if completed else 0, not changing",
                      f"{result} in {took:.2f} s; current {modes.current_mode}, changing {modes.changing}",
                      modes.current_mode == target and not modes.changing)
            time.sleep(max(0.3, seconds / 2))
            rebuild = c.restart_router("i1")
            out.check("dead router rebuilt into the current mode", f"<= {REBUILD_BOUND_S:.0f} s, mode "
                      f"{modes.current_mode}", f"{fmt_s(rebuild)}, mode {c.routers['i1'].current_mode()}",
                      rebuild <= REBUILD_BOUND_S and c.routers["i1"].current_mode() == modes.current_mode)
            modes_seen = {n: r.current_mode() for n, r in c.routers.items()}
            out.check("every router in the broker's mode", f"all {modes.current_mode}",
                      " ".join(f"{n}={m}" for n, m in modes_seen.items()),
                      set(modes_seen.values()) == {modes.current_mode})
            resumed_ms = int(time.time() * 1000)
            wait_for(lambda: sum(1 for ts in sink.timestamps(c.variable_id) if ts > resumed_ms) >= 10,
                     timeout_s=3)
        finally:
            feed.stop()
        out.check("stream flows after the change", "> 0 events",
                  f"{sum(1 for ts in sink.timestamps(c.variable_id) if ts > resumed_ms)} events",
                  any(ts > resumed_ms for ts in sink.timestamps(c.variable_id)))
        c.check_nothing_half_installed(out)
    return out


def admission_kill(seconds: float) -> Outcome:
    """kill -9 the admission controller: the broker decides with its own reservation and says so;
    restarted at its port, the controller decides again."""
    out = Outcome("admission-kill")
    deadline_ms = 500
    with tempfile.TemporaryDirectory(prefix="gridstat-chaos-") as tmp:
        adm = Admission("admission").start()
        c = Cloud(Path(tmp), admission=adm)
        sink = Sink()
        try:
            c.start(broker_extra=("--admission", adm.address, "--admission-deadline-ms", str(deadline_ms)))
            c.register_publisher()
            for name in ("ems1", "ems2", "ems3", "ems4"):
                c.register_subscriber(name, sink)
            first = c.subscribe("ems1", interval_ms=10)
            out.check("controller decides while up", "decided_by controller",
                      f"{first.admission.decided_by or '-'}",
                      first.admitted and first.admission.decided_by == "controller")
            adm.pause()
            t0 = time.monotonic()
            second = c.subscribe("ems2", interval_ms=20)
            took = time.monotonic() - t0
            adm.resume()
            out.check("controller stopped (SIGSTOP): broker falls back within the deadline, says so",
                      f"admitted, fallback, note, <= {deadline_ms + 1000} ms",
                      f"admitted={second.admitted} fallback={second.admission.fallback} ({took * 1000:.0f} ms)",
                      second.admitted and second.admission.fallback and bool(second.admission.note)
                      and took * 1000 <= deadline_ms + 1000)
            adm.kill()
            t0 = time.monotonic()
            third = c.subscribe("ems3", interval_ms=30)
            took = time.monotonic() - t0
            out.check("controller dead (kill -9): broker falls back and says so", "admitted, fallback, note",
                      f"admitted={third.admitted} fallback={third.admission.fallback} ({took * 1000:.0f} ms)",
                      third.admitted and third.admission.fallback and bool(third.admission.note))
            time.sleep(max(0.2, seconds / 4))
            adm.start()
            restarted = time.monotonic()
            fourth = None
            for _ in range(40):  # bounded: gRPC's reconnect back-off decides when the broker sees it again
                fourth = c.subscribe("ems4", interval_ms=40)
                if not fourth.admitted or fourth.admission.decided_by == "controller":
                    break
                c.stub.Unsubscribe(bpb.UnsubscribeRequest(subscription_id=fourth.subscription.subscription_id),
                                   timeout=5)
                if time.monotonic() - restarted > 10:
                    break
                time.sleep(0.25)
            took = time.monotonic() - restarted
            ok = fourth is not None and fourth.admitted and fourth.admission.decided_by == "controller"
            out.check("restarted controller decides again", "decided_by controller within 10 s",
                      f"{'controller' if ok else 'broker'} after {took:.1f} s", ok)
            c.check_nothing_half_installed(out)
        finally:
            sink.close()
            c.close()
    return out



#: The deadline of each subscription call in broker-stop's churn.
CHURN_DEADLINE_S = 1.0


def broker_stop(seconds: float) -> Outcome:
    """SIGSTOP the leaf broker during subscription churn, then SIGCONT: the data plane keeps flowing,
    calls during the stop end at their deadline (no hang), churn works again, nothing half-installed."""
    out = Outcome("broker-stop")
    with cloud() as c:
        sink, churn_sink = Sink(), Sink()
        calls: list[tuple[float, float, str, str]] = []  # (start, end, op, status) in monotonic seconds
        stop = threading.Event()
        orphans: list[str] = []

        def churn() -> None:
            for _ in range(500):  # bounded in count; each call bounded by its deadline
                if stop.is_set():
                    return
                t0 = time.monotonic()
                try:
                    reply = c.stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
                        subscriber="ems2", variable="pmu1/freq", type=FLOAT, edge_router="e2",
                        qos=[bpb.ModeQoS(mode=0, interval_ms=20, latency_ms=50)])), timeout=CHURN_DEADLINE_S)
                    calls.append((t0, time.monotonic(), "subscribe", "OK" if reply.admitted else "rejected"))
                    if reply.admitted:
                        t1 = time.monotonic()
                        c.stub.Unsubscribe(bpb.UnsubscribeRequest(
                            subscription_id=reply.subscription.subscription_id), timeout=CHURN_DEADLINE_S)
                        calls.append((t1, time.monotonic(), "unsubscribe", "OK"))
                except grpc.RpcError as exc:
                    calls.append((t0, time.monotonic(), "call", exc.code().name))
                    if exc.code() is grpc.StatusCode.ALREADY_EXISTS:
                        # A Subscribe queued while the broker was stopped, whose client gave up at its
                        # deadline, was admitted on SIGCONT: the client removes what it did not know it had.
                        with contextlib.suppress(grpc.RpcError):
                            for held in c.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(subscriber="ems2"),
                                                                 timeout=CHURN_DEADLINE_S).subscriptions:
                                orphans.append(held.subscription.subscription_id)
                                c.stub.Unsubscribe(bpb.UnsubscribeRequest(
                                    subscription_id=held.subscription.subscription_id), timeout=CHURN_DEADLINE_S)
                time.sleep(0.05)

        try:
            c.register_publisher()
            c.register_subscriber("ems", sink)
            c.register_subscriber("ems2", churn_sink)
            reply = c.subscribe("ems")
            assert c.broker is not None
            feed = c.feed()
            worker = threading.Thread(target=churn, name="chaos-churn", daemon=True)
            try:
                wait_for(lambda: len(sink.timestamps(c.variable_id)) > 20, timeout_s=5)
                worker.start()
                time.sleep(0.5)
                stopped = time.monotonic()
                down_ms = int(time.time() * 1000)
                c.broker.pause()
                time.sleep(max(3 * CHURN_DEADLINE_S, seconds))  # so that a whole call falls within the stop
                up_ms = int(time.time() * 1000)
                c.broker.resume()
                resumed = time.monotonic()
                wait_for(lambda: any(t0 > resumed and st == "OK" for t0, _, _, st in calls), timeout_s=10)
                stop.set()
                worker.join(timeout=2 * CHURN_DEADLINE_S + 1)
            finally:
                stop.set()
                sent = feed.stop()
            time.sleep(0.2)
            check_flowing(out, "data plane keeps flowing while the broker is stopped", sent,
                          sink.timestamps(c.variable_id), (down_ms, up_ms), fault="stopped", also=reply.admitted)
            # Calls started during the stop whose deadline came before SIGCONT.
            blocked = [(t1 - t0, st) for t0, t1, _, st in calls if stopped <= t0 and t0 + CHURN_DEADLINE_S < resumed]
            hung = [(d, st) for d, st in blocked if st != "DEADLINE_EXCEEDED" or d > CHURN_DEADLINE_S + 0.5]
            longest = max((d for d, _ in blocked), default=0.0)
            out.check("calls during the stop end at their deadline (no hang)",
                      f">= 1 call, all DEADLINE_EXCEEDED <= {CHURN_DEADLINE_S + 0.5:.1f} s",
                      f"{len(blocked)} calls, {len(hung)} otherwise, longest {longest:.2f} s",
                      bool(blocked) and not hung and not worker.is_alive())
            ok_after = [t0 - resumed for t0, _, _, st in calls if t0 > resumed and st == "OK"]
            out.check("churn works again after SIGCONT", "a subscribe admitted within 10 s",
                      f"after {ok_after[0]:.2f} s, {len(ok_after)} calls OK" if ok_after else "never",
                      bool(ok_after))
            left = [s.subscription.subscription_id for s in c.stub.ListSubscriptions(
                bpb.ListSubscriptionsRequest(), timeout=5).subscriptions if s.subscription.subscriber == "ems2"]
            queued = sorted({*orphans, *left})
            if queued:
                out.notes.append(f"{len(queued)} churn subscription(s) admitted by calls whose client gave up at the "
                                 f"deadline (queued while stopped): {', '.join(queued)}"
                                 + (f"; removed by the client: {', '.join(sorted(set(orphans)))}" if orphans else ""))
            c.check_nothing_half_installed(out)
        finally:
            stop.set()
            sink.close()
            churn_sink.close()
    return out
