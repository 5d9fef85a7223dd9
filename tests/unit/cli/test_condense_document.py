"""The function document of ``gridstat condense create|host``: parsing, field names, the request it makes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridstat.cli.condense import create_request, document_from_mapping, load_document, spec_to_pb
from gridstat.condensation.spec import spec_from_message
from gridstat.condensation.triggers import TriggerKind
from gridstat.errors import ValidationError
from gridstat.v1 import broker_pb2 as bpb

DOC = {
    "function_id": "area",
    "creator": "ops",
    "inputs": [{"variable": "p1/v", "latency_ms": 50}, {"variable": "p2/v", "latency_ms": 50, "interval_ms": 20}],
    "output": {"publisher": "cf", "variable": "avg", "interval_ms": 100, "type": "float"},
    "spec": {"calculator": "average", "input_filter": {"low": 0, "high": 5000},
             "output_filter": {"high": 4000, "pass_outside": True}, "parameters": {"max_age_ms": 300}},
}


def test_a_document_becomes_the_brokers_request_and_its_spec_survives_the_message() -> None:
    doc = document_from_mapping(DOC)
    assert doc.spec.trigger.kind is TriggerKind.TIME and doc.spec.trigger.interval_ms == 100  # from the output
    req = create_request(doc, creator="ops", placement_router="i1")
    assert (req.function_id, req.creator, req.placement_router, req.mode) == ("area", "ops", "i1", 0)
    assert [(i.variable, i.interval_ms, i.latency_ms) for i in req.inputs] == [("p1/v", 0, 50), ("p2/v", 20, 50)]
    assert req.output.type.kind == bpb.VALUE_KIND_FLOAT and req.output.interval_ms == 100
    assert spec_from_message(spec_to_pb(doc.spec)) == doc.spec


@pytest.mark.parametrize(("change", "field"), [
    ({"inputs": []}, "inputs"),
    ({"inputs": [{"variable": "novar"}]}, "inputs[0].variable"),
    ({"inputs": [{"variable": "p/v", "latency": 5}]}, "inputs[0].latency"),
    ({"inputs": [{"variable": "p/v", "type": "pmu"}]}, "inputs[0].type"),
    ({"output": {"publisher": "cf"}}, "output.variable"),
    ({"output": {"variable": "x", "interval_ms": -1}}, "output.interval_ms"),
    ({"spec": {"calculator": "sum", "trigger": {"kind": "events", "count": -1}}}, "spec.trigger.count"),
    ({"colour": "blue"}, "colour"),
])
def test_bad_documents_name_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        document_from_mapping({**DOC, **change})
    assert info.value.field == field


def test_a_file_error_names_the_file_and_the_field(tmp_path: Path) -> None:
    f = tmp_path / "f.yaml"
    f.write_text("inputs: [{variable: p/v}]\noutput: {variable: x}\nspec: {calculator: sum}\n")
    with pytest.raises(ValidationError, match=r"f.yaml: spec.trigger.interval_ms: a time trigger"):
        load_document(str(f))
    with pytest.raises(ValidationError, match="cannot read"):
        load_document(str(tmp_path / "missing.yaml"))
