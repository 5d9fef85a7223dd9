"""The gateway's counters, in one object the CLI prints as a stats line (docs/dnp3.md, "Counters").

Drops by reason come from the codec (``DropCounter``, shared by reference with the link decoder, the
reassembler and the object parser); the session, the transport and the publishing part add their own
counts. Plain integers, bumped on the hot path without locks (one event loop).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gridstat.gateways.dnp3.drops import DropCounter


@dataclass
class Dnp3Stats:
    #: ``disconnected``, ``connecting``, ``starting`` or ``polling`` (session.LinkState).
    state: str = "disconnected"
    drops: DropCounter = field(default_factory=DropCounter)
    #: TCP connections made to the outstation, attempts that failed, and connections that ended.
    connects: int = 0
    connect_failures: int = 0
    reconnects: int = 0
    #: Requests sent, by kind: ``integrity``, ``events``, ``clear_restart``, ``enable_unsolicited``,
    #: ``disable_unsolicited``.
    requests: dict[str, int] = field(default_factory=dict)
    #: Response fragments used: solicited and unsolicited; CONFIRMs sent.
    responses: int = 0
    unsolicited: int = 0
    confirms_sent: int = 0
    #: Requests unanswered within the response timeout; link status requests unanswered.
    response_timeouts: int = 0
    keepalive_timeouts: int = 0
    #: Internal indications seen, by name (``device_restart``, ``need_time``, ``class_1_events`` ...).
    iin: dict[str, int] = field(default_factory=dict)
    #: Points read, by ``ai``/``bi`` and ``static``/``event``.
    points: dict[str, int] = field(default_factory=dict)
    #: Points whose index has no variable (``--map`` left it out).
    points_unmapped: int = 0
    #: Events handed to a publisher, values with no registered variable yet, values a publisher refused.
    events_published: int = 0
    events_unpublished: int = 0
    events_failed: int = 0
    #: Binary input changes sent as alerts, and alerts refused for coming within min_interval_ms.
    alerts_published: int = 0
    alerts_too_early: int = 0
    registrations: int = 0
    registration_errors: int = 0
    publishers: int = 0

    def count_request(self, kind: str) -> None:
        self.requests[kind] = self.requests.get(kind, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready snapshot (the ``-o json`` stats line)."""
        return {
            "state": self.state, "drops": self.drops.as_dict(), "discarded_bytes": self.drops.discarded_bytes,
            "connects": self.connects, "connect_failures": self.connect_failures, "reconnects": self.reconnects,
            "requests": dict(self.requests), "responses": self.responses, "unsolicited": self.unsolicited,
            "confirms_sent": self.confirms_sent, "response_timeouts": self.response_timeouts,
            "keepalive_timeouts": self.keepalive_timeouts, "iin": dict(self.iin), "points": dict(self.points),
            "points_unmapped": self.points_unmapped, "events_published": self.events_published,
            "events_unpublished": self.events_unpublished, "events_failed": self.events_failed,
            "alerts_published": self.alerts_published, "alerts_too_early": self.alerts_too_early,
            "registrations": self.registrations, "registration_errors": self.registration_errors,
            "publishers": self.publishers,
        }
