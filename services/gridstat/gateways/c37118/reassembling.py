"""Putting a fragmented CFG-3 configuration back together (C37.118.2-2011 6.4, Table 11, CONT_IDX).

A series is CONT_IDX 1, 2, 3, ... and ends with 0xFFFF; its pieces concatenated are one CFG-3 body
(cfg3.py). One series per stream IDCODE is collected at a time. Memory is bounded twice: a series
longer than ``max_config_bytes`` is abandoned, and at most ``max_series`` streams may have one open
(the oldest is abandoned for a new one). Nothing here raises on peer input: a series that cannot
complete is one drop -- ``truncated`` when it is abandoned or replaced by a new first fragment,
``bad_field`` (CONT_IDX) when a fragment is out of order, ``bad_size`` when it grows too long.
"""

from __future__ import annotations

from gridstat.gateways.c37118.cfg3 import CONT_FIRST, CONT_LAST, ConfigFragment, parse_cfg3_body
from gridstat.gateways.c37118.configs import ConfigFrame
from gridstat.gateways.c37118.errors import DropCounter, DropReason, FrameError, bad_field
from gridstat.gateways.c37118.framing import FrameHead, FrameType

#: A CFG-3 series longer than this is abandoned: 16 full frames, far beyond any PDC's configuration.
DEFAULT_MAX_CONFIG_BYTES = 1 << 20
#: Streams that may each have a series open at once.
DEFAULT_MAX_SERIES = 16


class _Series:
    __slots__ = ("first", "next_idx", "pieces", "size")

    def __init__(self, first: ConfigFragment) -> None:
        self.first = first
        self.next_idx = CONT_FIRST + 1
        self.pieces = [first.body]
        self.size = len(first.body)


class ConfigReassembler:
    """Collects CFG-3 fragments per stream and returns the configuration when a series completes."""

    __slots__ = ("_open", "drops", "max_config_bytes", "max_series")

    def __init__(self, *, max_config_bytes: int = DEFAULT_MAX_CONFIG_BYTES, max_series: int = DEFAULT_MAX_SERIES,
                 drops: DropCounter | None = None) -> None:
        self.max_config_bytes = max_config_bytes
        self.max_series = max_series
        self.drops = drops if drops is not None else DropCounter()
        self._open: dict[int, _Series] = {}

    @property
    def open_series(self) -> int:
        return len(self._open)

    @property
    def pending_bytes(self) -> int:
        return sum(s.size for s in self._open.values())

    def add(self, fragment: ConfigFragment) -> ConfigFrame | None:
        """Take one fragment; the whole configuration when it was the last of a complete series."""
        idx = fragment.cont_idx
        series = self._open.get(fragment.idcode)
        if idx == CONT_FIRST:
            if series is not None:
                self._abandon(fragment.idcode, DropReason.TRUNCATED)
            elif len(self._open) >= self.max_series:
                self._abandon(next(iter(self._open)), DropReason.TRUNCATED)
            series = self._open[fragment.idcode] = _Series(fragment)
            self._too_large(fragment.idcode, series)
            return None
        if series is None or (idx != CONT_LAST and idx != series.next_idx):
            if series is not None:
                del self._open[fragment.idcode]
            self.drops.count_error(bad_field("CONT_IDX", idx, "not the next fragment of an open series"))
            return None
        series.pieces.append(fragment.body)
        series.size += len(fragment.body)
        if self._too_large(fragment.idcode, series):
            return None
        if idx != CONT_LAST:
            series.next_idx += 1
            return None
        del self._open[fragment.idcode]
        first = series.first
        head = FrameHead(FrameType.CFG3, first.version, first.idcode, first.soc, first.fracsec, first.time_quality)
        try:
            return parse_cfg3_body(head, b"".join(series.pieces))
        except FrameError as exc:
            self.drops.count_error(exc)
            return None

    def reset(self) -> None:
        """Forget every open series (a new connection), counting each as ``truncated``."""
        for idcode in list(self._open):
            self._abandon(idcode, DropReason.TRUNCATED)

    def _too_large(self, idcode: int, series: _Series) -> bool:
        if series.size <= self.max_config_bytes:
            return False
        self._abandon(idcode, DropReason.BAD_SIZE)
        return True

    def _abandon(self, idcode: int, reason: DropReason) -> None:
        del self._open[idcode]
        self.drops.count_error(FrameError(reason, f"CFG-3 series of stream {idcode} abandoned", field="CONT_IDX",
                                          value=idcode))
