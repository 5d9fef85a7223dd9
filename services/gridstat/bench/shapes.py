"""``gridstat bench shapes``: the shapes of the dissertation's filtering and condensation experiments.

Two experiments with real ``gridstat router`` processes on 127.0.0.1, one paced
load generator (``bench.peers pub``, load variables every 1 ms, burst pacing) and
counting subscribers (``bench.peers sub``); channels and routes are installed
directly over the RouterControl gRPC API, as a leaf broker would install them.

1. **Multicast with filtering** (dissertation Tables 8.28-8.32): the 4-SR tree of
   its multicast experiment, e -> i1 -> i2 -> i3 -> i4 where the publisher's edge
   router e feeds the chain and every i_k also feeds one load subscriber s_k. In
   variant ``filt=f`` the last f subscribers (s4, s3, ...) subscribe at 2 ms, the
   others at 1 ms. Routes are installed per subscription path, so the rate filter
   runs as near the source as the downstream subscriptions allow: f = 1 filters on
   i3 -> i4, f = 2 on i2 -> i3, f = 3 on i1 -> i2, f = 4 at the publisher's edge
   (e -> i1), so the last f routers of the chain carry half the events.
2. **Condensation** (Tables 8.37-8.47): i0 -> i1 -> i2, i2 the multicast split to
   load subscribers s3 and s4. Without the function s3 and s4 subscribe to every
   load variable at 1 ms; with it they subscribe to the output of an ``average``
   condensation function in i0's slot (time trigger 1 ms, output every 1 ms), whose
   inputs reach it by routes on i0 to the channel ``SetupCondensation`` returned.

Each trial reads, per router, the on-CPU time of all its threads (schedstat) and
the GetStats counters, and per link the events one end sent and the other
received, so drops include socket-buffer losses as well as the routers' counters.
One reference variable (50 ms) goes to reference subscribers whose one-way
latency is recorded (e2e through the tree, the dissertation's "Mean" column).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import IO, Any

import grpc

from gridstat.bench import peers
from gridstat.bench.router import (
    QUIET_PCT,
    READY,
    RouterProc,
    _LineProc,
    all_proc_ticks,
    other_cpu_pct,
    proc_cpu_s,
    router_command,
    wait_for_quiet,
)
from gridstat.v1 import condensation_pb2 as cpb
from gridstat.v1 import router_pb2 as pb
from gridstat.v1 import router_pb2_grpc as pb_grpc

Log = Callable[[str], None]

PUB_ID = 900_001
SUB_ID_BASE = 900_100
CF_SENDER_ID = 900_050
VAR_BLOCK = peers.VAR_BLOCK
REF_INTERVAL_MS = 50

#: The filtering tree: the publisher's edge router, then the chain i1..i4, i_k feeding load subscriber s_k.
FILTER_CHAIN = ("e", "i1", "i2", "i3", "i4")
FILTER_SUBS = ("s1", "s2", "s3", "s4")
MAX_FILT = len(FILTER_SUBS)
#: The condensation chain; i2 is the multicast split to s3 and s4; the function runs on i0.
COND_CHAIN = ("i0", "i1", "i2")
COND_SUBS = ("s3", "s4")
COND_FUNCTION = "avg"
COND_TRIGGER_MS = 1
COND_OUT_OFFSET = 5_000  # output variable id = block base + this
#: The average leaves out inputs older than this, so the output stops when the publisher does.
COND_MAX_AGE_MS = 20

#: Default offered loads (events/s) of the two experiments; see the report's method paragraph.
FILTER_RATES = (250_000, 500_000)
COND_RATES = (250_000, 500_000, 750_000)
QUICK_FILTER_RATES = (500_000,)
QUICK_COND_RATES = (500_000,)

#: Against other processes' load (the machine is shared): at most this many repeated trials and seconds waited
#: for a quiet machine before trials, over the whole run.
RETRIES, WAIT_S = 12, 120.0
QUICK_RETRIES, QUICK_WAIT_S = 2, 15.0

# -- dissertation reference figures (Chapter 8) ---------------------------------------------------
#: Tables 8.28-8.32, tlv -> per f = 0..4: (mean ms, sd ms, sub TP ev/ms, drop %).
DISS_FILTER: dict[int, tuple[tuple[float, float, float, float], ...]] = {
    40: ((1.616, .431, 70.13, .005), (1.674, 1.033, 61.85, .114), (1.558, .414, 53.69, .001),
         (1.544, .355, 44.57, .001), (1.466, .569, 34.88, .044)),
    80: ((3.516, 2.319, 122.96, 3.489), (3.347, 2.197, 107.82, 3.259), (2.713, 1.698, 92.61, 1.982),
         (2.267, 1.448, 78.07, 1.104), (1.78, 1.109, 61.9, .679)),
}
DISS_FILTER_CPU = ("forwarding half the events on a branch saves 7-10 % CPU (tlv 40) and 10-15 % (tlv 80); "
                   "at f=4 CPU roughly halves, e.g. tlv 80 i1: 56-65 % -> 26-37 %")
#: Tables 8.37-8.47, CF-average with a 1 ms time trigger: tlv -> (s1 ms, s2 ms, sub TP ev/ms, CPU i0, i1, i2 %,
#: drop %), each "without -> with".
DISS_COND: dict[int, tuple[str, str, str, str, str]] = {
    40: ("1.21 -> 1.055", "1.368 -> 1.079", "35.79 -> 1.875", "17-23, 10-15, 30-40 -> 18-23, 1-4, 2-5", "0 -> 0"),
    80: ("1.189 -> 1.06", "2.152 -> 1.067", "62.91 -> 1.961", "30-33, 20-25, 55-65 -> 32-38, 1-5, 2-5",
         "1.167 -> 0"),
    120: ("1.254 -> 1.13", "3.299 -> 1.119", "78.71 -> 2.021", "42-50, 25-30, 70-72 -> 42-46, 1-7, 2-5",
          "4.505 -> 0"),
}


# -- route planning (pure) --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RouteSpec:
    """One route to install: on ``router``, events of ``variable_id`` leave on ``channel``."""

    router: str
    route_id: str
    variable_id: int
    channel: str
    sub_interval_ms: int
    pub_interval_ms: int = 1

    def message(self) -> pb.Route:
        return pb.Route(route_id=self.route_id, variable_id=self.variable_id, mode=0, channel=self.channel,
                        sub_interval_ms=self.sub_interval_ms, priority=1, pub_interval_ms=self.pub_interval_ms)


def sub_intervals(f: int, n: int = MAX_FILT) -> list[int]:
    """Subscription interval (ms) of load subscribers s1..sn in variant filt=f: the last f at 2 ms."""
    if not 0 <= f <= n:
        raise ValueError(f"filt must be in 0..{n}, got {f}")
    return [1] * (n - f) + [2] * f


def filter_routes(f: int, load_vars: Sequence[int], ref_var: int, *, chain: Sequence[str] = FILTER_CHAIN,
                  subs: Sequence[str] = FILTER_SUBS, ref_sub: str = "ref") -> list[RouteSpec]:
    """The routes of variant filt=f, one per subscription path and hop, as a leaf broker installs them.

    Subscriber ``subs[k]`` hangs off ``chain[k + 1]``; its path is chain[0] -> ... -> chain[k + 1] -> subs[k]
    at its own interval. The reference variable goes the whole chain to ``ref_sub`` at 50 ms.
    """
    if len(chain) != len(subs) + 1:
        raise ValueError("the chain is the edge router plus one router per subscriber")
    intervals = sub_intervals(f, len(subs))
    out: list[RouteSpec] = []
    for k, (sub, interval) in enumerate(zip(subs, intervals, strict=True)):
        path = [*chain[:k + 2], sub]
        for hop, nxt in itertools.pairwise(path):
            out.extend(RouteSpec(hop, sub, v, nxt, interval) for v in load_vars)
    path = [*chain, ref_sub]
    out.extend(RouteSpec(hop, ref_sub, ref_var, nxt, REF_INTERVAL_MS, REF_INTERVAL_MS)
               for hop, nxt in itertools.pairwise(path))
    return out


def link_intervals(routes: Iterable[RouteSpec]) -> dict[tuple[str, str], int]:
    """Per (router, outgoing channel): the interval the link carries the load variables at.

    With 1-ms publications and subscriptions at 1 or 2 ms (multiples of each other), the close routing
    table keeps the smallest interval per channel, so a link carries the fastest of its paths.
    Reference routes (publication interval > 1 ms) are left out.
    """
    out: dict[tuple[str, str], int] = {}
    for r in routes:
        if r.pub_interval_ms != 1:
            continue
        key = (r.router, r.channel)
        out[key] = min(out.get(key, r.sub_interval_ms), r.sub_interval_ms)
    return out


def filtering_point(f: int, chain: Sequence[str] = FILTER_CHAIN) -> str:
    """Where the load variables are first filtered to 2 ms in variant filt=f ("-" for f=0: nowhere)."""
    if f == 0:
        return "-"
    n = len(chain) - 1
    if not 1 <= f <= n:
        raise ValueError(f"filt must be in 0..{n}, got {f}")
    return f"{chain[n - f]} -> {chain[n - f + 1]}"


def sub_tp_model(tp_pub: float, f: int, n: int = MAX_FILT) -> float:
    """Events/ms at the load subscribers: the dissertation's ``(TP_pub)(n - f) + TP_pub / 2 * f``
    (its reference-stream term left out: our reference variable goes to its own subscriber)."""
    return tp_pub * (n - f) + tp_pub / 2 * f


def condensation_routes(with_function: bool, load_vars: Sequence[int], ref_var: int, out_var: int, *,
                        function_channel: str = "", out_interval_ms: int = COND_TRIGGER_MS,
                        chain: Sequence[str] = COND_CHAIN, subs: Sequence[str] = COND_SUBS) -> list[RouteSpec]:
    """Routes of the condensation experiment.

    Without the function every load variable goes chain[0] -> ... -> chain[-1] -> each of ``subs`` at 1 ms.
    With it, the load variables go from chain[0] to ``function_channel`` only, and the function's output
    variable takes their place to ``subs`` (at the output interval). The reference variable always goes
    chain[0] -> "ref1" and chain[0] -> ... -> chain[-1] -> "ref2" at 50 ms.
    """
    out: list[RouteSpec] = []
    if with_function:
        if not function_channel:
            raise ValueError("with the function, its channel (from SetupCondensation) is needed")
        out.extend(RouteSpec(chain[0], "cf", v, function_channel, 1) for v in load_vars)
        streams: list[tuple[int, int]] = [(out_var, out_interval_ms)]
    else:
        streams = [(v, 1) for v in load_vars]
    for sub in subs:
        path = [*chain, sub]
        for hop, nxt in itertools.pairwise(path):
            out.extend(RouteSpec(hop, sub, v, nxt, iv, iv) for v, iv in streams)
    out.append(RouteSpec(chain[0], "ref1", ref_var, "ref1", REF_INTERVAL_MS, REF_INTERVAL_MS))
    path = [*chain, "ref2"]
    out.extend(RouteSpec(hop, "ref2", ref_var, nxt, REF_INTERVAL_MS, REF_INTERVAL_MS)
               for hop, nxt in itertools.pairwise(path))
    return out


def condensation_setup(function_id: str, load_vars: Sequence[int], out_var: int, *,
                       trigger_ms: int = COND_TRIGGER_MS) -> cpb.CondensationSetup:
    """An ``average`` over the load variables (8-byte ints), time trigger ``trigger_ms``, float output."""
    return cpb.CondensationSetup(
        function_id=function_id, creator="bench",
        inputs=[cpb.CondensationInput(variable_id=v, variable=f"bench/v{v}", value_type="int", pub_interval_ms=1)
                for v in load_vars],
        spec=cpb.CondensationSpec(calculator="average", parameters={"max_age_ms": float(COND_MAX_AGE_MS)},
                                  trigger=cpb.Trigger(kind=cpb.TRIGGER_KIND_TIME, interval_ms=trigger_ms),
                                  output_type="float"),
        output_variable_id=out_var, output_pub_interval_ms=trigger_ms, output_priority=1,
        output_sender_id=CF_SENDER_ID)


def rotated(items: Sequence[Any], k: int) -> list[Any]:
    """``items`` starting at index k mod len (trial order changes per repetition, so drift spreads)."""
    if not items:
        return []
    k %= len(items)
    return [*items[k:], *items[:k]]


def med(xs: Iterable[float]) -> float:
    ys = [x for x in xs if not math.isnan(x)]
    return median(ys) if ys else float("nan")


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
        import select

        for r in out:
            assert r.proc.stdout is not None
            line = b""
            while time.monotonic() < deadline:
                ready, _, _ = select.select([r.proc.stdout], [], [], 0.2)
                if ready:
                    line = r.proc.stdout.readline()
                    if READY.search(line.decode()) or not line:
                        break
                if r.proc.poll() is not None:
                    break
            m = READY.search(line.decode())
            if m is None:
                e = errs[r.name]
                e.seek(0)
                raise RuntimeError(f"router {r.name} did not start (exit {r.proc.poll()}): {line!r} "
                                   f"{e.read().decode(errors='replace')[-2000:]}")
            r.port, r.control_port = int(m.group(2)), int(m.group(3))
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
        self.subs: dict[str, _LineProc] = {}
        self.sub_ports: dict[str, int] = {}
        self.pub: _LineProc | None = None
        self._errs: dict[str, IO[bytes]] = {}
        try:
            for name in topo.subs:
                self.subs[name] = _LineProc([sys.executable, "-m", "gridstat.bench.peers", "sub"], f"subscriber {name}")
            self.pub = _LineProc([sys.executable, "-m", "gridstat.bench.peers", "pub", "--sender-id", str(PUB_ID)],
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


# -- experiment 1: multicast with filtering -----------------------------------------------------------------
def _filter_base(f: int) -> int:
    return (1 + f) * VAR_BLOCK


@dataclass
class FilterResult:
    rates: list[int]
    reps: int
    duration: float
    trials: dict[tuple[int, int], list[ShapeTrial]] = field(default_factory=dict)  # (rate, f) -> reps
    wall_s: float = 0.0
    repeated: int = 0
    waited_s: float = 0.0


@dataclass
class NoiseBudget:
    """Bounds on what the benchmark spends against other processes' load: repeats, and seconds waited."""

    retries: int
    wait_s: float
    repeated: int = 0
    waited_s: float = 0.0


def _await_quiet(ours: set[int], budget: NoiseBudget) -> None:
    """Before a trial: wait (within the budget) while other processes take more than QUIET_PCT of a core."""
    while budget.waited_s < budget.wait_s:
        a0, w0 = all_proc_ticks(), time.monotonic()
        time.sleep(0.5)
        busy = other_cpu_pct(a0, all_proc_ticks(), ours, time.monotonic() - w0)
        if busy <= QUIET_PCT:
            return
        budget.waited_s += time.monotonic() - w0


def _noisy_trial(rig: Rig, run: Callable[[], ShapeTrial], budget: NoiseBudget, log: Log) -> ShapeTrial:
    """A trial after a (bounded) wait for a quiet machine, repeated once (while the budget lasts) if other
    processes still took more than QUIET_PCT of a core during it."""
    _await_quiet(rig.pids(), budget)
    t = run()
    if t.other_cpu_pct > QUIET_PCT and budget.retries > 0:
        budget.retries -= 1
        budget.repeated += 1
        log(f"    (other processes used {t.other_cpu_pct:.0f} % of a core: trial repeated)")
        _await_quiet(rig.pids(), budget)
        t = run()
    return t


def run_filtering(*, rates: Sequence[int], reps: int, duration: float, log: Log,
                  budget: NoiseBudget | None = None) -> FilterResult:
    t_start = time.monotonic()
    res = FilterResult(list(rates), reps, duration)
    nvars = max(rates) // 1000
    plans = {}
    for f in range(MAX_FILT + 1):
        base = _filter_base(f)
        plans[f] = filter_routes(f, [peers.load_var(base, i) for i in range(nvars)], peers.ref_var(base))
    rig = Rig(filter_topology(), log)
    budget = budget or NoiseBudget(0, 0.0)
    repeated0, waited0 = budget.repeated, budget.waited_s
    try:
        for f in range(MAX_FILT + 1):
            rig.install(plans[f])
        log(f"filtering: routers {', '.join(FILTER_CHAIN)} up, routes of filt=0..{MAX_FILT} installed "
            f"({nvars} load variables each)")
        for f in range(MAX_FILT + 1):  # warm-up: every variant once
            rig.trial("warm-up", min(rates), 0.4, _filter_base(f), ref_subs=("ref",), load_subs=FILTER_SUBS)
        fs = list(range(MAX_FILT + 1))
        for rep in range(reps):
            for rate in rates:
                for f in rotated(fs, rep):
                    def run(f: int = f, rate: int = rate) -> ShapeTrial:
                        return rig.trial(f"filt={f}", rate, duration, _filter_base(f), ref_subs=("ref",),
                                         load_subs=FILTER_SUBS)
                    t = _noisy_trial(rig, run, budget, log)
                    res.trials.setdefault((rate, f), []).append(t)
                    log(f"  rep {rep + 1} {rate:>7,} ev/s filt={f}: " + _fmt_trial(t, FILTER_CHAIN, FILTER_SUBS))
    finally:
        rig.close()
    res.repeated, res.waited_s = budget.repeated - repeated0, budget.waited_s - waited0
    res.wall_s = time.monotonic() - t_start
    return res


# -- experiment 2: condensation ---------------------------------------------------------------------------
def _cond_bases(li: int) -> tuple[int, int]:
    """Variable blocks of load index li: (without the function, with it)."""
    return (10 + li) * VAR_BLOCK, (20 + li) * VAR_BLOCK


class CondensationUnavailable(RuntimeError):
    """SetupCondensation does not work on these routers (yet)."""


@dataclass
class CondResult:
    rates: list[int]
    reps: int
    duration: float
    trigger_ms: int
    trials: dict[tuple[int, bool], list[ShapeTrial]] = field(default_factory=dict)  # (rate, with) -> reps
    wall_s: float = 0.0
    repeated: int = 0
    waited_s: float = 0.0
    error: str = ""


def _setup_function(rig: Rig, function_id: str, load_vars: Sequence[int], out_var: int, trigger_ms: int) -> str:
    router = COND_CHAIN[0]
    try:
        reply = rig.stub(router).SetupCondensation(
            condensation_setup(function_id, load_vars, out_var, trigger_ms=trigger_ms), timeout=10)
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        detail = exc.details() if hasattr(exc, "details") else str(exc)
        raise CondensationUnavailable(f"SetupCondensation on {router} failed: {code}: {detail}") from exc
    channel = str(reply.channel)
    if not channel:
        raise CondensationUnavailable(f"SetupCondensation on {router} returned no channel")
    return channel


def run_condensation(*, rates: Sequence[int], reps: int, duration: float, log: Log,
                     trigger_ms: int = COND_TRIGGER_MS, budget: NoiseBudget | None = None) -> CondResult:
    """Without -> with the function at each rate. The function is set up (and its input routes installed)
    just before each with-trial and terminated after it, so it never runs during a without-trial."""
    t_start = time.monotonic()
    res = CondResult(list(rates), reps, duration, trigger_ms)
    rig = Rig(cond_topology(), log)
    budget = budget or NoiseBudget(0, 0.0)
    repeated0, waited0 = budget.repeated, budget.waited_s
    try:
        blocks: dict[int, tuple[list[int], int, int, int]] = {}
        for li, rate in enumerate(rates):
            raw, cf = _cond_bases(li)
            nvars = rate // 1000
            blocks[rate] = ([peers.load_var(cf, i) for i in range(nvars)], raw, cf, cf + COND_OUT_OFFSET)
            rig.install(condensation_routes(False, [peers.load_var(raw, i) for i in range(nvars)],
                                            peers.ref_var(raw), 0))
            # The output variable's and the reference's routes stay; the input routes come with the function.
            rig.install([r for r in condensation_routes(True, [], peers.ref_var(cf), cf + COND_OUT_OFFSET,
                                                        function_channel="-", out_interval_ms=trigger_ms)])
        log(f"condensation: routers {', '.join(COND_CHAIN)} up, routes installed")

        def with_function(rate: int, dur: float, label: str) -> ShapeTrial:
            inputs, _raw, cf, out_var = blocks[rate]
            fid = f"{COND_FUNCTION}{rate // 1000}"
            channel = _setup_function(rig, fid, inputs, out_var, trigger_ms)
            try:
                rig.install([r for r in condensation_routes(True, inputs, peers.ref_var(cf), out_var,
                                                            function_channel=channel, out_interval_ms=trigger_ms)
                             if r.route_id == "cf"])
                time.sleep(0.2)
                return rig.trial(label, rate, dur, cf, ref_subs=("ref1", "ref2"), load_subs=COND_SUBS,
                                 function_id=fid)
            finally:
                rig.stub(COND_CHAIN[0]).TerminateCondensation(pb.TerminateCondensationRequest(function_id=fid),
                                                              timeout=10)

        def without(rate: int, dur: float, label: str) -> ShapeTrial:
            return rig.trial(label, rate, dur, blocks[rate][1], ref_subs=("ref1", "ref2"), load_subs=COND_SUBS)

        for rate in rates:  # warm-up
            without(rate, 0.4, "warm-up")
            try:
                t = with_function(rate, 0.4, "warm-up")
            except CondensationUnavailable as exc:
                res.error = str(exc)
                log(f"condensation: {exc}")
                return res
            if not t.function.get("outputs"):
                log(f"condensation: warm-up with the function at {rate:,} ev/s gave no outputs ({t.function})")
        for rep in range(reps):
            for rate in rates:
                for w in rotated([False, True], rep):
                    def run(w: bool = w, rate: int = rate) -> ShapeTrial:
                        return (with_function if w else without)(rate, duration, "with" if w else "without")
                    t = _noisy_trial(rig, run, budget, log)
                    res.trials.setdefault((rate, w), []).append(t)
                    log(f"  rep {rep + 1} {rate:>7,} ev/s {'with   ' if w else 'without'}: "
                        + _fmt_trial(t, COND_CHAIN, COND_SUBS)
                        + (f", function outputs {t.function.get('outputs', 0)}" if w else ""))
    except CondensationUnavailable as exc:
        res.error = str(exc)
        log(f"condensation: {exc}")
    finally:
        rig.close()
    res.repeated, res.waited_s = budget.repeated - repeated0, budget.waited_s - waited0
    res.wall_s = time.monotonic() - t_start
    return res


# -- report -------------------------------------------------------------------------------------------------
#: Our offered events/s per dissertation tlv (load variables at 1 ms): 250,000 ev/s ~ tlv 40, 500,000 ~ tlv 80.
TLV_SCALE = 6_250


def nearest_tlv(rate: int, tlvs: Iterable[int]) -> int:
    """The dissertation's tlv row our offered load stands for (rate / TLV_SCALE, nearest row)."""
    return min(tlvs, key=lambda k: (abs(k * TLV_SCALE - rate), k))


def _f0(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:,.0f}"


def _f1(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:,.1f}"


def _f2(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2f}"


def _f3(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3f}"


def _where(ts: Sequence[ShapeTrial]) -> str:
    """Where events were lost over the repetitions: counters by router, socket losses by link."""
    tot: dict[str, int] = {}
    for t in ts:
        for k, v in t.counted_drops.items():
            if v:
                tot[f"{k} (counted)"] = tot.get(f"{k} (counted)", 0) + v
        for k, v in t.link_lost.items():
            if v:
                tot[k] = tot.get(k, 0) + v
    return ", ".join(f"{k} {v:,}" for k, v in sorted(tot.items(), key=lambda kv: -kv[1])) or "-"


def _drop_cell(ts: Sequence[ShapeTrial]) -> str:
    vals = [t.drop_pct for t in ts]
    return f"{_f3(med(vals))} (max {_f3(max(vals))})" if vals else "-"


def filtering_report(res: FilterResult) -> tuple[str, list[str]]:
    """The filtering section's Markdown and its shape statements."""
    out: list[str] = []
    notes: list[str] = []
    chain = FILTER_CHAIN
    out.append("### Multicast with filtering (cf. dissertation Tables 8.28-8.32)\n")
    out.append(
        f"Tree e -> i1 -> i2 -> i3 -> i4, i_k feeding load subscriber s_k (the dissertation's 4-SR multicast tree; "
        "e is the publisher's edge router). In filt=f the last f subscribers take the load variables at 2 ms, the "
        "others at 1 ms; routes are installed per subscription path, so the filtering point is where the table "
        "puts it (column 'filtered on'). Sub TP is the load events/ms the four load subscribers received together; "
        "model = (4 - f/2) x pub TP (the dissertation's model without its reference term). CPU in % of one core, "
        "medians over "
        f"{res.reps} repetition(s) of {res.duration:g} s; drop % = events lost anywhere (router and channel "
        "counters, and events a link's sender sent that its receiver never read: socket-buffer drops) over the "
        "events the publisher sent, median (max) over repetitions. Reference mean: e2e one-way latency of the "
        "50-ms reference variable through e, i1..i4 to its own subscriber at i4 (median over repetitions of "
        "each trial's mean; the dissertation's 'Mean' is ms through its tree). 'Lost where' names the socket that "
        "overflowed (a -> b: sent by a, never read by b), not necessarily the slowest router: every process here "
        "competes for the same 2 cores, so a saturated machine overflows whichever socket's reader is descheduled "
        "longest, usually the first hops'.\n")
    for rate in res.rates:
        tlv = nearest_tlv(rate, DISS_FILTER)
        diss = DISS_FILTER[tlv]
        rows = []
        cpu0 = cpu4 = float("nan")
        drops: list[float] = []
        for f in range(MAX_FILT + 1):
            ts = res.trials.get((rate, f), [])
            if not ts:
                continue
            tp_pub = med(t.tp_pub for t in ts)
            tp_sub = med(t.tp_subs(FILTER_SUBS) for t in ts)
            cpu = {n: med(t.cpu_pct[n] for t in ts) for n in chain}
            total = med(t.cpu_total for t in ts)
            if f == 0:
                cpu0 = total
            if f == MAX_FILT:
                cpu4 = total
            drops.append(med(t.drop_pct for t in ts))
            ref_mean = med(t.ref_mean_us("ref") for t in ts)
            ref_n = sum(t.ref_n("ref") for t in ts)
            d_mean, _d_sd, d_tp, d_drop = diss[f]
            rows.append([str(f), filtering_point(f), _f1(tp_pub), f"{_f1(tp_sub)} ({_f1(sub_tp_model(tp_pub, f))})",
                         *(_f0(cpu[n]) for n in chain), _f0(total), _drop_cell(ts), _where(ts),
                         f"{_f0(ref_mean)} ({ref_n})", f"{d_tp:.2f}", f"{d_drop:.3f}", f"{d_mean:.3f}"])
        out.append(f"**Offered {rate:,} events/s** ({rate // 1000} load variables at 1 ms, 16 events per datagram; "
                   f"set beside the dissertation's tlv={tlv}):\n")
        out.append(_table(["filt", "filtered on", "pub TP ev/ms", "sub TP ev/ms (model)",
                           *(f"CPU {n} %" for n in chain), "CPU routers %", "drop % (max)", "lost where (all reps)",
                           "ref mean us (n)", f"diss. sub TP (tlv={tlv})", "diss. drop %", "diss. mean ms"], rows))
        out.append("")
        # shape statements for this load
        tsd = {f: res.trials.get((rate, f), []) for f in range(MAX_FILT + 1)}
        if all(tsd.values()):
            by_f = {f: med(t.tp_subs(FILTER_SUBS) for t in tsd[f]) for f in tsd}
            ratios = [by_f[f] / sub_tp_model(med(t.tp_pub for t in tsd[f]), f) for f in tsd]
            bad = [f for f, r in zip(tsd, ratios, strict=True) if abs(r - 1) > 0.1]
            notes.append(
                f"{rate:,} ev/s: sub TP / model (4 - f/2) x pub TP = {' / '.join(f'{r:.2f}' for r in ratios)} for "
                f"f = 0..4, f=4 / f=0 = {by_f[MAX_FILT] / by_f[0]:.2f} (the dissertation's Sub TP is within 2 % of its "
                "model at every f, f=4 / f=0 = 0.50 at tlv 40 and 80) - "
                + ("**matches** (within 10 %)" if not bad else
                   f"**below the model at f = {', '.join(map(str, bad))}**, by the events lost there") + ".")
            totals = [med(t.cpu_total for t in tsd[f]) for f in range(MAX_FILT + 1)]
            mono = all(b <= a * 1.05 for a, b in itertools.pairwise(totals))
            saturated = drops[0] > 1.0
            notes.append(
                f"{rate:,} ev/s: the routers' CPU goes from {_f0(cpu0)} % (f=0) to {_f0(cpu4)} % (f=4), x "
                f"{cpu4 / cpu0:.2f}, " + ("falling monotonically (within 5 %)" if mono and cpu4 < cpu0
                                          else "**not falling monotonically**")
                + ". Per router, CPU with its input filtered to 2 ms vs at 1 ms (medians over the variants): "
                + "; ".join(_split_saving(res, rate, k) for k in range(1, MAX_FILT + 1))
                + f". Dissertation: {DISS_FILTER_CPU}."
                + (" Here the machine is saturated at f=0 (events lost), so the routers' CPU there is the share the "
                   "scheduler gave them, not what the load needs." if saturated else ""))
            row = "/".join(f"{x[3]:.3f}" for x in diss)
            if max(drops) > 0.01:
                falling = drops[-1] < drops[0]
                mono_drops = all(b <= a for a, b in itertools.pairwise(drops))
                notes.append(
                    f"{rate:,} ev/s: drops {' / '.join(_f3(d) for d in drops)} % for f = 0..4 (dissertation tlv "
                    f"{tlv}: {row}) - "
                    + (("**falling as the filtering moves toward the source, as in the dissertation**"
                        + ("" if mono_drops else " (f=4 below f=0, though not at every step)"))
                       if falling else "**not falling with f**") + ".")
            else:
                notes.append(f"{rate:,} ev/s: no drops in any variant (median drop % <= 0.01; dissertation tlv {tlv}: "
                             f"{row}).")
    return "\n".join(out), notes


def _split_saving(res: FilterResult, rate: int, k: int) -> str:
    """CPU of i_k when its input is filtered (f >= 5 - k) vs not, medians over those variants and repetitions."""
    name = FILTER_CHAIN[k]
    full = [t.cpu_pct[name] for f in range(MAX_FILT + 1) if f < MAX_FILT + 1 - k
            for t in res.trials.get((rate, f), [])]
    half = [t.cpu_pct[name] for f in range(MAX_FILT + 1) if f >= MAX_FILT + 1 - k
            for t in res.trials.get((rate, f), [])]
    a, b = med(full), med(half)
    return f"{name} {_f0(a)} -> {_f0(b)} % (x {b / a:.2f}, {_f0(a - b)} points)" if full and half else f"{name} -"


def condensation_report(res: CondResult) -> tuple[str, list[str]]:
    out: list[str] = []
    notes: list[str] = []
    out.append("### Condensation function (cf. dissertation Tables 8.37-8.47, CF-average)\n")
    out.append(
        "Chain i0 -> i1 -> i2, i2 the multicast split to load subscribers s3 and s4; the publisher sends to i0. "
        "Without: s3 and s4 subscribe to every load variable at 1 ms. With: an `average` condensation function in "
        f"i0's slot (SetupCondensation; inputs: the load variables, 8-byte ints, routed on i0 to the channel the "
        f"call returned; **time trigger {res.trigger_ms} ms**, output a float variable every {res.trigger_ms} ms, "
        f"inputs older than {COND_MAX_AGE_MS} ms left out so the output stops with the publisher) and s3, s4 "
        "subscribe to its output only, routed i0 -> i1 -> i2 -> s3, s4. The function is set up just before each "
        "with-trial and terminated after it. Reference variable (50 ms): s1 at i0 (one router) and s2 at i2 (three "
        "routers), as the dissertation's p1 -> s1 via i0 and p1 -> s2 via i2. Medians over "
        f"{res.reps} repetition(s) of {res.duration:g} s; cells read without -> with.\n")
    if res.error:
        out.append(f"**Not measured: {res.error}**\n")
        notes.append(f"Condensation: not measured ({res.error}).")
        return "\n".join(out), notes
    rows = []
    for rate in res.rates:
        wo, wi = res.trials.get((rate, False), []), res.trials.get((rate, True), [])
        if not wo or not wi:
            continue
        tlv = nearest_tlv(rate, DISS_COND)
        d = DISS_COND[tlv]

        def pair(fn: Callable[[ShapeTrial], float], fmt: Callable[[float], str] = _f0,
                 a: Sequence[ShapeTrial] = wo, b: Sequence[ShapeTrial] = wi) -> str:
            return f"{fmt(med(fn(t) for t in a))} -> {fmt(med(fn(t) for t in b))}"

        def cpu_of(n: str) -> Callable[[ShapeTrial], float]:
            return lambda tr: tr.cpu_pct[n]

        cpu = ", ".join(pair(cpu_of(n)) for n in COND_CHAIN)
        outs = med(t.function.get("outputs", 0) / t.elapsed / 1000 for t in wi)
        rows.append([f"{rate:,} (tlv {tlv})", _f1(med(t.tp_pub for t in wo)),
                     pair(lambda t: t.tp_subs(COND_SUBS), _f1), cpu,
                     pair(lambda t: t.us_per_event(COND_CHAIN[0]), _f2),
                     f"{_f3(med(t.drop_pct for t in wo))} -> {_f3(med(t.drop_pct for t in wi))}",
                     pair(lambda t: t.ref_mean_us("ref1")), pair(lambda t: t.ref_mean_us("ref2")),
                     f"{outs:.2f}", _where([*wo, *wi]), d[2], d[3], d[4], d[0], d[1]])
        c_wo = {n: med(t.cpu_pct[n] for t in wo) for n in COND_CHAIN}
        c_wi = {n: med(t.cpu_pct[n] for t in wi) for n in COND_CHAIN}
        s2 = (med(t.ref_mean_us("ref2") for t in wo), med(t.ref_mean_us("ref2") for t in wi))
        dr = (med(t.drop_pct for t in wo), med(t.drop_pct for t in wi))
        notes.append(
            f"Condensation {rate:,} ev/s: sub TP {_f1(med(t.tp_subs(COND_SUBS) for t in wo))} -> "
            f"{_f1(med(t.tp_subs(COND_SUBS) for t in wi))} ev/ms (dissertation tlv {tlv}: {d[2]}); i1 x "
            f"{c_wi['i1'] / c_wo['i1']:.2f}, i2 x {c_wi['i2'] / c_wo['i2']:.2f} ("
            + ("**falls to near idle, as in the dissertation**" if c_wi["i1"] < 0.35 * c_wo["i1"]
               and c_wi["i2"] < 0.35 * c_wo["i2"] else "**does not fall as far as the dissertation's**")
            + f"); i0 x {c_wi['i0'] / c_wo['i0']:.2f} ("
            + ("unchanged within 15 %, as in the dissertation" if abs(c_wi["i0"] / c_wo["i0"] - 1) <= 0.15
               else "**the dissertation's i0 stayed unchanged: here the function costs more than the forwarding "
                    "it saves**" if c_wi["i0"] > c_wo["i0"] else "**lower, unlike the dissertation's unchanged i0**")
            + f"); drop % {_f3(dr[0])} -> {_f3(dr[1])} ("
            + ("no drops with the function, as in the dissertation" if dr[1] <= 0.01
               else "**drops with the function, unlike the dissertation**")
            + f"); s2 reference mean {_f0(s2[0])} -> {_f0(s2[1])} us (x {s2[1] / s2[0]:.2f}; dissertation "
            f"{d[1]} ms); function output {outs:.2f} /ms (trigger {res.trigger_ms} ms).")
    out.append(_table(["offered ev/s", "pub TP ev/ms", "sub TP ev/ms", "CPU i0, i1, i2 %", "i0 CPU us/event", "drop %",
                       "s1 ref mean us", "s2 ref mean us", "function outputs /ms", "lost where (all reps)",
                       "diss. sub TP ev/ms", "diss. CPU i0, i1, i2 %", "diss. drop %", "diss. s1 ms",
                       "diss. s2 ms"], rows))
    out.append("")
    return "\n".join(out), notes


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def report(filt: FilterResult | None, cond: CondResult | None, *, facts_line: str, quick: bool, wall_s: float,
           background: float) -> str:
    out = ["## Shapes: multicast with filtering, condensation (`gridstat bench shapes`"
           + (" --quick" if quick else "") + ")\n",
           facts_line + f" Whole run {wall_s:.0f} s.\n"]
    rates = sorted({*(filt.rates if filt else []), *(cond.rates if cond else [])})
    out.append(
        "**Method.** The shapes of the dissertation's two experiments, with real `gridstat router` processes on "
        "127.0.0.1 (not pinned: the routers, the load generator, the subscribers and this orchestrator share the "
        "machine's cores), channels and routes installed over RouterControl (AddChannel, InstallRoutes, "
        "SetupCondensation) as a leaf broker would, counters from GetStats, router CPU from "
        "/proc/PID/task/*/schedstat over the trial divided by the publishing time. The load generator "
        "(`bench.peers pub`) publishes R/1000 load variables every 1 ms in bursts of 16-event datagrams (the "
        "dissertation's publishers: x events, then sleep) plus one reference variable every 50 ms. **Loads:** "
        f"{', '.join(f'{r:,}' for r in rates)} events/s, set beside the dissertation's tlv = R / {TLV_SCALE:,} "
        "(250,000 ~ tlv 40, 500,000 ~ tlv 80, 750,000 ~ tlv 120). Its tlv 40 and 80 achieved 17.7 and 31.3 "
        "events/ms, about 1/3 and 3/5 of one SR's saturation (~50-57 events/ms); strictly in proportion to our "
        "router's saturation (1.18 M events/s alone on a core, router section) they would be ~400,000 and "
        "~700,000 events/s. Ours are about 0.7 of that because the dissertation ran one SR per host and here "
        "the whole tree (5 or 3 routers, the publisher and 4-6 subscribers) shares 2 cores: at 500,000 events/s "
        "the filtering tree at f=0 saturates the machine, as tlv 80 saturated the dissertation's split SRs (3.5 % "
        "drops). The machine is shared: before each trial the benchmark waits while other processes (not this "
        f"benchmark's) take more than {QUIET_PCT:.0f} % of a core, and repeats a trial once if they did during it "
        f"(at most {WAIT_S:.0f} s of waiting and {RETRIES} repeats per run, {QUICK_WAIT_S:.0f} s and "
        f"{QUICK_RETRIES} with --quick; the last attempt is reported); other processes used {background:.0f} % of "
        "a core just before the run.\n")
    notes: list[str] = []
    if filt is not None:
        body, n = filtering_report(filt)
        out.append(body)
        notes += n
        noise = [t.other_cpu_pct for ts in filt.trials.values() for t in ts]
        out.append(f"Other processes used a median {_f0(med(noise))} % (max {_f0(max(noise, default=0))} %) of a "
                   f"core during these trials; {filt.repeated} trial(s) repeated, {filt.waited_s:.0f} s spent waiting "
                   f"for a quieter machine. {filt.wall_s:.0f} s.\n")
    if cond is not None:
        body, n = condensation_report(cond)
        out.append(body)
        notes += n
        noise = [t.other_cpu_pct for ts in cond.trials.values() for t in ts]
        if noise:
            out.append(f"Other processes used a median {_f0(med(noise))} % (max {_f0(max(noise, default=0))} %) "
                       f"of a core during these trials; {cond.repeated} trial(s) repeated, {cond.waited_s:.0f} s "
                       f"spent waiting for a quieter machine. {cond.wall_s:.0f} s.\n")
    out.append("### Shapes: what matches and what does not\n")
    out += [f"- {n}" for n in notes]
    return "\n".join(out) + "\n"


def run_shapes(*, quick: bool, reps: int, filter_rates: Sequence[int], cond_rates: Sequence[int],
               duration: float, only: str | None, facts_line: str, log: Log) -> tuple[str, bool]:
    """The whole benchmark; returns the Markdown and whether the condensation half ran."""
    t0 = time.monotonic()
    background = wait_for_quiet(5.0 if quick else 30.0, log)
    filt = cond = None
    budget = NoiseBudget(retries=QUICK_RETRIES if quick else RETRIES, wait_s=QUICK_WAIT_S if quick else WAIT_S)
    if only in (None, "filtering"):
        log(f"filtering: loads {', '.join(f'{r:,}' for r in filter_rates)} ev/s, filt=0..{MAX_FILT}, {reps} rep(s) "
            f"of {duration:g} s")
        filt = run_filtering(rates=filter_rates, reps=reps, duration=duration, log=log, budget=budget)
    if only in (None, "condensation"):
        log(f"condensation: loads {', '.join(f'{r:,}' for r in cond_rates)} ev/s, without/with, {reps} rep(s) "
            f"of {duration:g} s")
        cond = run_condensation(rates=cond_rates, reps=reps, duration=duration, log=log, budget=budget)
    body = report(filt, cond, facts_line=facts_line, quick=quick, wall_s=time.monotonic() - t0,
                  background=background)
    return body, cond is None or not cond.error
