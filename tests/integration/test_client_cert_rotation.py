"""Client-side certificate rotation without a restart (core.tls.ClientChannel): a long-lived channel
picks up renewed certificate files for its next calls, keeps the last good ones when the new files are
broken, and lets calls on the replaced channel finish."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import grpc
import pytest

from gridstat.core import tls as tlsmod
from gridstat.core.tls import ClientChannel, TlsFiles, peer_identities

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


async def _who(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    if request == b"slow":
        await asyncio.sleep(0.5)
    return ",".join(peer_identities(context)).encode()


async def _server(certs: Path) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler("t.T", {"Who": grpc.unary_unary_rpc_method_handler(_who)})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_secure_port("127.0.0.1:0", TlsFiles(str(certs / "router.pem"), str(certs / "router.key"),
                                                             str(certs / "ca.pem")).server_credentials())
    await server.start()
    return server, port


async def _call(client: ClientChannel, what: bytes = b"") -> str:
    reply = await client.channel().unary_unary("/t.T/Who")(what, timeout=5)
    return bytes(reply).decode()


async def test_a_renewed_client_certificate_is_used_without_a_restart(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tlsmod, "ROTATION_CHECK_S", 0.0)
    certs = tmp_path / "certs"
    subprocess.run([str(ROOT / "scripts/gen-certs.sh"), str(certs)], check=True, capture_output=True)
    subprocess.run([str(ROOT / "scripts/gen-certs.sh"), str(certs), "alice", "bob"], check=True, capture_output=True)
    live = tmp_path / "live"
    live.mkdir()
    for suffix in ("pem", "key"):
        shutil.copy(certs / f"alice.{suffix}", live / f"client.{suffix}")
    files = TlsFiles(str(live / "client.pem"), str(live / "client.key"), str(certs / "ca.pem"))
    server, port = await _server(certs)
    client = ClientChannel(f"127.0.0.1:{port}", files)
    try:
        assert await _call(client) == "alice"
        slow = asyncio.ensure_future(_call(client, b"slow"))  # in flight across the rotation
        await asyncio.sleep(0.1)
        # Renew in place, key then certificate, as scripts/gen-certs.sh does (each by rename).
        for suffix in ("key", "pem"):
            shutil.copy(certs / f"bob.{suffix}", live / f"new.{suffix}")
            (live / f"new.{suffix}").replace(live / f"client.{suffix}")
        assert await _call(client) == "bob"
        assert client.rotations == 1
        assert await slow == "alice"  # the old channel finished its call
        # A broken renewal (half-written certificate): the last good channel stays.
        (live / "client.pem").write_text("-----BEGIN CERTIFICATE-----\ntruncated")
        assert await _call(client) == "bob"
        assert client.rotations == 1
    finally:
        await client.close()
        await server.stop(None)


async def test_plaintext_channels_never_change() -> None:
    client = ClientChannel("127.0.0.1:9", None)
    first = client.channel()
    assert client.channel() is first and client.rotations == 0
    await client.close()
