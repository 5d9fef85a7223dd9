"""IEEE C37.118.2-2011 synchrophasor frames: a sans-I/O codec (docs/c37118.md).

Parse and build every frame type -- data, CFG-1, CFG-2, CFG-3 (fragmented too), header, command --
as typed, frozen dataclasses; builders' bytes parse back equal. The stream API (``StreamDecoder``,
``FrameSplitter``) takes bytes from a TCP stream or UDP datagrams and never raises on them: every loss is
counted by reason in a ``DropCounter``. The direct parse functions raise ``FrameError`` naming the
reason, the field and its value. No sockets and no clock here: the gateway and server roles bring them.

Modules, by role: ``framing`` (common fields, CHK), ``timestamps`` (SOC, FRACSEC, time quality),
``configs`` (configuration model, CFG-1/2), ``cfg3`` (CFG-3 and its series), ``reassembling``,
``measurements`` (data frames), ``commands``, ``headers``, ``codec`` (any frame), ``splitting`` (TCP
streams), ``decoding`` (the stream API), ``errors``.
"""

from gridstat.gateways.c37118.cfg3 import ConfigFragment, build_cfg3_frames
from gridstat.gateways.c37118.codec import Frame, build_frame, parse_frame
from gridstat.gateways.c37118.commands import Command, CommandFrame
from gridstat.gateways.c37118.configs import (
    AnalogKind,
    AnalogScale,
    AnalogUnit,
    Cfg3Details,
    ConfigFrame,
    DataFormat,
    DigitalUnit,
    PhasorComponent,
    PhasorKind,
    PhasorModification,
    PhasorScale,
    PhasorUnit,
    PmuConfig,
)
from gridstat.gateways.c37118.decoding import StreamDecoder
from gridstat.gateways.c37118.errors import DropCounter, DropReason, FrameError
from gridstat.gateways.c37118.framing import FrameType, crc_ccitt
from gridstat.gateways.c37118.headers import HeaderFrame
from gridstat.gateways.c37118.measurements import (
    DataError,
    DataFrame,
    DataLayout,
    PmuData,
    PmuTimeQuality,
    Stat,
    TriggerReason,
    UnlockedTime,
)
from gridstat.gateways.c37118.reassembling import ConfigReassembler
from gridstat.gateways.c37118.splitting import FrameSplitter
from gridstat.gateways.c37118.timestamps import MessageTimeQuality, TimeQuality, Timestamp

__all__ = [
    "AnalogKind",
    "AnalogScale",
    "AnalogUnit",
    "Cfg3Details",
    "Command",
    "CommandFrame",
    "ConfigFragment",
    "ConfigFrame",
    "ConfigReassembler",
    "DataError",
    "DataFormat",
    "DataFrame",
    "DataLayout",
    "DigitalUnit",
    "DropCounter",
    "DropReason",
    "Frame",
    "FrameError",
    "FrameSplitter",
    "FrameType",
    "HeaderFrame",
    "MessageTimeQuality",
    "PhasorComponent",
    "PhasorKind",
    "PhasorModification",
    "PhasorScale",
    "PhasorUnit",
    "PmuConfig",
    "PmuData",
    "PmuTimeQuality",
    "Stat",
    "StreamDecoder",
    "TimeQuality",
    "Timestamp",
    "TriggerReason",
    "UnlockedTime",
    "build_cfg3_frames",
    "build_frame",
    "crc_ccitt",
    "parse_frame",
]
