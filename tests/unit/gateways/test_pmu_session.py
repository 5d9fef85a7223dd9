"""The gateway's sans-I/O client state machine (gateways/pmu/session.py): commands, configurations,
samples with the device's time, the configuration-change bit, timeouts and bad input."""

from __future__ import annotations

import dataclasses

import pmu_samples as s
import pytest

from gridstat.core import wire
from gridstat.gateways.c37118 import (
    Command,
    CommandFrame,
    DropReason,
    FrameType,
    HeaderFrame,
    MessageTimeQuality,
    Stat,
    TimeQuality,
    build_frame,
    parse_frame,
)
from gridstat.gateways.pmu import GatewaySession, LinkState, Output, SessionSettings


def commands(out: Output) -> list[int]:
    got = []
    for raw in out.send:
        frame = parse_frame(raw)
        assert isinstance(frame, CommandFrame) and frame.idcode == s.STREAM
        got.append(frame.command)
    return got


def streaming(*pmus: object, cfg3: bool = False, **kw: float) -> tuple[GatewaySession, Output]:
    cfg = s.config(*pmus) if pmus else s.config()  # type: ignore[arg-type]
    session = GatewaySession(SessionSettings(s.STREAM, command_gap_s=0.0, cfg3=cfg3, **kw))  # type: ignore[arg-type]
    session.connected(0.0)
    out = session.tcp_bytes(s.cfg_bytes(cfg), 0.1)
    return session, out


def test_connecting_turns_data_off_asks_for_the_configuration_and_the_header() -> None:
    session = GatewaySession(SessionSettings(s.STREAM, command_gap_s=0.0))
    assert session.state is LinkState.DISCONNECTED
    out = session.connected(0.0)
    assert commands(out) == [Command.DATA_OFF, Command.SEND_CFG2, Command.SEND_HEADER]
    assert session.state is LinkState.CONFIGURING
    cfg3 = GatewaySession(SessionSettings(s.STREAM, command_gap_s=0.0, cfg3=True, request_header=False))
    assert commands(cfg3.connected(0.0)) == [Command.DATA_OFF, Command.SEND_CFG3]


def test_the_configuration_gives_a_plan_and_turns_data_on() -> None:
    session, out = streaming(s.INT_PMU, s.FLOAT_PMU)
    assert commands(out) == [Command.DATA_ON]
    assert session.state is LinkState.STREAMING and session.stats.state == "streaming"
    assert len(out.plans) == 1 and len(out.plans[0].channels) == 10
    assert session.stats.frames == {"cfg2": 1}
    header = session.tcp_bytes(build_frame(HeaderFrame(s.STREAM, s.SOC, 0, "tinyPMU")), 0.2)
    assert header.send == [] and session.header_text == "tinyPMU"


def test_data_frames_become_samples_stamped_with_the_device_time() -> None:
    session, out = streaming(s.INT_PMU, s.FLOAT_PMU)
    cfg = out.plans[0].config
    quality = TimeQuality(MessageTimeQuality.WITHIN_1US, leap_second_pending=True)
    stat = Stat(sorted_by_arrival=True, trigger_reason=3)
    frames = b"".join(s.data(cfg, k, stat=stat, quality=quality) for k in range(3))
    out = session.tcp_bytes(frames, 0.2)
    assert len(out.samples) == 6 and out.send == []
    first = out.samples[0]
    assert first.block.station == "Station A" and out.samples[1].block.station == "PMU/2 east"
    assert first.ts_ms == s.SOC * 1000
    assert out.samples[2].ts_ms == s.SOC * 1000 + 33 and out.samples[4].ts_ms == s.SOC * 1000 + 66
    count = round(1 * s.TIME_BASE / 30)
    assert wire.read_device_time([out.samples[2].device_time]) == (stat.to_word(), quality.to_byte() << 24 | count,
                                                                   s.TIME_BASE)
    assert first.values == first.block.values(s.block(s.INT_PMU, 0))
    assert session.stats.frames["data"] == 3 and session.stats.samples == 6


def test_timestamps_round_down_to_the_millisecond_so_soc_is_exact() -> None:
    session, out = streaming(s.INT_PMU)
    cfg = out.plans[0].config
    got = session.tcp_bytes(s.data(cfg, 0, fracsec=s.TIME_BASE - 1), 0.2).samples[0]
    assert got.ts_ms == s.SOC * 1000 + 999 and got.ts_ms // 1000 == s.SOC


def test_the_configuration_change_bit_asks_again_and_a_new_channel_is_planned() -> None:
    session, out = streaming(s.INT_PMU, config_retry_s=1.0, config_change_poll_s=5.0, data_timeout_s=10.0)
    cfg = out.plans[0].config
    flag = Stat(config_change_pending=True)
    assert commands(session.tcp_bytes(s.data(cfg, 0), 1.0)) == []
    assert commands(session.tcp_bytes(s.data(cfg, 1, stat=flag), 1.1)) == [Command.SEND_CFG2]  # rising edge
    assert commands(session.tcp_bytes(s.data(cfg, 2, stat=flag), 1.2)) == []
    assert commands(session.tick(3.0)) == []
    assert commands(session.tick(6.2)) == [Command.SEND_CFG2]  # still set: asked again every 5 s
    # The device answers with the configuration it still has: nothing changes.
    same = session.tcp_bytes(s.cfg_bytes(dataclasses.replace(cfg, soc=s.SOC + 6)), 6.3)
    assert same.plans == [] and session.stats.config_changes == 0
    new = s.config(s.with_channel(s.INT_PMU, "ANALOG2"))
    out = session.tcp_bytes(s.data(new, 3), 7.3)  # the new layout before its configuration: unreadable
    assert out.samples == [] and session.stats.drops.by_reason[DropReason.NUM_PMU_MISMATCH] == 1
    assert commands(out) == [Command.SEND_CFG2]
    changed = session.tcp_bytes(s.cfg_bytes(new), 7.4)
    assert [c.variable for c in changed.plans[0].channels][-2:] == ["ANALOG2", "BREAKER_1_STATUS"]
    assert changed.plans[0].config.pmus[0].config_count == 23
    assert session.stats.config_changes == 1 and session.state is LinkState.STREAMING
    out = session.tcp_bytes(s.data(new, 4), 7.5)  # falling edge: ask once more (the change is done) ...
    assert len(out.samples) == 1 and len(out.samples[0].values) == 7
    assert commands(out) == []  # ... but not within config_retry_s of the last request
    assert commands(session.tick(8.4)) == [Command.SEND_CFG2]


def test_a_cfgcnt_change_alone_is_a_change() -> None:
    session, _out = streaming(s.INT_PMU)
    bumped = s.config(dataclasses.replace(s.INT_PMU, config_count=23))
    assert len(session.tcp_bytes(s.cfg_bytes(bumped), 1.0).plans) == 1
    assert session.stats.config_changes == 1


def test_bad_input_is_counted_and_the_other_pmus_keep_publishing() -> None:
    session, out = streaming(s.INT_PMU, s.FLOAT_PMU)
    cfg = out.plans[0].config
    good = s.data(cfg, 1)
    bad_crc = bytearray(s.data(cfg, 2))
    bad_crc[-1] ^= 0xFF
    other = s.data(s.config(s.FLOAT_PMU, idcode=99), 0)  # a stream without a configuration
    stream = b"\x00\x01garbage" + good + bytes(bad_crc) + other + s.data(cfg, 3) + good[:10]
    out = session.tcp_bytes(stream, 0.5)
    assert [x.ts_ms for x in out.samples] == [s.SOC * 1000 + 33] * 2 + [s.SOC * 1000 + 100] * 2
    drops = session.stats.drops.as_dict()
    assert drops == {"bad_sync": 1, "bad_crc": 1, "unknown_idcode": 1}
    session.disconnected("test")
    assert session.stats.drops.as_dict()["truncated"] == 1
    assert session.state is LinkState.DISCONNECTED


def test_data_before_any_configuration_is_counted_not_published() -> None:
    session = GatewaySession(SessionSettings(s.STREAM, command_gap_s=0.0))
    session.connected(0.0)
    out = session.tcp_bytes(s.data(s.config(), 0), 0.1)
    assert out.samples == [] and session.stats.drops.as_dict() == {"no_config": 1}
    assert session.state is LinkState.CONFIGURING


def test_configuration_timeouts_ask_again_fall_back_to_cfg2_and_then_reconnect() -> None:
    session = GatewaySession(SessionSettings(s.STREAM, command_gap_s=0.0, cfg3=True, request_header=False,
                                             config_timeout_s=2.0, config_attempts=3, cfg3_attempts=1))
    assert commands(session.connected(0.0))[-1] == Command.SEND_CFG3
    assert session.tick(1.0).send == []
    assert commands(session.tick(2.0)) == [Command.SEND_CFG2]  # CFG-3 unanswered: CFG-2 from now on
    assert commands(session.tick(4.0)) == [Command.SEND_CFG2]
    out = session.tick(6.0)
    assert out.close is not None and "no configuration" in out.close
    assert session.stats.config_timeouts == 3


def test_no_data_while_streaming_means_reconnect_after_at_least_three_frame_periods() -> None:
    session, _ = streaming(s.INT_PMU, data_timeout_s=1.0)
    assert session.tick(1.0).close is None
    assert session.tick(1.2).close is not None and session.stats.data_timeouts == 1
    slow, _out = streaming(s.INT_PMU, data_timeout_s=1.0)
    slow.tcp_bytes(s.cfg_bytes(s.config(s.INT_PMU, rate=-2)), 0.2)  # one frame every 2 s
    assert slow.tick(5.0).close is None and slow.tick(6.3).close is not None


def test_a_refused_rate_publishes_nothing_but_keeps_reading() -> None:
    session = GatewaySession(SessionSettings(s.STREAM, command_gap_s=0.0))
    session.connected(0.0)
    cfg = s.config(rate=1000)
    out = session.tcp_bytes(s.cfg_bytes(cfg) + s.data(cfg, 0), 0.1)
    assert out.plans == [] and out.samples == [] and session.stats.configs_refused == 1


def test_udp_datagrams_carry_data_and_configurations() -> None:
    session = GatewaySession(SessionSettings(s.STREAM, command_gap_s=0.0))
    cfg = s.config(s.INT_PMU)
    assert session.datagram(s.cfg_bytes(cfg), 0.0).plans
    assert len(session.datagram(s.data(cfg, 0), 0.1).samples) == 1
    assert session.datagram(b"\xaa\x01\x00", 0.2).samples == []
    assert session.stats.udp_datagrams == 3 and session.stats.drops.total == 1


def test_stopping_turns_data_off() -> None:
    session, _ = streaming(s.INT_PMU)
    assert commands(session.stopping()) == [Command.DATA_OFF]
    session.disconnected("stopped")
    assert session.stopping().send == []


def test_a_device_command_is_counted_and_ignored() -> None:
    session, _ = streaming(s.INT_PMU)
    out = session.tcp_bytes(build_frame(CommandFrame(s.STREAM, 0, 0, Command.DATA_ON)), 0.3)
    assert out.send == [] and session.stats.frames["command"] == 1


@pytest.mark.parametrize("frame_type", [FrameType.CFG1])
def test_cfg1_is_counted_not_applied(frame_type: FrameType) -> None:
    session = GatewaySession(SessionSettings(s.STREAM, command_gap_s=0.0))
    session.connected(0.0)
    out = session.tcp_bytes(s.cfg_bytes(s.config(frame_type=frame_type)), 0.1)
    assert out.plans == [] and session.stats.frames == {"cfg1": 1} and session.state is LinkState.CONFIGURING


def test_commands_go_one_per_gap_as_simple_devices_read_them() -> None:
    session = GatewaySession(SessionSettings(s.STREAM, command_gap_s=0.1))
    assert commands(session.connected(0.0)) == [Command.DATA_OFF]
    assert commands(session.tick(0.05)) == []
    assert commands(session.tick(0.1)) == [Command.SEND_CFG2]
    assert commands(session.tick(0.2)) == [Command.SEND_HEADER]
    out = session.tcp_bytes(s.cfg_bytes(s.config()), 0.25)
    assert commands(out) == [] and session.state is LinkState.STREAMING
    assert commands(session.tick(0.31)) == [Command.DATA_ON]
    assert session.stats.commands_sent == 4
    session.connected(1.0)  # a new connection forgets what the old one had queued
    assert session.stats.commands_sent == 5
