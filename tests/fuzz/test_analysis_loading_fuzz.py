"""The ``gridstat analyze`` input parser (analysis.loading) under generated input: any text, any YAML
value, and the schema's example with one value anywhere replaced or removed. It returns a workload or
raises TopologyFileError whose message starts ``FILE:LINE: FIELD:`` (only an empty document or YAML
that breaks without a position has no line); nothing else escapes."""

from __future__ import annotations

import re
from typing import Any

import yaml
import yamlfuzz
from hypothesis import example, given
from hypothesis import strategies as st

from gridstat.analysis.loading import TopologyFileError, parse_analysis_file
from gridstat.analysis.workloads import Workload

FUZZ = yamlfuzz.FUZZ
WHERE = re.compile(r"^fuzz\.yaml:\d+: ")

EXAMPLE = """\
name: fuzz
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
    lifetime_distribution: exponential
    default: {subscriptions: 0.5, publish_per_s: 0}
    at:
      west-1: {publish_per_s: 30, arrival_per_s: 0.1, lifetime_s: 5}
"""
GENERATED = "generate: {brokers: 15, max_per_level: 4, arity: 2}\n" \
            "uniform: {classes: 3, subscriptions: 100, lifetime_s: 60, publication_rate: 10}\n"
DOCS = [yaml.safe_load(EXAMPLE), yaml.safe_load(GENERATED)]

values = yamlfuzz.values(["root", "west", "west-1", "r9", "exponential"])


PATHS = [(i, p) for i, doc in enumerate(DOCS) for p in yamlfuzz.paths(doc)]


def _parse(text: str) -> None:
    try:
        workload = parse_analysis_file(text, "fuzz.yaml")
    except TopologyFileError as exc:
        message = str(exc.args[0])  # str(exc) puts the reason in front
        assert exc.field, message
        if "the file is empty" not in message and not message.startswith("fuzz.yaml: (document): not valid YAML"):
            assert WHERE.match(message), message
        else:
            assert message.startswith("fuzz.yaml: "), message
        return
    assert isinstance(workload, Workload)


def test_the_examples_parse() -> None:
    for doc in DOCS:
        assert isinstance(parse_analysis_file(yaml.safe_dump(doc), "fuzz.yaml"), Workload)


@FUZZ
@given(st.text(max_size=300))
@example("=")  # found by this test: a tag SafeLoader cannot construct escaped as a ConstructorError
@example("classes: !!int x")
def test_any_text(text: str) -> None:
    _parse(text)


@FUZZ
@given(values)
def test_any_yaml_value(value: Any) -> None:
    _parse(yaml.safe_dump(value, allow_unicode=True))


@FUZZ
@given(st.sampled_from(PATHS), values, st.booleans())
def test_an_example_with_one_value_replaced_or_removed(where: tuple[int, tuple[Any, ...]], value: Any,
                                                       remove: bool) -> None:
    index, path = where
    _parse(yaml.safe_dump(yamlfuzz.mutated(DOCS[index], path, value, remove=remove), allow_unicode=True))
