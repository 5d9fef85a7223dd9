"""Shed notices (kind 5, docs/wire-format.md 4.1): layout, limits and the one rule both receivers apply."""

from __future__ import annotations

import struct

import pytest

from gridstat.core import wire
from gridstat.core.wire import DecodeError, DropReason
from gridstat.errors import ValidationError


def test_round_trip_and_exact_size() -> None:
    (data,) = wire.encode_shed_notices(9, 0, reason=wire.SHED_LINK_OVERLOAD, action=wire.SHED_ACTION_DROPPED,
                                       entries=[(7, 12), (8, 0)], hops=3)
    assert len(data) == 24 + 16
    d = wire.decode_datagram(data)
    assert d.kind == wire.KIND_SHED and d.sender_id == 9 and d.shed_notice is not None
    n = d.shed_notice
    assert (n.reason_name, n.action_name, n.entries, n.hops) == ("link_overload", "dropped", ((7, 12), (8, 0)), 3)


def test_long_lists_are_split() -> None:
    notices = wire.encode_shed_notices(1, 0, reason=1, action=1, entries=[(v, 0) for v in range(2500)])
    sizes = []
    for d in notices:
        n = wire.decode_datagram(d).shed_notice
        assert n is not None
        sizes.append(len(n.entries))
    assert sizes == [1024, 1024, 452]


@pytest.mark.parametrize("kw", [dict(reason=3), dict(action=0), dict(hops=16), dict(entries=[])])
def test_encoder_refuses_what_receivers_would_drop(kw: dict[str, object]) -> None:
    args: dict[str, object] = dict(reason=1, action=1, entries=[(1, 0)], hops=0)
    args.update(kw)
    with pytest.raises(ValidationError):
        wire.encode_shed_notices(1, 0, **args)  # type: ignore[arg-type]


def _bad_variants() -> list[bytes]:
    (good,) = wire.encode_shed_notices(1, 0, reason=1, action=1, entries=[(1, 0), (2, 0)])
    head = bytearray(good)
    out = [good[:-1], good + b"\0" * 8]  # length does not match count
    for offset, value in ((16, 9), (17, 7), (18, 16)):  # reason, action, hops out of range
        b = bytearray(head)
        b[offset] = value
        out.append(bytes(b))
    b = bytearray(head)
    struct.pack_into(">H", b, 12, 0)  # count 0
    out.append(bytes(b[:24]))
    b = bytearray(head)
    b[14] = 4  # a tag
    out.append(bytes(b) + b"TTTT")
    return out


@pytest.mark.parametrize("data", _bad_variants())
def test_malformed_notices_are_malformed_for_subscribers_and_routers(data: bytes) -> None:
    with pytest.raises(DecodeError) as err:
        wire.decode_datagram(data)
    assert err.value.reason is DropReason.MALFORMED
