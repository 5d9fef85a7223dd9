"""skaffold.yaml names the image the chart deploys and paths that exist (issue 7 point 6).

skaffold itself is not installed (no package on PyPI, npm or Debian; a large build from the Go
module proxy): the file is checked for what skaffold would reject first.
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
