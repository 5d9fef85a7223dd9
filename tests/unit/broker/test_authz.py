"""The leaf broker's publish/subscribe policy (broker.authz)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gridstat.broker.authz import Policy, PolicyFile, parse
from gridstat.errors import Unauthorized, ValidationError

DOC = """
default: deny
publish:
  - clients: ["pmu*"]
    variables: ["pmu*/*"]
subscribe:
  - clients: [ems]
    variables: ["pmu1/*"]
  - clients: ["dash-*"]
    variables: "*/freq"
"""


def test_rules_name_clients_and_variables_and_default_covers_the_rest() -> None:
    p = parse(DOC)
    assert p.allowed("publish", "pmu1", "pmu1/freq")
    assert not p.allowed("publish", "pmu1", "sub1/freq")  # named, but not for this variable
    assert not p.allowed("publish", "rogue", "pmu1/freq")  # not named: default deny
    assert p.allowed("subscribe", "ems", "pmu1/volt") and not p.allowed("subscribe", "ems", "pmu2/volt")
    assert p.allowed("subscribe", "dash-7", "pmu2/freq") and not p.allowed("subscribe", "dash-7", "pmu2/volt")
    with pytest.raises(Unauthorized) as exc:
        p.check("subscribe", "ems", "pmu2/volt", field="subscription.variable")
    assert exc.value.field == "subscription.variable" and exc.value.reason == "Unauthorized"
    assert Policy().allowed("publish", "anyone", "x/y")  # no policy: everything allowed
    assert parse('{"default": "allow", "subscribe": [{"clients": ["x"], "variables": ["a/*"]}]}').allowed(
        "subscribe", "y", "b/c")


@pytest.mark.parametrize(("text", "field"), [
    ("default: maybe", "policy.default"),
    ("publish: {}", "policy.publish"),
    ("publish: [{clients: [a]}]", "policy.publish[0].variables"),
    ("subscribe: [{clients: [], variables: [x]}]", "policy.subscribe[0].clients"),
    ("subscribe: [{clients: [a], variables: [x], extra: 1}]", "policy.subscribe[0]"),
    ("readers: []", "policy.readers"),
    ("- a list", "policy"),
    ("{not json", "policy"),
])
def test_invalid_policies_name_the_field(text: str, field: str) -> None:
    with pytest.raises(ValidationError) as exc:
        parse(text)
    assert exc.value.field == field


def test_policy_file_is_reread_when_it_changes_and_a_bad_version_keeps_the_last_good(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(DOC)
    pf = PolicyFile(path, recheck_s=0.0)
    assert not pf.current().allowed("subscribe", "ems", "pmu2/volt")
    path.write_text("default: allow\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000_000))
    assert pf.current().allowed("subscribe", "ems", "pmu2/volt")
    path.write_text("default: [")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 2_000_000_000))
    assert pf.current().allowed("subscribe", "ems", "pmu2/volt") and pf.reload_errors == 1
