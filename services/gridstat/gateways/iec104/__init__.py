"""The ``gridstat iec104-gateway`` role: an IEC 60870-5-104 controlling station that publishes an
outstation's monitored values as GridStat status variables (docs/iec104.md).

Python-zeroconf's three rooms (gateways/__init__.py): the codec is ``apci`` (APDU framing, I/S/U
frames), ``asdu`` (the types read and the interrogation command) and ``cp56`` (CP56Time2a); the
handlers are the sans-I/O ``session`` (bytes and a clock reading in; frames to send and values out:
STARTDT, general interrogation, sequence numbers, k/w windows, t1/t2/t3), the ``mapping`` of
information objects to status variables and the ``quality`` option; the transport is the PMU
gateway's TCP connection and ``publishing`` (the SDK's ``Publisher``). ``gateway.Iec104Gateway``
owns them all, with the reconnect policy of ``gridstat.core.backoff``.

Layer: runtime, a gateway role (the README's layout table; ``.importlinter`` keeps it from importing
any tool).
"""

from gridstat.core.backoff import ReconnectPolicy
from gridstat.gateways.iec104.apci import ApduSplitter, IFrame, SFrame, UFrame, UFunction
from gridstat.gateways.iec104.asdu import Cot, Kind, PointValue, TypeId
from gridstat.gateways.iec104.errors import DropCounter, DropReason, Iec104Error
from gridstat.gateways.iec104.gateway import DEFAULT_PORT, GatewayOptions, Iec104Gateway
from gridstat.gateways.iec104.mapping import PointMap, PointSpec, load_point_map
from gridstat.gateways.iec104.quality import IEC104, Quality, read_quality
from gridstat.gateways.iec104.session import Iec104Session, LinkState, Output, SessionSettings
from gridstat.gateways.iec104.stats import GatewayStats

__all__ = [
    "DEFAULT_PORT",
    "IEC104",
    "ApduSplitter",
    "Cot",
    "DropCounter",
    "DropReason",
    "GatewayOptions",
    "GatewayStats",
    "IFrame",
    "Iec104Error",
    "Iec104Gateway",
    "Iec104Session",
    "Kind",
    "LinkState",
    "Output",
    "PointMap",
    "PointSpec",
    "PointValue",
    "Quality",
    "ReconnectPolicy",
    "SFrame",
    "SessionSettings",
    "TypeId",
    "UFrame",
    "UFunction",
    "load_point_map",
    "read_quality",
]
