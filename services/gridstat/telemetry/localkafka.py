"""A local Apache Kafka for ``gridstat up --kafka`` and ``gridstat bench telemetry``.

Real Kafka in KRaft mode (one node, broker and controller) on 127.0.0.1, through the project's
``scripts/kafka.sh run DIR PORT CPORT``: the script resolves the jars from Maven Central once
(cached under ~/.cache/gridstat/kafka-<version>), formats DIR on first use and execs the JVM,
so the process started here is the broker itself. The script is found next to the package in a
checkout, or named by GRIDSTAT_KAFKA_SCRIPT.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

from gridstat.core.ports import free_port as free_port  # re-exported: the telemetry bench picks ports with it
from gridstat.core.ports import port_answers

from .errors import KafkaUnavailable, TelemetryError


def kafka_script() -> Path:
    env = os.environ.get("GRIDSTAT_KAFKA_SCRIPT")
    path = Path(env) if env else Path(__file__).resolve().parents[3] / "scripts" / "kafka.sh"
    if not path.is_file():
        raise TelemetryError(f"scripts/kafka.sh not found at {path}: run from a checkout or set "
                             "GRIDSTAT_KAFKA_SCRIPT", reason="KafkaScriptMissing")
    return path


class LocalKafka:
    """One Kafka node in ``directory``; ``start`` waits until its port answers, ``stop`` ends it."""

    def __init__(self, directory: Path, *, port: int = 0, controller_port: int = 0) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "kafka.out"

    def start(self, timeout_s: float = 180.0) -> None:
        """Start (resolving the jars first if this machine has none yet: minutes on a new machine)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([str(kafka_script()), "run", str(self.directory), str(self.port),
                                      str(self.controller_port)], stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                raise KafkaUnavailable(f"Kafka exited with {self.proc.returncode}; see {self.log_path}")
            if port_answers(self.port):
                return
            time.sleep(0.2)
        self.stop()
        raise KafkaUnavailable(f"Kafka did not answer on {self.bootstrap} within {timeout_s:.0f} s; "
                               f"see {self.log_path}")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
