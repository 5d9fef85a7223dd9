"""Every Grafana dashboard is scoped to one utility and cloud (docs/telemetry.md, "Kubernetes").

Each dashboard of deploy/grafana/dashboards has the template variables ``namespace`` (the utility:
one Helm release per namespace) and ``cloud`` (the chart's scrape relabelings put both labels on every
series), and every panel query selects on both and keeps them in every aggregation, so no panel
merges two utilities or two clouds. The matchers are regexes whose "All" value is ``.*``: where the
labels are absent (``gridstat up --metrics`` scraped directly) the queries still match everything.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

DASHBOARDS = sorted((Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "dashboards").glob("*.json"))
SCOPE = ('namespace=~"$namespace"', 'cloud=~"$cloud"')
#: A series selector: a metric name (gridstat's or Prometheus's own ``up``) with its optional matchers,
#: not a function call.
SELECTOR = re.compile(r"\b(gridstat_[A-Za-z0-9_]+|up)\b(\s*\{[^}]*\})?(?!\s*\()")
GROUPING = re.compile(r"\b(by|on)\s*\(([^)]*)\)")


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in items:
        yield p
        yield from panels(p.get("panels", []))


def targets(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in panels(dashboard["panels"]) for t in p.get("targets", [])]


def load(path: Path) -> dict[str, Any]:
    d: dict[str, Any] = json.loads(path.read_text())
    return d


def test_there_are_dashboards() -> None:
    assert {p.name for p in DASHBOARDS} >= {"gridstat-brokers.json", "gridstat-routers.json",
                                           "gridstat-subscriptions.json"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_namespace_and_cloud_variables_with_an_all_that_matches_absent_labels(path: Path) -> None:
    variables = {v["name"]: v for v in load(path)["templating"]["list"]}
    names = list(variables)
    assert names[:3] == ["datasource", "namespace", "cloud"], names  # the scope first, then the rest
    for name in ("namespace", "cloud"):
        v = variables[name]
        assert v["type"] == "query" and v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert v["includeAll"] is True and v["allValue"] == ".*" and v["multi"] is True
        assert v["current"]["value"] == ["$__all"]
        assert v["definition"] == v["query"]["query"]
    assert re.fullmatch(r"label_values\(gridstat_[a-z_]+, namespace\)", variables["namespace"]["query"]["query"])
    assert re.fullmatch(r'label_values\(gridstat_[a-z_]+\{namespace=~"\$namespace"\}, cloud\)',
                        variables["cloud"]["query"]["query"])
    # the dashboard's own variables (broker, router, subscriber, variable) list what is in scope only
    for name in names[3:]:
        query = variables[name]["query"]["query"]
        assert all(s in query for s in SCOPE), f"{path.name}: variable {name}: {query}"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_query_selects_on_namespace_and_cloud_and_keeps_them_when_aggregating(path: Path) -> None:
    found = targets(load(path))
    assert found
    for title, expr in found:
        selectors = SELECTOR.findall(expr)
        assert selectors, f"{path.name}: {title}: no series selector in {expr}"
        for name, matchers in selectors:
            assert all(s in matchers for s in SCOPE), f"{path.name}: {title}: {name}{matchers} is not scoped"
        groupings = [(kind, frozenset(x.strip() for x in labels.split(","))) for kind, labels in GROUPING.findall(expr)]
        joins = {labels for kind, labels in groupings if kind == "on"}
        for kind, labels in groupings:
            # A join (on), and the aggregation that makes a join's side (by the join's labels), keep the
            # utility; the cloud may differ between the sides (a station of one cloud, its subscribers in
            # another: the stations map). Every other aggregation keeps both.
            needed = {"namespace"} if kind == "on" or labels in joins else {"namespace", "cloud"}
            assert needed <= labels, f"{path.name}: {title}: {kind} ({', '.join(sorted(labels))}) merges " \
                                     "utilities or clouds"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_with_every_variable_at_all_the_queries_still_match_series_without_the_labels(path: Path) -> None:
    """The substitution the live-Prometheus check makes: each ``$var`` -> ``.*``. An empty label value
    matches ``.*``, so series of ``gridstat up --metrics`` (no namespace, no cloud) are still selected."""
    for _, expr in targets(load(path)):
        concrete = re.sub(r"\$(?!__)[A-Za-z_]+", ".*", expr)
        assert "$" not in concrete.replace("$__rate_interval", "")
        for _, matchers in SELECTOR.findall(concrete):
            assert re.search(r'namespace=~"\.\*"', matchers) and re.search(r'cloud=~"\.\*"', matchers)
            assert not re.search(r'\b(namespace|cloud)\s*(=|!=|!~)\s*"', matchers.replace("=~", "~~"))
