"""``operator-kill``: the Kubernetes operator killed (-9) and stopped (SIGSTOP/SIGCONT) during churn.

A real control plane (``scripts/kube-apiserver.sh``: etcd, kube-apiserver and kube-controller-manager
on 127.0.0.1, binaries from ``scripts/k8s-tools.sh``) with the GridStat CRDs, the chaos cloud of the
other scenarios (four routers in a diamond, a leaf broker) and the operator as a child process
(``python -m gridstat_operator --namespace NS --standalone``, brokers from ``GRIDSTAT_BROKERS``).
A Subscription ``kept`` (pmu1/freq, 10 ms) is admitted and its stream measured throughout. Then,
twice: Mode and Subscription resources are created, edited and deleted with ``kubectl`` while the
operator is first ``kill -9``'d (and restarted), then ``SIGSTOP``ped (and continued). Afterwards
every Subscription left must reach Ready and Admitted with ``observedGeneration`` current, every Mode
Ready, every deleted resource be gone with its broker subscriptions and routes, the broker hold
exactly what the resources ask (``k8s:`` ids), the routers hold exactly the broker's routes, and the
kept stream must not lose an event. Every kubectl call and wait is bounded; every child is reaped.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gridstat.core import ports
from gridstat.v1 import broker_pb2 as bpb

from .checks import Outcome
from .diamond import FLOAT, Cloud, cloud, count_lost, fmt_s
from .procs import ChaosError, Signals, wait_for
from .traffic import Sink

API = "gridstat.io/v1alpha1"
#: Variables of pmu1 the churned Subscriptions use (one each, so no two share a variable).
CHURN_VARIABLES = tuple(f"c{i}" for i in range(10))
#: After a restart or SIGCONT, everything must have converged within this (kopf's timers run every 5 s).
CONVERGE_S = 60.0
KUBECTL_TIMEOUT_S = 30.0


def repo_root() -> Path | None:
    """The checkout this package runs from (scripts/k8s-tools.sh beside it), if any."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "scripts" / "k8s-tools.sh").exists():
            return parent
    return None


@dataclass
class Kube:
    """A reachable API server with the GridStat CRDs installed: its kubeconfig and kubectl's env."""

    kubeconfig: Path
    env: dict[str, str]

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["kubectl", "--kubeconfig", str(self.kubeconfig), *args], input=input,
                              capture_output=True, text=True, env=self.env, timeout=KUBECTL_TIMEOUT_S)
        if check and proc.returncode != 0:
            raise ChaosError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc

    def apply(self, manifest: Mapping[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(manifest))

    def items(self, kind: str, namespace: str) -> dict[str, dict[str, Any]]:
        out = self.kubectl("get", kind, "-n", namespace, "-o", "json").stdout
        return {i["metadata"]["name"]: i for i in json.loads(out)["items"]}


def tool_env(root: Path) -> dict[str, str]:
    """The environment with the cached Kubernetes binaries on PATH (``scripts/k8s-tools.sh env``)."""
    proc = subprocess.run([str(root / "scripts" / "k8s-tools.sh"), "env"], capture_output=True, text=True,
                          timeout=30)
    env = dict(os.environ)
    for line in proc.stdout.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export "):].partition("=")
            env[key] = value.replace("$PATH", os.environ.get("PATH", ""))
    return env


def require_tools() -> tuple[Path, dict[str, str]]:
    """(checkout root, env) when everything the scenario needs is there; else ChaosError naming what
    is missing and how to get it."""
    root = repo_root()
    if root is None:
        raise ChaosError("operator-kill needs a GridStat checkout (scripts/k8s-tools.sh, scripts/kube-apiserver.sh, "
                         "charts/gridstat/crds): run it from the source tree")
    env = tool_env(root)
    k8s_bin = env.get("GRIDSTAT_K8S_BIN", "")
    missing = [b for b in ("kube-apiserver", "kube-controller-manager")
               if not (k8s_bin and os.access(Path(k8s_bin, b), os.X_OK))]
    missing += [b for b in ("etcd", "kubectl") if shutil.which(b, path=env.get("PATH")) is None]
    if missing:
        raise ChaosError(f"operator-kill needs {', '.join(missing)}, not found: run scripts/k8s-tools.sh "
                         f"(builds kube-apiserver/kube-controller-manager and installs etcd into ~/.cache/gridstat; "
                         f"kubectl must be on PATH)")
    if importlib.util.find_spec("gridstat_operator") is None:
        raise ChaosError("operator-kill needs the operator package: pip install -e operator")
    return root, env


@contextlib.contextmanager
def control_plane(workdir: Path) -> Iterator[Kube]:
    """A throw-away etcd + kube-apiserver + kube-controller-manager with the GridStat CRDs."""
    root, env = require_tools()
    script = str(root / "scripts" / "kube-apiserver.sh")
    proc = subprocess.run([script, "start", str(workdir)], capture_output=True, text=True,
                          env={**env, "GRIDSTAT_KUBE_PARENT_PID": str(os.getpid())}, timeout=180)
    try:
        if proc.returncode != 0 or "READY" not in proc.stdout:
            raise ChaosError(f"kube-apiserver did not start: {proc.stderr.strip()[-400:]}")
        kube = Kube(workdir / "kubeconfig", env)
        crds = str(root / "charts" / "gridstat" / "crds")
        kube.kubectl("apply", "--server-side", "-f", crds)
        kube.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", crds)
        yield kube
    finally:
        subprocess.run([script, "stop", str(workdir)], env=env, timeout=60, capture_output=True)


#: Run the operator's ``__main__`` after asking the kernel to SIGKILL it when we die (PR_SET_PDEATHSIG),
#: the operator's equivalent of the other children's ``--exit-with-parent``.
_LAUNCH = ("import ctypes, runpy, signal\n"
           "try:\n    ctypes.CDLL(None).prctl(1, signal.SIGKILL)\nexcept Exception:\n    pass\n"
           "runpy.run_module('gridstat_operator', run_name='__main__', alter_sys=True)")


@dataclass
class OperatorProc(Signals):
    """``python -m gridstat_operator`` on one namespace, standalone, liveness on 127.0.0.1."""

    #: kopf finishes its handlers on SIGTERM: give it longer than a role.
    term_timeout_s = 10.0

    kube: Kube
    namespace: str
    broker: str
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    starts: int = 0

    def start(self) -> OperatorProc:
        env = {**self.kube.env, "KUBECONFIG": str(self.kube.kubeconfig), "GRIDSTAT_BROKERS": f"A={self.broker}",
               "GRIDSTAT_BROKER_TIMEOUT_S": "3", "GRIDSTAT_DRIFT_CHECK_S": "10", "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, "-c", _LAUNCH, "--namespace", self.namespace, "--standalone",
               "--liveness", f"http://127.0.0.1:{ports.free_port()}/healthz"]
        self.starts += 1
        with self.log.open("ab") as log:
            log.write(f"--- start {self.starts}\n".encode())
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
        return self



def subscription(name: str, namespace: str, variable: str, *, interval_ms: int = 20,
                 modes: tuple[str, ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"subscriber": "ems", "edgeRouter": "e2", "variables": [f"pmu1/{variable}"],
                            "qos": {"intervalMs": interval_ms, "latencyMs": 50, "redundancy": 1}}
    if modes:
        spec["modes"] = [{"mode": m} for m in modes]
    return {"apiVersion": API, "kind": "Subscription", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}


def mode(name: str, namespace: str, mode_id: int) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "Mode", "metadata": {"name": name, "namespace": namespace},
            "spec": {"id": mode_id}}


def _settled(body: Mapping[str, Any], *types: str) -> bool:
    """Every condition in ``types`` True, for the current generation."""
    status = body.get("status") or {}
    if status.get("observedGeneration") != body["metadata"].get("generation"):
        return False
    got = {c.get("type"): c.get("status") for c in status.get("conditions") or ()}
    return all(got.get(t) == "True" for t in types)


@dataclass
class Churn:
    """What the churn leaves: live resources (name -> variable or mode id) and deleted names."""

    namespace: str
    subs: dict[str, str] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)
    deleted_subs: set[str] = field(default_factory=set)
    deleted_modes: set[str] = field(default_factory=set)
    ops: int = 0

    def apply_sub(self, kube: Kube, name: str, variable: str, **kw: Any) -> None:
        kube.apply(subscription(name, self.namespace, variable, **kw))
        self.subs[name] = variable
        self.ops += 1

    def apply_mode(self, kube: Kube, name: str, mode_id: int) -> None:
        kube.apply(mode(name, self.namespace, mode_id))
        self.modes[name] = mode_id
        self.ops += 1

    def delete(self, kube: Kube, kind: str, name: str) -> None:
        kube.kubectl("delete", kind, name, "-n", self.namespace, "--wait=false")
        if kind == "gsub":
            self.subs.pop(name, None)
            self.deleted_subs.add(name)
        else:
            self.modes.pop(name, None)
            self.deleted_modes.add(name)
        self.ops += 1


@dataclass
class Disagreement:
    """What does not agree yet: live resources not settled, deleted ones (or their broker
    subscriptions) still there, and the routers' routes against the broker's."""

    unsettled: list[str] = field(default_factory=list)
    leftover: list[str] = field(default_factory=list)
    routes: str = ""

    def __bool__(self) -> bool:
        return bool(self.unsettled or self.leftover or self.routes)

    def __str__(self) -> str:
        return "; ".join([*self.unsettled, *self.leftover, *([f"routes: {self.routes}"] if self.routes else [])])


def convergence(kube: Kube, c: Cloud, churn: Churn) -> Disagreement:
    """Empty once the resources, the broker and the routers agree."""
    ns = churn.namespace
    subs, modes = kube.items("gsub", ns), kube.items("gmode", ns)
    d = Disagreement()
    d.unsettled += [f"gsub/{n} not Ready+Admitted" for n in sorted(churn.subs)
                    if n not in subs or not _settled(subs[n], "Ready", "Admitted")]
    d.unsettled += [f"gmode/{n} not Ready" for n in sorted(churn.modes)
                    if n not in modes or not _settled(modes[n], "Ready")]
    d.leftover += [f"gsub/{n} still there" for n in sorted(churn.deleted_subs & set(subs))]
    d.leftover += [f"gmode/{n} still there" for n in sorted(churn.deleted_modes & set(modes))]
    want = {f"k8s:{ns}:{n}:pmu1#{v}" for n, v in churn.subs.items()}
    held = {s.subscription.subscription_id: s.admitted for s in c.stub.ListSubscriptions(
        bpb.ListSubscriptionsRequest(), timeout=5).subscriptions if s.subscription.subscription_id.startswith("k8s:")}
    extra, missing = sorted(set(held) - want), sorted(want - set(held))
    if extra:
        d.leftover.append(f"broker still holds {', '.join(extra)}")
    if missing or not all(held.values()):
        d.unsettled.append(f"broker misses {', '.join(missing)}" if missing else "broker: not all admitted")
    d.routes = c.half_installed()
    return d


def _wait_converged(kube: Kube, c: Cloud, churn: Churn) -> tuple[float, Disagreement]:
    """Seconds until converged (inf if not within CONVERGE_S) and the last disagreement."""
    t0 = time.monotonic()
    last = Disagreement(unsettled=["not checked"])

    def done() -> bool:
        nonlocal last
        try:
            last = convergence(kube, c, churn)
        except (ChaosError, subprocess.TimeoutExpired) as exc:
            last = Disagreement(unsettled=[str(exc)])
        return not last

    ok = wait_for(done, timeout_s=CONVERGE_S, step_s=0.5)
    return (time.monotonic() - t0 if ok else float("inf")), last


def _check_fault(out: Outcome, what: str, after: str, churn: Churn, took: float, last: Disagreement) -> None:
    out.check(f"{what} during churn: after {after} every resource settles",
              f"Ready+Admitted, observedGeneration current, <= {CONVERGE_S:.0f} s",
              f"{len(churn.subs)} gsub, {len(churn.modes)} gmode in {fmt_s(took)}" if not last.unsettled
              else "; ".join(last.unsettled), not last.unsettled)
    out.check(f"{what}: deleted resources gone, their broker subscriptions and routes removed",
              "0 left", "; ".join(last.leftover) or f"0 left of {len(churn.deleted_subs)} gsub, "
              f"{len(churn.deleted_modes)} gmode deleted", not last.leftover)
    out.check(f"{what}: nothing half-installed", "routers' routes == broker's desired",
              last.routes or "match", not last.routes)


def operator_kill(seconds: float, kube: Kube | None = None) -> Outcome:
    """The operator kill -9'd, then SIGSTOPped, while Modes and Subscriptions are created, edited and
    deleted: everything converges afterwards and the admitted stream never stops."""
    out = Outcome("operator-kill")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gridstat-chaos-kube-") as tmp:
        work = Path(tmp)
        if kube is None:
            with control_plane(work / "kube") as own:
                _operator_kill(out, seconds, own, work)
        else:
            require_tools()
            _operator_kill(out, seconds, kube, work)
    out.seconds = time.monotonic() - t0
    return out


def _operator_kill(out: Outcome, seconds: float, kube: Kube, work: Path) -> None:
    ns = f"chaos-{os.getpid()}-{int(time.time()) % 100000}"
    kube.kubectl("create", "namespace", ns)
    sink = Sink()
    op: OperatorProc | None = None
    try:
        with cloud() as c:
            c.register_publisher()
            c.register_subscriber("ems", sink)
            for v in CHURN_VARIABLES:
                c.stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
                    publisher="pmu1", variable=v, type=FLOAT, interval_ms=10, edge_router="e1")), timeout=5)
            assert c.broker is not None
            op = OperatorProc(kube, ns, c.broker.address, work / "operator.log").start()
            try:
                _run_churn(out, seconds, kube, c, sink, op, ns)
            finally:
                if not out.ok:
                    with contextlib.suppress(OSError):
                        out.notes.append("operator log tail: " + " | ".join(op.log.read_text().splitlines()[-8:]))
                # delete what the scenario made while its operator and broker still run (no finalizer left)
                op.resume()
                if not op.running:
                    op.start()
                _clean_up(kube, ns, op)
    finally:
        if op is not None:
            op.stop()
        sink.close()
        kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _run_churn(out: Outcome, seconds: float, kube: Kube, c: Cloud, sink: Sink, op: OperatorProc, ns: str) -> None:
    """The kept stream, then churn through kill -9 + restart and SIGSTOP + SIGCONT; the checks."""
    churn = Churn(ns)
    kube.apply(subscription("kept", ns, "freq", interval_ms=10))
    churn.subs["kept"] = "freq"
    churn.apply_sub(kube, "pre-kill", "c0")
    churn.apply_sub(kube, "pre-stop", "c1")
    churn.apply_mode(kube, "storm", 1)
    took, last = _wait_converged(kube, c, churn)
    out.check("resources admitted before the faults", f"Ready+Admitted within {CONVERGE_S:.0f} s",
              f"{len(churn.subs)} gsub, {len(churn.modes)} gmode in {fmt_s(took)}" if not last else str(last),
              not last)
    if last:
        return
    feed = c.feed()
    try:
        wait_for(lambda: len(sink.timestamps(c.variable_id)) > 20, timeout_s=5)
        # -- kill -9 during churn, restart -------------------------------------------------
        t0 = time.monotonic()
        churn.apply_mode(kube, "drill", 2)
        churn.apply_sub(kube, "k1", "c2", modes=("normal", "storm"))
        op.kill()
        down_ms = int(time.time() * 1000)
        churn.apply_sub(kube, "k2", "c3")
        churn.apply_sub(kube, "k2", "c3", interval_ms=40)  # a new generation while nobody watches
        churn.delete(kube, "gsub", "pre-kill")
        churn.apply_sub(kube, "k3", "c4")
        churn.delete(kube, "gsub", "k3")  # created and deleted while the operator is dead
        churn.apply_sub(kube, "k4", "c5", modes=("drill",))
        time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
        untouched = _untouched(kube, ns, ("k2", "k4"))
        up_ms = int(time.time() * 1000)
        op.start()
        took, last = _wait_converged(kube, c, churn)
        during = [ts for ts in sink.timestamps(c.variable_id) if down_ms <= ts <= up_ms]
        _check_fault(out, "operator killed (kill -9)", "the restart", churn, took, last)
        # -- SIGSTOP during churn, SIGCONT ------------------------------------------------
        t0 = time.monotonic()
        churn.apply_sub(kube, "s1", "c6", modes=("normal", "drill"))
        op.pause()
        stopped_ms = int(time.time() * 1000)
        churn.apply_sub(kube, "s2", "c7")
        churn.apply_sub(kube, "k2", "c3", interval_ms=60)
        churn.delete(kube, "gsub", "pre-stop")
        churn.delete(kube, "gsub", "k1")
        churn.delete(kube, "gmode", "storm")  # no Subscription names it any more
        churn.apply_sub(kube, "s3", "c8")
        churn.delete(kube, "gsub", "s3")
        time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
        untouched += _untouched(kube, ns, ("s2",))
        continued_ms = int(time.time() * 1000)
        op.resume()
        took, last = _wait_converged(kube, c, churn)
        stopped = [ts for ts in sink.timestamps(c.variable_id) if stopped_ms <= ts <= continued_ms]
        _check_fault(out, "operator stopped (SIGSTOP)", "SIGCONT", churn, took, last)
        time.sleep(0.3)
    finally:
        sent = feed.stop()
    out.check("the faults held: what changed meanwhile waited for the restart / SIGCONT",
              "k2 (edited), k4, s2 not reconciled before", ", ".join(untouched) or "all reconciled",
              untouched == ["k2", "k4", "s2"])
    time.sleep(0.2)
    got = sink.timestamps(c.variable_id)
    lost, expected = count_lost(sent, got)
    out.check("admitted stream never stops (kill and stop of the operator)", "events flow, 0 lost",
              f"{len(during)} events while dead, {len(stopped)} while stopped, {lost} lost of {expected}",
              bool(during) and bool(stopped) and lost == 0 and expected > 0)
    held = [s.subscription.subscription_id for s in c.stub.ListSubscriptions(
        bpb.ListSubscriptionsRequest(), timeout=5).subscriptions
        if s.subscription.subscription_id.startswith(f"k8s:{ns}:")]
    out.check("broker holds exactly what the resources ask", f"{len(churn.subs)} k8s subscriptions",
              f"{len(held)} held", sorted(held) == sorted(f"k8s:{ns}:{n}:pmu1#{v}"
                                                         for n, v in churn.subs.items()))
    c.check_nothing_half_installed(out)
    out.notes.append(f"{churn.ops} kubectl changes to Modes and Subscriptions (apply, edit, delete); "
                     f"operator started {op.starts} times")


def _untouched(kube: Kube, ns: str, names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` whose current generation the operator has not reconciled."""
    items = kube.items("gsub", ns)
    return [n for n in names if n in items and not _settled(items[n], "Ready")]


def _clean_up(kube: Kube, ns: str, op: OperatorProc) -> None:
    """Delete what the scenario made while its operator still runs (so no finalizer is left)."""
    kube.kubectl("delete", "gsub,gmode", "--all", "-n", ns, "--wait=false", check=False)

    def gone() -> bool:
        try:
            return op.running and not kube.items("gsub", ns) and not kube.items("gmode", ns)
        except (ChaosError, subprocess.TimeoutExpired):
            return False

    wait_for(gone, timeout_s=20, step_s=0.5)
