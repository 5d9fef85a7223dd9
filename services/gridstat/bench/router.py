"""``gridstat bench router``: real router processes on 127.0.0.1, driven by a paced load generator.

Topology: one load-generator process (``bench.peers pub``) -> a chain of
``gridstat router`` processes -> one subscriber process (``bench.peers sub``).
Seven router processes are started once; chain length N uses routers r1..rN
and its own block of variable ids, routed r1 -> r2 -> ... -> rN -> subscriber,
so every chain length runs on the same processes (the other routers see no
traffic for that block). N = 0 is the publisher sending straight to the
subscriber: the reference the per-hop figures subtract.

Channels and routes are installed over the gRPC control API (AddChannel,
InstallRoutes); drops and counters come from GetStats; router CPU from
/proc/PID/task/*/schedstat (on-CPU ns, all threads) over the trial.

On a 2-core machine the router under test (r1) is pinned to core 1 and
everything else, the publisher, the subscriber, this orchestrator and the routers
r2..r7 that only the hop table uses, to core 0 (``os.sched_setaffinity``), so r1
has a core to itself: idle routers' liveness pings and gRPC threads on r1's core
showed up in its latency tail (a deployment runs one router per host or core).
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

import grpc

from gridstat.bench import peers
from gridstat.bench.jitter import Gaps, probe_gaps
from gridstat.core.children import ChildFailed, ready_port, wait_ready
from gridstat.v1 import router_pb2 as pb
from gridstat.v1 import router_pb2_grpc as pb_grpc

PUB_ID = 900_001
SUB_ID = 900_002
MAX_CHAIN = 7
LOSS_LIMIT = 0.001  # 0.1 %
#: A trial is sustained only if its median end-to-end latency stays under this: a router that keeps up adds
#: its batch time (hundreds of us); one that falls behind lets its 4 MiB socket buffer absorb the backlog, so
#: a 1.5-s trial shows no loss but a median latency that grows into the tens of ms.
SUSTAIN_P50_US = 2_000.0
ROUTER_CPU = 1
PEER_CPU = 0

Log = Callable[[str], None]


def _ncpu() -> int:
    """Cores of the machine (not this process's affinity: the orchestrator pins itself to core 0)."""
    return os.cpu_count() or 1


def pin(pid: int, cpu: int) -> bool:
    """Pin every thread of ``pid`` to ``cpu``; False if the machine has too few cores."""
    if _ncpu() < 2 or not hasattr(os, "sched_setaffinity"):
        return False
    tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")] if os.path.isdir(f"/proc/{pid}/task") else [pid]
    ok = True
    for tid in tids:
        try:
            os.sched_setaffinity(tid, {cpu})
        except OSError:
            ok = False
    return ok


def proc_cpu_s(pid: int) -> float:
    """CPU time of a process in seconds: the sum over its threads of /proc/PID/task/TID/schedstat's
    on-CPU nanoseconds (exact, unlike the 10-ms tick sampling of /proc/PID/stat, which misjudges processes
    that wake thousands of times a second); /proc/PID/stat utime + stime if schedstat is missing."""
    total = 0
    found = False
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
                    found = True
            except (OSError, ValueError, IndexError):
                continue
    except OSError:
        pass
    if found:
        return total / 1e9
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def all_proc_ticks() -> dict[int, int]:
    """utime + stime ticks of every process (to tell the benchmark's CPU from everybody else's)."""
    out: dict[int, int] = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[int(p)] = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return out


def other_cpu_pct(before: dict[int, int], after: dict[int, int], ours: set[int], seconds: float) -> float:
    """CPU used by processes that are not the benchmark's, % of one core (machine noise)."""
    if seconds <= 0:
        return 0.0
    ticks = sum(v - before.get(k, 0) for k, v in after.items() if k not in ours)
    return 100 * ticks / os.sysconf("SC_CLK_TCK") / seconds


def udp_errors() -> dict[str, int]:
    """Machine-wide UDP counters (InErrors, RcvbufErrors, SndbufErrors) from /proc/net/snmp."""
    try:
        with open("/proc/net/snmp") as f:
            lines = [ln.split() for ln in f if ln.startswith("Udp:")]
        head, vals = lines[0][1:], [int(v) for v in lines[1][1:]]
        d = dict(zip(head, vals, strict=False))
        return {k: d.get(k, 0) for k in ("InErrors", "RcvbufErrors", "SndbufErrors")}
    except (OSError, IndexError, ValueError):
        return {}


class LineProc:
    """A child process spoken to in JSON lines, with bounded waits."""

    def __init__(self, cmd: list[str], name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._buf = b""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def readline(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{self.name}: no reply within {timeout:.1f} s")
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    err = self._stderr()
                    raise RuntimeError(f"{self.name} exited (code {self.proc.poll()}): {err}")
                self._buf += chunk
            elif self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited (code {self.proc.poll()}): {self._stderr()}")
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def _stderr(self) -> str:
        if self.proc.stderr is None or self.proc.poll() is None:
            return ""
        return self.proc.stderr.read().decode(errors="replace")[-2000:]

    def send(self, obj: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()

    def call(self, obj: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.send(obj)
        reply: dict[str, Any] = json.loads(self.readline(timeout))
        return reply

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send({"cmd": "quit"})
            except OSError:
                pass
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=3)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=5)
        for s in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if s is not None:
                s.close()


def router_command() -> tuple[list[str], str]:
    """``python -m gridstat.cli.main router``, or GRIDSTAT_BENCH_ROUTER_CMD to measure a patched router."""
    override = os.environ.get("GRIDSTAT_BENCH_ROUTER_CMD")
    if override:
        return override.split(), f"`{override}` (GRIDSTAT_BENCH_ROUTER_CMD)"
    return [sys.executable, "-m", "gridstat.cli.main", "router"], "gridstat.cli.main router"


@dataclass
class RouterProc:
    name: str
    router_id: int
    proc: subprocess.Popen[bytes]
    port: int = 0
    control_port: int = 0
    channel: grpc.Channel | None = None
    stub: pb_grpc.RouterControlStub | None = None

    def stats(self) -> pb.RouterStats:
        assert self.stub is not None
        reply: pb.RouterStats = self.stub.GetStats(pb.GetStatsRequest(), timeout=5)
        return reply

    def cpu_s(self) -> float:
        return proc_cpu_s(self.proc.pid)

    def stop(self) -> None:
        if self.channel is not None:
            self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        for s in (self.proc.stdout, self.proc.stderr):
            if s is not None:
                s.close()


def router_cpu(k: int) -> int:
    """r1, the router under test, alone on its core; the others with the load generator."""
    return ROUTER_CPU if k == 1 else PEER_CPU


def start_routers(n: int, variant: str, timeout_s: float = 30.0,
                  extra_args: Sequence[str] = ()) -> tuple[list[RouterProc], str]:
    base, how = router_command()
    out: list[RouterProc] = []
    try:
        for k in range(1, n + 1):
            cmd = [*base, "--name", f"r{k}", "--id", str(k), "--variant", variant, "--control-port", "0",
                   *extra_args]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
            pin(proc.pid, router_cpu(k))
            out.append(RouterProc(f"r{k}", k, proc))
        deadline = time.monotonic() + timeout_s
        for r in out:
            try:
                fields = wait_ready(r.proc, what=f"router {r.name}", timeout_s=max(0.0, deadline - time.monotonic()))
            except ChildFailed as exc:
                err = r.proc.stderr.read().decode()[-2000:] if r.proc.stderr and r.proc.poll() is not None else ""
                raise RuntimeError(f"{exc} {err}") from None
            r.port, r.control_port = ready_port(fields), ready_port(fields, "control_port")
            r.channel = grpc.insecure_channel(f"127.0.0.1:{r.control_port}")
            r.stub = pb_grpc.RouterControlStub(r.channel)  # type: ignore[no-untyped-call]
            pin(r.proc.pid, router_cpu(r.router_id))  # again, now that grpc's threads exist
            # The router logs to stderr only on warnings; drain it into nothing so the pipe never fills.
            if r.proc.stderr is not None:
                os.set_blocking(r.proc.stderr.fileno(), False)
    except BaseException:
        for r in out:
            r.stop()
        raise
    return out, how


def configure_chains(routers: Sequence[RouterProc], sub_port: int, vars_per_chain: dict[int, int],
                     key: bytes = b"") -> None:
    """Chain N (1..len(routers)) routes block N*VAR_BLOCK through r1..rN to the subscriber; with ``key``
    every channel is keyed (datagram authentication, docs/security.md)."""
    n = len(routers)
    for k, r in enumerate(routers, start=1):
        assert r.stub is not None
        chans = []
        if k == 1:
            chans.append(pb.Channel(name="pub", peer_id=PUB_ID, kind=pb.CHANNEL_KIND_PUBLISHER))
        else:
            prev = routers[k - 2]
            chans.append(pb.Channel(name=prev.name, peer_id=prev.router_id, kind=pb.CHANNEL_KIND_ROUTER,
                                    host="127.0.0.1", port=prev.port))
        if k < n:
            nxt = routers[k]
            chans.append(pb.Channel(name=nxt.name, peer_id=nxt.router_id, kind=pb.CHANNEL_KIND_ROUTER,
                                    host="127.0.0.1", port=nxt.port))
        chans.append(pb.Channel(name="sub", peer_id=SUB_ID, kind=pb.CHANNEL_KIND_SUBSCRIBER,
                                host="127.0.0.1", port=sub_port))
        for c in chans:
            if key:
                c.key = key
            r.stub.AddChannel(pb.AddChannelRequest(channel=c), timeout=5)
        routes = []
        for chain, nvars in vars_per_chain.items():
            if chain < k:
                continue  # this router is not on chain `chain`
            out = "sub" if chain == k else routers[k].name
            base = chain * peers.VAR_BLOCK
            for i in range(nvars):
                routes.append(pb.Route(route_id=f"b{base}", variable_id=peers.load_var(base, i), mode=0,
                                       channel=out, sub_interval_ms=1, priority=1, pub_interval_ms=1))
            routes.append(pb.Route(route_id=f"b{base}", variable_id=peers.ref_var(base), mode=0, channel=out,
                                   sub_interval_ms=50, priority=1, pub_interval_ms=50))
        for i in range(0, len(routes), 2000):
            r.stub.InstallRoutes(pb.InstallRoutesRequest(routes=routes[i:i + 2000]), timeout=10)


def _drops(s: pb.RouterStats) -> int:
    return sum(s.drops.values()) + sum(sum(c.drops.values()) for c in s.channels)


@dataclass
class Trial:
    hops: int
    offered: int
    duration: float
    pub: dict[str, Any]
    sub: dict[str, Any]
    pacing: str = "burst"
    router_cpu_s: list[float] = field(default_factory=list)
    router_events_in: list[int] = field(default_factory=list)
    router_drops: list[int] = field(default_factory=list)
    udp_err: dict[str, int] = field(default_factory=dict)
    pub_cpu_pct: float = 0.0
    sub_cpu_pct: float = 0.0
    other_cpu_pct: float = 0.0

    @property
    def sent(self) -> int:
        return int(self.pub["sent"])

    @property
    def received(self) -> int:
        return int(self.sub["received"])

    @property
    def lost(self) -> int:
        return max(0, self.sent - self.received)

    @property
    def loss(self) -> float:
        return self.lost / self.sent if self.sent else 0.0

    @property
    def elapsed(self) -> float:
        return float(self.pub["elapsed"])

    @property
    def kept_pace(self) -> bool:
        return bool(self.pub["achieved_rate"] >= 0.95 * (self.offered + 20) and self.pub["send_errors"] == 0)

    @property
    def forwarded_rate(self) -> float:
        return self.received / self.elapsed if self.elapsed else 0.0

    @property
    def cpu_pct(self) -> float:
        """CPU of the first router, % of one core over the publishing time."""
        return 100 * self.router_cpu_s[0] / self.elapsed if self.router_cpu_s and self.elapsed else 0.0

    @property
    def us_per_event(self) -> float:
        if not self.router_cpu_s or not self.router_events_in or not self.router_events_in[0]:
            return float("nan")
        return 1e6 * self.router_cpu_s[0] / self.router_events_in[0]

    @property
    def drops(self) -> int:
        return sum(self.router_drops)

    @property
    def p50_us(self) -> float:
        lat = self.sub.get("lat_all", {})
        return float(lat["p50"]) if lat.get("n") else math.nan

    def ok(self) -> bool:
        """Sustained: <= 0.1 % loss, a publisher that kept pace, and (when measured) no growing backlog."""
        p50 = self.p50_us
        return self.loss <= LOSS_LIMIT and self.kept_pace and not p50 > SUSTAIN_P50_US


class Bench:
    """Owns the peer and router processes; ``close`` (always called) stops every one of them."""

    def __init__(self, *, variant: str, vars_per_chain: dict[int, int], log: Log,
                 router_args: Sequence[str] = (), key: bytes = b"") -> None:
        self.log = log
        #: Channel key of every channel (publisher, routers, subscriber); b"" = unauthenticated.
        self.key = key
        self.pub: LineProc | None = None
        self.sub: LineProc | None = None
        self.routers: list[RouterProc] = []
        self.how = ""
        self.retries = 0
        self.max_retries = 20
        self.pinned = _ncpu() >= 2
        if self.pinned:
            pin(os.getpid(), PEER_CPU)
        cpu_arg = ["--cpu", str(PEER_CPU)] if self.pinned else []
        key_arg = ["--key", key.hex()] if key else []
        self.sub = LineProc([sys.executable, "-m", "gridstat.bench.peers", "sub", *cpu_arg, *key_arg],
                             "subscriber")
        self.pub = LineProc([sys.executable, "-m", "gridstat.bench.peers", "pub", "--sender-id", str(PUB_ID),
                              *cpu_arg], "publisher")
        self.sub_port = int(json.loads(self.sub.readline(20))["port"])
        json.loads(self.pub.readline(20))
        chains = max(vars_per_chain) if vars_per_chain else 0
        if chains:
            self.routers, self.how = start_routers(chains, variant, extra_args=router_args)
            configure_chains(self.routers, self.sub_port, vars_per_chain, key)
            time.sleep(0.3)  # first pings and pongs: every router link is up before the first trial

    def close(self) -> None:
        for r in self.routers:
            try:
                r.stop()
            except Exception as exc:  # keep stopping the others
                self.log(f"stopping {r.name}: {exc}")
        for p in (self.pub, self.sub):
            if p is not None:
                try:
                    p.stop()
                except Exception as exc:
                    self.log(f"stopping {p.name}: {exc}")

    def trial(self, hops: int, rate: int, duration: float, *, record: bool = False, pack: int = 16,
              pacing: str = "burst") -> Trial:
        """One trial; repeated (bounded) if other processes took more than QUIET_PCT of a core meanwhile."""
        t = self._trial(hops, rate, duration, record=record, pack=pack, pacing=pacing)
        for _ in range(2):
            if t.other_cpu_pct <= QUIET_PCT or self.retries >= self.max_retries:
                break
            self.retries += 1
            self.log(f"    (other processes used {t.other_cpu_pct:.0f} % of a core: trial repeated)")
            time.sleep(1.0)
            t = self._trial(hops, rate, duration, record=record, pack=pack, pacing=pacing)
        return t

    def _trial(self, hops: int, rate: int, duration: float, *, record: bool, pack: int, pacing: str) -> Trial:
        assert self.pub is not None and self.sub is not None
        chain = self.routers[:hops]
        base = hops * peers.VAR_BLOCK
        dest = chain[0].port if chain else self.sub_port
        s0 = [r.stats() for r in chain]
        c0 = [r.cpu_s() for r in chain]
        p0, q0 = proc_cpu_s(self.pub.pid), proc_cpu_s(self.sub.pid)
        u0 = udp_errors()
        a0 = all_proc_ticks()
        w0 = time.monotonic()
        # Latency of every event up to 100k events/s, of every k-th delivered datagram above (sub stays cheap).
        sample_every = max(1, math.ceil(rate / 100_000)) if hops else max(1, math.ceil(rate / 25_000))
        self.sub.call({"cmd": "start", "record": record, "ref_var": peers.ref_var(base),
                       "sample_every": sample_every}, timeout=10)
        pub = self.pub.call({"host": "127.0.0.1", "port": dest, "rate": rate, "duration": duration, "pack": pack,
                             "var_base": base, "ref_interval_ms": 50, "pacing": pacing, "key": self.key.hex()},
                            timeout=duration * 2 + 10)
        sub = self.sub.call({"cmd": "stop", "quiet_s": 0.15, "max_wait_s": 2.0}, timeout=30)
        c1 = [r.cpu_s() for r in chain]
        p1, q1 = proc_cpu_s(self.pub.pid), proc_cpu_s(self.sub.pid)
        s1 = [r.stats() for r in chain]
        u1 = udp_errors()
        a1 = all_proc_ticks()
        w1 = time.monotonic()
        ours = {os.getpid(), self.pub.pid, self.sub.pid, *(r.proc.pid for r in self.routers)}
        t = Trial(hops, rate, duration, pub, sub, pacing=pacing,
                  router_cpu_s=[b - a for a, b in zip(c0, c1, strict=True)],
                  router_events_in=[b.events_in - a.events_in for a, b in zip(s0, s1, strict=True)],
                  router_drops=[_drops(b) - _drops(a) for a, b in zip(s0, s1, strict=True)],
                  udp_err={k: u1.get(k, 0) - u0.get(k, 0) for k in u1})
        el = t.elapsed or 1.0
        t.pub_cpu_pct, t.sub_cpu_pct = 100 * (p1 - p0) / el, 100 * (q1 - q0) / el
        t.other_cpu_pct = other_cpu_pct(a0, a1, ours, w1 - w0)
        time.sleep(0.1)
        return t


def _round_rate(x: float) -> int:
    return max(1000, round(x / 1000) * 1000)


@dataclass
class Saturation:
    rate: int
    trial: Trial | None
    trials: list[Trial]
    publisher_bound: bool


def find_saturation(b: Bench, *, start: int, duration: float, max_trials: int, log: Log,
                    pacing: str = "burst") -> Saturation:
    """Highest sustained offered rate (``Trial.ok``) in ``pacing``, to within ~10 %."""
    good: Trial | None = None
    bad_rate: int | None = None
    rate = start
    trials: list[Trial] = []
    publisher_bound = False
    for _ in range(max_trials):
        t = b.trial(1, rate, duration, record=True, pacing=pacing)
        trials.append(t)
        log(f"  saturation trial ({pacing}) {rate:>9,} ev/s: forwarded {t.forwarded_rate:>11,.0f} ev/s,"
            f" loss {100 * t.loss:.3f} %,"
            f" p50 {t.p50_us:,.0f} us,"
            f" router CPU {t.cpu_pct:.0f} %, {t.us_per_event:.2f} us/ev, router drops {t.drops},"
            f" pub kept pace {t.kept_pace}")
        if t.ok():
            if good is None or rate > good.offered:
                good = t
        else:
            if not t.kept_pace and t.loss <= LOSS_LIMIT:
                publisher_bound = True
            bad_rate = rate if bad_rate is None else min(bad_rate, rate)
        lo = good.offered if good is not None else None
        if bad_rate is None:
            rate = _round_rate(rate * 1.5)
        elif lo is None:
            rate = _round_rate(rate / 2)
        else:
            if bad_rate / lo <= 1.1:
                break
            rate = _round_rate(math.sqrt(lo * bad_rate))
            if rate in (lo, bad_rate):
                break
    return Saturation(good.offered if good else 0, good, trials, publisher_bound)


PACINGS = ("burst", "spread")
QUIET_PCT = 25.0


def wait_for_quiet(max_wait_s: float, log: Log) -> float:
    """Other processes' CPU (% of one core) over 1 s; wait (bounded) while it is above QUIET_PCT."""
    deadline = time.monotonic() + max_wait_s
    while True:
        a0, w0 = all_proc_ticks(), time.monotonic()
        time.sleep(1.0)
        busy = other_cpu_pct(a0, all_proc_ticks(), {os.getpid()}, time.monotonic() - w0)
        if busy <= QUIET_PCT or time.monotonic() >= deadline:
            log(f"background: other processes use {busy:.0f} % of a core" +
                ("" if busy <= QUIET_PCT else " (still busy: figures will be noisier)"))
            return busy
        log(f"background: other processes use {busy:.0f} % of a core; waiting for a quieter machine")
        time.sleep(1.0)


def _p(t: Trial, key: str) -> str:
    v = t.sub.get("lat_all", {}).get(key)
    return "-" if v is None else f"{v:.0f}"


def summarize(ts: Sequence[Trial], key: str, which: str = "lat_all") -> float:
    vals = [float(t.sub[which][key]) for t in ts if t.sub[which].get("n")]
    return median(vals) if vals else float("nan")


#: The low-latency profile's busy-poll budget (``gridstat router --busy-poll-us``).
BUSY_POLL_US = 100


@dataclass
class Profile:
    """Saturation, latency at 50 % and the 70 % check of one router configuration, per repetition."""

    name: str
    router_args: tuple[str, ...]
    #: Burst pacing (the headline, the 70 % check, the load table's fractions).
    saturation: list[Saturation] = field(default_factory=list)
    #: Spread pacing: its latency trials run at half of this one.
    saturation_spread: list[Saturation] = field(default_factory=list)
    lat: dict[str, tuple[list[Trial], list[Trial]]] = field(default_factory=dict)
    at70: list[Trial] = field(default_factory=list)
    gaps: list[Gaps] = field(default_factory=list)

    @property
    def sat_rate(self) -> int:
        return int(median(s.rate for s in self.saturation)) if self.saturation else 0


def run_profile(b: Bench, prof: Profile, *, reps: int, dur_sat: float, dur_lat: float, quick: bool,
                log: Log) -> None:
    """Fill ``prof``: per repetition a saturation search, latency at 50 % in both pacings, the 70 % check."""
    prof.lat = {p: ([], []) for p in PACINGS}
    start = {p: 200_000 for p in PACINGS}
    for rep in range(reps):
        sat: dict[str, Saturation] = {}
        for pacing in PACINGS:
            log(f"[{prof.name}] rep {rep + 1}/{reps}: saturation search (1 router, {dur_sat} s trials, "
                f"{pacing} pacing)")
            sat[pacing] = find_saturation(b, start=start[pacing], duration=dur_sat, max_trials=8 if quick else 10,
                                          log=log, pacing=pacing)
            start[pacing] = max(10_000, _round_rate(sat[pacing].rate * 0.8))
        prof.saturation.append(sat["burst"])
        prof.saturation_spread.append(sat["spread"])
        # The router's core, routers idle: how much of it the machine itself takes away (bench.jitter).
        prof.gaps.append(probe_gaps(ROUTER_CPU if b.pinned else -1, 1.0 if quick else 2.0))
        log(f"[{prof.name}] rep {rep + 1}: saturation burst {sat['burst'].rate:,} / spread "
            f"{sat['spread'].rate:,} ev/s; core {ROUTER_CPU} idle gaps: {prof.gaps[-1].lost_pct:.2f} % of the "
            f"time, largest {prof.gaps[-1].largest_us:,} us")
        for pacing in PACINGS:
            half = _round_rate(sat[pacing].rate * 0.5)
            l0, l1 = prof.lat[pacing]
            l0.append(b.trial(0, half, dur_lat, record=True, pacing=pacing))
            l1.append(b.trial(1, half, dur_lat, record=True, pacing=pacing))
            log(f"  {pacing:<6} at {half:,} ev/s: 0-hop p50/p99 {_p(l0[-1], 'p50')}/{_p(l0[-1], 'p99')} us, "
                f"1 router {_p(l1[-1], 'p50')}/{_p(l1[-1], 'p99')} us")
        sat_b = sat["burst"]
        seventy = _round_rate(sat_b.rate * 0.7)
        prof.at70.append(b.trial(1, seventy, dur_lat if not quick else dur_sat))
        log(f"[{prof.name}] rep {rep + 1}: at 70 % ({seventy:,} ev/s): lost {prof.at70[-1].lost}, "
            f"router drops {prof.at70[-1].drops}")


def run_router_bench(*, quick: bool, reps: int, variant: str, hop_load: int, max_hops: int,
                     log: Log, busy_poll_us: int = BUSY_POLL_US) -> dict[str, Any]:
    """The whole router benchmark; returns everything the report needs.

    The default profile (routers as ``gridstat router`` starts them) gets every table; with
    ``busy_poll_us`` > 0 a second, low-latency profile (``--busy-poll-us``) repeats saturation,
    latency and the 70 % check on fresh routers.
    """
    t_start = time.monotonic()
    dur_sat = 0.8 if quick else 1.5
    dur_lat = 1.5 if quick else 3.0
    dur_load = 0.8 if quick else 2.0
    dur_hop = 1.0 if quick else 3.0
    max_hops = max(1, min(MAX_CHAIN, max_hops))
    vars_per_chain = {1: 1500}
    for n in range(2, max_hops + 1):
        vars_per_chain[n] = max(1, round(hop_load / 1000))
    result: dict[str, Any] = {"quick": quick, "reps": reps, "variant": variant, "hop_load": hop_load,
                              "durations": {"saturation": dur_sat, "latency": dur_lat, "load": dur_load,
                                            "hop": dur_hop}}
    result["background_before"] = wait_for_quiet(10.0 if quick else 60.0, log)
    b = Bench(variant=variant, vars_per_chain=vars_per_chain, log=log)
    b.max_retries = 3 if quick else 20  # keeps --quick under a minute on a busy machine
    retries = 0
    try:
        result["launcher"] = b.how
        result["pinned"] = b.pinned
        log(f"routers r1..r{len(b.routers)} started ({b.how}); pinned: {b.pinned}")
        for n in range(1, max_hops + 1):  # warm-up: every chain once (connections, first-use allocations)
            b.trial(n, 10_000, 0.3)
        b.trial(0, 10_000, 0.3)
        prof = Profile("default", ())
        run_profile(b, prof, reps=reps, dur_sat=dur_sat, dur_lat=dur_lat, quick=quick, log=log)
        result["profiles"] = [prof]
        sat_rate = prof.sat_rate
        # Load scalability (one router): the dissertation's tlv rows (events/ms -> k events/s) and fractions of
        # the measured saturation, each in both pacings.
        tlv = [0, 10, 40, 80, 120, 160, 200, 240]
        fracs = [0.25, 0.5, 0.7, 0.9, 1.0, 1.2]
        if quick:
            tlv, fracs = [0, 40, 160], [0.5, 0.9, 1.2]
        loads = sorted({x * 1000 for x in tlv} | {_round_rate(f * sat_rate) for f in fracs if sat_rate})
        load_rows: list[dict[str, Trial]] = []
        log(f"load scalability: {len(loads)} loads x {len(PACINGS)} pacings, {dur_load} s each")
        for rate in loads:
            row = {p: b.trial(1, rate, dur_load, record=True, pacing=p) for p in PACINGS}
            load_rows.append(row)
            log(f"  {rate:>9,} ev/s: " + ", ".join(
                f"{p} p50 {_p(t, 'p50')} us loss {100 * t.loss:.3f} % CPU {t.cpu_pct:.0f} %" for p, t in row.items()))
        result["load_rows"] = load_rows
        # Hop scalability at a fixed load (burst pacing, like the dissertation's publishers).
        hops_rows: dict[int, list[Trial]] = {}
        log(f"hop scalability: chains 0..{max_hops} at {hop_load:,} ev/s, {dur_hop} s each")
        for n in range(0, max_hops + 1):
            t = b.trial(n, hop_load, dur_hop, record=True)
            hops_rows.setdefault(n, []).append(t)
            log(f"  {n} routers: p50 {_p(t, 'p50')} us mean {_p(t, 'mean')} us, loss {100 * t.loss:.3f} %")
        result["hop_rows"] = hops_rows
    finally:
        b.close()
        retries += b.retries
    if busy_poll_us > 0:
        args = ("--busy-poll-us", str(busy_poll_us))
        b = Bench(variant=variant, vars_per_chain={1: vars_per_chain[1]}, log=log, router_args=args)
        b.max_retries = 3 if quick else 20
        try:
            b.trial(1, 10_000, 0.3)
            b.trial(0, 10_000, 0.3)
            fast = Profile(f"busy poll {busy_poll_us} us", args)
            run_profile(b, fast, reps=reps, dur_sat=dur_sat, dur_lat=dur_lat, quick=quick, log=log)
            result["profiles"].append(fast)
        finally:
            b.close()
            retries += b.retries
    result["retries"] = retries
    result["wall_s"] = time.monotonic() - t_start
    return result
