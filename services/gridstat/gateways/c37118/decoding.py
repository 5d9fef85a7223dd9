"""The receiving side of a C37.118 connection, sans I/O: bytes in, typed frames out, nothing raised.

``StreamDecoder`` owns its parts: a ``FrameSplitter`` (TCP byte streams), a ``ConfigReassembler``
(CFG-3 series) and the configurations it has seen, one per stream IDCODE with its compiled
``DataLayout``. A CFG-2 or CFG-3 frame replaces its stream's configuration (C37.118.2-2011 6.4: both
describe the data being sent; CFG-1 only says what the device could send and is returned, not
applied). Data frames are parsed against their stream's configuration.

Peer input never raises: every frame that is not returned is one count in ``drops`` (errors.py), so
a gateway or server role reads all its losses in one place. The roles built on this decide what to do
with the frames (ask for a configuration on ``no_config``, answer commands); nothing here does I/O.
"""

from __future__ import annotations

from gridstat.gateways.c37118.cfg3 import ConfigFragment
from gridstat.gateways.c37118.codec import Frame, parse_frame
from gridstat.gateways.c37118.configs import ConfigFrame
from gridstat.gateways.c37118.errors import DropCounter, DropReason, FrameError
from gridstat.gateways.c37118.framing import MAX_FRAME_SIZE, FrameType, read_head
from gridstat.gateways.c37118.measurements import DataLayout
from gridstat.gateways.c37118.reassembling import DEFAULT_MAX_CONFIG_BYTES, ConfigReassembler
from gridstat.gateways.c37118.splitting import FrameSplitter

#: Streams (IDCODEs) whose configuration a decoder keeps; a further one is dropped (``bad_field``
#: IDCODE) rather than grow the table without bound.
DEFAULT_MAX_STREAMS = 1024


class StreamDecoder:
    """Typed frames from a TCP stream (``feed``) or from datagrams (``receive_datagram``)."""

    __slots__ = ("_configs", "_layouts", "drops", "frames_out", "max_streams", "reassembler", "splitter")

    def __init__(self, *, max_frame_size: int = MAX_FRAME_SIZE, max_config_bytes: int = DEFAULT_MAX_CONFIG_BYTES,
                 max_streams: int = DEFAULT_MAX_STREAMS) -> None:
        self.drops = DropCounter()
        self.splitter = FrameSplitter(max_frame_size=max_frame_size, drops=self.drops)
        self.reassembler = ConfigReassembler(max_config_bytes=max_config_bytes, drops=self.drops)
        self.max_streams = max_streams
        self.frames_out = 0
        self._configs: dict[int, ConfigFrame] = {}
        self._layouts: dict[int, DataLayout] = {}

    @property
    def configs(self) -> dict[int, ConfigFrame]:
        """The configuration of each stream, by IDCODE (a copy)."""
        return dict(self._configs)

    def configure(self, config: ConfigFrame) -> bool:
        """Use ``config`` for its stream's data frames (one known beforehand, or one just received).
        False, and one drop counted, when its data frames could not be parsed (too large, too many
        streams)."""
        try:
            layout = DataLayout(config)
        except FrameError as exc:
            self.drops.count_error(exc)
            return False
        if config.idcode not in self._configs and len(self._configs) >= self.max_streams:
            self.drops.count_error(FrameError(DropReason.BAD_FIELD, f"more than {self.max_streams} streams",
                                              field="IDCODE", value=config.idcode))
            return False
        self._configs[config.idcode] = config
        self._layouts[config.idcode] = layout
        return True

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """The next bytes of a TCP stream; the frames they complete, in order. CFG-3 series are
        returned once complete, as one ``ConfigFrame``."""
        out: list[Frame] = []
        for raw in self.splitter.feed(data):
            frame = self._decode(raw, checked=True)
            if frame is not None:
                out.append(frame)
        return out

    def receive_datagram(self, datagram: bytes) -> Frame | None:
        """One UDP datagram, which must be exactly one frame (6.2.1). None when it was dropped (and
        counted), or when it was a CFG-3 fragment of a series still open."""
        return self._decode(datagram, checked=False)

    def close(self) -> None:
        """The connection ended: a partial frame and open CFG-3 series are counted as ``truncated``.
        Configurations are kept (a reconnecting PMU usually keeps its own)."""
        self.splitter.close()
        self.reassembler.reset()

    def _decode(self, raw: bytes, *, checked: bool) -> Frame | None:
        try:
            if checked:  # the splitter checked the framing and CHK
                head = read_head(raw, check_crc=False)
            else:
                head = read_head(raw)
            frame_type = head.frame_type
            if frame_type is FrameType.DATA:
                layout = self._layouts.get(head.idcode)
                if layout is None:
                    reason = DropReason.UNKNOWN_IDCODE if self._layouts else DropReason.NO_CONFIG
                    raise FrameError(reason, f"no configuration for stream {head.idcode}", field="IDCODE",
                                     value=head.idcode)
                frame: Frame | None = parse_frame(raw, config=layout, head=head)
            else:
                frame = parse_frame(raw, head=head)
        except FrameError as exc:
            self.drops.count_error(exc)
            return None
        if isinstance(frame, ConfigFragment):
            frame = self.reassembler.add(frame)
        if isinstance(frame, ConfigFrame) and frame.frame_type is not FrameType.CFG1 and not self.configure(frame):
            return None
        if frame is not None:
            self.frames_out += 1
        return frame
