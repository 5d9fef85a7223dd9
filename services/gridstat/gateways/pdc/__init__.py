"""``gridstat pdc-server``: GridStat subscriptions served as one IEEE C37.118.2-2011 stream to PDCs (runtime,
a gateway role; docs/pdc-server.md).

The server subscribes to status variables through the broker like any subscriber, aligns their events
on the time grid of the served rate, and sends data frames to every PDC that turned data on. It follows
the gateways' three rooms: the codec is ``gridstat.gateways.c37118``; the handlers are sans-I/O
(``configs``: CFG-1/2/3 from the variables' metadata, ``aligner``: frames from events, ``stream``:
the two together, ``session``: one PDC's commands), each taking ``now`` from its caller; ``transport``
is the thin asyncio layer (TCP listener, UDP spontaneous data) and ``server.PdcServer`` the front object
that owns the parts.

Layer: runtime (the README's layout table; ``.importlinter`` keeps it from importing any tool).
"""

from gridstat.gateways.pdc.aligner import AlignedFrame, AlignerStats, DeviceTime, FrameAligner
from gridstat.gateways.pdc.configs import PHASOR_TYPE, Channel, ChannelKind, ServedConfig, channel_of
from gridstat.gateways.pdc.server import PdcServer, PdcServerOptions
from gridstat.gateways.pdc.session import ClientSession, CommandCounters
from gridstat.gateways.pdc.stream import ServedStream

__all__ = [
    "PHASOR_TYPE",
    "AlignedFrame",
    "AlignerStats",
    "Channel",
    "ChannelKind",
    "ClientSession",
    "CommandCounters",
    "DeviceTime",
    "FrameAligner",
    "PdcServer",
    "PdcServerOptions",
    "ServedConfig",
    "ServedStream",
    "channel_of",
]
