"""The IEC 60870-5-104 session never raises on what an outstation sends, and counts what it could not
use: random bytes, and valid streams cut, corrupted and spliced (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gridstat.gateways.iec104 import apci, asdu
from gridstat.gateways.iec104.apci import UFunction
from gridstat.gateways.iec104.asdu import Cot
from gridstat.gateways.iec104.session import Iec104Session

T0 = 1_795_810_899_287
ASDUS = [asdu.encode_interrogation(47, cot=Cot.ACTIVATION_CON),
         *(asdu.encode_values(t, Cot.SPONTANEOUS, 47, [(i, 1, 0, T0 + i) for i in range(3)])
           for t in asdu.MONITORED),
         asdu.encode_interrogation(47, cot=Cot.ACTIVATION_TERMINATION)]
VALID = apci.encode_u(UFunction.STARTDT_CON) + b"".join(apci.encode_i(n, 1, a) for n, a in enumerate(ASDUS))
VALUES = 3 * len(asdu.MONITORED)


def _session() -> Iec104Session:
    session = Iec104Session()
    session.connected(0.0)
    return session


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=300), max_size=8))
def test_random_bytes_never_raise_and_are_counted(chunks: list[bytes]) -> None:
    session = _session()
    now = 0.0
    for chunk in chunks:
        now += 0.5
        out = session.received(chunk, now)
        session.tick(now)
        if out.close is not None:
            session.disconnected(out.close)
            session.connected(now)
    session.disconnected("end")
    c = session.stats.connection
    if any(chunks):  # every byte is in a frame or counted as dropped
        assert c.i_received + c.s_received + c.u_received + session.stats.drops.total >= 1


@settings(max_examples=300)
@given(st.data())
def test_corrupted_streams_never_raise_and_every_loss_is_counted(data: st.DataObject) -> None:
    raw = bytearray(VALID)
    for _ in range(data.draw(st.integers(0, 6))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=6)))
    session = _session()
    values = 0
    prev = 0
    closed = False
    for n, cut in enumerate([*cuts, len(raw)]):
        out = session.received(bytes(raw[prev:cut]), 0.1 * n)
        values += len(out.values)
        prev = cut
        if out.close is not None:
            closed = True
            break
    session.disconnected("end")
    stats = session.stats
    assert values == stats.values <= VALUES
    if raw == VALID:
        assert values == VALUES and stats.drops.total == 0 and stats.interrogations_completed == 1
    elif values < VALUES:
        assert stats.drops.total >= 1 or closed or stats.connection.i_received < len(ASDUS)
