"""One entry point for every frame type: ``parse_frame`` and ``build_frame``.

Data frames need their stream's configuration (a ``DataLayout`` or ``ConfigFrame``); the other types
stand alone. A CFG-3 frame that is one piece of a series parses to a ``ConfigFragment`` (cfg3.py).
"""

from __future__ import annotations

from gridstat.errors import ValidationError
from gridstat.gateways.c37118.cfg3 import ConfigFragment, build_cfg3_frame, build_fragment, parse_cfg3_frame
from gridstat.gateways.c37118.commands import CommandFrame, build_command_frame, parse_command_frame
from gridstat.gateways.c37118.configs import ConfigFrame, build_cfg12_frame, parse_cfg12_frame
from gridstat.gateways.c37118.errors import DropReason, FrameError
from gridstat.gateways.c37118.framing import FrameHead, FrameType, read_head
from gridstat.gateways.c37118.headers import HeaderFrame, build_header_frame, parse_header_frame
from gridstat.gateways.c37118.measurements import DataFrame, DataLayout, build_data_frame, parse_data_frame

Frame = DataFrame | ConfigFrame | ConfigFragment | HeaderFrame | CommandFrame


def parse_frame(frame: bytes, *, config: DataLayout | ConfigFrame | None = None,
                head: FrameHead | None = None) -> Frame:
    """Parse one complete frame of any type (``config``: the stream's, for a data frame).

    Raises:
        FrameError: naming the drop reason, the field and its value; ``no_config`` for a data frame
            without ``config``.
    """
    if head is None:
        head = read_head(frame)
    t = head.frame_type
    if t is FrameType.DATA:
        if config is None:
            raise FrameError(DropReason.NO_CONFIG, "a data frame needs its stream's configuration",
                             field="IDCODE", value=head.idcode)
        return parse_data_frame(frame, config, head=head)
    if t is FrameType.CFG1 or t is FrameType.CFG2:
        return parse_cfg12_frame(frame, head=head)
    if t is FrameType.CFG3:
        return parse_cfg3_frame(frame, head=head)
    if t is FrameType.HEADER:
        return parse_header_frame(frame, head=head)
    return parse_command_frame(frame, head=head)


def build_frame(frame: Frame) -> bytes:
    """The bytes of one frame (a CFG-3 configuration as one frame: ``cfg3.build_cfg3_frames`` cuts a
    large one into a series).

    Raises:
        ValidationError: a value that does not fit its field.
    """
    if isinstance(frame, DataFrame):
        return build_data_frame(frame)
    if isinstance(frame, ConfigFrame):
        if frame.frame_type is FrameType.CFG3:
            return build_cfg3_frame(frame)
        return build_cfg12_frame(frame)
    if isinstance(frame, ConfigFragment):
        return build_fragment(frame)
    if isinstance(frame, HeaderFrame):
        return build_header_frame(frame)
    if isinstance(frame, CommandFrame):
        return build_command_frame(frame)
    raise ValidationError(f"not a C37.118 frame: {type(frame).__name__}", field="frame")
