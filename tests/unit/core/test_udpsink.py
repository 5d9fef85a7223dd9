"""core.udpsink and core.ports: a receiving thread on 127.0.0.1, a free port, whether one answers."""

from __future__ import annotations

import socket
import time

from gridstat.core import ports
from gridstat.core.udpsink import UdpSink
from gridstat.core.waiting import wait_for


def test_every_datagram_reaches_the_callback_with_its_arrival_until_closed() -> None:
    got: list[tuple[bytes, int]] = []
    sink = UdpSink(lambda data, at: got.append((data, at)))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
        before = time.time_ns() // 1_000_000
        out.sendto(b"one", ("127.0.0.1", sink.port))
        out.sendto(b"two", ("127.0.0.1", sink.port))
        assert wait_for(lambda: len(got) == 2, timeout_s=2)
        sink.close()
        out.sendto(b"three", ("127.0.0.1", sink.port))
    time.sleep(0.1)
    assert [d for d, _ in got] == [b"one", b"two"]
    assert all(at >= before for _, at in got)


def test_a_free_port_binds_and_nothing_answers_there() -> None:
    tcp, udp = ports.free_port(), ports.free_port(socket.SOCK_DGRAM)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", udp))
    assert not ports.port_answers(tcp)
    with socket.socket() as server:
        server.bind(("127.0.0.1", tcp))
        server.listen(1)
        assert ports.port_answers(tcp)
