"""IEC 61850 GOOSE in and out of GridStat (docs/goose.md): ``gridstat goose-gateway`` publishes the
members of GOOSE data sets as alert variables; ``gridstat goose-publisher`` sends alert variables as
GOOSE to protection relays.

Python-zeroconf's three rooms (gateways/__init__.py): the codec is ``ber``, ``values`` and ``frames``
(bytes in, ``GooseFrame`` out, and back); the handlers are ``subscribing.SubscriberSession`` (frames and
a clock reading in, points out: de-duplication, stNum/sqNum, timeAllowedtoLive) and
``retransmission.Retransmitter`` (stNum/sqNum and the retransmission curve, the clock passed in), with
the ``mapping`` of the map file; the transport is ``transport.RawSocket`` (AF_PACKET) and
``publishing`` (the SDK's ``Publisher``). ``gateway.GooseGateway`` and
``publisher.GoosePublisherGateway`` own them.

Layer: runtime, a gateway role (.importlinter keeps it from importing any tool).
"""

from gridstat.gateways.goose.errors import DropCounter, DropReason, FrameError
from gridstat.gateways.goose.frames import GooseFrame, decode_frame, encode_frame
from gridstat.gateways.goose.gateway import GooseGateway, GooseGatewayOptions
from gridstat.gateways.goose.mapping import GooseMap, PointSpec, PublishedBlock, SubscribedBlock, load_map, parse_map
from gridstat.gateways.goose.publisher import GoosePublisherGateway, GoosePublisherOptions
from gridstat.gateways.goose.retransmission import Retransmitter
from gridstat.gateways.goose.stats import GooseStats
from gridstat.gateways.goose.subscribing import Point, SubscriberSession
from gridstat.gateways.goose.transport import RawSocket, packet_sockets_available
from gridstat.gateways.goose.values import BitString, Unsigned, UtcTime

__all__ = [
    "BitString", "DropCounter", "DropReason", "FrameError", "GooseFrame", "GooseGateway", "GooseGatewayOptions",
    "GooseMap", "GoosePublisherGateway", "GoosePublisherOptions", "GooseStats", "Point", "PointSpec",
    "PublishedBlock", "RawSocket", "Retransmitter", "SubscribedBlock", "SubscriberSession", "Unsigned", "UtcTime",
    "decode_frame", "encode_frame", "load_map", "packet_sockets_available", "parse_map",
]
