"""Runs the atheris harness (tests/fuzz/fuzz_wire.py) for a bounded number of inputs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

HARNESS = Path(__file__).with_name("fuzz_wire.py")


def test_atheris_is_installed() -> None:
    # scripts/setup.sh installs it; a missing fuzzer fails the suite rather than skipping the fuzz run.
    assert importlib.util.find_spec("atheris") is not None, "atheris is missing: pip install 'gridstat[fuzz]'"


def test_wire_and_forwarder_survive_fuzzing(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    subprocess.run([sys.executable, str(HARNESS), "--write-seeds", str(corpus)], check=True, timeout=60)
    assert len(list(corpus.iterdir())) >= 5
    proc = subprocess.run(
        [sys.executable, str(HARNESS), "-runs=50000", "-max_total_time=30", "-max_len=4096",
         f"-artifact_prefix={tmp_path}/", str(corpus)],
        capture_output=True, text=True, timeout=110, cwd=tmp_path,
    )
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"fuzzer found a crash (exit {proc.returncode}):\n{tail}"
    assert "Done" in proc.stderr or "DONE" in proc.stderr, tail


C37118_HARNESS = Path(__file__).with_name("fuzz_c37118.py")


def test_c37118_codec_survives_fuzzing(tmp_path: Path) -> None:
    # The C37.118 codec (gridstat.gateways.c37118): every frame type and the stream API, bounded like the above.
    corpus = tmp_path / "corpus"
    subprocess.run([sys.executable, str(C37118_HARNESS), "--write-seeds", str(corpus)], check=True, timeout=60)
    assert len(list(corpus.iterdir())) >= 10
    proc = subprocess.run(
        [sys.executable, str(C37118_HARNESS), "-runs=20000", "-max_total_time=15", "-max_len=4096",
         f"-artifact_prefix={tmp_path}/", str(corpus)],
        capture_output=True, text=True, timeout=110, cwd=tmp_path,
    )
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"fuzzer found a crash (exit {proc.returncode}):\n{tail}"
    assert "Done" in proc.stderr or "DONE" in proc.stderr, tail
