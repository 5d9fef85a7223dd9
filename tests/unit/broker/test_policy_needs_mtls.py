"""``gridstat broker --policy`` without mTLS refuses to start unless told to trust declared names
(docs/security.md, "Authorization")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def broker(tmp_path: Path, *extra: str, timeout_s: float = 20) -> subprocess.CompletedProcess[str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text("default: deny\n")
    return subprocess.run([sys.executable, "-m", "gridstat.cli.main", "broker", "--name", "A", "--port", "0",
                           "--state", str(tmp_path / "A.sqlite"), "--policy", str(policy), *extra],
                          capture_output=True, text=True, timeout=timeout_s)


def test_policy_without_mtls_refuses_to_start_naming_the_fix(tmp_path: Path) -> None:
    out = broker(tmp_path)
    assert out.returncode == 2 and "READY" not in out.stdout
    err = out.stderr
    assert "gridstat broker: error:" in err and "--policy needs mTLS" in err
    assert "--tls-client-ca" in err and "--insecure-client-names" in err
    assert not (tmp_path / "A.sqlite").exists()  # refused before anything was created


def test_policy_with_tls_but_no_client_ca_is_refused_too(tmp_path: Path) -> None:
    out = broker(tmp_path, "--tls-cert", "x.pem", "--tls-key", "x.key")
    assert out.returncode == 2 and "--policy needs mTLS" in out.stderr


@pytest.mark.parametrize("level", ["WARNING"])
def test_explicit_opt_out_starts_and_says_so(tmp_path: Path, level: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("default: deny\n")
    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "broker", "--name", "A", "--port", "0",
                             "--state", str(tmp_path / "A.sqlite"), "--policy", str(policy),
                             "--insecure-client-names", "--log-level", level],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY name=A"), line
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "INSECURE: --policy with --insecure-client-names" in err
