"""TLS for the gRPC control plane: server and channel credentials from PEM files.

All control traffic is gRPC (DESIGN.md); with TLS configured a router or broker
serves only TLS, and with a client CA configured it requires client
certificates (mutual TLS), so that forged commands, which would give full
control of the data plane (dissertation 3.8), are refused.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc

from gridstat.errors import ValidationError

T = TypeVar("T")


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
                self.check_files()
                config = self._server_config()
            except (ValidationError, grpc.RpcError, ValueError):
                return None
            stamp[0] = now
            return config

        return grpc.dynamic_ssl_server_credentials(initial, fetch, require_client_authentication=bool(self.ca))

    def check_files(self) -> None:
        """ValidationError unless the certificate and key parse and belong together and the CA parses
        (``ssl`` loads them): a half-written renewal is not used."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            if self.cert or self.key:
                context.load_cert_chain(self.cert, self.key)
            if self.ca:
                context.load_verify_locations(self.ca)
        except (OSError, ssl.SSLError) as exc:
            raise ValidationError(f"TLS files {self.cert!r}, {self.key!r}, {self.ca!r} do not load: {exc}",
                                  field="tls_cert") from exc

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


#: Metadata key under which an edge proxy relays its client's certificate identities to the leaf broker
#: (one entry per identity; docs/security.md, "Client identity").
IDENTITY_KEY = "gridstat-client-identity"
#: What an edge proxy relays for a client that presented no certificate (never a valid client name), so
#: that the broker can tell "a client without a certificate" from "the proxy itself calling".
ANONYMOUS = "-"


def peer_identities(context: object) -> tuple[str, ...]:
    """The identities of a gRPC call's verified client certificate: its common name, then its DNS
    subject alternative names (``localhost`` and IP addresses left out); () without a client
    certificate (plaintext, or TLS without client authentication)."""
    try:
        auth = context.auth_context()  # type: ignore[attr-defined]
    except Exception:  # not a server context, or no transport security
        return ()
    if not auth:
        return ()
    out: list[str] = []
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        for raw in auth.get(key, ()):
            name = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            if name and name != "localhost" and name not in out and not _is_ip(name):
                out.append(name)
    return tuple(out)


def relayed_identities(context: object) -> tuple[str, ...]:
    """The client identities an edge proxy relayed in the call's metadata (IDENTITY_KEY)."""
    try:
        md = context.invocation_metadata() or ()  # type: ignore[attr-defined]
    except Exception:
        return ()
    return tuple(str(v) for k, v in md if k == IDENTITY_KEY and isinstance(v, str) and v)


def _is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


#: How often a rotating client channel looks at its certificate files (a stat of each per check).
ROTATION_CHECK_S = 1.0
#: In-flight calls on a replaced channel get this long before it is closed.
ROTATION_GRACE_S = 30.0


class ClientChannel:
    """A long-lived ``grpc.aio`` client channel that follows its certificate files (rotation without a
    restart, client side; servers rotate through :meth:`TlsFiles.server_credentials`).

    ``channel()`` returns the current channel; at most once a second it compares the files' modification
    times with those it was built from and, when they changed and the new files load, builds a new
    channel from them. Calls in flight on the old one get ``ROTATION_GRACE_S`` to finish. ``stub(cls)``
    caches one stub per channel. Plaintext channels never change.
    """

    def __init__(self, target: str, tls: TlsFiles | None, options: Sequence[tuple[str, Any]] = ()) -> None:
        self.target = target
        self.tls = tls
        self.options = tuple(options)
        self.rotations = 0
        self._stamp = tls._stamp() if tls is not None else ()
        self._checked = time.monotonic()
        self._channel = self._build(tls.channel_credentials() if tls is not None else None)
        self._stubs: dict[type, Any] = {}
        self._retired: set[asyncio.Task[None]] = set()

    def _build(self, credentials: grpc.ChannelCredentials | None) -> grpc.aio.Channel:
        if credentials is None:
            return grpc.aio.insecure_channel(self.target, options=self.options)
        return grpc.aio.secure_channel(self.target, credentials, options=self.options)

    def channel(self) -> grpc.aio.Channel:
        tls = self.tls
        if tls is not None and time.monotonic() - self._checked >= ROTATION_CHECK_S:
            self._checked = time.monotonic()
            stamp = tls._stamp()
            if stamp != self._stamp:
                try:
                    tls.check_files()
                    credentials = tls.channel_credentials()
                except ValidationError:  # half-written or unreadable: keep the last good channel
                    return self._channel
                self._stamp = stamp
                old, self._channel = self._channel, self._build(credentials)
                self._stubs.clear()
                self.rotations += 1
                self._retire(old)
        return self._channel

    def stub(self, cls: Callable[[grpc.aio.Channel], T]) -> T:
        channel = self.channel()
        stub = self._stubs.get(cls)  # type: ignore[call-overload]
        if stub is None:
            stub = self._stubs[cls] = cls(channel)  # type: ignore[index]
        return stub  # type: ignore[no-any-return]

    def _retire(self, old: grpc.aio.Channel) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop: nothing can be in flight on an aio channel
            return
        task = loop.create_task(old.close(grace=ROTATION_GRACE_S))
        self._retired.add(task)
        task.add_done_callback(self._retired.discard)

    async def close(self) -> None:
        for task in list(self._retired):
            task.cancel()
        await self._channel.close()
