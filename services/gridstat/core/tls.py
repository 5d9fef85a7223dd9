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
        pair = (_read(self.key, "tls_key"), _read(self.cert, "tls_cert"))
        if self.ca:
            return grpc.ssl_server_credentials([pair], root_certificates=_read(self.ca, "tls_ca"),
                                               require_client_auth=True)
        return grpc.ssl_server_credentials([pair])

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Client side: mutual TLS with cert and key; server-authenticated TLS with only a CA."""
        if bool(self.cert) != bool(self.key):
            raise ValidationError("a TLS certificate and its key go together", field="tls_key")
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca, "tls_ca") if self.ca else None,
            private_key=_read(self.key, "tls_key") if self.key else None,
            certificate_chain=_read(self.cert, "tls_cert") if self.cert else None)
