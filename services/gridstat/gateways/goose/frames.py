"""GOOSE frames (IEC 61850-8-1 Annex A and C): the Ethernet header, the GOOSE header and the goosePdu.

``decode_frame(data)`` reads one Ethernet frame into a ``GooseFrame`` or raises ``FrameError``;
``encode_frame(...)`` writes one. Sans-I/O: no socket, no clock.

    dst(6) src(6) [0x8100 TCI(2)] 0x88B8 APPID(2) Length(2) Reserved1(2) Reserved2(2) goosePdu

    goosePdu ::= [APPLICATION 1] IMPLICIT SEQUENCE {
      gocbRef [0] VisibleString, timeAllowedtoLive [1] INTEGER, datSet [2] VisibleString,
      goID [3] VisibleString OPTIONAL, t [4] UtcTime, stNum [5] INTEGER, sqNum [6] INTEGER,
      simulation [7] BOOLEAN DEFAULT FALSE, confRev [8] INTEGER, ndsCom [9] BOOLEAN DEFAULT FALSE,
      numDatSetEntries [10] INTEGER, allData [11] IMPLICIT SEQUENCE OF Data, ... }
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gridstat.gateways.goose.ber import decode_unsigned, encode_integer, iter_tlvs, read_tlv, tlv
from gridstat.gateways.goose.errors import DropReason, FrameError
from gridstat.gateways.goose.values import UtcTime, Value, decode_utc_time, decode_value, encode_utc_time, encode_value

ETHERTYPE_GOOSE = 0x88B8
ETHERTYPE_VLAN = 0x8100
GOOSE_PDU_TAG = 0x61
#: The multicast range IEC 61850-8-1 Annex B recommends for GOOSE, first address.
DEFAULT_DST_MAC = bytes.fromhex("010ccd010000")
#: Ethernet's payload limit: a goosePdu longer than this does not fit one frame.
MAX_PAYLOAD = 1500

_STRING_FIELDS = {0x80: "gocbRef", 0x82: "datSet", 0x83: "goID"}
_UNSIGNED_FIELDS = {0x81: "timeAllowedtoLive", 0x85: "stNum", 0x86: "sqNum", 0x88: "confRev",
                    0x8A: "numDatSetEntries"}


@dataclass(frozen=True, slots=True)
class GooseFrame:
    app_id: int
    gocb_ref: str
    time_allowed_to_live_ms: int
    dat_set: str
    go_id: str
    t: UtcTime
    st_num: int
    sq_num: int
    simulation: bool
    conf_rev: int
    nds_com: bool
    all_data: tuple[Value, ...]
    src_mac: bytes = b"\x00" * 6
    dst_mac: bytes = DEFAULT_DST_MAC
    vlan_id: int | None = None


def decode_frame(data: bytes | memoryview) -> GooseFrame:
    """One Ethernet frame carrying GOOSE; raises ``FrameError`` with its ``DropReason``."""
    n = len(data)
    if n < 14:
        raise FrameError(DropReason.NOT_GOOSE, f"{n} bytes: no Ethernet header")
    pos = 12
    ethertype = int.from_bytes(data[12:14], "big")
    vlan_id = None
    if ethertype == ETHERTYPE_VLAN:
        if n < 18:
            raise FrameError(DropReason.NOT_GOOSE, "802.1Q tag truncated")
        vlan_id = int.from_bytes(data[14:16], "big") & 0x0FFF
        ethertype = int.from_bytes(data[16:18], "big")
        pos = 16
    if ethertype != ETHERTYPE_GOOSE:
        raise FrameError(DropReason.NOT_GOOSE, f"EtherType 0x{ethertype:04x}")
    pos += 2
    if pos + 8 > n:
        raise FrameError(DropReason.BAD_LENGTH, "GOOSE header truncated")
    app_id = int.from_bytes(data[pos:pos + 2], "big")
    length = int.from_bytes(data[pos + 2:pos + 4], "big")
    # Ethernet pads short frames to 60 bytes: the Length may be below what arrived, never above.
    if length < 8 or pos + length > n:
        raise FrameError(DropReason.BAD_LENGTH, f"Length {length} with {n - pos} bytes after the EtherType")
    end = pos + length
    tag, start, stop = read_tlv(data, pos + 8, end)
    if tag != GOOSE_PDU_TAG:
        raise FrameError(DropReason.BAD_BER, f"tag 0x{tag:02x} is not the goosePdu's")
    texts: dict[str, str] = {}
    numbers: dict[str, int] = {}
    flags: dict[str, bool] = {}
    t: UtcTime | None = None
    all_data: tuple[Value, ...] | None = None
    last = -1
    for ftag, a, b in iter_tlvs(data, start, stop):
        number = ftag & 0x1F
        if number <= last:
            raise FrameError(DropReason.BAD_FIELD, f"goosePdu field [{number}] out of order")
        last = number
        raw = data[a:b]
        if ftag in _STRING_FIELDS:
            try:
                texts[_STRING_FIELDS[ftag]] = bytes(raw).decode("ascii")
            except UnicodeDecodeError:
                raise FrameError(DropReason.BAD_FIELD, f"{_STRING_FIELDS[ftag]} is not ASCII") from None
        elif ftag in _UNSIGNED_FIELDS:
            numbers[_UNSIGNED_FIELDS[ftag]] = decode_unsigned(raw)
        elif ftag == 0x84:
            t = decode_utc_time(raw)
        elif ftag in (0x87, 0x89):
            if len(raw) != 1:
                raise FrameError(DropReason.BAD_FIELD, "BOOLEAN of a length other than 1")
            flags["simulation" if ftag == 0x87 else "ndsCom"] = raw[0] != 0
        elif ftag == 0xAB:
            all_data = tuple(decode_value(t_, data[x:y]) for t_, x, y in iter_tlvs(data, a, b))
        # [12] security and later extensions: skipped
    missing = [f for f in ("gocbRef", "datSet") if f not in texts]
    missing += [f for f in ("timeAllowedtoLive", "stNum", "sqNum", "confRev", "numDatSetEntries") if f not in numbers]
    missing += ["t"] * (t is None) + ["allData"] * (all_data is None)
    if missing or t is None or all_data is None:
        raise FrameError(DropReason.BAD_FIELD, f"goosePdu without {', '.join(missing)}")
    if numbers["numDatSetEntries"] != len(all_data):
        raise FrameError(DropReason.ENTRIES_MISMATCH,
                         f"numDatSetEntries {numbers['numDatSetEntries']} with {len(all_data)} members")
    return GooseFrame(
        app_id=app_id, gocb_ref=texts["gocbRef"], time_allowed_to_live_ms=numbers["timeAllowedtoLive"],
        dat_set=texts["datSet"], go_id=texts.get("goID", ""), t=t, st_num=numbers["stNum"], sq_num=numbers["sqNum"],
        simulation=flags.get("simulation", False), conf_rev=numbers["confRev"], nds_com=flags.get("ndsCom", False),
        all_data=all_data, src_mac=bytes(data[6:12]), dst_mac=bytes(data[0:6]), vlan_id=vlan_id)


def encode_pdu(frame: GooseFrame, encoded_data: Sequence[bytes] | None = None) -> bytes:
    """The goosePdu TLV; ``encoded_data``: the members already encoded (the publisher caches them)."""
    members = encoded_data if encoded_data is not None else [encode_value(v) for v in frame.all_data]
    body = [tlv(0x80, frame.gocb_ref.encode("ascii")),
            tlv(0x81, encode_integer(frame.time_allowed_to_live_ms)),
            tlv(0x82, frame.dat_set.encode("ascii"))]
    if frame.go_id:
        body.append(tlv(0x83, frame.go_id.encode("ascii")))
    body += [tlv(0x84, encode_utc_time(frame.t)), tlv(0x85, encode_integer(frame.st_num)),
             tlv(0x86, encode_integer(frame.sq_num)), tlv(0x87, b"\x01" if frame.simulation else b"\x00"),
             tlv(0x88, encode_integer(frame.conf_rev)), tlv(0x89, b"\x01" if frame.nds_com else b"\x00"),
             tlv(0x8A, encode_integer(len(members))), tlv(0xAB, b"".join(members))]
    return tlv(GOOSE_PDU_TAG, b"".join(body))


def encode_frame(frame: GooseFrame, encoded_data: Sequence[bytes] | None = None) -> bytes:
    """The Ethernet frame (with an 802.1Q tag, priority 4, when ``vlan_id`` is set). Raises ``ValueError``
    when it does not fit one Ethernet frame."""
    pdu = encode_pdu(frame, encoded_data)
    header = frame.dst_mac + frame.src_mac
    if frame.vlan_id is not None:
        header += ETHERTYPE_VLAN.to_bytes(2, "big") + ((4 << 13) | frame.vlan_id).to_bytes(2, "big")
    length = 8 + len(pdu)
    if length > MAX_PAYLOAD:
        raise ValueError(f"goosePdu of {len(pdu)} bytes does not fit one Ethernet frame")
    return (header + ETHERTYPE_GOOSE.to_bytes(2, "big") + frame.app_id.to_bytes(2, "big")
            + length.to_bytes(2, "big") + b"\x00\x00\x00\x00" + pdu)
