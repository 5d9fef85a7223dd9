"""When to try a peer again: exponential back-off, capped, jittered, reset after a healthy period.

One policy for every reconnecting client of a device or server (the gateways: C37.118, STTP, SCADA).

A pure policy (no clock, no sleep): the caller says when a connection came up (``connected``) and when
it failed or ended (``failed``, which returns the delay before the next attempt). A connection that
stayed up for ``healthy_after_s`` resets the series, so a device that restarts once a day is retried at
once, while one that drops every few seconds is retried ever more slowly (docs/pmu-gateway.md,
"Reconnecting").
"""

from __future__ import annotations

import random

from gridstat.errors import ValidationError


class ReconnectPolicy:
    """``initial_s * multiplier**n``, at most ``max_s``, times a uniform jitter in ``1 +/- jitter``."""

    __slots__ = ("_connected_at_s", "_rng", "attempt", "healthy_after_s", "initial_s", "jitter", "max_s",
                 "multiplier")

    def __init__(self, *, initial_s: float = 0.5, max_s: float = 30.0, multiplier: float = 2.0,
                 jitter: float = 0.2, healthy_after_s: float = 30.0, rng: random.Random | None = None) -> None:
        if not 0 < initial_s <= max_s:
            raise ValidationError(f"back-off needs 0 < initial_s <= max_s, got {initial_s:g} and {max_s:g}",
                                  field="initial_s")
        if multiplier < 1:
            raise ValidationError(f"back-off multiplier must be at least 1, got {multiplier:g}", field="multiplier")
        if not 0 <= jitter < 1:
            raise ValidationError(f"back-off jitter must be in [0, 1), got {jitter:g}", field="jitter")
        if healthy_after_s < 0:
            raise ValidationError(f"healthy_after_s must not be negative, got {healthy_after_s:g}",
                                  field="healthy_after_s")
        self.initial_s = initial_s
        self.max_s = max_s
        self.multiplier = multiplier
        self.jitter = jitter
        self.healthy_after_s = healthy_after_s
        #: Failures since the last reset: the exponent of the next delay.
        self.attempt = 0
        self._connected_at_s: float | None = None
        self._rng = rng or random.Random()

    def connected(self, now_s: float) -> None:
        """A connection is up (the series is reset only once it has stayed up ``healthy_after_s``)."""
        self._connected_at_s = now_s

    def failed(self, now_s: float) -> float:
        """A connection attempt failed or a connection ended at ``now_s``: seconds to wait."""
        since = self._connected_at_s
        self._connected_at_s = None
        if since is not None and now_s - since >= self.healthy_after_s:
            self.attempt = 0
        base = min(self.max_s, self.initial_s * self.multiplier ** min(self.attempt, 64))
        self.attempt += 1
        spread = 1.0 + self.jitter * (2.0 * self._rng.random() - 1.0)
        return min(self.max_s, base * spread)

    def reset(self) -> None:
        self.attempt = 0
        self._connected_at_s = None
