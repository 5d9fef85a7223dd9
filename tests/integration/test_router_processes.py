"""Real router processes on 127.0.0.1: multi-hop filtering, liveness, bad input under traffic."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import grpc
import pytest

from gridstat.core import wire
from gridstat.core.model import FLOAT
from gridstat.core.tls import TlsFiles
from gridstat.v1 import router_pb2 as pb
from gridstat.v1 import router_pb2_grpc as pb_grpc

from .routerprocs import link, route, routers, start_router

pytestmark = pytest.mark.integration

PUB_ID = 1000
SUB_ID = 2000


def aligned_now(step: int = 3_600_000) -> int:
    now = time.time_ns() // 1_000_000
    return now - now % step


class Ends:
    """A raw publisher socket and a raw subscriber socket on 127.0.0.1."""

    def __init__(self) -> None:
        self.pub = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sub = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sub.bind(("127.0.0.1", 0))
        self.sub.settimeout(0.2)
        self.seq = 0

    @property
    def sub_port(self) -> int:
        return int(self.sub.getsockname()[1])

    def publish(self, to: tuple[str, int], var: int, ts: int) -> None:
        self.seq += 1
        ev = wire.encode_event(wire.Event(ts, var, wire.encode_value(FLOAT, 1.0)))
        self.pub.sendto(wire.encode_datagram(PUB_ID, self.seq, [ev]), to)

    def collect(self, quiet_s: float = 0.5, limit_s: float = 10.0) -> list[tuple[int, int]]:
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + limit_s
        last = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last < quiet_s:
            try:
                data = self.sub.recv(65536)
            except TimeoutError:
                continue
            got.extend((e.variable_id, e.timestamp_ms) for e in wire.decode_datagram(data).events)
            last = time.monotonic()
        return got

    def close(self) -> None:
        self.pub.close()
        self.sub.close()


def attach_ends(first: object, last: object, ends: Ends) -> None:
    first.stub.AddChannel(pb.AddChannelRequest(channel=pb.Channel(  # type: ignore[attr-defined]
        name="pub", peer_id=PUB_ID, kind=pb.CHANNEL_KIND_PUBLISHER)), timeout=5)
    last.stub.AddChannel(pb.AddChannelRequest(channel=pb.Channel(  # type: ignore[attr-defined]
        name="sub", peer_id=SUB_ID, kind=pb.CHANNEL_KIND_SUBSCRIBER, host="127.0.0.1", port=ends.sub_port)),
        timeout=5)


def test_three_hop_chain_filters_and_mixes_variants() -> None:
    ends = Ends()
    with routers(("e1", 1, "close"), ("i1", 2, "sparse"), ("e2", 3, "close")) as rs:
        e1, i1, e2 = rs["e1"], rs["i1"], rs["e2"]
        link(e1, i1)
        link(i1, e2)
        attach_ends(e1, e2, ends)
        for r, ch in ((e1, "i1"), (i1, "e2"), (e2, "sub")):
            route(r, "s20/0", 7, ch, 20, 10)
            route(r, "s30/0", 7, ch, 30, 10)
        base = aligned_now()
        for t in range(0, 120, 10):
            ends.publish(e1.address, 7, base + t)
            ends.publish(e1.address, 99, base + t)  # unknown variable: counted, not forwarded
        got = ends.collect()
        assert [ts - base for _, ts in got] == [0, 20, 30, 40, 60, 80, 90, 100]
        stats = e1.stub.GetStats(pb.GetStatsRequest(), timeout=5)
        assert stats.drops["unknown_variable"] == 12
        assert stats.events_forwarded == 8 and stats.events_filtered == 4
    ends.close()


def test_failed_link_is_detected_and_recovers() -> None:
    with routers(("a", 11, "close"), ("b", 12, "close")) as rs:
        a, b = rs["a"], rs["b"]
        link(a, b)
        time.sleep(0.5)
        assert a.stub.Health(pb.HealthRequest(), timeout=5).channels_down == 0
        port = b.port
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(timeout=5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and a.stub.Health(pb.HealthRequest(), timeout=5).channels_down == 0:
            time.sleep(0.05)
        assert a.stub.Health(pb.HealthRequest(), timeout=5).channels_down == 1
        chans = {c.name: c for c in a.stub.ListChannels(pb.ListChannelsRequest(), timeout=5).channels}
        assert not chans["b"].up
        # The restarted router comes back on the same port; once it answers pings the link is up again.
        b2 = start_router("b", 12, port=port)
        try:
            b2.stub.AddChannel(pb.AddChannelRequest(channel=pb.Channel(
                name="a", peer_id=11, kind=pb.CHANNEL_KIND_ROUTER, host="127.0.0.1", port=a.port)), timeout=5)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and a.stub.Health(pb.HealthRequest(), timeout=5).channels_down:
                time.sleep(0.05)
            assert a.stub.Health(pb.HealthRequest(), timeout=5).channels_down == 0
        finally:
            b2.stop()


def test_garbage_under_traffic_is_counted_and_the_stream_is_untouched() -> None:
    ends = Ends()
    with routers(("g", 21, "close")) as rs:
        g = rs["g"]
        attach_ends(g, g, ends)
        route(g, "s/0", 5, "sub", 10, 10)
        base = aligned_now()
        junk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        good = wire.encode_datagram(PUB_ID, 1, [wire.encode_event(wire.Event(base, 5, b"\0" * 8))])
        garbage = [b"", b"\x00", os.urandom(15), b"GS\x01\x07" + bytes(40), good[:20], good[:-3],
                   good[:2] + b"\x09" + good[3:], wire.encode_datagram(4242, 1, [good[16:]])]
        for t in range(50):
            ends.publish(g.address, 5, base + 10 * t)
            for g_ in garbage:
                junk.sendto(g_, g.address)
        got = ends.collect()
        assert [ts - base for _, ts in got] == [10 * t for t in range(50)]
        stats = g.stub.GetStats(pb.GetStatsRequest(), timeout=5)
        drops = dict(stats.drops)
        # An unknown sender right after the channels were set up counts as sender_pending (docs/wire-format.md).
        unknown = drops.get("unknown_sender", 0) + drops.get("sender_pending", 0)
        assert drops["truncated"] >= 150 and drops["bad_version"] == 50 and unknown >= 100
        assert g.proc.poll() is None
        junk.close()
    ends.close()


def test_control_api_rejects_bad_calls_with_reasons() -> None:
    with routers(("c", 31, "close")) as rs:
        c = rs["c"]
        with pytest.raises(grpc.RpcError) as err:
            route(c, "x", 1, "nowhere", 10, 10)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        md = dict(err.value.trailing_metadata() or ())
        assert md["gridstat-reason"] == "NotFound" and md["gridstat-field"] == "channel"
        with pytest.raises(grpc.RpcError) as err:
            c.stub.AddChannel(pb.AddChannelRequest(channel=pb.Channel(name="s", peer_id=5,
                                                                      kind=pb.CHANNEL_KIND_SUBSCRIBER)), timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "host" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            c.stub.SetMode(pb.SetModeRequest(mode=40), timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_watch_links_streams_snapshot_then_changes() -> None:
    with routers(("w1", 41, "close"), ("w2", 42, "close")) as rs:
        w1, w2 = rs["w1"], rs["w2"]
        link(w1, w2)
        time.sleep(0.3)
        stream = w1.stub.WatchLinks(pb.WatchLinksRequest(), timeout=10)
        first = next(stream)
        assert (first.channel, first.up, first.snapshot) == ("w2", True, True)
        w2.proc.send_signal(signal.SIGKILL)
        change = next(stream)
        assert (change.channel, change.up, change.snapshot) == ("w2", False, False)
        stream.cancel()


def _make_pki(tmp: Path) -> dict[str, str]:
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=gridstat-test-ca")
    for name in ("server", "broker"):  # the router's control API answers its broker (core.access)
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", "-copy_extensions", "copy")
    return {n: str(tmp / n) for n in ("ca.pem", "server.pem", "server.key", "broker.pem", "broker.key")}


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make test certificates")
def test_control_api_over_mutual_tls(tmp_path: Path) -> None:
    pki = _make_pki(tmp_path)
    r = start_router("t", 51, extra=("--tls-cert", pki["server.pem"], "--tls-key", pki["server.key"],
                                     "--tls-client-ca", pki["ca.pem"]))
    try:
        target = f"127.0.0.1:{r.control_port}"
        good = TlsFiles(pki["broker.pem"], pki["broker.key"], pki["ca.pem"]).channel_credentials()
        with grpc.secure_channel(target, good) as ch:
            health = pb_grpc.RouterControlStub(ch).Health(pb.HealthRequest(), timeout=5)
            assert health.serving and health.router == "t"
        # Without a client certificate the handshake is refused.
        anonymous = grpc.ssl_channel_credentials(root_certificates=Path(pki["ca.pem"]).read_bytes())
        with grpc.secure_channel(target, anonymous) as ch, pytest.raises(grpc.RpcError) as err:
            pb_grpc.RouterControlStub(ch).Health(pb.HealthRequest(), timeout=3)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        # Plain text is refused too.
        with grpc.insecure_channel(target) as ch, pytest.raises(grpc.RpcError):
            pb_grpc.RouterControlStub(ch).Health(pb.HealthRequest(), timeout=3)
    finally:
        r.stop()
