"""The DNP3 CRC (IEEE 1815-2012, the data link layer): CRC-16 with polynomial 0x3D65 (bit-reversed 0xA6BC), initial
value 0, the one's complement of the register sent low octet first."""

from __future__ import annotations


def _table() -> tuple[int, ...]:
    rows = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA6BC if crc & 1 else crc >> 1
        rows.append(crc)
    return tuple(rows)


_TABLE = _table()


def crc16(data: bytes | bytearray | memoryview) -> int:
    """The CRC of ``data`` as the 16-bit value whose low octet goes first on the wire."""
    crc = 0
    table = _TABLE
    for byte in data:
        crc = (crc >> 8) ^ table[(crc ^ byte) & 0xFF]
    return ~crc & 0xFFFF


def crc_bytes(data: bytes | bytearray | memoryview) -> bytes:
    """``data``'s CRC as sent: two octets, low first."""
    return crc16(data).to_bytes(2, "little")
