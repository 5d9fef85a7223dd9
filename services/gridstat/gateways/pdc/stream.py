"""The served stream, sans I/O: subscription events in, C37.118 frames (bytes) out.

``ServedStream`` owns the stream's ``ServedConfig`` (CFG-1/2/3, data layout) and its ``FrameAligner``.
A sample is converted to what its slot carries (``Channel.convert``), its DEVICE_TIME option read
(docs/wire-format.md 3.5), and the frames it completes are packed. Configuration and header frames
are stamped with ``now_ms`` on the stream's TIME_BASE (6.2.2). The caller passes ``now_ms``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from gridstat.core import wire
from gridstat.errors import ValidationError
from gridstat.gateways.c37118 import FrameType
from gridstat.gateways.pdc.aligner import AlignedFrame, DeviceTime, FrameAligner
from gridstat.gateways.pdc.configs import ServedConfig


class ServedStream:
    """One C37.118 stream: the configuration, the aligner, and the counts of samples it could not use."""

    def __init__(self, config: ServedConfig, *, wait_ms: int, max_open_frames: int = 64,
                 max_lead_ms: int = 2_000) -> None:
        self.config = config
        self.aligner = FrameAligner(slot_stations=config.slot_stations, frames_per_s=config.frames_per_s,
                                    time_base=config.time_base, wait_ms=wait_ms, max_open_frames=max_open_frames,
                                    max_lead_ms=max_lead_ms)
        #: Samples not used, by reason: ``bad_value`` (a value the slot cannot carry), ``pack_error``.
        self.drops: Counter[str] = Counter()

    def on_sample(self, slot: int, value: object, ts_ms: int, options: Sequence[wire.DerivedValue],
                  now_ms: int) -> list[bytes]:
        """One delivered event of the variable in ``slot``: the data frames now ready, in order."""
        converted = self.config.channels[slot].convert(value)
        if converted is None:
            self.drops["bad_value"] += 1
            return self.poll(now_ms)
        read = wire.read_device_time(options)
        device = DeviceTime(*read) if read is not None else None
        return self._pack(self.aligner.add(slot, converted, ts_ms, device, now_ms))

    def poll(self, now_ms: int) -> list[bytes]:
        """The data frames whose wait window ended by ``now_ms``."""
        return self._pack(self.aligner.poll(now_ms))

    def flush(self) -> list[bytes]:
        return self._pack(self.aligner.flush())

    def _pack(self, frames: list[AlignedFrame]) -> list[bytes]:
        out = []
        pack = self.config.pack
        for f in frames:
            try:
                out.append(pack(f.soc, f.fracsec, f.time_quality, f.values, f.stats))
            except ValidationError:
                self.drops["pack_error"] += 1
        return out

    # -- replies to commands ------------------------------------------------------------------------
    def _stamp(self, now_ms: int) -> tuple[int, int]:
        soc, ms = divmod(now_ms, 1000)
        return soc, ms * self.config.time_base // 1000

    def config_frames(self, frame_type: FrameType, now_ms: int) -> list[bytes]:
        return self.config.config_frames(frame_type, *self._stamp(now_ms))

    def header_frame(self, now_ms: int) -> bytes:
        return self.config.header_frame(*self._stamp(now_ms))
