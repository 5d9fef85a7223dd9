"""Atheris harness over the wire decoder and the router's forwarding path.

Contract checked for every input:

* ``wire.decode_datagram`` raises nothing but ``DecodeError``;
* ``Forwarder.process`` raises nothing at all, counts at most one datagram-level drop, and that
  drop has the reason the decoder gives (or ``unknown_sender``); a well-formed shed notice (kind 5)
  is decoded by both and counted by neither;
* the forwarder's counters stay consistent:
  ``events_in == forwarded + filtered + unknown_variable + future_timestamp``;
* on a keyed (authenticated) channel, a datagram of any kind from the known sender whose tag does not
  verify is counted ``auth_failed`` and nothing else (the tag is checked before the body); one that
  verifies (a signed seed) is counted as on an unkeyed channel.

Run by hand::

    .venv/bin/python tests/fuzz/fuzz_wire.py --write-seeds /tmp/corpus
    .venv/bin/python tests/fuzz/fuzz_wire.py -runs=200000 /tmp/corpus

tests/fuzz/test_atheris.py runs it bounded under pytest.
"""

from __future__ import annotations

import sys
from collections import Counter

import atheris

with atheris.instrument_imports(include=["gridstat"]):
    from gridstat.core import wire
    from gridstat.core.model import BOOL, FLOAT, INT
    from gridstat.core.wire import DecodeError, DerivedValue, DropReason, Event
    from gridstat.router.channels import ChannelKind, EventChannel
    from gridstat.router.forwarding import Forwarder
    from gridstat.router.tables import Route, RoutingTable, Variant

NOW = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000
PUB = 77
_EVENT_REASONS = (DropReason.UNKNOWN_VARIABLE.value, DropReason.FUTURE_TIMESTAMP.value)


class _Target:
    __slots__ = ("events", "filtered")

    def __init__(self) -> None:
        self.events: list[bytes] = []
        self.filtered = 0

    def push(self, event: bytes) -> None:
        self.events.append(event)


def _rig(variant: Variant) -> tuple[Forwarder, dict[tuple[str, int], _Target]]:
    targets: dict[tuple[str, int], _Target] = {}

    def resolve(channel: str, priority: int) -> _Target:
        return targets.setdefault((channel, priority), _Target())

    table = RoutingTable(variant, resolve)
    for rid, (var, ch, sub, prio) in enumerate([(1, "a", 10, 1), (1, "b", 20, 3), (2, "b", 30, 1),
                                                 (2, "c", 60, 6), (3, "c", 10, 2)]):
        table.install(Route(str(rid), var, 0, ch, sub, prio), pub_interval_ms=10, alert=var == 3)
    fw = Forwarder(table, future_tolerance_ms=5_000)
    fw.by_sender[PUB] = EventChannel(name="pub", peer_id=PUB, kind=ChannelKind.PUBLISHER, address=None,
                                     sender_id=1)
    fw.on_control = lambda kind, channel, data: None
    return fw, targets


_RIGS = [_rig(Variant.CLOSE), _rig(Variant.SPARSE)]
KEY = b"fuzz-channel-key-0123456789abcdef"
_KEYED = _rig(Variant.CLOSE)
_KEYED[0].by_sender[PUB].set_key(KEY)


def _expected_reason(data: bytes) -> str | None:
    if wire.HEADER_SIZE <= len(data) <= wire.MAX_DATAGRAM:
        magic, version, _kind, sender, *_ = wire.HEADER.unpack_from(data, 0)
        if magic == wire.MAGIC and version == wire.WIRE_VERSION and sender != PUB:
            return DropReason.UNKNOWN_SENDER.value
    try:
        d = wire.decode_datagram(data)  # anything but DecodeError escapes and is a finding
    except DecodeError as exc:
        if not isinstance(exc.reason, DropReason):
            raise AssertionError(f"DecodeError without a DropReason: {exc!r}") from exc
        return exc.reason.value
    if d.kind == wire.KIND_MODE:  # well formed, but for subscribers: a router counts it bad_kind
        return DropReason.BAD_KIND.value
    return None


def _keyed_reason(data: bytes, want: str | None) -> str | None:
    if wire.HEADER_SIZE <= len(data) <= wire.MAX_DATAGRAM:
        magic, version, _kind, sender, *_ = wire.HEADER.unpack_from(data, 0)
        # Every kind (control datagrams too) from the keyed sender is checked before anything else.
        if (magic, version, sender) == (wire.MAGIC, wire.WIRE_VERSION, PUB) and not wire.verify_datagram(KEY, data):
            return DropReason.AUTH_FAILED.value
    return want


def TestOneInput(data: bytes) -> None:  # atheris looks for this name
    want = _expected_reason(data)
    _KEYED[0].by_sender[PUB].replay.reset()  # each input on its own: a verified one is fresh
    for fw, targets, expect in ((*_RIGS[0], want), (*_RIGS[1], want), (*_KEYED, _keyed_reason(data, want))):
        before = Counter(fw.drops)
        fw.process(data, NOW)  # nothing may escape
        delta = Counter(fw.drops)
        delta.subtract(before)
        got = {k: v for k, v in delta.items() if v and k not in _EVENT_REASONS}
        if got != ({expect: 1} if expect else {}):
            raise AssertionError(f"forwarder counted {got}, expected {expect!r} for {data.hex()}")
        if fw.events_in != (fw.events_forwarded + fw.events_filtered
                            + fw.drops[_EVENT_REASONS[0]] + fw.drops[_EVENT_REASONS[1]]):
            raise AssertionError(f"counters inconsistent after {data.hex()}")
        for t in targets.values():
            for ev in t.events:
                if ev not in data:
                    raise AssertionError("forwarded bytes that are not a slice of the input")
            t.events.clear()


def seeds() -> list[bytes]:
    """A small corpus of valid datagrams (and a ping) to start the fuzzer from."""
    def ev(var: int, dt: int, value: bytes, flags: int = 0, opts: int = 0) -> bytes:
        return wire.encode_event(Event(NOW + dt, var, value, flags,
                                       tuple(DerivedValue(k, 10, 1.5) for k in range(1, opts + 1))))

    f = wire.encode_value(FLOAT, 50.0)
    i = wire.encode_value(INT, -7)
    b = wire.encode_value(BOOL, True)
    out = [
        wire.encode_datagram(PUB, 1, [ev(1, 0, f)]),
        wire.encode_datagram(PUB, 2, [ev(1, 0, f), ev(2, 10, i, opts=2), ev(3, 20, b, flags=1)]),
        wire.encode_datagram(PUB, 3, [ev(4, 0, f), ev(1, 10_000, f)], tag=b"T" * 16),
        wire.encode_datagram(PUB, 4, [ev(2, 30, b"\x01" * 40, flags=0xFC, opts=1)] * 5),
        wire.sign_datagram(KEY, wire.encode_datagram(PUB, 5, [ev(1, 0, f), ev(3, 20, b, flags=1)])),
        wire.encode_ping(wire.KIND_PING, PUB, 0, 123456789),
        wire.encode_ping(wire.KIND_PONG, PUB, 0, 1),
        # A shed notice (kind 5): a router relays it, a subscriber decodes it; both call the same rule.
        *wire.encode_shed_notices(PUB, 0, reason=wire.SHED_LINK_OVERLOAD, action=wire.SHED_ACTION_DROPPED,
                                  entries=[(1, 3), (2, 0)]),
    ]
    return out


if __name__ == "__main__":
    from atheris_main import run  # this directory is on the path of a script run from it

    run(sys.argv, seeds, TestOneInput)
