"""Datagram authentication (docs/wire-format.md section 5): HMAC tag and replay window."""

from __future__ import annotations

import pytest

from gridstat.core import wire
from gridstat.errors import ValidationError

KEY = bytes(range(32))


def datagram(seq: int = 1) -> bytes:
    return wire.encode_datagram(7, seq, [wire.encode_event(wire.Event(1_000, 3, b"\0" * 8))])


def test_signed_datagram_verifies_and_still_decodes() -> None:
    signed = wire.sign_datagram(KEY, datagram())
    assert len(signed) == len(datagram()) + wire.AUTH_TAG_LEN and signed[14] == wire.AUTH_TAG_LEN
    assert wire.verify_datagram(KEY, signed)
    assert wire.decode_datagram(signed).events[0].variable_id == 3


@pytest.mark.parametrize("flip", [0, 3, 4, 8, 14, 16, 30, -1])
def test_any_changed_byte_or_other_key_fails(flip: int) -> None:
    signed = bytearray(wire.sign_datagram(KEY, datagram()))
    assert not wire.verify_datagram(b"\1" * 32, bytes(signed))
    signed[flip] ^= 0x01
    assert not wire.verify_datagram(KEY, bytes(signed))


def test_untagged_truncated_or_other_tag_length_fails() -> None:
    assert not wire.verify_datagram(KEY, datagram())
    assert not wire.verify_datagram(KEY, wire.sign_datagram(KEY, datagram())[:20])
    assert not wire.verify_datagram(KEY, wire.encode_datagram(7, 1, [wire.encode_event(
        wire.Event(1, 3, b"\0" * 8))], tag=b"\0" * 8))


def test_keys_and_signing_are_validated() -> None:
    with pytest.raises(ValidationError):
        wire.check_key(b"short")
    with pytest.raises(ValidationError):
        wire.sign_datagram(KEY, wire.sign_datagram(KEY, datagram()))


def test_replay_window_accepts_each_number_once_within_the_window() -> None:
    w = wire.ReplayWindow()
    assert w.accept(100) and not w.accept(100)
    assert w.accept(105) and w.accept(101) and not w.accept(101)  # reordered, then replayed
    assert w.accept(105 - 63) and not w.accept(105 - 64)  # the window's edge
    assert w.accept(1000) and not w.accept(105)  # a jump leaves old numbers behind


def test_replay_window_follows_wraparound_and_resets() -> None:
    w = wire.ReplayWindow()
    assert w.accept(0xFFFF_FFFE) and w.accept(0xFFFF_FFFF) and w.accept(0) and w.accept(1)
    assert not w.accept(0xFFFF_FFFF)
    w.reset()
    assert w.accept(5)
