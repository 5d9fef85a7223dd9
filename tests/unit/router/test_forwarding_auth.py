"""An authenticated channel at the router: tag checked first, replay window, signed output."""

from __future__ import annotations

from gridstat.core import wire
from gridstat.router.channels import ChannelKind, EventChannel
from gridstat.router.forwarding import Forwarder
from gridstat.router.tables import Route, RoutingTable, Variant

KEY = b"k" * 32
NOW = 1_700_000_000_000


class Target:
    def __init__(self) -> None:
        self.events: list[bytes] = []
        self.filtered = 0

    def push(self, ev: bytes) -> None:
        self.events.append(ev)


def rig(key: bytes | None) -> tuple[Forwarder, Target]:
    out = Target()
    table = RoutingTable(Variant.CLOSE, lambda channel, priority: out)
    table.install(Route("r", 3, 0, "out", 10, 1), pub_interval_ms=10)
    fw = Forwarder(table)
    ch = EventChannel(name="pub", peer_id=7, kind=ChannelKind.PUBLISHER, address=None, sender_id=1)
    if key is not None:
        ch.set_key(key)
    fw.by_sender[7] = ch
    return fw, out


def dgram(seq: int, *, vid: int = 3) -> bytes:
    return wire.encode_datagram(7, seq, [wire.encode_event(wire.Event(NOW - NOW % 10, vid, b"\0" * 8))])


def test_keyed_channel_forwards_signed_and_drops_unsigned_forged_and_replayed() -> None:
    fw, out = rig(KEY)
    fw.process(wire.sign_datagram(KEY, dgram(1)), NOW)
    assert len(out.events) == 1
    fw.process(dgram(2), NOW)  # no tag
    fw.process(wire.sign_datagram(b"x" * 32, dgram(3)), NOW)  # wrong key
    forged = bytearray(wire.sign_datagram(KEY, dgram(4)))
    forged[24] ^= 0xFF  # the variable id, after signing
    fw.process(bytes(forged), NOW)
    fw.process(wire.sign_datagram(KEY, dgram(1)), NOW)  # replayed
    assert fw.drops == {"auth_failed": 3, "replayed": 1}
    assert len(out.events) == 1 and fw.events_in == 1
    # A forged datagram must not move the window: sequence 4 is still fresh.
    fw.process(wire.sign_datagram(KEY, dgram(4)), NOW)
    assert len(out.events) == 2


def test_keyless_channel_behaves_as_before_and_ignores_tags() -> None:
    fw, out = rig(None)
    fw.process(dgram(1), NOW)
    fw.process(dgram(1), NOW)
    fw.process(wire.sign_datagram(b"x" * 32, dgram(2)), NOW)
    assert len(out.events) == 3 and not fw.drops


def test_a_keyed_channel_signs_what_it_sends_and_keeps_the_mtu() -> None:
    sent: list[bytes] = []
    ch = EventChannel(name="n", peer_id=2, kind=ChannelKind.ROUTER, address=("127.0.0.1", 9), sender_id=1, mtu=200)
    ch.set_key(KEY)
    ev = wire.encode_event(wire.Event(NOW, 3, b"\0" * 8))
    for _ in range(20):
        ch.queues[1].events.append(ev)
    assert ch.flush(lambda data, addr: sent.append(data))
    assert len(sent) > 1 and all(len(d) <= 200 and wire.verify_datagram(KEY, d) for d in sent)
    assert sum(len(wire.decode_datagram(d).events) for d in sent) == 20
    fw, _ = rig(None)
    fw.by_sender.clear()
    rx = EventChannel(name="in", peer_id=1, kind=ChannelKind.ROUTER, address=None, sender_id=2)
    rx.set_key(KEY)
    fw.by_sender[1] = rx
    for d in sent:
        fw.process(d, NOW)
    assert not fw.drops and fw.events_in == 20
