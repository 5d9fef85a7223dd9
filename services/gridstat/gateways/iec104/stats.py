"""The gateway's counters, in one object the CLI prints as a stats line (docs/iec104.md, "Counters").

Drops by reason come from the codec's ``DropCounter`` (shared by reference); the session, the
transport and the publishing part add their own counts here. ``connection`` holds the counts of the
current connection to the outstation and starts again at each connect. Plain integers, bumped on the
hot path without locks (one event loop).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gridstat.gateways.iec104.errors import DropCounter


@dataclass
class ConnectionStats:
    """Counts of one TCP connection to the outstation."""

    peer: str = ""
    #: Frames received and sent by format.
    i_received: int = 0
    s_received: int = 0
    u_received: int = 0
    i_sent: int = 0
    s_sent: int = 0
    u_sent: int = 0
    values: int = 0
    #: Times the gateway had to wait for the outstation's acknowledgement (k I frames outstanding).
    window_full: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"peer": self.peer, "i_received": self.i_received, "s_received": self.s_received,
                "u_received": self.u_received, "i_sent": self.i_sent, "s_sent": self.s_sent, "u_sent": self.u_sent,
                "values": self.values, "window_full": self.window_full}


@dataclass
class GatewayStats:
    #: ``disconnected``, ``connecting``, ``starting`` or ``started`` (session.LinkState).
    state: str = "disconnected"
    #: ASDUs read, by type identification (``M_ME_NC_1``, ``C_IC_NA_1``, ...).
    asdus: dict[str, int] = field(default_factory=dict)
    drops: DropCounter = field(default_factory=DropCounter)
    connects: int = 0
    connect_failures: int = 0
    #: Connections that ended (the outstation closed, an error, a timeout) and were tried again.
    reconnects: int = 0
    #: Connections closed by a timer: t1 (an I frame or a U act not acknowledged in time).
    t1_timeouts: int = 0
    #: TESTFR act sent after t3 of silence.
    tests_sent: int = 0
    #: General interrogations sent, confirmed negatively, and terminated (ACTTERM).
    interrogations: int = 0
    interrogations_refused: int = 0
    interrogations_completed: int = 0
    #: M_EI_NA_1 received: the outstation (re)initialized; a general interrogation follows.
    end_of_initialization: int = 0
    #: Information objects read from monitored ASDUs.
    values: int = 0
    events_published: int = 0
    #: Values with no registered variable yet (or no edge router): not queued, counted.
    events_unpublished: int = 0
    events_failed: int = 0
    alerts_published: int = 0
    #: Alerts closer to the variable's previous one than its min_interval_ms (the SDK's AlertTooEarly).
    alerts_too_early: int = 0
    #: Point states received again with the same time, value and quality: not sent again.
    alerts_repeated: int = 0
    registrations: int = 0
    registration_errors: int = 0
    publishers: int = 0
    connection: ConnectionStats = field(default_factory=ConnectionStats)

    def count_asdu(self, name: str) -> None:
        self.asdus[name] = self.asdus.get(name, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready snapshot (the ``-o json`` stats line)."""
        return {
            "state": self.state, "asdus": dict(self.asdus), "drops": self.drops.as_dict(),
            "discarded_bytes": self.drops.discarded_bytes, "connects": self.connects,
            "connect_failures": self.connect_failures, "reconnects": self.reconnects, "t1_timeouts": self.t1_timeouts,
            "tests_sent": self.tests_sent, "interrogations": self.interrogations,
            "interrogations_refused": self.interrogations_refused,
            "interrogations_completed": self.interrogations_completed,
            "end_of_initialization": self.end_of_initialization, "values": self.values,
            "events_published": self.events_published, "events_unpublished": self.events_unpublished,
            "events_failed": self.events_failed, "alerts_published": self.alerts_published,
            "alerts_too_early": self.alerts_too_early,
            "alerts_repeated": self.alerts_repeated, "registrations": self.registrations,
            "registration_errors": self.registration_errors, "publishers": self.publishers,
            "connection": self.connection.as_dict(),
        }
