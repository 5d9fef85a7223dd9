"""The session never raises on what a device sends, and counts everything it could not use: random
bytes, and valid sessions cut, corrupted and spliced (hypothesis)."""

from __future__ import annotations

import pmu_samples as s
from hypothesis import given
from hypothesis import strategies as st

from gridstat.gateways.pmu import GatewaySession, SessionSettings

CFG = s.config(s.INT_PMU, s.FLOAT_PMU)
VALID = s.cfg_bytes(CFG) + b"".join(s.data(CFG, k) for k in range(6))


def _session() -> GatewaySession:
    session = GatewaySession(SessionSettings(s.STREAM))
    session.connected(0.0)
    return session


@given(st.lists(st.binary(max_size=300), max_size=8))
def test_random_tcp_bytes_never_raise_and_are_counted(chunks: list[bytes]) -> None:
    session = _session()
    now = 0.0
    for chunk in chunks:
        now += 0.1
        session.tcp_bytes(chunk, now)
        session.tick(now)
    session.disconnected("end")
    st_ = session.stats
    if any(chunks):  # every byte is in a frame or counted as dropped
        assert sum(st_.frames.values()) + st_.drops.total >= 1


@given(st.data())
def test_corrupted_sessions_never_raise_and_every_frame_is_accounted(data: st.DataObject) -> None:
    raw = bytearray(VALID)
    for _ in range(data.draw(st.integers(0, 6))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=6)))
    session = _session()
    samples = 0
    prev = 0
    for n, cut in enumerate([*cuts, len(raw)]):
        out = session.tcp_bytes(bytes(raw[prev:cut]), 0.1 * n)
        samples += len(out.samples)
        prev = cut
    session.disconnected("end")
    st_ = session.stats
    assert samples == st_.samples
    assert st_.frames.get("data", 0) * 2 == samples  # two PMU blocks per data frame, all or none
    assert st_.frames.get("data", 0) <= 6
    if raw == VALID:
        assert samples == 12 and st_.drops.total == 0
    else:
        assert st_.drops.total >= 1 or st_.frames.get("data", 0) + st_.frames.get("cfg2", 0) < 7 or samples == 12


@given(st.lists(st.one_of(st.binary(max_size=80), st.sampled_from([s.data(CFG, k) for k in range(3)]),
                          st.just(s.cfg_bytes(CFG))), max_size=12))
def test_every_datagram_is_a_frame_or_a_drop(datagrams: list[bytes]) -> None:
    session = GatewaySession(SessionSettings(s.STREAM))
    for i, d in enumerate(datagrams):
        session.datagram(d, 0.01 * i)
    st_ = session.stats
    assert st_.udp_datagrams == len(datagrams)
    assert sum(st_.frames.values()) + st_.drops.total == len(datagrams)
