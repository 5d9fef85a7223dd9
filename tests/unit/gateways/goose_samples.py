"""Frames and map entries the GOOSE unit tests share."""

from __future__ import annotations

from gridstat.gateways.goose import GooseFrame, encode_frame, parse_map
from gridstat.gateways.goose.values import BitString, UtcTime, Value

#: A frame libiec61850 1.6 (pyiec61850-ng 1.6.1.10, GoosePublisher on lo) sent: gocbRef IED1/LLN0$GO$gcb1,
#: datSet IED1/LLN0$ds1, goID gid1, APPID 0x1000, stNum 1, sqNum 0, allData (True, 42, 3.5, "x").
LIBIEC61850_FRAME = bytes.fromhex(
    "010ccd01000000000000000088b81000006400000000615a8011494544312f4c4c4e3024474f2467636231810207d0820d4945"
    "44312f4c4c4e302464733183046769643184086b09e5717645a10a8501018601008701008801018901008a0104ab10830101"
    "85012a870508406000008a0178")

GOCB = "IED1/LLN0$GO$gcb1"
MAP = {"subscribe": [{"gocbRef": GOCB, "appID": 0x1000, "members": [
    {"index": 0, "variable": "bay1/breaker_closed", "kind": "boolean", "quality": 1},
    {"index": 2, "variable": "bay1/current", "kind": "float"},
    {"index": "3.0", "variable": "bay1/position", "kind": "bitstring"},
    {"index": 4, "variable": "bay1/trip_time", "kind": "utc_time"},
    {"index": 5, "variable": "bay1/count", "kind": "integer"}]}]}
GOOSE_MAP = parse_map(MAP, "test")


def data(closed: bool = True, amps: float = 12.5, q: int = 0) -> tuple[Value, ...]:
    return (closed, BitString(q, 13), amps, (BitString(2, 2), BitString(0, 13)), UtcTime.from_ms(1_700_000_000_123),
            -7)


def frame(st_num: int = 1, sq_num: int = 0, t_ms: int = 1_800_000_000_250, *, gocb: str = GOCB, app_id: int = 0x1000,
          ttl_ms: int = 2000, all_data: tuple[Value, ...] | None = None) -> bytes:
    return encode_frame(GooseFrame(
        app_id=app_id, gocb_ref=gocb, time_allowed_to_live_ms=ttl_ms, dat_set="IED1/LLN0$ds1", go_id="gid1",
        t=UtcTime.from_ms(t_ms, 0x0A), st_num=st_num, sq_num=sq_num, simulation=False, conf_rev=1, nds_com=False,
        all_data=data() if all_data is None else all_data, src_mac=bytes.fromhex("020000000001")))
