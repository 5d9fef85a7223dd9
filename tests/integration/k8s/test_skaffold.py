"""skaffold.yaml names the image the chart deploys and paths that exist (docs/kubernetes.md).

skaffold itself is not installed (no package on PyPI, npm or Debian; a large build from the Go
module proxy): the file is checked against skaffold's own JSON schema (from its Go module) and for
the paths and image names skaffold would resolve.
"""

from __future__ import annotations

import re

import yaml

from .kube import ROOT

#: Schema versions of skaffold v2 (skaffold/v4beta1 .. v4beta13).
KNOWN = re.compile(r"^skaffold/v4beta([1-9]|1[0-3])$")


def test_skaffold_config_names_the_image_and_the_chart() -> None:
    config = yaml.safe_load((ROOT / "skaffold.yaml").read_text())
    assert KNOWN.match(config["apiVersion"]) and config["kind"] == "Config"
    (artifact,) = config["build"]["artifacts"]
    assert (ROOT / artifact["context"] / artifact["docker"]["dockerfile"]).is_file()
    (release,) = config["deploy"]["helm"]["releases"]
    chart = ROOT / release["chartPath"]
    assert (chart / "Chart.yaml").is_file() and (chart / "values.schema.json").is_file()
    image = artifact["image"]
    assert release["setValueTemplates"]["image.repository"] == f"{{{{.IMAGE_REPO_{image}}}}}"
    assert release["setValueTemplates"]["image.tag"] == f"{{{{.IMAGE_TAG_{image}}}}}"
    values = yaml.safe_load((chart / "values.yaml").read_text())
    assert values["image"]["repository"] == image
    for profile in config.get("profiles", []):
        for patch in profile.get("patches", []):
            for path in patch.get("value", []) if patch["path"].endswith("valuesFiles") else []:
                assert (ROOT / path).is_file()


def test_skaffold_config_is_valid_for_its_schema_version() -> None:
    """Against skaffold's own JSON schema for the file's apiVersion, taken from skaffold's Go module
    by scripts/k8s-tools.sh (skaffold-schema); a typo in a field name or a wrong type fails here."""
    import json
    import os
    from pathlib import Path

    import jsonschema

    config = yaml.safe_load((ROOT / "skaffold.yaml").read_text())
    version = config["apiVersion"].split("/")[1]
    schemas = Path(os.environ.get("GRIDSTAT_SKAFFOLD_SCHEMAS")
                   or Path.home() / ".cache/gridstat/skaffold-schemas-v2.16.1")
    schema_file = schemas / f"{version}.json"
    assert schema_file.is_file(), f"{schema_file} is missing: run scripts/k8s-tools.sh skaffold-schema"
    schema = json.loads(schema_file.read_text())
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(config), key=lambda e: list(e.absolute_path))
    assert not errors, "; ".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:5])
    # The schema really checks: a misspelt field is refused.
    broken = {**config, "deploy": {"helm": {"releases": [{"name": "x", "chartPth": "charts/gridstat"}]}}}
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))
