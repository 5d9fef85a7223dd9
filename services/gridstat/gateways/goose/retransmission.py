"""The publisher handler (sans-I/O): one control block's stNum, sqNum and retransmission curve.

IEC 61850-8-1 (clause 18.1, Figure "Transmission time for events"): a state change is sent at once
with stNum incremented and sqNum 0, then repeated with sqNum + 1 at ``min_time_ms``, doubling each
time, until the interval reaches ``max_time_ms``, the heartbeat, where it stays until the next change.
stNum and sqNum roll over to 1. Every frame carries ``timeAllowedtoLive`` (2 x max_time_ms unless the
map says otherwise). The clock is passed in; deadlines advance from the previous deadline, not from
when the caller got round to it, so a late tick does not stretch the curve.
"""

from __future__ import annotations

from gridstat.gateways.goose.frames import GooseFrame, encode_frame
from gridstat.gateways.goose.mapping import PublishedBlock
from gridstat.gateways.goose.values import BitString, Unsigned, UtcTime, Value, encode_value

ROLLOVER = 1 << 32


def initial_value(kind: str, bits: int) -> Value:
    initial: dict[str, Value] = {"boolean": False, "float": 0.0, "integer": 0, "unsigned": Unsigned(0),
                                 "utc_time": UtcTime(0, 0), "bitstring": BitString(0, bits)}
    return initial.get(kind, 0)


def next_number(n: int) -> int:
    """stNum or sqNum after ``n`` (INT32U, rolling over to 1)."""
    return n + 1 if n + 1 < ROLLOVER else 1


class Retransmitter:
    """Frames of one control block: ``change`` for a new state, ``due`` for the retransmissions."""

    def __init__(self, block: PublishedBlock, *, src_mac: bytes = b"\x00" * 6) -> None:
        self.block = block
        self.src_mac = src_mac
        self.values: list[Value] = [initial_value(m.kind, m.bits) for m in block.members]
        self._encoded = [encode_value(v) for v in self.values]
        self.st_num = 0
        self.sq_num = 0
        self.t = UtcTime(0, 0)
        #: The interval to the next frame and when it is due (None before the first state).
        self.interval_ms = block.max_time_ms
        self.next_due_s: float | None = None

    def frame(self) -> bytes:
        b = self.block
        return encode_frame(GooseFrame(
            app_id=b.app_id, gocb_ref=b.gocb_ref, time_allowed_to_live_ms=b.time_allowed_to_live_ms,
            dat_set=b.dat_set, go_id=b.go_id, t=self.t, st_num=self.st_num, sq_num=self.sq_num, simulation=False,
            conf_rev=b.conf_rev, nds_com=False, all_data=tuple(self.values), src_mac=self.src_mac,
            dst_mac=b.dst_mac, vlan_id=b.vlan_id), self._encoded)

    def change(self, updates: dict[int, Value], t_ms: int, now_s: float) -> bytes:
        """A new state: the members at ``updates``' indexes take their values; the frame to send now."""
        for i, value in updates.items():
            self.values[i] = value
            self._encoded[i] = encode_value(value)
        self.st_num = next_number(self.st_num)
        self.sq_num = 0
        self.t = UtcTime.from_ms(t_ms)
        self.interval_ms = min(self.block.min_time_ms, self.block.max_time_ms)
        self.next_due_s = now_s + self.interval_ms / 1000
        return self.frame()

    def due(self, now_s: float) -> list[bytes]:
        """The retransmissions due by ``now_s`` (one per deadline passed, at most a handful)."""
        out: list[bytes] = []
        while self.next_due_s is not None and now_s >= self.next_due_s and len(out) < 8:
            self.sq_num = next_number(self.sq_num)
            out.append(self.frame())
            self.interval_ms = min(self.interval_ms * 2, self.block.max_time_ms)
            self.next_due_s += self.interval_ms / 1000
        if self.next_due_s is not None and now_s >= self.next_due_s:  # far behind: start from now
            self.next_due_s = now_s + self.interval_ms / 1000
        return out
