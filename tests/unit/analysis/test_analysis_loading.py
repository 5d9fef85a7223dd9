"""``gridstat analyze`` input files: the schema, and bad input with file:line:field errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gridstat.analysis import loading, model
from gridstat.cli import main as cli

GOOD = """\
brokers:
  - name: root
  - name: west
    parent: root
  - name: west-1
    parent: west
classes:
  - name: phasors
    count: 10
    lifetime_s: 60
    default: {subscriptions: 0.5, publish_per_s: 0}
    at:
      west-1: {publish_per_s: 30}
"""


def test_a_valid_file() -> None:
    w = loading.parse_analysis_file(GOOD, "t.yaml")
    assert w.tree.names == ("root", "west", "west-1")
    g = w.groups[0]
    assert g.count == 10
    assert g.arrival_per_s == pytest.approx((0.5 / 60,) * 3)
    assert g.publish_per_s == (0.0, 0.0, 30.0)
    assert w.subscriptions == pytest.approx(15.0)


def test_generated_tree_and_uniform_workload_match_the_paper_setting() -> None:
    w = loading.parse_analysis_file("generate: {brokers: 127, max_per_level: 8}\nuniform: {subscriptions: 1000, "
                                    "publication_rate: 32}\n")
    assert len(w.tree.level_sizes()) == 18
    assert model.break_even(w, "simple").subscriptions == pytest.approx(9.4e3, rel=0.03)


@pytest.mark.parametrize(("text", "where", "reason", "words"), [
    ("brokers:\n  - name: a\n  - name: b\n    parent: c\n  - name: c\n    parent: b\nuniform: {subscriptions: 1}\n",
     "t.yaml:4: brokers[1].parent", "CyclicTopology", "b -> c -> b"),
    ("brokers:\n  - name: a\n    parent: a\nuniform: {subscriptions: 1}\n", "t.yaml:3: brokers[0].parent",
     "CyclicTopology", "own parent"),
    ("brokers:\n  - name: a\n  - name: b\nuniform: {subscriptions: 1}\n", "t.yaml:3: brokers[1]",
     "InvalidArgument", "second root"),
    ("brokers:\n  - name: a\n  - name: b\n    parent: zz\nuniform: {subscriptions: 1}\n",
     "t.yaml:4: brokers[1].parent", "InvalidArgument", "unknown broker 'zz'"),
    ("brokers:\n  - name: a\n", "t.yaml:1: (document)", "MissingParameter", "'classes' or 'uniform'"),
    ("brokers:\n  - name: a\nclasses:\n  - name: x\n    default: {arrival_per_s: 0.1}\n",
     "t.yaml:5: classes[0].default", "MissingParameter", "no lifetime"),
    ("brokers:\n  - name: a\nclasses:\n  - name: x\n    lifetime_s: 5\n", "t.yaml:4: classes[0]",
     "MissingParameter", "'default' or 'at'"),
    ("brokers:\n  - name: a\nclasses:\n  - name: x\n    at:\n      b: {publish_per_s: 1}\n",
     "t.yaml:6: classes[0].at.b", "InvalidArgument", "unknown broker 'b'"),
    ("brokers:\n  - name: a\nclasses:\n  - name: x\n    default: {publish_per_s: -1}\n",
     "t.yaml:5: classes[0].default.publish_per_s", "InvalidArgument", "out of range"),
    ("generate: {brokers: 7}\nuniform: {subscriptions: 1}\n", "t.yaml:1: generate", "MissingParameter",
     "max_per_level"),
    ("brokers: [{name: a}]\nuniform: {subscriptions: 1}\nuniform: {subscriptions: 2}\n", "t.yaml:3: uniform",
     "InvalidArgument", "duplicate key"),
    ("brokers: [\n", "t.yaml", "InvalidArgument", "not valid YAML"),
])
def test_bad_files_name_file_line_and_field(text: str, where: str, reason: str, words: str) -> None:
    with pytest.raises(loading.TopologyFileError) as err:
        loading.parse_analysis_file(text, "t.yaml")
    assert str(err.value).startswith(f"{err.value.reason}: {where}"), str(err.value)
    assert err.value.reason == reason
    assert words in str(err.value)


def test_cli_prints_json_and_writes_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "t.yaml"
    f.write_text(GOOD)
    assert cli.main(["analyze", str(f), "-o", "json", "--plots", str(tmp_path / "plots")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [b["name"] for b in data["brokers"]] == ["root", "west", "west-1"]
    assert data["totals"]["remote_entries"] > 0
    assert {b["routing"] for b in data["break_even"]} == {"identity", "simple"}
    for name in ("brokers.png", "sweep.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_table_with_simulation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "t.yaml"
    f.write_text(GOOD)
    assert cli.main(["analyze", str(f), "--simulate", "200", "--replicas", "4"]) == 0
    out = capsys.readouterr().out
    assert "break-even (identity routing)" in out
    assert "simulation: 4 classes per group" in out


def test_cli_bad_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "t.yaml"
    f.write_text("brokers:\n  - name: a\n    parent: a\nuniform: {subscriptions: 1}\n")
    assert cli.main(["analyze", str(f)]) == 2
    assert "CyclicTopology" in capsys.readouterr().err
    assert cli.main(["analyze", str(tmp_path / "missing.yaml")]) == 2
