"""``gridstat-operator``: run the operator (what the chart's Deployment runs).

    gridstat-operator [--namespace NS ... | --all-namespaces] [--peering NAME | --standalone]
                      [--liveness URL] [--verbose]

A thin front over ``kopf run -m gridstat_operator.handlers``: the same flags, with the
defaults a Deployment wants (its own namespace from ``POD_NAMESPACE``, peering named
``gridstat``, liveness at ``http://0.0.0.0:8080/healthz``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

import kopf.cli


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return int(kopf.cli.main(kopf_args(args, os.environ), standalone_mode=False) or 0)


def given(args: list[str], *flags: str) -> bool:
    """Whether one of ``flags`` is among ``args``, as ``--flag value`` or ``--flag=value``."""
    return any(a in flags or a.split("=", 1)[0] in flags for a in args)


def kopf_args(args: list[str], environ: Mapping[str, str]) -> list[str]:
    """The ``kopf run`` command line: ``args`` plus the defaults they do not override."""
    out = ["run", "-m", "gridstat_operator.handlers", *args]
    if not given(args, "--namespace", "-n", "--all-namespaces", "-A"):
        out += ["--namespace", environ.get("POD_NAMESPACE", "default")]
    if not given(args, "--peering", "--standalone"):
        out += ["--peering", environ.get("GRIDSTAT_OPERATOR_PEERING", "gridstat")]
    if not given(args, "--liveness"):
        out += ["--liveness", "http://0.0.0.0:8080/healthz"]
    return out


if __name__ == "__main__":
    raise SystemExit(main())
