"""An outstation's responses as dnp3py (no one here wrote it) encodes them: link frames, transport
segments, response fragments and objects, for the dnp3 gateway's unit tests (docs/dnp3.md, "Tests")."""

from __future__ import annotations

from dnp3.application.builder import build_response, build_unsolicited_response
from dnp3.application.fragment import ObjectBlock
from dnp3.application.qualifiers import ObjectHeader
from dnp3.core.flags import IIN, AnalogQuality, BinaryQuality
from dnp3.core.timestamp import DNP3Timestamp
from dnp3.datalink.builder import build_unconfirmed_user_data
from dnp3.objects.analog_input import (
    AnalogInput16,
    AnalogInput32,
    AnalogInput32NoFlag,
    AnalogInputDouble,
    AnalogInputEvent32Time,
    AnalogInputEventDoubleTime,
    AnalogInputEventFloatTime,
    AnalogInputFloat,
)
from dnp3.objects.binary_input import BinaryInputEvent, BinaryInputEventTime, BinaryInputFlags
from dnp3.transport.segmenter import Segmenter

MASTER = 1
OUTSTATION = 10

__all__ = ["IIN", "AnalogInput16", "AnalogInput32", "AnalogInput32NoFlag", "AnalogInputDouble",
           "AnalogInputEvent32Time", "AnalogInputEventDoubleTime", "AnalogInputEventFloatTime", "AnalogInputFloat",
           "AnalogQuality", "BinaryInputEvent", "BinaryInputEventTime", "BinaryInputFlags", "BinaryQuality",
           "DNP3Timestamp"]


def ranged(group: int, variation: int, start: int, objects: list[bytes]) -> ObjectBlock:
    """Objects ``start..start+n-1``, qualifier 0x01 (two-octet start and stop)."""
    stop = start + len(objects) - 1
    return ObjectBlock(ObjectHeader(group, variation, 0x01),
                       start.to_bytes(2, "little") + stop.to_bytes(2, "little") + b"".join(objects))


def indexed(group: int, variation: int, items: list[tuple[int, bytes]]) -> ObjectBlock:
    """Objects with two-octet index prefixes, qualifier 0x28."""
    return ObjectBlock(ObjectHeader(group, variation, 0x28),
                       len(items).to_bytes(2, "little") + b"".join(i.to_bytes(2, "little") + o for i, o in items))


def counted(group: int, variation: int, objects: list[bytes]) -> ObjectBlock:
    """Objects without index, qualifier 0x07 (one-octet count): a CTO (g51) for instance."""
    return ObjectBlock(ObjectHeader(group, variation, 0x07), bytes((len(objects),)) + b"".join(objects))


def fragment(blocks: list[ObjectBlock], *, seq: int = 0, iin: int = 0, unsolicited: bool = False, con: bool = False,
             fir: bool = True, fin: bool = True) -> bytes:
    build = build_unsolicited_response if unsolicited else build_response
    return build(tuple(blocks), iin=IIN(iin), seq=seq, fir=fir, fin=fin, con=con).to_bytes()


def frames(fragment_bytes: bytes, *, transport_seq: int = 0, source: int = OUTSTATION,
           destination: int = MASTER) -> bytes:
    """The link frames of one fragment, as dnp3py's outstation sends them (unconfirmed user data)."""
    out = b""
    for seg in Segmenter(transport_seq).segment(fragment_bytes):
        out += build_unconfirmed_user_data(destination=destination, source=source, dir_from_master=False,
                                           user_data=seg.to_bytes()).to_bytes()
    return out


def response(blocks: list[ObjectBlock], **kwargs: object) -> bytes:
    transport_seq = int(kwargs.pop("transport_seq", 0))  # type: ignore[call-overload]
    return frames(fragment(blocks, **kwargs), transport_seq=transport_seq)  # type: ignore[arg-type]
