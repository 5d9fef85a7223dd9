"""A real Prometheus server for the tests, and the dashboards' queries made concrete for it.

* :class:`PromServer`: Debian's ``prometheus`` (``scripts/prometheus.sh``) on 127.0.0.1 with a temporary
  data directory, a generated configuration of static targets (job names and target labels as the
  chart's ServiceMonitors give them, charts/gridstat/templates/080-Monitoring.yaml), scraping and
  evaluating its rule files every second; queried over its HTTP API.
* :func:`dashboard_problems`: a structural check of a Grafana dashboard's JSON (Grafana itself does not
  run here): ids, grid positions, datasources, targets and every template variable used defined.
* :func:`concrete`: a panel's PromQL with every template variable substituted, whatever variables the
  dashboard defines: query variables by the values Prometheus has for them, Grafana's built-in
  interval variables by fixed durations.

docs/telemetry.md, "What is tested of the dashboards and alerts".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gridstat.core import children
from gridstat.core.ports import free_port

#: Grafana's built-in variables that can appear in a query, and what a 1 s scrape interval makes of them.
BUILTIN_VARIABLES = {
    "__rate_interval": "15s", "__interval": "5s", "__interval_ms": "5000", "__range": "5m", "__range_s": "300",
    "__range_ms": "300000", "__auto": "5s", "__auto_interval": "5s",
}
#: Other built-ins a dashboard may use outside queries (titles, links).
OTHER_BUILTINS = {"__dashboard", "__from", "__to", "__org", "__user", "__name", "__timeFilter", "timeFilter",
                  "__all_variables", "__url_time_range", "__data", "__field", "__series", "__value", "__cell"}
#: ``$name``, ``${name}``, ``${name:format}`` and ``[[name]]``.
VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+)")


def prometheus_binary() -> str:
    """Debian's prometheus; skipped (failed under CI) when scripts/prometheus.sh has not installed it."""
    found = shutil.which("prometheus")
    if found is None:
        message = "prometheus is not installed: run scripts/prometheus.sh (Debian's prometheus package)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


#: Jobs the chart scrapes through a PodMonitor (no Service; charts/gridstat/templates/080-Monitoring.yaml).
POD_MONITOR_JOBS = {"gridstat-subscriber"}


@dataclass(frozen=True)
class Target:
    """One scrape target: what the chart's ServiceMonitor (or PodMonitor) of ``job`` makes of a pod's
    metrics port: the Prometheus Operator's target labels and the chart's relabelings (``cloud`` and
    ``utility`` from the pod's labels, gridstat.scrapeRelabelings in charts/gridstat/templates/_helpers.tpl)."""

    job: str
    pod: str
    port: int
    cloud: str = ""
    namespace: str = "gridstat-test"
    release: str = "gridstat"
    utility: str = "gridstat-test"

    def labels(self) -> dict[str, str]:
        out = {"namespace": self.namespace, "pod": self.pod, "container": "gridstat", "endpoint": "metrics",
               "utility": self.utility}
        if self.job not in POD_MONITOR_JOBS:
            out["service"] = f"{self.release}-{self.job.removeprefix('gridstat-')}"
        if self.cloud:  # a pod without the gridstat.io/cloud label gets no cloud label
            out["cloud"] = self.cloud
        return out


@dataclass
class PromServer:
    directory: Path
    targets: list[Target]
    rule_files: list[Path] = field(default_factory=list)
    #: More scrape configs, as they are (service discovery: tests/integration/cluster/monitors.py).
    scrape_configs: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0
    proc: subprocess.Popen[str] | None = None

    def config(self) -> dict[str, Any]:
        jobs: dict[str, list[Target]] = {}
        for t in self.targets:
            jobs.setdefault(t.job, []).append(t)
        return {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{t.port}"], "labels": t.labels()}
                                                     for t in ts]}
                for job, ts in sorted(jobs.items())] + list(self.scrape_configs),
        }

    def start(self, timeout_s: float = 30.0) -> PromServer:
        binary = prometheus_binary()
        self.port = free_port()
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = self.directory / "prometheus.yml"
        conf.write_text(yaml.safe_dump(self.config()))
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        log = (self.directory / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={conf}", f"--web.listen-address=127.0.0.1:{self.port}",
             f"--storage.tsdb.path={data}", "--storage.tsdb.retention.time=1h", "--web.enable-lifecycle"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, text=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited {self.proc.returncode}: {self.log()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready in {timeout_s:g} s: {self.log()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None:
            children.stop(self.proc, signal.SIGTERM, grace_s=10)

    def log(self) -> str:
        path = self.directory / "prometheus.log"
        return path.read_text(errors="replace") if path.exists() else ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as r:
            body = json.loads(r.read())
        assert body.get("status") == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result (a vector; a scalar comes back as one unlabelled sample)."""
        try:
            data = self.api("query", query=expr)
        except urllib.error.HTTPError as exc:
            raise AssertionError(
                f"Prometheus refused the query {expr!r}: {exc.read().decode(errors='replace')}") from exc
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def series(self, selector: str) -> list[dict[str, str]]:
        data: list[dict[str, str]] = self.api("series", **{"match[]": selector})
        return data

    def label_values(self, label: str) -> list[str]:
        data: list[str] = self.api(f"label/{label}/values")
        return data

    def active_targets(self) -> list[dict[str, Any]]:
        targets: list[dict[str, Any]] = self.api("targets")["activeTargets"]
        return targets

    def alerts(self) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return data

    def rules(self) -> list[dict[str, Any]]:
        return [r for g in self.api("rules")["groups"] for r in g["rules"]]


def values(result: list[dict[str, Any]]) -> list[float]:
    return [float(s["value"][1]) for s in result]


# -- dashboards --------------------------------------------------------------------------------------

def all_panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows' collapsed panels included."""
    for p in dashboard.get("panels", []):
        yield p
        yield from p.get("panels", [])


def variables_used(text: str) -> set[str]:
    return {a or b or c for a, b, c in VARIABLE.findall(text)}


def dashboard_problems(name: str, d: Mapping[str, Any]) -> list[str]:
    """What Grafana's dashboard model requires of a provisioned dashboard that this one lacks."""
    out: list[str] = []
    for key, kind in (("uid", str), ("title", str), ("schemaVersion", int), ("panels", list),
                      ("templating", dict)):
        if not isinstance(d.get(key), kind):
            out.append(f"{name}: {key} missing or not a {kind.__name__}")
    templating = d.get("templating", {}).get("list", [])
    defined = [v.get("name") for v in templating]
    if len(set(defined)) != len(defined):
        out.append(f"{name}: template variables defined twice: {defined}")
    known = set(defined) | set(BUILTIN_VARIABLES) | OTHER_BUILTINS
    for v in templating:
        if not v.get("name") or not v.get("type"):
            out.append(f"{name}: template variable without name or type: {v}")
        if v.get("type") == "query":
            q = v.get("query")
            text = q.get("query") if isinstance(q, dict) else q
            if not text:
                out.append(f"{name}: variable {v.get('name')} has no query")
            if not v.get("datasource"):
                out.append(f"{name}: variable {v.get('name')} has no datasource")
        for used in variables_used(json.dumps(v.get("query", ""))) - known:
            out.append(f"{name}: variable {v.get('name')} uses undefined ${used}")
    ids = [p.get("id") for p in all_panels(d)]
    if len(set(ids)) != len(ids) or not all(isinstance(i, int) for i in ids):
        out.append(f"{name}: panel ids not unique integers: {ids}")
    for p in all_panels(d):
        where = f"{name}: panel {p.get('id')} {p.get('title')!r}"
        if not p.get("title"):
            out.append(f"{where}: no title")
        grid = p.get("gridPos", {})
        if not all(isinstance(grid.get(k), int) for k in ("h", "w", "x", "y")):
            out.append(f"{where}: gridPos needs integer h, w, x, y: {grid}")
        elif grid["x"] < 0 or grid["w"] <= 0 or grid["x"] + grid["w"] > 24 or grid["h"] <= 0:
            out.append(f"{where}: gridPos outside Grafana's 24 columns: {grid}")
        if p.get("type") == "row":
            continue
        if not p.get("type"):
            out.append(f"{where}: no type")
        ds = p.get("datasource")
        if not isinstance(ds, dict) or ds.get("type") != "prometheus" or not ds.get("uid"):
            out.append(f"{where}: datasource must name the prometheus type and a uid: {ds}")
        targets = p.get("targets") or []
        if not targets:
            out.append(f"{where}: no targets")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs) or not all(refs):
            out.append(f"{where}: targets' refIds missing or not unique: {refs}")
        for t in targets:
            if not (t.get("expr") or "").strip():
                out.append(f"{where}: target {t.get('refId')} has no expr")
        for used in variables_used(json.dumps({"ds": ds, "targets": targets, "title": p.get("title")})) - known:
            out.append(f"{where}: uses undefined template variable ${used}")
    return out


def resolve_variables(d: Mapping[str, Any], prom: PromServer) -> dict[str, list[str]]:
    """Each template variable's values as Grafana would offer them against ``prom`` (a query variable's
    query itself substituted with the variables before it, as Grafana chains them)."""
    out: dict[str, list[str]] = {}
    for v in d.get("templating", {}).get("list", []):
        name, kind = v["name"], v.get("type")
        if kind == "datasource":
            out[name] = ["prometheus"]
        elif kind == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            out[name] = query_variable(concrete(q, out, d), prom)
        elif kind in ("custom", "constant", "textbox", "interval"):
            opts = [o["value"] for o in v.get("options", []) if "value" in o]
            if not opts and kind == "custom":
                opts = [s.strip() for s in str(v.get("query", "")).split(",") if s.strip()]
            if not opts:
                cur = v.get("current", {}).get("value", v.get("query", ""))
                opts = cur if isinstance(cur, list) else [str(cur)]
            out[name] = [str(o) for o in opts]
        else:
            out[name] = [".*"]  # ad hoc filters and the like: nothing to narrow
    return out


LABEL_VALUES = re.compile(r"^\s*label_values\((?:(.*),\s*)?(\w+)\s*\)\s*$", re.S)
QUERY_RESULT = re.compile(r"^\s*query_result\((.*)\)\s*$", re.S)


def query_variable(query: str, prom: PromServer) -> list[str]:
    m = LABEL_VALUES.match(query)
    if m:
        selector, label = m.group(1), m.group(2)
        if selector is None:
            return sorted(prom.label_values(label))
        return sorted({s[label] for s in prom.series(selector) if label in s})
    m = QUERY_RESULT.match(query)
    if m:
        return sorted({json.dumps(s["metric"]) for s in prom.query(m.group(1))})
    raise AssertionError(f"template variable query of a kind this test does not evaluate: {query!r}")


def unset(d: Mapping[str, Any], values_of: Mapping[str, list[str]]) -> list[str]:
    """Variables Grafana could not give a value: no values, and no "All" value to fall back on."""
    out = []
    for v in d.get("templating", {}).get("list", []):
        if not values_of.get(v["name"]) and not (v.get("includeAll") and v.get("allValue")):
            out.append(v["name"])
    return out


def concrete(expr: str, values_of: Mapping[str, list[str]], d: Mapping[str, Any] | None = None) -> str:
    """``expr`` with every template variable substituted as Grafana does on a dashboard's first load:
    a variable with "All" (``includeAll``) takes All -- its ``allValue`` if it has one, else the regex of
    all its values -- one without takes its first value. Built-in intervals become fixed durations."""
    defs = {v["name"]: v for v in (d or {}).get("templating", {}).get("list", [])}

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name in BUILTIN_VARIABLES:
            return BUILTIN_VARIABLES[name]
        vals = values_of.get(name)
        if vals is None:
            return m.group(0)  # not a variable we know: left for the structural check to report
        v = defs.get(name, {})
        if v.get("includeAll"):
            if v.get("allValue"):
                return str(v["allValue"])
            return "(" + "|".join(re.escape(x).replace("\\", "\\\\") for x in vals) + ")" if vals else ".*"
        return vals[0] if vals else ""
    return VARIABLE.sub(sub, expr)


def wait_until(cond: Callable[[], bool], timeout_s: float, what: str, step_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(step_s)
    raise AssertionError(f"not within {timeout_s:g} s: {what}")
