"""The GOOSE gateway's counters, printed as its stats line and served as Prometheus metrics
(docs/goose.md, "Counters"). Plain integers bumped on one event loop."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gridstat.gateways.goose.errors import DropCounter


@dataclass
class GooseStats:
    #: Ethernet frames read from the socket (GOOSE or not, every copy).
    frames: int = 0
    #: Frames dropped, by reason (errors.DropReason; ``duplicate`` is the second copy of a frame).
    drops: DropCounter = field(default_factory=DropCounter)
    #: Frames taken: a new state (``states``: the first of a stream and every stNum change) or a
    #: retransmission (``retransmissions``: the same stNum, a higher sqNum).
    states: int = 0
    state_changes: int = 0
    retransmissions: int = 0
    #: stNum values skipped (states never seen) and sqNum gaps within a state.
    st_num_gaps: int = 0
    sq_num_gaps: int = 0
    #: Streams whose timeAllowedtoLive ran out before the next frame (the publisher is presumed lost).
    ttl_expired: int = 0
    #: Points (member values) handed to a publisher, with no registered variable yet, refused by it.
    points_published: int = 0
    points_unpublished: int = 0
    points_failed: int = 0
    registrations: int = 0
    registration_errors: int = 0
    publishers: int = 0
    #: The publishing direction (goose-publisher): frames sent, send errors, alerts taken.
    frames_sent: int = 0
    send_errors: int = 0
    alerts: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"frames": self.frames, "drops": self.drops.as_dict(), "states": self.states,
                "state_changes": self.state_changes, "retransmissions": self.retransmissions,
                "st_num_gaps": self.st_num_gaps, "sq_num_gaps": self.sq_num_gaps, "ttl_expired": self.ttl_expired,
                "points_published": self.points_published, "points_unpublished": self.points_unpublished,
                "points_failed": self.points_failed, "registrations": self.registrations,
                "registration_errors": self.registration_errors, "publishers": self.publishers,
                "frames_sent": self.frames_sent, "send_errors": self.send_errors, "alerts": self.alerts}
