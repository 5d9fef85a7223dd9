"""The rate after filtering: events/s one channel forwards for one variable (dissertation 4.2.1, 4.3).

A channel forwards an event if it passes *any* subscription interval routed over
it, one copy per timestamp, so its load for a variable depends on the set of
intervals, not on how many subscriptions use them.

Exactness. Let p be the publication interval and s = m*p a (rounded) interval.
Publication j carries ts = phi + j*p. Writing phi + ceil(p/2) = a*p + r with
0 <= r < p, Function 4.1 passes it iff ((a+j)*p + r) mod m*p < p iff
(a + j) mod m == 0. So over any lcm(m_1..m_n) = M consecutive publications the
number forwarded is #{i in [0, M) : some m_i divides i}, whatever the phase, and
the rate is 1000 * count / (M * p) events/s. We count it with a bytearray sieve
when M <= HYPERPERIOD_LIMIT, else use the union bound min(sum 1000/s_i, 1000/p),
which over-reserves but never under-reserves.

The count is cached per (publication interval, multiples): a cloud's subscriptions
use few distinct interval sets.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction
from functools import lru_cache

from gridstat.core.filtering import round_down_interval, smallest_non_multiples

#: Publications per hyperperiod counted exactly; above it the union bound is used.
HYPERPERIOD_LIMIT = 1 << 20
_ZERO = Fraction(0)


@lru_cache(maxsize=1 << 16)
def _rate_of_multiples(pub_interval_ms: int, multiples: tuple[int, ...], limit: int) -> Fraction:
    if multiples[0] == 1:
        return Fraction(1000, pub_interval_ms)
    period = math.lcm(*multiples)
    if period > limit:
        bound = sum((Fraction(1000, m * pub_interval_ms) for m in multiples), _ZERO)
        return min(Fraction(1000, pub_interval_ms), bound)
    marks = bytearray(period)
    for m in multiples:
        marks[::m] = b"\x01" * (period // m)
    return Fraction(1000 * marks.count(1), period * pub_interval_ms)


def forwarded_rate(pub_interval_ms: int, intervals: Iterable[int], *, hyperperiod_limit: int = HYPERPERIOD_LIMIT
                   ) -> Fraction:
    """Events/s a channel forwards for one variable given the subscription intervals routed over it."""
    rounded = {round_down_interval(s, pub_interval_ms) for s in intervals}
    if not rounded:
        return _ZERO
    multiples = tuple(s // pub_interval_ms for s in smallest_non_multiples(rounded))
    return _rate_of_multiples(pub_interval_ms, multiples, hyperperiod_limit)
