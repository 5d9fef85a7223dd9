"""The processes of ``gridstat bench shapes``: routers, the load generator and subscribers on
127.0.0.1, one trial's measurements, and the wait for a quiet machine."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import grpc

from gridstat.bench import peers
from gridstat.bench.router import (
    QUIET_PCT,
    LineProc,
    RouterProc,
    all_proc_ticks,
    other_cpu_pct,
    proc_cpu_s,
    router_command,
)
from gridstat.bench.shape_plans import (
    CF_SENDER_ID,
    COND_CHAIN,
    COND_SUBS,
    FILTER_CHAIN,
    FILTER_SUBS,
    PUB_ID,
    REF_INTERVAL_MS,
    SUB_ID_BASE,
    RouteSpec,
)
from gridstat.core.children import ChildFailed, ready_port, wait_ready
from gridstat.v1 import condensation_pb2 as cpb
from gridstat.v1 import router_pb2 as pb
from gridstat.v1 import router_pb2_grpc as pb_grpc

Log = Callable[[str], None]

# -- processes ------------------------------------------------------------------------------------------
@dataclass
class Topology:
    """Routers (name -> id), router links, subscribers (name -> the router feeding them), publisher's router."""

    routers: dict[str, int]
    links: list[tuple[str, str]]
    subs: dict[str, str]
    pub_at: str
    cf_at: str | None = None


def filter_topology() -> Topology:
    chain = list(FILTER_CHAIN)
    subs = {s: chain[k + 1] for k, s in enumerate(FILTER_SUBS)}
    subs["ref"] = chain[-1]
    return Topology({n: k + 1 for k, n in enumerate(chain)}, list(itertools.pairwise(chain)), subs,
                    chain[0])


def cond_topology() -> Topology:
    chain = list(COND_CHAIN)
    subs = {s: chain[-1] for s in COND_SUBS}
    subs["ref1"] = chain[0]
    subs["ref2"] = chain[-1]
    return Topology({n: 11 + k for k, n in enumerate(chain)}, list(itertools.pairwise(chain)), subs,
                    chain[0], cf_at=chain[0])


def _start_routers(names: dict[str, int], errs: dict[str, IO[bytes]], timeout_s: float = 30.0) -> list[RouterProc]:
    """Router processes, not pinned (the whole tree shares the machine's cores, like the peers)."""
    base, _how = router_command()
    out: list[RouterProc] = []
    try:
        for name, rid in names.items():
            err = tempfile.TemporaryFile()  # noqa: SIM115 (open while the router runs; closed by Rig.close)
            errs[name] = err
            proc = subprocess.Popen([*base, "--name", name, "--id", str(rid), "--control-port", "0",
                                     "--exit-with-parent"], stdout=subprocess.PIPE, stderr=err,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
            out.append(RouterProc(name, rid, proc))
        deadline = time.monotonic() + timeout_s
        for r in out:
            try:
                fields = wait_ready(r.proc, what=f"router {r.name}", timeout_s=max(0.0, deadline - time.monotonic()))
            except ChildFailed as exc:
                e = errs[r.name]
                e.seek(0)
                raise RuntimeError(f"{exc} {e.read().decode(errors='replace')[-2000:]}") from None
            r.port, r.control_port = ready_port(fields), ready_port(fields, "control_port")
            r.channel = grpc.insecure_channel(f"127.0.0.1:{r.control_port}")
            r.stub = pb_grpc.RouterControlStub(r.channel)  # type: ignore[no-untyped-call]
    except BaseException:
        for r in out:
            r.stop()
        raise
    return out


def _counted_drops(s: pb.RouterStats) -> int:
    return sum(s.drops.values()) + sum(sum(c.drops.values()) for c in s.channels)


def _chan(s: pb.RouterStats, name: str) -> pb.ChannelStats | None:
    for c in s.channels:
        if c.name == name:
            return c
    return None


@dataclass
class ShapeTrial:
    """One trial's figures (rates over the publisher's elapsed time)."""

    label: str
    offered: int
    elapsed: float
    sent_load: int
    sent: int
    cpu_pct: dict[str, float]
    events_in: dict[str, int]
    counted_drops: dict[str, int]
    link_lost: dict[str, int]
    received: dict[str, int]
    ref: dict[str, dict[str, Any]]
    pub_cpu_pct: float = 0.0
    subs_cpu_pct: float = 0.0
    other_cpu_pct: float = 0.0
    function: dict[str, int] = field(default_factory=dict)

    @property
    def tp_pub(self) -> float:
        """Load events/ms the publisher sent."""
        return self.sent_load / self.elapsed / 1000 if self.elapsed else float("nan")

    def tp_subs(self, subs: Sequence[str]) -> float:
        return sum(self.received.get(s, 0) for s in subs) / self.elapsed / 1000 if self.elapsed else float("nan")

    @property
    def dropped(self) -> int:
        return sum(self.counted_drops.values()) + sum(self.link_lost.values())

    @property
    def drop_pct(self) -> float:
        """The dissertation's drop %: events dropped anywhere over events the publisher sent, x 100."""
        return 100 * self.dropped / self.sent if self.sent else float("nan")

    @property
    def cpu_total(self) -> float:
        return sum(self.cpu_pct.values())

    def us_per_event(self, router: str) -> float:
        """The router's CPU per event it received (us)."""
        n = self.events_in.get(router, 0)
        return 1e4 * self.cpu_pct[router] * self.elapsed / n if n else float("nan")

    def ref_mean_us(self, sub: str) -> float:
        v = self.ref.get(sub, {}).get("mean")
        return float(v) if v is not None else float("nan")

    def ref_n(self, sub: str) -> int:
        return int(self.ref.get(sub, {}).get("n", 0))


class Rig:
    """The routers and peers of one experiment; ``close`` (always called) stops every process it started."""

    def __init__(self, topo: Topology, log: Log) -> None:
        self.topo = topo
        self.log = log
        self.routers: dict[str, RouterProc] = {}
        self.subs: dict[str, LineProc] = {}
        self.sub_ports: dict[str, int] = {}
        self.pub: LineProc | None = None
        self._errs: dict[str, IO[bytes]] = {}
        try:
            for name in topo.subs:
                self.subs[name] = LineProc([sys.executable, "-m", "gridstat.bench.peers", "sub"], f"subscriber {name}")
            self.pub = LineProc([sys.executable, "-m", "gridstat.bench.peers", "pub", "--sender-id", str(PUB_ID)],
                                 "publisher")
            for name, p in self.subs.items():
                self.sub_ports[name] = int(json.loads(p.readline(20))["port"])
            json.loads(self.pub.readline(20))
            self.routers = {r.name: r for r in _start_routers(topo.routers, self._errs)}
            self._channels()
            time.sleep(0.3)  # first pings and pongs: every router link is up
        except BaseException:
            self.close()
            raise

    def stub(self, router: str) -> pb_grpc.RouterControlStub:
        s = self.routers[router].stub
        assert s is not None
        return s

    def _channels(self) -> None:
        t = self.topo
        chans: dict[str, list[pb.Channel]] = {n: [] for n in t.routers}
        for a, b in t.links:
            ra, rb = self.routers[a], self.routers[b]
            chans[a].append(pb.Channel(name=b, peer_id=rb.router_id, kind=pb.CHANNEL_KIND_ROUTER, host="127.0.0.1",
                                       port=rb.port))
            chans[b].append(pb.Channel(name=a, peer_id=ra.router_id, kind=pb.CHANNEL_KIND_ROUTER, host="127.0.0.1",
                                       port=ra.port))
        for k, (s, r) in enumerate(t.subs.items()):
            chans[r].append(pb.Channel(name=s, peer_id=SUB_ID_BASE + k, kind=pb.CHANNEL_KIND_SUBSCRIBER,
                                       host="127.0.0.1", port=self.sub_ports[s]))
        chans[t.pub_at].append(pb.Channel(name="pub", peer_id=PUB_ID, kind=pb.CHANNEL_KIND_PUBLISHER))
        if t.cf_at is not None:
            # The condensation output enters i0's forwarding as from this publisher channel (output_sender_id).
            chans[t.cf_at].append(pb.Channel(name="pub:cf", peer_id=CF_SENDER_ID, kind=pb.CHANNEL_KIND_PUBLISHER))
        for r, cs in chans.items():
            for c in cs:
                self.stub(r).AddChannel(pb.AddChannelRequest(channel=c), timeout=5)

    def install(self, routes: Sequence[RouteSpec]) -> None:
        by: dict[str, list[pb.Route]] = {}
        for r in routes:
            by.setdefault(r.router, []).append(r.message())
        for router, rs in by.items():
            for i in range(0, len(rs), 2000):
                self.stub(router).InstallRoutes(pb.InstallRoutesRequest(routes=rs[i:i + 2000]), timeout=20)

    def pids(self) -> set[int]:
        """This process's and every process of the rig (to tell them from other processes' load)."""
        return {os.getpid(), *(r.proc.pid for r in self.routers.values()), *(p.pid for p in self.subs.values()),
                *([self.pub.pid] if self.pub is not None else [])}

    def router_log(self, name: str) -> str:
        e = self._errs.get(name)
        if e is None:
            return ""
        e.seek(0)
        return e.read().decode(errors="replace")[-2000:]

    def trial(self, label: str, rate: int, duration: float, var_base: int, *, ref_subs: Sequence[str],
              load_subs: Sequence[str], function_id: str | None = None) -> ShapeTrial:
        assert self.pub is not None
        t = self.topo
        names = list(t.routers)
        s0 = {n: self.routers[n].stats() for n in names}
        c0 = {n: self.routers[n].cpu_s() for n in names}
        p0 = proc_cpu_s(self.pub.pid)
        q0 = sum(proc_cpu_s(p.pid) for p in self.subs.values())
        a0 = all_proc_ticks()
        w0 = time.monotonic()
        ref = peers.ref_var(var_base)
        for name, p in self.subs.items():
            p.call({"cmd": "start", "record": name in ref_subs, "ref_var": ref, "sample_every": 1}, timeout=10)
        pub = self.pub.call({"host": "127.0.0.1", "port": self.routers[t.pub_at].port, "rate": rate,
                             "duration": duration, "pack": 16, "var_base": var_base,
                             "ref_interval_ms": REF_INTERVAL_MS, "pacing": "burst"}, timeout=duration * 2 + 10)
        for p in self.subs.values():
            p.send({"cmd": "stop", "quiet_s": 0.15, "max_wait_s": 2.0})
        got = {name: json.loads(p.readline(30)) for name, p in self.subs.items()}
        c1 = {n: self.routers[n].cpu_s() for n in names}
        p1 = proc_cpu_s(self.pub.pid)
        q1 = sum(proc_cpu_s(p.pid) for p in self.subs.values())
        s1 = {n: self.routers[n].stats() for n in names}
        a1 = all_proc_ticks()
        w1 = time.monotonic()
        el = float(pub["elapsed"]) or 1.0

        def delta(router: str, chan: str, attr: str) -> int:
            a, b = _chan(s0[router], chan), _chan(s1[router], chan)
            return (int(getattr(b, attr)) if b is not None else 0) - (int(getattr(a, attr)) if a is not None else 0)

        lost: dict[str, int] = {}
        lost[f"pub->{t.pub_at}"] = max(0, int(pub["sent"]) - delta(t.pub_at, "pub", "events_in"))
        for a, b in t.links:
            lost[f"{a}->{b}"] = max(0, delta(a, b, "events_sent") - delta(b, a, "events_in"))
            lost[f"{b}->{a}"] = max(0, delta(b, a, "events_sent") - delta(a, b, "events_in"))
        for s, r in t.subs.items():
            lost[f"{r}->{s}"] = max(0, delta(r, s, "events_sent") - int(got[s]["received"]))
        fn: dict[str, int] = {}
        if function_id is not None and t.cf_at is not None:
            def status(st: pb.RouterStats) -> cpb.CondensationStatus | None:
                return next((c for c in st.condensations if c.function_id == function_id), None)
            f0, f1 = status(s0[t.cf_at]), status(s1[t.cf_at])
            if f1 is not None:
                for k in ("inputs", "input_filtered", "triggers", "outputs", "calculator_errors"):
                    fn[k] = int(getattr(f1, k)) - (int(getattr(f0, k)) if f0 is not None else 0)
        ours = {os.getpid(), self.pub.pid, *(p.pid for p in self.subs.values()),
                *(r.proc.pid for r in self.routers.values())}
        tr = ShapeTrial(
            label=label, offered=rate, elapsed=el, sent_load=int(pub["sent_load"]), sent=int(pub["sent"]),
            cpu_pct={n: 100 * (c1[n] - c0[n]) / el for n in names},
            events_in={n: s1[n].events_in - s0[n].events_in for n in names},
            counted_drops={n: _counted_drops(s1[n]) - _counted_drops(s0[n]) for n in names},
            link_lost=lost, received={s: int(got[s]["received"]) for s in load_subs},
            ref={s: got[s].get("lat_ref", {}) for s in ref_subs},
            pub_cpu_pct=100 * (p1 - p0) / el, subs_cpu_pct=100 * (q1 - q0) / el,
            other_cpu_pct=other_cpu_pct(a0, a1, ours, w1 - w0), function=fn)
        time.sleep(0.1)
        return tr

    def close(self) -> None:
        for r in self.routers.values():
            try:
                r.stop()
            except Exception as exc:  # keep stopping the others
                self.log(f"stopping {r.name}: {exc}")
        for p in [*self.subs.values(), *([self.pub] if self.pub is not None else [])]:
            try:
                p.stop()
            except Exception as exc:
                self.log(f"stopping {p.name}: {exc}")
        for e in self._errs.values():
            e.close()


def _fmt_trial(t: ShapeTrial, routers: Sequence[str], subs: Sequence[str]) -> str:
    cpu = " ".join(f"{n} {t.cpu_pct[n]:.0f}" for n in routers)
    where = ", ".join(f"{k} {v}" for k, v in {**t.counted_drops, **t.link_lost}.items() if v)
    return (f"pub TP {t.tp_pub:.1f} ev/ms, sub TP {t.tp_subs(subs):.1f} ev/ms, CPU % {cpu} (sum "
            f"{t.cpu_total:.0f}), drops {t.dropped} ({t.drop_pct:.3f} %{': ' + where if where else ''}), "
            f"other procs {t.other_cpu_pct:.0f} %")


@dataclass
class NoiseBudget:
    """Bounds on what the benchmark spends against other processes' load: repeats, and seconds waited."""

    retries: int
    wait_s: float
    repeated: int = 0
    waited_s: float = 0.0


def await_quiet(ours: set[int], budget: NoiseBudget) -> None:
    """Before a trial: wait (within the budget) while other processes take more than QUIET_PCT of a core."""
    while budget.waited_s < budget.wait_s:
        a0, w0 = all_proc_ticks(), time.monotonic()
        time.sleep(0.5)
        busy = other_cpu_pct(a0, all_proc_ticks(), ours, time.monotonic() - w0)
        if busy <= QUIET_PCT:
            return
        budget.waited_s += time.monotonic() - w0


def noisy_trial(rig: Rig, run: Callable[[], ShapeTrial], budget: NoiseBudget, log: Log) -> ShapeTrial:
    """A trial after a (bounded) wait for a quiet machine, repeated once (while the budget lasts) if other
    processes still took more than QUIET_PCT of a core during it."""
    await_quiet(rig.pids(), budget)
    t = run()
    if t.other_cpu_pct > QUIET_PCT and budget.retries > 0:
        budget.retries -= 1
        budget.repeated += 1
        log(f"    (other processes used {t.other_cpu_pct:.0f} % of a core: trial repeated)")
        await_quiet(rig.pids(), budget)
        t = run()
    return t
