"""Control datagrams on keyed channels (docs/security.md): pings, pongs, mode and shed notices
carry the HMAC tag and pass the replay window; forged and replayed ones are dropped and counted while
the admitted streams keep flowing. Unkeyed channels behave as before."""

from __future__ import annotations

import time

from gridstat.client import Subscriber
from gridstat.core import wire
from gridstat.core.model import FLOAT, StatusVariable
from gridstat.router.channels import ChannelKind, EventChannel
from gridstat.router.process import RouterConfig, StatusRouter
from gridstat.router.tables import Route

KEY = b"k" * 32
OTHER_KEY = b"x" * 32
NOW = 1_700_000_000_000
PEER = 7
VAR = StatusVariable("pmu1", "freq", FLOAT, 10, variable_id=3)


def with_seq(data: bytes, seq: int) -> bytes:
    return data[:8] + seq.to_bytes(4, "big") + data[12:]


def signed(key: bytes, data: bytes, seq: int) -> bytes:
    return wire.sign_datagram(key, with_seq(data, seq))


def ping(kind: int = wire.KIND_PING, sender: int = PEER) -> bytes:
    return wire.encode_ping(kind, sender, 0, 123)


def shed(sender: int = PEER) -> bytes:
    return wire.encode_shed_notices(sender, 0, reason=wire.SHED_CPU_OVERLOAD, action=wire.SHED_ACTION_SHED,
                                    entries=[(3, 0)])[0]


def mode(change_id: int = 1, sender: int = PEER) -> bytes:
    return wire.encode_mode_notice(sender, 0, phase=wire.MODE_PREPARE, mode=1, previous_mode=0, change_id=change_id)


def events(seq: int, sender: int = PEER) -> bytes:
    ts = NOW - NOW % 10 + 10 * seq
    return wire.encode_datagram(sender, seq, [wire.encode_event(wire.Event(ts, 3, wire.encode_value(FLOAT, 1.0)))])


def router(key: bytes | None) -> tuple[StatusRouter, EventChannel, EventChannel, list[bytes]]:
    r = StatusRouter(RouterConfig(name="r1", router_id=1))
    sent: list[bytes] = []
    r._sendto = lambda data, addr: sent.append(data)  # type: ignore[attr-defined]
    link = r.add_channel("r2", peer_id=PEER, kind=ChannelKind.ROUTER, address=("127.0.0.1", 9), key=key)
    sub = r.add_channel("sub:ems", peer_id=1_000_001, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", 10),
                        key=key)
    r.install_routes([])
    r.table.install(Route("s", 3, 0, "sub:ems", 10, 1), pub_interval_ms=10)
    return r, link, sub, sent


def test_forged_and_replayed_pings_do_not_keep_a_dead_link_alive() -> None:
    r, link, sub, sent = router(KEY)
    link.up, link.last_heard_ms = False, 0
    r.forwarder.process(ping(), NOW)  # unsigned
    r.forwarder.process(signed(OTHER_KEY, ping(), 1), NOW)  # wrong key
    r.forwarder.process(signed(OTHER_KEY, ping(wire.KIND_PONG), 2), NOW)
    assert not link.up and link.last_heard_ms == 0 and not sent
    assert r.drops["auth_failed"] == 3
    good = signed(KEY, ping(), 5)
    r.forwarder.process(good, NOW)
    assert link.up and link.last_heard_ms == NOW
    (pong,) = sent  # answered with a signed pong that carries the ping's body
    assert wire.verify_datagram(KEY, pong) and wire.decode_datagram(pong).ping_ns == 123
    link.last_heard_ms = 0
    r.forwarder.process(good, NOW + 1)  # replayed
    assert r.drops["replayed"] == 1 and link.last_heard_ms == 0 and len(sent) == 1
    # The admitted stream keeps flowing on the same channel.
    r.forwarder.process(signed(KEY, events(6), 6), NOW)
    assert r.forwarder.events_forwarded == 1 and sub.queues[1].events


def test_forged_shed_notices_are_not_relayed() -> None:
    r, _link, _sub, sent = router(KEY)
    r.forwarder.process(shed(), NOW)
    r.forwarder.process(signed(OTHER_KEY, shed(), 1), NOW)
    assert r.drops["auth_failed"] == 2 and not sent
    good = signed(KEY, shed(), 2)
    r.forwarder.process(good, NOW)
    (relayed,) = sent  # to the subscriber, signed with that channel's key
    assert wire.verify_datagram(KEY, relayed)
    assert wire.decode_datagram(relayed).shed_notice == wire.ShedNotice(1, 1, ((3, 0),), 1)
    r.forwarder.process(good, NOW)
    assert r.drops["replayed"] == 1 and len(sent) == 1


def test_keyed_channels_sign_pings_and_notices_with_fresh_sequence_numbers() -> None:
    r, link, _sub, sent = router(KEY)
    assert r.notify_mode(wire.MODE_PREPARE, 1, 0, 9) == 1
    assert r._notify("sub:ems", wire.SHED_LINK_OVERLOAD, wire.SHED_ACTION_DROPPED, [(3, 4)]) == 1
    pinged = link.sign_control(ping(sender=1))
    assert len(sent) == 3 and all(wire.verify_datagram(KEY, d) for d in [*sent, pinged])
    seqs = [wire.decode_datagram(d).sequence for d in sent]
    assert seqs == [seqs[0], seqs[0] + 1, seqs[0] + 2]  # consecutive, on from the wall clock
    # A restarted edge router's subscriber channel numbers on from a later clock: the subscriber's replay
    # window takes its datagrams without anyone resetting it (docs/security.md).
    time.sleep(0.002)
    r2, _link2, _sub2, sent2 = router(KEY)
    assert r2.notify_mode(wire.MODE_PREPARE, 2, 1, 9) == 1
    assert ((wire.decode_datagram(sent2[0]).sequence - seqs[-1]) & 0xFFFF_FFFF) < 0x8000_0000
    assert wire.decode_datagram(pinged).sequence == (link.sequence & 0xFFFF_FFFF)  # the link's own counter
    # A subscriber with the key takes each once.
    s = Subscriber("ems", 1_000_001, key=KEY)
    told: list[tuple[str, int, int]] = []
    s.on_mode_change = lambda phase, m, prev: told.append((phase, m, prev))
    for d in sent:
        s.process(d, NOW)
    assert told == [("prepare", 1, 0)] and s.stats.shed_notices == 1 and not s.stats.drops


def test_unkeyed_channels_send_and_take_control_datagrams_as_before() -> None:
    r, link, _sub, sent = router(None)
    link.up, link.last_heard_ms = False, 0
    r.forwarder.process(ping(), NOW)
    assert link.up and link.last_heard_ms == NOW and not r.drops
    assert sent == [wire.encode_ping(wire.KIND_PONG, 1, 0, 123)]  # untagged, sequence 0
    assert link.sign_control(ping(sender=1)) == ping(sender=1)
    r.notify_mode(wire.MODE_PREPARE, 1, 0, 9)
    assert sent[1:] == [mode(9, sender=1)] * 2


def test_subscriber_drops_forged_and_replayed_mode_and_shed_notices() -> None:
    s = Subscriber("ems", 5, key=KEY)
    got: list[int] = []
    s.subscribe(VAR, interval_ms=10, latency_ms=1000, on_event=lambda _s, h: got.append(h.timestamp_ms))
    told: list[tuple[str, int, int]] = []
    s.on_mode_change = lambda phase, m, prev: told.append((phase, m, prev))
    s.process(mode(), NOW)  # unsigned: a forger's
    s.process(signed(OTHER_KEY, mode(), 1), NOW)
    s.process(shed(), NOW)
    s.process(signed(OTHER_KEY, shed(), 2), NOW)
    assert s.stats.drops["auth_failed"] == 4 and not told and s.stats.shed_notices == 0
    s.process(signed(KEY, events(3), 3), NOW + 100)
    good = signed(KEY, mode(), 4)
    s.process(good, NOW)
    assert told == [("prepare", 1, 0)]
    s.process(good, NOW)  # replayed
    s.process(signed(KEY, mode(2), 4), NOW)  # a new change id under a used sequence number
    assert s.stats.drops["replayed"] == 2 and told == [("prepare", 1, 0)]
    s.process(signed(KEY, events(5), 5), NOW + 100)
    assert len(got) == 2  # the admitted stream kept flowing


def test_control_datagrams_take_only_no_tag_or_the_auth_tag() -> None:
    for data in (ping(), mode(), shed()):
        tagged = wire.sign_datagram(KEY, data)
        assert wire.decode_datagram(tagged).tag == tagged[-wire.AUTH_TAG_LEN:]
        bad = data[:14] + bytes((4,)) + data[15:] + b"TTTT"
        try:
            wire.decode_datagram(bad)
        except wire.DecodeError as exc:
            assert exc.reason is wire.DropReason.MALFORMED
        else:  # pragma: no cover
            raise AssertionError("a 4-byte tag on a control datagram must be malformed")


def test_a_restarted_router_is_taken_by_its_peers_window_without_a_re_key() -> None:
    """A channel numbers from the wall clock, so after a restart its numbers are newer than the
    previous run's and an inter-cloud peer (which no broker re-keys) takes them; replays stay refused."""
    before = EventChannel(name="b", peer_id=2, kind=ChannelKind.ROUTER, address=("127.0.0.1", 9), sender_id=1)
    before.set_key(KEY)
    rx = EventChannel(name="a", peer_id=1, kind=ChannelKind.ROUTER, address=("127.0.0.1", 9), sender_id=2)
    rx.set_key(KEY)
    old = [before.sign_control(ping(sender=1)) for _ in range(50)]
    assert all(rx.replay.accept(wire.decode_datagram(d).sequence) for d in old)
    time.sleep(0.02)  # 50 datagrams take 12.5 ms of the clock (4 per ms: a faster link catches up later)
    restarted = EventChannel(name="b", peer_id=2, kind=ChannelKind.ROUTER, address=("127.0.0.1", 9), sender_id=1)
    restarted.set_key(KEY)
    assert rx.replay.accept(wire.decode_datagram(restarted.sign_control(ping(sender=1))).sequence)
    assert not rx.replay.accept(wire.decode_datagram(old[-1]).sequence)  # a replay of the previous run
    # Subscriber channels too: nobody resets a subscriber's window when its edge router restarts.
    sub = EventChannel(name="s", peer_id=3, kind=ChannelKind.SUBSCRIBER, address=("127.0.0.1", 9), sender_id=1)
    assert 0 < ((sub.sequence - wire.decode_datagram(old[-1]).sequence) & 0xFFFF_FFFF) < 0x8000_0000
