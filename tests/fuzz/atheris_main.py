"""The command line every atheris harness here shares (run as ``python fuzz_X.py``, this directory on the
path): ``--write-seeds DIR`` writes the harness's seed inputs; otherwise the seeds are checked to pass,
then atheris fuzzes ``test_one_input`` with the given libFuzzer options."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import atheris


def run(argv: list[str], seeds: Callable[[], Iterable[bytes]], test_one_input: Callable[[bytes], None]) -> None:
    if len(argv) == 3 and argv[1] == "--write-seeds":
        directory = Path(argv[2])
        directory.mkdir(parents=True, exist_ok=True)
        for n, data in enumerate(seeds()):
            (directory / f"seed-{n}").write_bytes(data)
        return
    for data in seeds():  # sanity: the seeds themselves pass
        test_one_input(data)
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()
