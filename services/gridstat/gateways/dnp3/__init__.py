"""The ``gridstat dnp3-gateway`` role: a DNP3 (IEEE 1815-2012) master over TCP that publishes an
outstation's analog inputs as periodic status variables and its binary input changes as alerts
(docs/dnp3.md).

Python-zeroconf's three rooms (gateways/__init__.py): the codec is ``crc``, ``link`` (data link frames),
``segments`` (the transport function), ``application`` (headers and requests) and ``objects`` (points out
of a response), all sans I/O with losses counted in ``drops``; the handlers are ``session`` (the master's
state machine, clock readings passed in) and ``points`` (latest values, the periodic grid, alerts), with
``mapping`` (names, the map file) and ``quality`` (flags and device time on every event); the transport is
the TCP connection (gateways/pmu/transport.py) and ``publishing`` (the SDK's ``Publisher``).
``gateway.Dnp3Gateway`` owns them all.

Layer: runtime, a gateway role (``.importlinter`` keeps it from importing any tool).
"""

from gridstat.gateways.dnp3.drops import DropCounter, DropReason
from gridstat.gateways.dnp3.gateway import Dnp3Gateway, GatewayOptions
from gridstat.gateways.dnp3.mapping import ALERT, PERIODIC, PointMap, PointSpec, load_point_map
from gridstat.gateways.dnp3.objects import Flags, Point, PointKind, TimeSource, flag_names, parse_objects
from gridstat.gateways.dnp3.points import Alert, PointTable
from gridstat.gateways.dnp3.quality import DNP3_QUALITY, quality_option, read_quality
from gridstat.gateways.dnp3.session import LinkState, MasterSession, Output, SessionSettings
from gridstat.gateways.dnp3.stats import Dnp3Stats

__all__ = [
    "ALERT",
    "DNP3_QUALITY",
    "PERIODIC",
    "Alert",
    "Dnp3Gateway",
    "Dnp3Stats",
    "DropCounter",
    "DropReason",
    "Flags",
    "GatewayOptions",
    "LinkState",
    "MasterSession",
    "Output",
    "Point",
    "PointKind",
    "PointMap",
    "PointSpec",
    "PointTable",
    "SessionSettings",
    "TimeSource",
    "flag_names",
    "load_point_map",
    "parse_objects",
    "quality_option",
    "read_quality",
]
