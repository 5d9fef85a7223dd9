"""Header frames: human-readable text about the stream (C37.118.2-2011 6.5, Table 13).

The body is ASCII text with no fixed format. It is read as Latin-1, so a byte above 0x7F from a
peer is kept rather than rejected, and written the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from gridstat.errors import ValidationError
from gridstat.gateways.c37118.framing import (
    CHK_SIZE,
    HEAD_SIZE,
    VERSION_2005,
    FrameHead,
    FrameType,
    expect_type,
    read_head,
    seal,
)
from gridstat.gateways.c37118.timestamps import LOCKED_TO_UTC, TimeQuality


@dataclass(frozen=True, slots=True)
class HeaderFrame:
    idcode: int
    soc: int
    fracsec: int
    text: str
    time_quality: TimeQuality = LOCKED_TO_UTC
    version: int = VERSION_2005


def parse_header_frame(frame: bytes, *, head: FrameHead | None = None) -> HeaderFrame:
    """Parse a header frame. Raises FrameError on bad framing (``read_head``)."""
    if head is None:
        head = read_head(frame)
    expect_type(head, FrameType.HEADER)
    return HeaderFrame(head.idcode, head.soc, head.fracsec, frame[HEAD_SIZE:-CHK_SIZE].decode("latin-1"),
                       head.time_quality, head.version)


def build_header_frame(frame: HeaderFrame) -> bytes:
    """The bytes of a header frame. Raises ValidationError for text that is not ASCII or too long."""
    try:
        text = frame.text.encode("latin-1")
    except UnicodeEncodeError as exc:
        raise ValidationError("header text is not ASCII", field="DATA") from exc
    return seal(FrameType.HEADER, version=frame.version, idcode=frame.idcode, soc=frame.soc, fracsec=frame.fracsec,
                time_quality=frame.time_quality, body=text)
