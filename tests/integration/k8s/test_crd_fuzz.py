"""CRD fuzzing (docs/security.md): generated custom resources against the REAL API server and the operator's planner.

* Invalid Subscriptions and Modes -- one generated defect each: a wrong type, an out-of-range interval,
  latency, redundancy, priority or mode id, a mode name that is no mode name, a bad resource name, a
  missing required field, an oversized string or list, a duplicate -- are POSTed (server-side dry run,
  nothing is stored) and every one must be refused (422) with a message naming the defective field.
* Valid Subscription specs, generated from the CRD schema, are accepted by the server, and passed through
  the operator's pure plan_* functions (with generated Mode indexes and broker state) they either plan or
  raise the project's typed errors (plan.SpecError, gridstat.errors.GridStatError): nothing else escapes.

Example counts are bounded (about 20 s in all, the control plane aside). The planner is imported when
the tests run, not at collection: tests/unit/gridstat_operator is a test package of the same name, and
collected after the real package was imported it would not be found.
"""

from __future__ import annotations

import copy
import importlib
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gridstat import errors
from gridstat.client import extrapolation

from .kube import Cluster
from .manifests import API

pytestmark = pytest.mark.integration

SERVER = settings(max_examples=400, deadline=None, database=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
PLANNER = settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


class Api:
    """POST with ``dryRun=All`` straight to the API server (kubectl would cost a process per example)."""

    def __init__(self, cluster: Cluster) -> None:
        cfg = yaml.safe_load(cluster.kubeconfig.read_text())
        self.server = cfg["clusters"][0]["cluster"]["server"]
        self.token = cfg["users"][0]["user"]["token"]
        self.tls = ssl.create_default_context()
        self.tls.check_hostname = False
        self.tls.verify_mode = ssl.CERT_NONE  # the test control plane's self-signed certificate, on 127.0.0.1

    def create(self, plural: str, body: dict[str, Any]) -> tuple[int, str]:
        req = urllib.request.Request(f"{self.server}/apis/gridstat.io/v1alpha1/namespaces/default/{plural}?dryRun=All",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.tls, timeout=10) as reply:
                return reply.status, ""
        except urllib.error.HTTPError as exc:
            return exc.code, str(json.loads(exc.read()).get("message", ""))


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Api:
    return Api(cluster)


# -- valid resources, from the CRD schemas -----------------------------------------------------------
def _regex(pattern: str) -> st.SearchStrategy[str]:
    return st.from_regex(pattern, fullmatch=True)


NAME = _regex(r"[a-z0-9]([a-z0-9-]{0,14}[a-z0-9])?")
IDENT = _regex(r"[A-Za-z0-9_.:-]{1,16}")
MODE_NAME = _regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?")
METHOD = st.one_of(st.sampled_from(extrapolation.BUILTIN_METHODS), _regex(r"[a-z0-9]([a-z0-9_-]{0,10}[a-z0-9])?"))
EXTRAPOLATION = st.fixed_dictionaries({"method": METHOD}, optional={
    "order": st.integers(0, 16), "orders": st.lists(st.integers(0, 16), max_size=17),
    "window": st.integers(1, 256), "maxConsecutive": st.integers(1, 1000)})
QOS_FIELDS = {"redundancy": st.integers(1, 8), "priority": st.integers(0, 6), "extrapolation": EXTRAPOLATION}
QOS = st.fixed_dictionaries({"intervalMs": st.integers(1, 3_600_000), "latencyMs": st.integers(1, 60_000)},
                            optional=QOS_FIELDS)
MODE_QOS = st.builds(lambda name, over: {"mode": name, **over}, MODE_NAME, st.fixed_dictionaries(
    {}, optional={"intervalMs": st.integers(1, 3_600_000), "latencyMs": st.integers(1, 60_000), **QOS_FIELDS}))
SPEC = st.fixed_dictionaries(
    {"subscriber": IDENT, "edgeRouter": IDENT,
     "variables": st.lists(st.builds(lambda p, v: f"{p}/{v}", IDENT, IDENT), min_size=1, max_size=4, unique=True),
     "qos": QOS},
    optional={"type": st.sampled_from(["", "int", "float", "bool"]),
              "cloud": _regex(r"([a-zA-Z0-9]([a-zA-Z0-9_.-]{0,10}[a-zA-Z0-9])?)?"),
              "modes": st.lists(MODE_QOS, max_size=4, unique_by=lambda m: m["mode"])})
LABELS = st.dictionaries(_regex(r"[a-z]{1,4}"), _regex(r"[a-z0-9]{0,4}"), max_size=3)


def subscription(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "Subscription", "metadata": {"name": name}, "spec": spec}


def mode(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "Mode", "metadata": {"name": name}, "spec": spec}


BASE_SUB = subscription("fuzz", {"subscriber": "ems", "edgeRouter": "e2", "variables": ["pmu1/freq"],
                                 "qos": {"intervalMs": 20, "latencyMs": 50, "redundancy": 1,
                                         "extrapolation": {"method": "average"}},
                                 "modes": [{"mode": "normal"}]})
BASE_MODE = mode("storm", {"id": 3, "description": "storm", "subscriptions": ["fuzz"]})


# -- one defect each ------------------------------------------------------------------------------------
Path_ = tuple[str | int, ...]
NOT_INT = st.one_of(st.text(max_size=5), st.booleans(), st.lists(st.integers(), max_size=2),
                    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f != int(f)))
NOT_STR = st.one_of(st.integers(-5, 5), st.booleans(), st.lists(st.text(max_size=2), max_size=2),
                    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1))
NOT_LIST = st.one_of(st.text(max_size=5), st.integers(),
                     st.dictionaries(st.text(max_size=2), st.integers(), max_size=1))
NOT_OBJ = st.one_of(st.text(max_size=5), st.integers(), st.lists(st.integers(), max_size=2))
BIG = 2**53


def _outside(low: int, high: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(-BIG, low - 1), st.integers(high + 1, BIG))


def _too_long(n: int, alphabet: str = "abc") -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=n + 1, max_size=n + 40)


# (kind, path to set -- or delete with None as the value strategy --, bad values, field the message must name)
DEFECTS: list[tuple[str, Path_, st.SearchStrategy[Any] | None, str]] = [
    # wrong types
    *[("gsub", ("spec", "qos", f), NOT_INT, f"spec.qos.{f}") for f in ("intervalMs", "latencyMs", "redundancy",
                                                                       "priority")],
    *[("gsub", ("spec", f), NOT_STR, f"spec.{f}") for f in ("subscriber", "edgeRouter", "cloud", "type")],
    ("gsub", ("spec", "variables"), NOT_LIST, "spec.variables"),
    ("gsub", ("spec", "variables", 0), NOT_STR, "spec.variables[0]"),
    ("gsub", ("spec", "qos"), NOT_OBJ, "spec.qos"),
    ("gsub", ("spec", "modes"), NOT_LIST, "spec.modes"),
    ("gsub", ("spec",), NOT_OBJ, "spec"),
    ("gmode", ("spec", "id"), NOT_INT, "spec.id"),
    ("gmode", ("spec", "subscriptions"), NOT_LIST, "spec.subscriptions"),
    # out of range
    ("gsub", ("spec", "qos", "intervalMs"), _outside(1, 3_600_000), "spec.qos.intervalMs"),
    ("gsub", ("spec", "qos", "latencyMs"), _outside(1, 60_000), "spec.qos.latencyMs"),
    ("gsub", ("spec", "qos", "redundancy"), _outside(1, 8), "spec.qos.redundancy"),
    ("gsub", ("spec", "qos", "priority"), _outside(0, 6), "spec.qos.priority"),
    ("gsub", ("spec", "modes", 0, "intervalMs"), _outside(1, 3_600_000), "spec.modes[0].intervalMs"),
    ("gsub", ("spec", "modes", 0, "latencyMs"), _outside(1, 60_000), "spec.modes[0].latencyMs"),
    ("gsub", ("spec", "modes", 0, "redundancy"), _outside(1, 8), "spec.modes[0].redundancy"),
    ("gsub", ("spec", "qos", "extrapolation"), st.builds(lambda w: {"method": "average", "window": w},
                                                         _outside(1, 256)), "spec.qos.extrapolation.window"),
    ("gsub", ("spec", "qos", "extrapolation"), st.builds(lambda o: {"method": "polynomial", "order": o},
                                                         _outside(0, 16)), "spec.qos.extrapolation.order"),
    ("gmode", ("spec", "id"), _outside(0, 15), "spec.id"),
    # unknown modes, bad values of enumerations and patterns
    ("gsub", ("spec", "modes", 0, "mode"), _regex(r"[A-Z_ !/][a-z]{0,5}|[a-z]{1,5}[A-Z_ !/.]|-[a-z]{1,4}"),
     "spec.modes[0].mode"),
    ("gsub", ("spec", "type"), st.text(max_size=8).filter(lambda t: t not in ("", "int", "float", "bool")),
     "spec.type"),
    ("gsub", ("spec", "cloud"), _regex(r"[-_.][a-z]{0,4}|[a-z]{1,4}[ /!]"), "spec.cloud"),
    ("gsub", ("spec", "subscriber"), _regex(r"[a-z]{0,3}[ /!@#][a-z]{0,3}"), "spec.subscriber"),
    ("gsub", ("spec", "variables"), st.lists(_regex(r"[a-z]{1,6}|[a-z]{1,3}/[a-z]{1,3}/[a-z]{1,3}|/[a-z]{1,4}"),
                                             min_size=1, max_size=3, unique=True), "spec.variables"),
    ("gsub", ("spec", "qos", "extrapolation", "method"), _regex(r"[A-Z][a-z]{0,5}|[a-z]{1,5}[ A-Z.]"),
     "spec.qos.extrapolation.method"),
    ("gmode", ("metadata", "name"), st.just("normal"), "spec.id"),
    # bad resource names
    ("gsub", ("metadata", "name"), _regex(r"[A-Z_][a-z]{0,5}|[a-z]{1,5}[A-Z_ ]|-[a-z]{1,5}"), "metadata.name"),
    ("gsub", ("metadata", "name"), _too_long(253), "metadata.name"),
    ("gmode", ("metadata", "name"), _too_long(63), "metadata.name"),
    # missing required fields
    *[("gsub", p, None, f) for p, f in [
        (("spec", "subscriber"), "spec.subscriber"), (("spec", "edgeRouter"), "spec.edgeRouter"),
        (("spec", "variables"), "spec.variables"), (("spec", "qos"), "spec.qos"),
        (("spec", "qos", "intervalMs"), "spec.qos.intervalMs"), (("spec", "qos", "latencyMs"), "spec.qos.latencyMs"),
        (("spec", "modes", 0, "mode"), "spec.modes[0].mode"), (("spec",), "spec"),
        (("metadata", "name"), "metadata.name")]],
    ("gmode", ("spec", "id"), None, "spec.id"),
    # oversized strings and lists, duplicates
    ("gsub", ("spec", "subscriber"), _too_long(128), "spec.subscriber"),
    ("gsub", ("spec", "edgeRouter"), _too_long(128), "spec.edgeRouter"),
    ("gsub", ("spec", "cloud"), _too_long(63), "spec.cloud"),
    ("gsub", ("spec", "variables", 0), st.builds(lambda s: f"p/{s}", _too_long(256)), "spec.variables[0]"),
    ("gsub", ("spec", "modes", 0, "mode"), _too_long(63), "spec.modes[0].mode"),
    ("gsub", ("spec", "variables"), st.integers(257, 300).map(lambda n: [f"p/v{i}" for i in range(n)]),
     "spec.variables"),
    ("gsub", ("spec", "modes"), st.integers(17, 20).map(lambda n: [{"mode": f"m{i}"} for i in range(n)]),
     "spec.modes"),
    ("gsub", ("spec", "variables"), st.just(["pmu1/freq", "pmu1/freq"]), "spec.variables[1]"),
    ("gsub", ("spec", "modes"), st.just([{"mode": "storm"}, {"mode": "storm", "intervalMs": 40}]),
     "spec.modes[1]"),
    ("gmode", ("spec", "description"), _too_long(1024), "spec.description"),
    ("gmode", ("spec", "subscriptions", 0), _too_long(253), "spec.subscriptions[0]"),
]


def _set(doc: dict[str, Any], path: Path_, value: Any, *, delete: bool) -> None:
    parent: Any = doc
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value


@st.composite
def defective(draw: Callable[..., Any]) -> tuple[str, dict[str, Any], str]:
    kind, path, values, field = draw(st.sampled_from(DEFECTS))
    doc = copy.deepcopy(BASE_SUB if kind == "gsub" else BASE_MODE)
    _set(doc, path, None if values is None else draw(values), delete=values is None)
    return ("subscriptions" if kind == "gsub" else "modes"), doc, field


def test_the_defect_list_covers_every_kind_of_defect_the_issue_names() -> None:
    fields = {f for _, _, _, f in DEFECTS}
    for f in ("spec.qos.intervalMs", "spec.qos.latencyMs", "spec.qos.redundancy", "spec.modes[0].mode",
              "metadata.name", "spec.subscriber", "spec.id"):
        assert f in fields
    assert any(v is None for _, _, v, _ in DEFECTS)  # missing required fields


@SERVER
@given(defective())
def test_every_invalid_resource_is_refused_by_the_api_server_naming_the_field(
        api: Api, case: tuple[str, dict[str, Any], str]) -> None:
    plural, doc, field = case
    status, message = api.create(plural, doc)
    assert status == 422, f"{plural} accepted ({status}): {json.dumps(doc)[:300]}"
    assert field in message, f"{field} not named: {message[:400]}"


def test_the_unmodified_bases_are_accepted(api: Api) -> None:
    assert api.create("subscriptions", BASE_SUB) == (201, "")
    assert api.create("modes", BASE_MODE) == (201, "")


# -- valid specs: accepted by the server, and the planner raises nothing but typed errors ---------------------
@settings(max_examples=80, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(NAME, SPEC)
def test_generated_valid_subscriptions_are_accepted_by_the_api_server(api: Api, name: str,
                                                                       spec: dict[str, Any]) -> None:
    status, message = api.create("subscriptions", subscription(name, spec))
    assert status == 201, message


def _plan() -> Any:
    return importlib.import_module("gridstat_operator.plan")


MODE_REFS = st.deferred(lambda: st.lists(st.builds(
    _plan().ModeRef, name=MODE_NAME, id=st.integers(-1, 16), defined=st.booleans(),
    selector=st.one_of(st.none(), st.fixed_dictionaries({"matchLabels": LABELS})),
    names=st.frozensets(NAME, max_size=2)), max_size=5))


@st.composite
def actual_state(draw: Callable[..., Any], desired: list[Any]) -> list[Any]:
    """What a broker might hold under this resource's ids: some of the desired, changed, plus strays."""
    plan = _plan()
    out = []
    for d in desired:
        if draw(st.booleans()):
            qos = {q.mode_id: q.key for q in d.qos if draw(st.booleans())}
            qos.update(draw(st.dictionaries(st.integers(0, 15), st.tuples(*[st.integers(0, 10)] * 5), max_size=2)))
            out.append(plan.ActualSubscription(d.subscription_id, draw(st.sampled_from([d.subscriber, "other"])),
                                               d.variable, draw(st.sampled_from([d.edge_router, "e9"])), qos,
                                               [(m, 0, ("e1", "e2"), 1.5) for m in qos]))
    if desired and draw(st.booleans()):
        out.append(plan.ActualSubscription(desired[0].subscription_id[:-1] + "#stray", "ems", "p/stray", "e2",
                                           {0: (0, 20, 50, 1, 1)}))
    return out


@PLANNER
@given(NAME, LABELS, SPEC, MODE_REFS, st.data())
def test_valid_specs_through_the_planner_raise_nothing_but_typed_errors(
        name: str, labels: dict[str, str], spec: dict[str, Any], refs: list[Any], data: st.DataObject) -> None:
    plan = _plan()
    typed = (plan.SpecError, errors.GridStatError)
    modes = plan.known_modes(refs)
    try:
        desired = plan.desired_subscriptions(namespace="ns", name=name, labels=labels, spec=spec, modes=modes)
    except typed as exc:
        assert str(exc)
        if isinstance(exc, plan.SpecError):
            assert exc.reason and exc.field.startswith("spec."), (exc.reason, exc.field)
        desired = []
    else:
        assert [d.variable for d in desired] == spec["variables"]
        assert all(d.subscription_id.startswith(plan.id_prefix("ns", name)) for d in desired)
        assert len(plan.fingerprint(desired)) == 16
    steps = plan.plan_subscription(desired, data.draw(actual_state(desired)))
    assert all(isinstance(a, plan.Subscribe | plan.Change | plan.Replace | plan.Unsubscribe) for a in steps.actions)
    plan.paths_status(data.draw(actual_state(desired)), {m.id: m.name for m in modes.values()})
    try:
        ref = plan.plan_mode_change({"mode": data.draw(st.one_of(MODE_NAME, st.sampled_from(sorted(modes))))}, modes)
    except typed as exc:
        assert exc.field == "spec.mode"  # type: ignore[union-attr]
    else:
        assert ref.defined and plan.mode_clash(ref, modes.values()) in (None, *modes)
