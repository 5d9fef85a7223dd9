"""Parsing gRPC's handshake-failure lines (core.grpclog) without installing the stderr tap."""

from __future__ import annotations

from gridstat.core import grpclog

NO_CERT = (b"I1126 03:51:10.177622   27522 ssl_transport_security.cc:2563] Handshake failed with error "
           b"SSL_ERROR_SSL: error:100000c0:SSL routines:OPENSSL_internal:PEER_DID_NOT_RETURN_A_CERTIFICATE: "
           b"Invalid certificate verification context")
UNTRUSTED = (b"E1126 ssl_transport_security.cc:1900] Handshake failed with fatal error SSL_ERROR_SSL: "
             b"error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED")


def test_reasons_of_handshake_failures() -> None:
    assert grpclog.reason_of(NO_CERT) == "no_client_certificate"
    assert grpclog.reason_of(UNTRUSTED) == "certificate_not_trusted"
    assert grpclog.reason_of(b"Handshake failed with error SSL_ERROR_SYSCALL") == "handshake_failed"
    assert grpclog.reason_of(b"2026-11-26 WARNING gridstat.tls: refused 3 gRPC connection(s)") is None
    assert grpclog.reason_of(b"") is None


def test_lines_split_across_reads_are_counted_once() -> None:
    first, rest = NO_CERT[:40], NO_CERT[40:] + b"\nother line\n" + UNTRUSTED[:10]
    reasons, pending = grpclog.count_lines(first)
    assert reasons == [] and pending == first
    reasons, pending = grpclog.count_lines(rest, pending)
    assert reasons == ["no_client_certificate"] and pending == UNTRUSTED[:10]
    reasons, pending = grpclog.count_lines(UNTRUSTED[10:] + b"\n", pending)
    assert reasons == ["certificate_not_trusted"] and pending == b""


def test_a_runaway_line_without_newline_keeps_bounded_memory() -> None:
    _, pending = grpclog.count_lines(b"x" * 100_000)
    assert len(pending) <= 4096


def test_nothing_counted_without_the_tap() -> None:
    assert not grpclog.installed() and grpclog.refused() == {}


def test_the_last_lines_a_tapped_process_writes_reach_stderr() -> None:
    """The tap is in front of stderr when a role process fails to start: its error message must still
    be seen (the reader drains the pipe at exit), not vanish with the daemon thread."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "gridstat.cli.main", "router", "--name", "r", "--id", "1",
                           "--port", "0", "--control-port", "0", "--tls-cert", "/nonexistent/c.pem",
                           "--tls-key", "/nonexistent/c.key", "--exit-with-parent"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "cannot read tls_key '/nonexistent/c.key'" in proc.stderr, proc.stderr
