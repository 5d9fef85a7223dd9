"""One PDC client's commands, sans I/O: bytes in, reply frames out (C37.118.2-2011 6.6, Table 15).

A ``ClientSession`` reads command frames from a TCP stream (a ``FrameSplitter``) or from datagrams,
and answers them: turn data off (0x01) and on (0x02), send HDR (0x03), CFG-1 (0x04), CFG-2 (0x05),
CFG-3 (0x06; a series when it does not fit one frame). Each session has its own data on/off state; a
session starts with data off, as a PMU waits for "turn on transmission" (6.6).

A command's IDCODE names the stream it is for; one server serves one stream on its port, so every
command is answered whatever IDCODE it carries (as pypmu's PMU does).

Peer input never raises. Every frame or run of bytes not taken is counted once in the server-wide
``CommandCounters``: the codec's reasons (``bad_crc``, ``bad_sync``, ``truncated``, ...; docs/c37118.md,
"Drop reasons") and ``not_a_command`` (a data, configuration or header frame sent to the server),
``unknown_command`` (a reserved CMD code), ``user_defined_command`` (0x0100-0x0FFF and the like),
``unsupported_command`` (extended frame, 0x08).
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

from gridstat.gateways.c37118 import Command, DropCounter, FrameError, FrameSplitter, FrameType
from gridstat.gateways.c37118.commands import parse_command_frame
from gridstat.gateways.c37118.framing import MAX_FRAME_SIZE, read_head

#: Commands are small: a client's pending bytes are bounded by this (an EXTFRAME may fill a frame).
DEFAULT_MAX_FRAME_SIZE = MAX_FRAME_SIZE
_CONFIG_OF = {Command.SEND_CFG1: FrameType.CFG1, Command.SEND_CFG2: FrameType.CFG2,
              Command.SEND_CFG3: FrameType.CFG3}


class StreamSource(Protocol):
    """What a session answers with: the stream's configuration and header frames, stamped ``now_ms``."""

    def config_frames(self, frame_type: FrameType, now_ms: int) -> list[bytes]: ...

    def header_frame(self, now_ms: int) -> bytes: ...


class CommandCounters:
    """Commands received and input refused, summed over every session of a server."""

    __slots__ = ("commands", "drops", "refused")

    def __init__(self) -> None:
        #: The codec's drop reasons, shared by every session's splitter.
        self.drops = DropCounter()
        #: Frames that parsed but were not taken, by reason (module docstring).
        self.refused: Counter[str] = Counter()
        #: Commands answered, by name (``data_on``, ``send_cfg2``, ...).
        self.commands: Counter[str] = Counter()

    def by_reason(self) -> dict[str, int]:
        """Every refusal by reason, the codec's and the session's, non-zero counts only."""
        out = self.drops.as_dict()
        for reason, n in self.refused.items():
            if n:
                out[reason] = out.get(reason, 0) + n
        return out

    @property
    def total_refused(self) -> int:
        return self.drops.total + sum(self.refused.values())


class ClientSession:
    """One PDC: its data on/off state and the replies to its commands."""

    __slots__ = ("counters", "data_on", "splitter", "stream")

    def __init__(self, stream: StreamSource, counters: CommandCounters, *, data_on: bool = False,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.stream = stream
        self.counters = counters
        self.data_on = data_on
        self.splitter = FrameSplitter(max_frame_size=max_frame_size, drops=counters.drops)

    def receive(self, data: bytes | bytearray | memoryview, now_ms: int) -> list[bytes]:
        """The next bytes of the client's TCP stream: the frames to send back, in order."""
        out: list[bytes] = []
        for raw in self.splitter.feed(data):
            out += self._handle(raw, now_ms, checked=True)
        return out

    def receive_datagram(self, datagram: bytes, now_ms: int) -> list[bytes]:
        """One UDP datagram, which must be exactly one frame (6.2.1): the frames to send back."""
        return self._handle(datagram, now_ms, checked=False)

    def close(self) -> None:
        """The connection ended: a partial frame is counted (``truncated``)."""
        self.splitter.close()

    def _handle(self, raw: bytes, now_ms: int, *, checked: bool) -> list[bytes]:
        counters = self.counters
        try:
            head = read_head(raw, check_crc=not checked)
            if head.frame_type is not FrameType.COMMAND:
                counters.refused["not_a_command"] += 1
                return []
            cmd = parse_command_frame(raw, head=head)
        except FrameError as exc:
            counters.drops.count_error(exc)
            return []
        code = cmd.command
        if not isinstance(code, Command):
            counters.refused["user_defined_command" if cmd.is_user_defined else "unknown_command"] += 1
            return []
        if code is Command.EXTENDED_FRAME:
            counters.refused["unsupported_command"] += 1
            return []
        counters.commands[code.name.lower()] += 1
        if code is Command.DATA_OFF:
            self.data_on = False
            return []
        if code is Command.DATA_ON:
            self.data_on = True
            return []
        if code is Command.SEND_HEADER:
            return [self.stream.header_frame(now_ms)]
        return self.stream.config_frames(_CONFIG_OF[code], now_ms)
