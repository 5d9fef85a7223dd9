"""The chart's CRDs are generated from operator/crds and must be structural (no $ref)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gridstat_operator import crdgen


def _walk(node: Any) -> list[Any]:
    out = [node]
    if isinstance(node, dict):
        for v in node.values():
            out.extend(_walk(v))
    elif isinstance(node, list):
        for v in node:
            out.extend(_walk(v))
    return out


def test_the_chart_crds_are_fresh() -> None:
    assert crdgen.main(["--check"]) == 0


def test_generated_crds_have_no_references_and_name_their_kinds() -> None:
    generated = crdgen.generate()
    kinds = set()
    for text in generated.values():
        crd = yaml.safe_load(text)
        assert not any(isinstance(n, dict) and "$ref" in n for n in _walk(crd))
        kinds.add(crd["spec"]["names"]["kind"])
        if crd["spec"]["group"] == "gridstat.io":
            assert crd["spec"]["names"]["categories"] == ["gridstat"]
            version = crd["spec"]["versions"][0]
            assert version["subresources"] == {"status": {}}
            columns = {c["name"] for c in version["additionalPrinterColumns"]}
            assert {"Ready", "Reason", "Age"} <= columns
    assert kinds == {"Subscription", "Mode", "ActiveMode", "CondensationFunction", "KopfPeering"}


def test_a_reference_to_nothing_or_a_cycle_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown reference"):
        crdgen.resolve({"$ref": "#/definitions/nope"}, {})
    with pytest.raises(ValueError, match="circular"):
        crdgen.resolve({"$ref": "#/definitions/a"}, {"a": {"items": {"$ref": "#/definitions/a"}}})


def test_the_sources_cannot_be_mistaken_for_applyable_manifests() -> None:
    """``kubectl apply -f operator/crds/`` finds nothing to apply: the sources (with ``$ref``) are
    ``operator/crds/src/*.schema.yaml``, the applyable CRDs are charts/gridstat/crds/."""
    crds = crdgen.SOURCES.parent
    assert [p.name for p in crds.iterdir() if p.suffix in (".yaml", ".yml", ".json")] == []
    assert "not applyable" in (crds / "README.md").read_text()
    sources = sorted(p.name for p in crdgen.SOURCES.glob("*.schema.yaml"))
    assert len(sources) == len(crdgen.generate())


def test_the_switch_plan_schema_holds_as_many_names_as_the_operator_writes() -> None:
    from gridstat_operator import plan

    crd = yaml.safe_load(crdgen.generate()["activemodes.gridstat.io.yaml"])
    version = crd["spec"]["versions"][0]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    for group in ("stopping", "changing", "starting"):
        assert status["plan"]["properties"][group]["properties"]["names"]["maxItems"] == plan.PLAN_NAMES_MAX
    assert "Planned" in status["phase"]["enum"]
    assert "dryRun" in version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert {"name": "Stops", "type": "integer", "jsonPath": ".status.plan.stopping.count",
            "description": "Subscriptions the switch stops"} in version["additionalPrinterColumns"]
