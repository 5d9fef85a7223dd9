"""Where ``gridstat up`` keeps its certificates, and how the CLI finds them for a running demo.

``gridstat up`` runs with mTLS by default (docs/security.md, "Certificates (embedded mode)"): its
certificates live in ``<--state-dir>/certs`` when a state directory is given, else in
``$XDG_STATE_HOME/gridstat/up/certs`` (``~/.local/state/gridstat/up/certs``), so that a second start
reuses them. While it runs, it lists the gRPC addresses of its brokers and routers in
``.../gridstat/up/running/<pid>.json``; a CLI command without ``--tls-*`` options (or
``GRIDSTAT_TLS_*``) whose target is one of those addresses uses that demo's ``admin`` certificate. A
plaintext broker run by hand on another port is not affected.

No third-party import here: every CLI command reads this module (the certificates themselves are
made by ``gridstat.demo.certs``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gridstat.core.tls import TlsFiles

#: Identity of the certificate the CLI and the demo's own management calls use (docs/security.md).
ADMIN = "admin"


def leaf_broker_identity(cloud: str) -> str:
    """The identity of a cloud's leaf broker certificate: its routers take control calls from it only
    (``gridstat router --broker-identity``, docs/security.md "Control by role")."""
    return f"broker-{cloud}"


#: Default locations (``XDG_STATE_HOME``, like the brokers' default state).
STATE_HOME_ENV = "XDG_STATE_HOME"


def state_home(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get(STATE_HOME_ENV) or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "gridstat" / "up"


def default_certs_dir(state_dir: str | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """``<state_dir>/certs`` when a state directory is given, else ``$XDG_STATE_HOME/gridstat/up/certs``."""
    return Path(state_dir) / "certs" if state_dir else state_home(environ) / "certs"


@dataclass(frozen=True)
class CertDir:
    """A directory of ``ca.pem`` and ``NAME.pem`` + ``NAME.key`` (the layout of scripts/gen-certs.sh)."""

    path: Path

    @property
    def ca(self) -> Path:
        return self.path / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.path / "ca.key"

    def cert(self, name: str) -> Path:
        return self.path / f"{name}.pem"

    def key(self, name: str) -> Path:
        return self.path / f"{name}.key"

    def tls(self, name: str) -> TlsFiles:
        """Certificate and key of ``name`` with the CA: a client's mTLS, or a server's with client auth."""
        return TlsFiles(str(self.cert(name)), str(self.key(name)), str(self.ca))

    def cli_flags(self, name: str = ADMIN) -> str:
        return f"--tls-ca {self.ca} --tls-cert {self.cert(name)} --tls-key {self.key(name)}"


def normalize(address: str) -> str:
    """``localhost:P`` and ``127.0.0.1:P`` are the same target (the demo binds 127.0.0.1)."""
    host, _, port = address.strip().rpartition(":")
    if host in ("localhost", "127.0.0.1", "[::ffff:127.0.0.1]"):
        host = "127.0.0.1"
    return f"{host}:{port}"


def _running_dir(environ: Mapping[str, str] | None = None) -> Path:
    return state_home(environ) / "running"


def register(certs: CertDir, addresses: Iterable[str], *, pid: int | None = None,
             environ: Mapping[str, str] | None = None) -> Path:
    """Record a running demo's gRPC addresses and certificate directory; returns the file to remove."""
    import psutil

    pid = os.getpid() if pid is None else pid
    d = _running_dir(environ)
    d.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        os.chmod(d, 0o700)
    path = d / f"{pid}.json"
    doc = {"pid": pid, "started": psutil.Process(pid).create_time(), "certs": str(certs.path),
           "addresses": sorted({normalize(a) for a in addresses})}
    tmp = path.with_name(path.name + ".new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)
    return path


def _alive(pid: int, started: float) -> bool:
    import psutil

    try:
        return bool(abs(psutil.Process(pid).create_time() - started) < 1.0)  # not a recycled pid
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def lookup(address: str, environ: Mapping[str, str] | None = None) -> CertDir | None:
    """The certificate directory of a running ``gridstat up`` serving ``address``, else None."""
    d = _running_dir(environ)
    try:
        entries = sorted(d.glob("*.json"))
    except OSError:
        return None
    want = normalize(address)
    for entry in entries:
        try:
            doc = json.loads(entry.read_text())
            if want in doc["addresses"] and _alive(int(doc["pid"]), float(doc["started"])):
                certs = CertDir(Path(doc["certs"]))
                if certs.ca.is_file() and certs.cert(ADMIN).is_file():
                    return certs
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None
