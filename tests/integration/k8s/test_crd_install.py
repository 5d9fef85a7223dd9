"""The CRDs the guide names are the ones that apply (docs/kubernetes.md, "Install the CRDs"):
every ``kubectl apply ... -f <path in this repository>`` in the guide and the README is run
against the real API server with ``--dry-run=server``. The ``$ref`` sources under
operator/crds/src/ are not applyable and no guide offers them."""

from __future__ import annotations

import re
import shlex

import pytest

from .kube import ROOT, Cluster

pytestmark = pytest.mark.integration

GUIDES = ("docs/kubernetes.md", "README.md", "operator/README.md", "operator/crds/README.md")


def applied_paths() -> list[tuple[str, list[str]]]:
    """(guide, kubectl arguments) of every ``kubectl apply`` whose ``-f`` names a repository path."""
    out: list[tuple[str, list[str]]] = []
    for guide in GUIDES:
        for line in (ROOT / guide).read_text().splitlines():
            command = line.split("#", 1)[0].strip()
            if not command.startswith("kubectl apply"):
                continue
            args = shlex.split(command)[1:]
            files = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "-f"]
            if files and all((ROOT / f).exists() for f in files):
                out.append((guide, args))
    return out


def test_the_guide_applies_the_generated_crds() -> None:
    commands = applied_paths()
    assert ("docs/kubernetes.md", ["apply", "--server-side", "-f", "charts/gridstat/crds/"]) in commands
    for guide in GUIDES:
        text = (ROOT / guide).read_text()
        assert not re.search(r"-f\s+operator/crds", text), f"{guide} offers the CRD sources to kubectl"


def test_every_crd_apply_the_guides_name_passes_the_api_server(cluster: Cluster) -> None:
    for guide, args in applied_paths():
        absolute = [str(ROOT / a) if i and args[i - 1] == "-f" else a for i, a in enumerate(args)]
        proc = cluster.kubectl(*absolute, "--dry-run=server", check=False, timeout=120)
        assert proc.returncode == 0, f"{guide}: kubectl {' '.join(args)}: {proc.stderr}"


def test_the_crd_sources_are_not_applyable_and_say_so(cluster: Cluster) -> None:
    # kubectl apply -f operator/crds/ finds no manifest there (only the README that explains); the
    # sources under src/ are refused for their $ref, as the README says
    proc = cluster.kubectl("apply", "--dry-run=server", "-f", str(ROOT / "operator" / "crds"), check=False)
    assert proc.returncode != 0 and "recognized file extensions are" in proc.stderr
    proc = cluster.kubectl("apply", "--server-side", "--dry-run=server", "-f",
                           str(ROOT / "operator" / "crds" / "src" / "activemode.schema.yaml"), check=False)
    assert proc.returncode != 0
