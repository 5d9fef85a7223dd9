"""The STTP (IEEE 2664) gateways (docs/sttp.md): ``gridstat sttp-server`` serves GridStat variables to
STTP subscribers, ``gridstat sttp-gateway`` republishes an STTP publisher's measurements as variables.

The protocol itself is the ``sttpapi`` library's (the optional extra ``gridstat[sttp]``), imported
lazily by ``library`` only, so the rest of GridStat needs neither it nor numpy. The three rooms of the
gateways (gateways/__init__.py): the codec is the library; the pure ``mapping`` decides metadata,
names, signal IDs, signal types, timestamps and throttling; ``library`` adapts the library's threads,
and ``server.SttpServer`` and ``gateway.SttpGateway`` are the front objects that own the parts.

Layer: runtime, a gateway role (the README's layout table; ``.importlinter`` keeps it from importing
any tool).
"""

from gridstat.gateways.sttp.gateway import SttpGateway, SttpGatewayOptions
from gridstat.gateways.sttp.mapping import (
    SIGNAL_NAMESPACE,
    RepublishedVariable,
    ServedPoint,
    ServedVariable,
    SourceMeasurement,
    ms_of_ticks,
    plan_republish,
    serve_variable,
    signal_id,
    ticks_of_ms,
    values_of,
)
from gridstat.gateways.sttp.server import SttpServer, SttpServerOptions

__all__ = [
    "SIGNAL_NAMESPACE",
    "RepublishedVariable",
    "ServedPoint",
    "ServedVariable",
    "SourceMeasurement",
    "SttpGateway",
    "SttpGatewayOptions",
    "SttpServer",
    "SttpServerOptions",
    "ms_of_ticks",
    "plan_republish",
    "serve_variable",
    "signal_id",
    "ticks_of_ms",
    "values_of",
]
