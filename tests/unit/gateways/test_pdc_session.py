"""One PDC client's commands (C37.118.2-2011 6.6): data on/off per session, HDR and CFG-1/2/3 replies,
and bad input -- bad CRC, random bytes, unknown commands -- counted by reason, never raised."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gridstat.core.model import FLOAT
from gridstat.gateways.c37118 import (
    Command,
    CommandFrame,
    ConfigFrame,
    FrameType,
    HeaderFrame,
    StreamDecoder,
    build_frame,
)
from gridstat.gateways.pdc.configs import PHASOR_TYPE, ServedConfig, channel_of
from gridstat.gateways.pdc.session import ClientSession, CommandCounters
from gridstat.gateways.pdc.stream import ServedStream

NOW_MS = 1_700_000_000_250
STREAM = ServedStream(ServedConfig([channel_of("s1/va", PHASOR_TYPE, {}), channel_of("s1/f", FLOAT, {"kind": "freq"})],
                                   idcode=12, frames_per_s=30), wait_ms=50)


def cmd(command: int, idcode: int = 12, ext: bytes = b"") -> bytes:
    return build_frame(CommandFrame(idcode, 1, 0, command, ext))


def test_each_session_has_its_own_data_state_and_gets_its_replies() -> None:
    counters = CommandCounters()
    a, b = ClientSession(STREAM, counters), ClientSession(STREAM, counters)
    assert not a.data_on and not b.data_on
    assert a.receive(cmd(Command.DATA_ON), NOW_MS) == []
    assert a.data_on and not b.data_on
    decoder = StreamDecoder()
    replies = b.receive(cmd(Command.SEND_CFG2) + cmd(Command.SEND_HEADER) + cmd(Command.SEND_CFG1), NOW_MS)
    cfg2, hdr, cfg1 = (f for r in replies for f in decoder.feed(r))
    assert isinstance(cfg2, ConfigFrame) and cfg2.frame_type is FrameType.CFG2 and cfg2.idcode == 12
    assert (cfg2.soc, cfg2.fracsec) == (1_700_000_000, 250_000)
    assert isinstance(hdr, HeaderFrame) and "s1/va" in hdr.text
    assert isinstance(cfg1, ConfigFrame) and cfg1.frame_type is FrameType.CFG1
    [cfg3] = [f for r in b.receive(cmd(Command.SEND_CFG3), NOW_MS) for f in decoder.feed(r)]
    assert isinstance(cfg3, ConfigFrame) and cfg3.frame_type is FrameType.CFG3
    a.receive(cmd(Command.DATA_OFF), NOW_MS)
    assert not a.data_on
    assert counters.commands == {"data_on": 1, "data_off": 1, "send_cfg1": 1, "send_cfg2": 1, "send_cfg3": 1,
                                 "send_header": 1}
    assert counters.by_reason() == {}


def test_a_command_to_another_idcode_is_answered_as_pypmu_does() -> None:
    s = ClientSession(STREAM, CommandCounters())
    assert len(s.receive(cmd(Command.SEND_CFG2, idcode=999), NOW_MS)) == 1


def test_bad_input_is_counted_by_reason_and_the_session_goes_on() -> None:
    counters = CommandCounters()
    s = ClientSession(STREAM, counters)
    bad_crc = bytearray(cmd(Command.SEND_CFG2))
    bad_crc[-1] ^= 0xFF
    data_frame = STREAM.config.pack(1, 0, 0, [None, None], [0])
    stream = (bytes(bad_crc) + b"\x00garbage\x13" + cmd(0x0055) + cmd(0x0123) + cmd(Command.EXTENDED_FRAME, ext=b"x")
              + data_frame + cmd(Command.SEND_CFG2))
    replies = s.receive(stream, NOW_MS)
    assert len(replies) == 1  # only the last, good command is answered
    # The garbage after the bad frame is skipped in the same resynchronisation: one count (docs/c37118.md 4).
    assert counters.by_reason() == {"bad_crc": 1, "unknown_command": 1, "user_defined_command": 1,
                                    "unsupported_command": 1, "not_a_command": 1}
    assert counters.drops.discarded_bytes == len(bad_crc) + len(b"\x00garbage\x13")
    assert s.receive_datagram(b"\xaa", NOW_MS) == [] and counters.by_reason()["truncated"] == 1
    assert s.receive_datagram(cmd(Command.DATA_ON) + b"\x00", NOW_MS) == [] and counters.by_reason()["bad_size"] == 1
    assert s.receive_datagram(cmd(Command.DATA_ON), NOW_MS) == [] and s.data_on


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=80), st.sampled_from([cmd(c) for c in Command] + [cmd(0x7777)])),
                max_size=30),
       st.integers(1, 64))
def test_random_bytes_and_commands_cut_anywhere_never_raise_and_every_loss_is_counted(
        pieces: list[bytes], cut: int) -> None:
    counters = CommandCounters()
    s = ClientSession(STREAM, counters, max_frame_size=4096)
    data = b"".join(pieces)
    for i in range(0, len(data), cut):
        for reply in s.receive(data[i:i + cut], NOW_MS):
            assert reply[0] == 0xAA
        assert s.splitter.pending_bytes <= 4096
    for p in pieces:
        s.receive_datagram(p, NOW_MS)
    s.close()
    # A datagram that is not a good command was counted, once.
    good = {cmd(c) for c in Command if c is not Command.EXTENDED_FRAME}
    bad_datagrams = sum(1 for p in pieces if p not in good)
    assert counters.total_refused >= bad_datagrams
