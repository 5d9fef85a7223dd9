"""TLS for the gRPC control plane: server and channel credentials from PEM files.

All control traffic is gRPC (DESIGN.md); with TLS configured a router or broker
serves only TLS, and with a client CA configured it requires client
certificates (mutual TLS), so that forged commands, which would give full
control of the data plane (dissertation 3.8), are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from gridstat.errors import ValidationError


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValidationError(f"cannot read {what} {path!r}: {exc.strerror}", field=what) from exc


@dataclass(frozen=True)
class TlsFiles:
    cert: str = ""
    key: str = ""
    #: CA that signs peers' certificates; on a server it turns on client authentication (mTLS).
    ca: str = ""

    def server_credentials(self) -> grpc.ServerCredentials:
        """Server side, rotated without a restart: before each new TLS handshake gRPC asks whether the
        files changed (mtime), and a new certificate, key or CA is used for new connections from then
        on. A half-written or unreadable new version is skipped and the last good one stays."""
        initial = self._server_config()
        stamp = [self._stamp()]

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            now = self._stamp()
            if now == stamp[0]:
                return None
            try:
                config = self._server_config()
            except (ValidationError, grpc.RpcError, ValueError):
                return None
            stamp[0] = now
            return config

        return grpc.dynamic_ssl_server_credentials(initial, fetch, require_client_authentication=bool(self.ca))

    def _server_config(self) -> grpc.ServerCertificateConfiguration:
        pair = (_read(self.key, "tls_key"), _read(self.cert, "tls_cert"))
        return grpc.ssl_server_certificate_configuration(
            [pair], root_certificates=_read(self.ca, "tls_ca") if self.ca else None)

    def _stamp(self) -> tuple[int, ...]:
        out = []
        for path in (self.cert, self.key, self.ca):
            try:
                out.append(Path(path).stat().st_mtime_ns if path else 0)
            except OSError:
                out.append(-1)
        return tuple(out)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Client side: mutual TLS with cert and key; server-authenticated TLS with only a CA."""
        if bool(self.cert) != bool(self.key):
            raise ValidationError("a TLS certificate and its key go together", field="tls_key")
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca, "tls_ca") if self.ca else None,
            private_key=_read(self.key, "tls_key") if self.key else None,
            certificate_chain=_read(self.cert, "tls_cert") if self.cert else None)
