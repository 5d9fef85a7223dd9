"""EventBlock (client/blocks.py): a block of variables published at one timestamp is one datagram
whose events are byte for byte those the one-by-one encoding writes, skipped instants included."""

from __future__ import annotations

import pytest

from gridstat.client import EventBlock, Publisher
from gridstat.client.publisher import PublicationHandle
from gridstat.core import wire
from gridstat.core.model import FLOAT, INT, StatusVariable, StructType, TypeSpec, ValueType
from gridstat.errors import TypeMismatch, ValidationError

PHASOR = TypeSpec(ValueType.STRUCT, StructType("phasor", (("magnitude", "float64"), ("angle", "float64"))))


def handles(p: Publisher, base: int = 1) -> list[PublicationHandle]:
    def var(name: str, t: TypeSpec, i: int) -> StatusVariable:
        return StatusVariable(p.name, name, t, 16, frames_per_s=60, variable_id=base + i)

    return [p.variable(var("VA", PHASOR, 0)), p.variable(var("VB", PHASOR, 1)), p.variable(var("freq", FLOAT, 2)),
            p.variable(var("breakers", INT, 3))]


def captured(p: Publisher) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    p._emit = lambda count, body: out.append((count, body))  # type: ignore[method-assign]
    return out


VALUES: list[object] = [{"magnitude": 1000.5, "angle": 0.25}, {"magnitude": 999.0, "angle": -2.0}, 60.001, 0x8001]
DEVICE = wire.device_time(0, (4 << 24) | 16_666, 1_000_000)


def test_a_block_is_one_datagram_of_the_same_events() -> None:
    block_pub, one_pub = Publisher("pmu1", 1, ("127.0.0.1", 9)), Publisher("pmu1", 1, ("127.0.0.1", 9))
    block = EventBlock(handles(block_pub))
    singles = handles(one_pub)
    got = captured(block_pub)
    frame_ms = [1_795_000_000_000 + 1000 * k // 60 for k in (0, 1, 2, 5, 6)]  # frames 3 and 4 skipped
    for ts in frame_ms:
        assert block.publish(VALUES, ts, (DEVICE,)) == 4
        want = b"".join(h.encode(v, ts, (DEVICE,)) for h, v in zip(singles, VALUES, strict=True))
        assert got[-1] == (4, want)
    events = wire.decode_datagram(wire.encode_header(wire.KIND_EVENTS, 1, 1, 4) + got[-1][1]).events
    assert [e.variable_id for e in events] == [1, 2, 3, 4]
    assert block.skipped == 2 and block_pub.stats.skipped == 2
    skipped = [o for o in events[0].options if o.kind == wire.OptionKind.SKIPPED]
    assert skipped and wire.read_device_time(events[0].options) == (0, (4 << 24) | 16_666, 1_000_000)


def test_values_that_do_not_fit_send_nothing() -> None:
    p = Publisher("pmu1", 1, ("127.0.0.1", 9))
    block = EventBlock(handles(p))
    got = captured(p)
    for bad in ([{"magnitude": 1.0}, *VALUES[1:]], [1.0, *VALUES[1:]], [*VALUES[:3], "x"], [*VALUES[:3], 2**70]):
        with pytest.raises(TypeMismatch):
            block.publish(bad, 1_795_000_000_000, (DEVICE,))
    with pytest.raises(ValidationError, match="3 values"):
        block.publish(VALUES[:3], 1_795_000_000_000)
    assert got == []


def test_a_block_too_large_for_one_datagram_goes_event_by_event() -> None:
    p = Publisher("pmu1", 1, ("127.0.0.1", 9), mtu=150)
    block = EventBlock(handles(p))
    got = captured(p)
    block.publish(VALUES, 1_795_000_000_000, (DEVICE,))
    assert sum(c for c, _ in got) == 4 and len(got) > 1


def test_a_block_is_one_publishers_periodic_variables() -> None:
    a, b = Publisher("pmu1", 1, ("127.0.0.1", 9)), Publisher("pmu2", 2, ("127.0.0.1", 9))
    with pytest.raises(ValidationError, match="another publisher"):
        EventBlock([*handles(a), *handles(b, 10)])
    alert = a.variable(StatusVariable("pmu1", "trip", FLOAT, 0, alert=True, min_interval_ms=10, variable_id=99))
    with pytest.raises(ValidationError, match="alert"):
        EventBlock([alert])
    with pytest.raises(ValidationError):
        EventBlock([])
