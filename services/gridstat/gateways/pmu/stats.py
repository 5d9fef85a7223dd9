"""The gateway's counters, in one object the CLI prints as a stats line (docs/pmu-gateway.md, "Counters").

Frames by type and drops by reason come from the codec (``StreamDecoder.drops``, a ``DropCounter``
shared by reference); the session, the transport and the publishing part add their own counts here.
Plain integers, bumped on the hot path without locks (one event loop).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gridstat.gateways.c37118 import DropCounter


@dataclass
class GatewayStats:
    #: ``disconnected``, ``connecting``, ``configuring`` or ``streaming`` (session.LinkState).
    state: str = "disconnected"
    #: Frames read, by type: ``data``, ``cfg1``, ``cfg2``, ``cfg3``, ``header``, ``command``.
    frames: dict[str, int] = field(default_factory=dict)
    #: The codec's counter of dropped frames and bytes (docs/c37118.md, "Drop reasons").
    drops: DropCounter = field(default_factory=DropCounter)
    #: TCP connections made to the device, and attempts that failed.
    connects: int = 0
    connect_failures: int = 0
    #: Connections that ended (the device closed, an error, a timeout) and were tried again.
    reconnects: int = 0
    commands_sent: int = 0
    config_requests: int = 0
    #: Configurations that changed the stream (a new layout, names or CFGCNT) after the first one.
    config_changes: int = 0
    #: Configurations GridStat cannot serve (DATA_RATE 0 or above 400 frames/s): kept out.
    configs_refused: int = 0
    config_timeouts: int = 0
    data_timeouts: int = 0
    #: Data frames whose STAT had the configuration-change bit (10) set, in any block.
    config_change_flags: int = 0
    udp_datagrams: int = 0
    #: Datagrams from an address other than the device's: ignored.
    udp_foreign: int = 0
    #: Events handed to a publisher, events with no registered variable yet (or no edge router),
    #: and events a publisher refused.
    events_published: int = 0
    events_unpublished: int = 0
    events_failed: int = 0
    samples: int = 0
    registrations: int = 0
    registration_errors: int = 0
    publishers: int = 0

    def count_frame(self, kind: str) -> None:
        self.frames[kind] = self.frames.get(kind, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready snapshot (the ``-o json`` stats line)."""
        return {
            "state": self.state, "frames": dict(self.frames), "drops": self.drops.as_dict(),
            "discarded_bytes": self.drops.discarded_bytes, "connects": self.connects,
            "connect_failures": self.connect_failures, "reconnects": self.reconnects,
            "commands_sent": self.commands_sent, "config_requests": self.config_requests,
            "config_changes": self.config_changes, "configs_refused": self.configs_refused,
            "config_timeouts": self.config_timeouts, "data_timeouts": self.data_timeouts,
            "config_change_flags": self.config_change_flags, "udp_datagrams": self.udp_datagrams,
            "udp_foreign": self.udp_foreign, "events_published": self.events_published,
            "events_unpublished": self.events_unpublished, "events_failed": self.events_failed,
            "samples": self.samples, "registrations": self.registrations,
            "registration_errors": self.registration_errors, "publishers": self.publishers,
        }
