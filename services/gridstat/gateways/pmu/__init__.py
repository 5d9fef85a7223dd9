"""The ``gridstat pmu-gateway`` role: a C37.118.2-2011 client that publishes a PMU's or PDC's channels
as GridStat status variables (docs/pmu-gateway.md).

Python-zeroconf's three rooms (gateways/__init__.py): the codec is ``gridstat.gateways.c37118``; the
handlers are the sans-I/O ``session`` (bytes and a clock reading in; commands to send, a channel plan
and samples to publish out), with the pure ``backoff`` policy and the ``mapping`` of channels to
status variables; the transport is ``transport`` (asyncio TCP and UDP) and ``publishing`` (the SDK's
``Publisher``, one per station). ``gateway.PmuGateway`` owns them all.

Layer: runtime, a gateway role (the README's layout table; ``.importlinter`` keeps it from importing
any tool).
"""

from gridstat.core.backoff import ReconnectPolicy
from gridstat.gateways.pmu.gateway import GatewayOptions, PmuGateway
from gridstat.gateways.pmu.mapping import (
    PHASOR,
    BlockPlan,
    ChannelSpec,
    NameMap,
    StreamPlan,
    load_name_map,
    plan_stream,
    sanitize_name,
)
from gridstat.gateways.pmu.session import GatewaySession, LinkState, Output, Sample, SessionSettings
from gridstat.gateways.pmu.stats import GatewayStats

__all__ = [
    "PHASOR",
    "BlockPlan",
    "ChannelSpec",
    "GatewayOptions",
    "GatewaySession",
    "GatewayStats",
    "LinkState",
    "NameMap",
    "Output",
    "PmuGateway",
    "ReconnectPolicy",
    "Sample",
    "SessionSettings",
    "StreamPlan",
    "load_name_map",
    "plan_stream",
    "sanitize_name",
]
