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
