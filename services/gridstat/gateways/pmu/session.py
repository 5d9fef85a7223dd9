"""The gateway's side of a C37.118.2-2011 connection, sans I/O: the client's state machine.

Bytes from the device's TCP connection (``tcp_bytes``) or its UDP datagrams (``datagram``) and clock
readings (``now_s``, passed in) go in; an ``Output`` comes out: the command frames to send, a new
``StreamPlan`` when the configuration changed, the ``Sample``s to publish, and whether to drop the
connection. No sockets, no clock, no sleeping: ``transport`` and ``gateway`` bring those.

The client (C37.118.2-2011 6.6 and Annex F's "commanded" mode): on connecting, turn data off, ask for
the configuration (CFG-2, or CFG-3 as an option, falling back to CFG-2 when the device does not answer)
and the header, then turn data on once a configuration is in. The configuration is asked again:

* when a data frame's STAT has the configuration-change bit (bit 10, 6.3.1: set for a minute before
  the change) -- at its rising edge, every ``config_change_poll_s`` while it stays set, and at its
  falling edge (the change is done);
* when data frames cannot be read against the configuration held (``no_config``,
  ``num_pmu_mismatch``, ``unknown_idcode``), at most every ``config_retry_s``;
* every ``config_poll_s`` if set (CFGCNT changes are noticed on every configuration received).

A configuration that differs from the last one (layout, names, rate or CFGCNT) gives a new plan; one
equal to it changes nothing. Peer input never raises: the codec counts every loss by reason.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections import deque
from dataclasses import dataclass, field

from gridstat.core import wire
from gridstat.errors import ValidationError
from gridstat.gateways.c37118 import (
    Command,
    CommandFrame,
    ConfigFrame,
    DataFrame,
    DropReason,
    FrameType,
    HeaderFrame,
    StreamDecoder,
    build_frame,
)
from gridstat.gateways.pmu.mapping import BlockPlan, NameMap, StreamPlan, plan_stream
from gridstat.gateways.pmu.stats import GatewayStats

log = logging.getLogger(__name__)

#: Drops that mean "the configuration held does not describe these data frames" (docs/c37118.md 3).
_CONFIG_MISSES = (DropReason.NO_CONFIG, DropReason.NUM_PMU_MISMATCH, DropReason.UNKNOWN_IDCODE)
_FRAME_KINDS = {FrameType.CFG1: "cfg1", FrameType.CFG2: "cfg2", FrameType.CFG3: "cfg3"}


class LinkState(enum.Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    #: Connected; the configuration was asked for and data is off.
    CONFIGURING = "configuring"
    #: A configuration is held and data was turned on.
    STREAMING = "streaming"


@dataclass(frozen=True)
class SessionSettings:
    #: The device's IDCODE: the destination of every command (6.6, Table 14).
    idcode: int
    #: Ask for CFG-3 (optional in the standard) instead of CFG-2.
    cfg3: bool = False
    request_header: bool = True
    #: No configuration this long after asking: ask again; after ``config_attempts`` tries, reconnect.
    config_timeout_s: float = 5.0
    config_attempts: int = 3
    #: CFG-3 requests unanswered before falling back to CFG-2.
    cfg3_attempts: int = 2
    #: No data frame this long while streaming (at least 3 frame periods): reconnect.
    data_timeout_s: float = 5.0
    #: The shortest gap between two configuration requests caused by unreadable data frames.
    config_retry_s: float = 1.0
    #: While STAT bit 10 stays set, ask again this often.
    config_change_poll_s: float = 5.0
    #: Ask for the configuration this often while streaming (0: only when needed).
    config_poll_s: float = 0.0
    #: The shortest gap between two commands: one command per TCP segment, as simple devices read
    #: them (pypmu reads one frame per ``recv``); 0 sends them together.
    command_gap_s: float = 0.1

    def __post_init__(self) -> None:
        if not 0 <= self.idcode <= 0xFFFF:
            raise ValidationError(f"IDCODE must be 0..65535, got {self.idcode}", field="idcode")
        for name in ("config_timeout_s", "data_timeout_s", "config_retry_s", "config_change_poll_s"):
            if not getattr(self, name) > 0:
                raise ValidationError(f"{name} must be positive, got {getattr(self, name)}", field=name)
        if self.config_poll_s < 0 or self.command_gap_s < 0 or self.config_attempts < 1 or self.cfg3_attempts < 1:
            raise ValidationError("config_poll_s must not be negative and the attempts at least 1",
                                  field="config_poll_s")


@dataclass(frozen=True, slots=True)
class Sample:
    """One PMU block of one data frame, ready to publish: ``values`` in ``block.channels`` order, all
    stamped ``ts_ms`` (the device's time, rounded down to the millisecond) with ``device_time`` (the
    DEVICE_TIME option: STAT, raw FRACSEC, TIME_BASE; docs/wire-format.md 3.5)."""

    block: BlockPlan
    ts_ms: int
    device_time: wire.DerivedValue
    values: list[object]


@dataclass
class Output:
    """What the caller must do after one input."""

    #: Command frames to write to the TCP connection, in order.
    send: list[bytes] = field(default_factory=list)
    #: A stream whose variables changed (register the new ones), in order.
    plans: list[StreamPlan] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    #: Why the connection must be dropped (then reconnect after the back-off), or None.
    close: str | None = None


class GatewaySession:
    """The client state machine of one device connection (kept across reconnections: the
    configuration held stays until a new one arrives, as the codec's decoder keeps it)."""

    def __init__(self, settings: SessionSettings, *, names: NameMap | None = None,
                 stats: GatewayStats | None = None, decoder: StreamDecoder | None = None) -> None:
        self.settings = settings
        self.names = names or NameMap()
        self.decoder = decoder or StreamDecoder()
        self.stats = stats or GatewayStats()
        self.stats.drops = self.decoder.drops
        self.state = LinkState.DISCONNECTED
        #: The plan of each stream, by IDCODE, and the configuration it was made of.
        self.plans: dict[int, StreamPlan] = {}
        self.header_text: str | None = None
        self._use_cfg3 = settings.cfg3
        self._cfg3_unanswered = 0
        self._config_asked_s: float | None = None
        self._config_attempts = 0
        self._config_wanted = False
        self._config_received_s: float | None = None
        self._streaming_since_s = 0.0
        self._last_data_s: float | None = None
        self._flag_set = False
        self._flag_asked_s = 0.0
        self._misses_seen = 0
        self._data_timeout_s = settings.data_timeout_s
        #: Commands waiting for ``command_gap_s`` after the previous one.
        self._commands: deque[bytes] = deque()
        self._command_sent_s = float("-inf")

    # -- state ------------------------------------------------------------------------------------

    def _set_state(self, state: LinkState, why: str = "") -> None:
        if state is not self.state:
            log.info("device %d: %s -> %s%s", self.settings.idcode, self.state.value, state.value,
                     f" ({why})" if why else "")
            self.state = state
            self.stats.state = state.value

    def connecting(self) -> None:
        self._set_state(LinkState.CONNECTING)

    def connected(self, now_s: float) -> Output:
        """The TCP connection is up: data off, ask for the configuration (and the header)."""
        out = Output()
        self._set_state(LinkState.CONFIGURING, "connected")
        self._config_attempts = 0
        self._config_wanted = False
        self._last_data_s = None
        self._commands.clear()
        self._command_sent_s = float("-inf")
        self._command(out, Command.DATA_OFF)
        self._ask_config(out, now_s)
        if self.settings.request_header:
            self._command(out, Command.SEND_HEADER)
        self._flush(out, now_s)
        return out

    def disconnected(self, why: str) -> None:
        """The connection ended: a partial frame is counted (``truncated``); configurations stay."""
        self.decoder.close()
        self._commands.clear()
        self._flag_set = False
        self._set_state(LinkState.DISCONNECTED, why)

    def stopping(self) -> Output:
        """The gateway stops: turn data off (when connected)."""
        out = Output()
        if self.state in (LinkState.CONFIGURING, LinkState.STREAMING):
            self._commands.clear()
            out.send.append(self._command_frame(Command.DATA_OFF))
            self.stats.commands_sent += 1
        return out

    # -- input ------------------------------------------------------------------------------------

    def tcp_bytes(self, data: bytes | bytearray | memoryview, now_s: float) -> Output:
        out = Output()
        for frame in self.decoder.feed(data):
            self._on_frame(frame, now_s, out)
        self._after_input(now_s, out)
        return out

    def datagram(self, data: bytes, now_s: float) -> Output:
        """One UDP datagram from the device: a data frame (or a configuration) of a spontaneous or
        UDP data stream (one frame per datagram, 6.2.1)."""
        out = Output()
        self.stats.udp_datagrams += 1
        frame = self.decoder.receive_datagram(data)
        if frame is not None:
            self._on_frame(frame, now_s, out)
        self._after_input(now_s, out)
        return out

    def tick(self, now_s: float) -> Output:
        """Timeouts and pending requests; call a few times a second."""
        out = Output()
        s = self.settings
        if self.state is LinkState.CONFIGURING and self._config_asked_s is not None \
                and now_s - self._config_asked_s >= s.config_timeout_s:
            self.stats.config_timeouts += 1
            if self._use_cfg3:
                self._cfg3_unanswered += 1
                if self._cfg3_unanswered >= s.cfg3_attempts:
                    log.warning("device %d: no CFG-3 after %d requests; asking for CFG-2", s.idcode,
                                self._cfg3_unanswered)
                    self._use_cfg3 = False
            if self._config_attempts >= s.config_attempts:
                out.close = f"no configuration after {self._config_attempts} requests"
                return out
            self._ask_config(out, now_s)
            self._flush(out, now_s)
        elif self.state is LinkState.STREAMING:
            last = self._last_data_s if self._last_data_s is not None else self._streaming_since_s
            if now_s - last >= self._data_timeout_s:
                self.stats.data_timeouts += 1
                out.close = f"no data frame for {now_s - last:.1f} s"
                return out
            if s.config_poll_s and self._config_asked_s is not None and now_s - self._config_asked_s >= s.config_poll_s:
                self._config_wanted = True
            if self._flag_set and now_s - self._flag_asked_s >= s.config_change_poll_s:
                self._flag_asked_s = now_s
                self._config_wanted = True
        self._after_input(now_s, out)
        return out

    # -- frames -----------------------------------------------------------------------------------

    def _on_frame(self, frame: object, now_s: float, out: Output) -> None:
        if isinstance(frame, DataFrame):
            self._on_data(frame, now_s, out)
        elif isinstance(frame, ConfigFrame):
            self.stats.count_frame(_FRAME_KINDS[frame.frame_type])
            if frame.frame_type is not FrameType.CFG1:
                self._on_config(frame, now_s, out)
        elif isinstance(frame, HeaderFrame):
            self.stats.count_frame("header")
            if frame.text != self.header_text:
                self.header_text = frame.text
                log.info("device %d: header: %.200s", self.settings.idcode, frame.text.strip())
        elif isinstance(frame, CommandFrame):
            self.stats.count_frame("command")  # a device has no business commanding us: counted, ignored

    def _on_config(self, config: ConfigFrame, now_s: float, out: Output) -> None:
        """A CFG-2 or CFG-3 (the decoder already reads data frames with it)."""
        self._config_received_s = now_s
        self._config_wanted = False  # whatever was pending is answered
        if config.frame_type is FrameType.CFG3:
            self._cfg3_unanswered = 0
        old = self.plans.get(config.idcode)
        same = old is not None and (old.config.time_base, old.config.pmus, old.config.data_rate) == (
            config.time_base, config.pmus, config.data_rate)
        if same and old is not None:
            self.plans[config.idcode] = dataclasses.replace(old, config=config)
        else:
            try:
                plan = plan_stream(config, self.names)
            except ValidationError as exc:
                self.plans.pop(config.idcode, None)  # its data frames are read, and not published
                self.stats.configs_refused += 1
                log.warning("device %d: configuration of stream %d refused: %s", self.settings.idcode,
                            config.idcode, exc)
                return
            if old is not None:
                self.stats.config_changes += 1
                counts = [p.config_count for p in config.pmus]
                log.info("device %d: configuration of stream %d changed (CFGCNT %s -> %s, %d -> %d variables)",
                         self.settings.idcode, config.idcode, [p.config_count for p in old.config.pmus], counts,
                         len(old.channels), len(plan.channels))
            self.plans[config.idcode] = plan
            out.plans.append(plan)
            rate = config.frames_per_second
            period_s = float(1 / rate) if rate else 1.0
            self._data_timeout_s = max(self.settings.data_timeout_s, 3 * period_s)
        if self.state is LinkState.CONFIGURING:
            self._command(out, Command.DATA_ON)
            self._streaming_since_s = now_s
            self._set_state(LinkState.STREAMING, f"configuration of {config.num_pmu} PMU(s) received")

    def _on_data(self, frame: DataFrame, now_s: float, out: Output) -> None:
        self.stats.count_frame("data")
        self._last_data_s = now_s
        plan = self.plans.get(frame.idcode)
        flagged = False
        if plan is None or plan.config is not frame.config:  # a configuration we refused
            self.stats.events_unpublished += 1
            return
        time_base = frame.config.time_base
        ts_ms = wire.device_timestamp_ms(frame.soc, frame.fracsec, time_base)
        fracsec_raw = frame.time_quality.to_byte() << 24 | frame.fracsec
        blocks = plan.blocks
        samples = out.samples
        for block, data in zip(blocks, frame.pmus, strict=True):
            stat = data.stat
            if stat.config_change_pending:
                flagged = True
            samples.append(Sample(block, ts_ms, wire.device_time(stat.to_word(), fracsec_raw, time_base),
                                  block.values(data)))
        self.stats.samples += len(frame.pmus)
        if flagged:
            self.stats.config_change_flags += 1
            if not self._flag_set:  # rising edge: the configuration changes within a minute (6.3.1)
                self._flag_set = True
                self._flag_asked_s = now_s
                self._config_wanted = True
        elif self._flag_set:  # falling edge: the change is done
            self._flag_set = False
            self._config_wanted = True

    # -- requests ---------------------------------------------------------------------------------

    def _after_input(self, now_s: float, out: Output) -> None:
        misses = sum(self.decoder.drops.by_reason[r] for r in _CONFIG_MISSES)
        if misses != self._misses_seen:
            self._misses_seen = misses
            self._config_wanted = True
        if self._config_wanted and self.state is LinkState.STREAMING:
            asked = self._config_asked_s
            if asked is None or now_s - asked >= self.settings.config_retry_s:
                self._config_wanted = False
                self._ask_config(out, now_s)
        self._flush(out, now_s)

    def _flush(self, out: Output, now_s: float) -> None:
        """Send the commands that are due: one per ``command_gap_s`` (all at once with a gap of 0)."""
        queue = self._commands
        gap = self.settings.command_gap_s
        while queue and now_s - self._command_sent_s >= gap:
            out.send.append(queue.popleft())
            self._command_sent_s = now_s
            self.stats.commands_sent += 1
            if gap:
                break

    def _ask_config(self, out: Output, now_s: float) -> None:
        self._command(out, Command.SEND_CFG3 if self._use_cfg3 else Command.SEND_CFG2)
        self._config_asked_s = now_s
        self._config_attempts += 1
        self.stats.config_requests += 1

    def _command(self, out: Output, command: Command) -> None:
        """Queue ``command`` (``_flush`` sends it)."""
        self._commands.append(self._command_frame(command))

    def _command_frame(self, command: Command) -> bytes:
        # SOC 0: the session reads no wall clock, and a device acts on CMD alone (6.6, Table 14).
        return build_frame(CommandFrame(self.settings.idcode, 0, 0, command))
