"""Runs the atheris harnesses (tests/fuzz/fuzz_wire.py, fuzz_c37118.py, fuzz_expressions.py) for a bounded number
of inputs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest


def test_atheris_is_installed() -> None:
    # scripts/setup.sh installs it; a missing fuzzer fails the suite rather than skipping the fuzz run.
    assert importlib.util.find_spec("atheris") is not None, "atheris is missing: pip install 'gridstat[fuzz]'"


@pytest.mark.parametrize("harness, min_seeds, runs, seconds", [
    ("fuzz_wire.py", 5, 50_000, 30),     # the wire parser and the forwarder
    ("fuzz_c37118.py", 10, 20_000, 15),  # the C37.118 codec: every frame type, the stream API
    ("fuzz_expressions.py", 8, 20_000, 15),  # the where-language of queries and listings (docs/queries.md)
])
def test_parsers_survive_fuzzing(tmp_path: Path, harness: str, min_seeds: int, runs: int, seconds: int) -> None:
    script = Path(__file__).with_name(harness)
    corpus = tmp_path / "corpus"
    subprocess.run([sys.executable, str(script), "--write-seeds", str(corpus)], check=True, timeout=60)
    assert len(list(corpus.iterdir())) >= min_seeds
    proc = subprocess.run(
        [sys.executable, str(script), f"-runs={runs}", f"-max_total_time={seconds}", "-max_len=4096",
         f"-artifact_prefix={tmp_path}/", str(corpus)],
        capture_output=True, text=True, timeout=110, cwd=tmp_path,
    )
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"fuzzer found a crash (exit {proc.returncode}):\n{tail}"
    assert "Done" in proc.stderr or "DONE" in proc.stderr, tail
