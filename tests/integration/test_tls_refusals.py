"""A router serving mTLS counts the connections it refuses in the TLS handshake (docs/security.md: gRPC calls
without a valid client certificate are refused and counted, with a clear log line and metric)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from gridstat.v1 import router_pb2 as pb
from gridstat.v1 import router_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
METRIC = re.compile(r'gridstat_tls_handshakes_refused_total\{[^}]*reason="([a-z_]+)"[^}]*\} ([0-9.]+)')


def _refused(metrics_port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    return {m.group(1): float(m.group(2)) for m in METRIC.finditer(text)}


def _call(port: int, creds: grpc.ChannelCredentials) -> grpc.StatusCode:
    with grpc.secure_channel(f"127.0.0.1:{port}", creds) as ch:
        try:
            pb_grpc.RouterControlStub(ch).GetStats(pb.GetStatsRequest(), timeout=2)  # type: ignore[no-untyped-call]
            return grpc.StatusCode.OK
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]


def test_connections_without_a_valid_client_certificate_are_refused_counted_and_logged(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    subprocess.run([str(ROOT / "scripts/gen-certs.sh"), str(certs)], check=True, capture_output=True)
    other = tmp_path / "other"  # a second CA: its certificates are not trusted by the router
    subprocess.run([str(ROOT / "scripts/gen-certs.sh"), str(other)], check=True, capture_output=True)
    err = (tmp_path / "router.err").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "router", "--name", "r1", "--id", "1",
                             "--control-port", "0", "--metrics-port", "0", "--exit-with-parent",
                             "--tls-cert", str(certs / "router.pem"), "--tls-key", str(certs / "router.key"),
                             "--tls-client-ca", str(certs / "ca.pem")],
                            stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"control_port=(\d+).*metrics_port=(\d+)", line)
        assert m, line
        port, metrics_port = int(m.group(1)), int(m.group(2))
        assert _refused(metrics_port) == {}
        ca = (certs / "ca.pem").read_bytes()
        # The router's broker (a certificate from the right CA, role broker) gets in and is not counted.
        good = grpc.ssl_channel_credentials(ca, (certs / "broker.key").read_bytes(),
                                            (certs / "broker.pem").read_bytes())
        assert _call(port, good) is grpc.StatusCode.OK
        # A client's certificate from the same CA passes the handshake but not the role check: refused by
        # method and counted in gridstat_rpc_denied_total (core.access).
        client = grpc.ssl_channel_credentials(ca, (certs / "client.key").read_bytes(),
                                              (certs / "client.pem").read_bytes())
        assert _call(port, client) is grpc.StatusCode.PERMISSION_DENIED
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
        assert re.search(r'gridstat_rpc_denied_total\{caller_role="client",method="RouterControl.GetStats"'
                         r'[^}]*\} 1\.0', text), text
        # No client certificate; then one signed by a CA the router does not trust.
        assert _call(port, grpc.ssl_channel_credentials(ca)) is grpc.StatusCode.UNAVAILABLE
        bad = grpc.ssl_channel_credentials(ca, (other / "client.key").read_bytes(),
                                           (other / "client.pem").read_bytes())
        assert _call(port, bad) is grpc.StatusCode.UNAVAILABLE
        counts: dict[str, float] = {}
        for _ in range(100):  # the tap reads stderr in its own thread: bounded wait
            counts = _refused(metrics_port)
            if counts.get("no_client_certificate", 0) >= 1 and counts.get("certificate_not_trusted", 0) >= 1:
                break
            time.sleep(0.05)
        assert counts.get("no_client_certificate", 0) >= 1, counts
        assert counts.get("certificate_not_trusted", 0) >= 1, counts
        assert _call(port, good) is grpc.StatusCode.OK  # the router still serves valid clients
        assert _refused(metrics_port) == counts
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        err.close()
    log = (tmp_path / "router.err").read_text()
    assert "Handshake failed" in log  # gRPC's own line passes through unchanged
    assert re.search(r"WARNING gridstat\.tls: refused \d+ gRPC connection\(s\): TLS handshake failed "
                     r"\(no_client_certificate\)", log), log[-2000:]
