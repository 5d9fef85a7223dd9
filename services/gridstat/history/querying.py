"""A history query, checked and planned: bounds, the interval applied, the live rate filter (docs/history.md).

Pure: no Kafka, no gRPC. :func:`validate` checks a query against the server's :class:`Bounds` with an
error naming the field; :class:`Answering` is one answer's state: given the archive's parameters (read
from the variable's first record in the range) it picks the rate filter and says in notes what it
applied, and it counts the events sent against the bound.

The filter is the live one (dissertation 4.2.1, Function 4.1; docs/frame-rates.md): the interval
is rounded down like a live subscription's (:func:`gridstat.core.filtering.round_down_interval`)
and an event is kept iff ``(ts·scale + half) % interval < pub`` with the publication's own phase
parameters, so a history answer at 100 ms holds the timestamps a live 100 ms subscription was
delivered. The archive holds only what its own subscription was delivered (at its interval A):

* an interval below A is answered at A, and the answer says so;
* an interval that is a multiple of A gets exactly the live answer (if A does not pass an event,
  no multiple of A does: dissertation 4.3);
* any other interval gets the live answer's events that the archive holds, and the answer says so.

Bounds: a span longer than ``max_span_ms`` is refused (``SpanTooLong``, field ``to_ms``). Past
``max_events`` the answer is an error, never a silent truncation (``TooManyEvents``, field
``max_events``): refused before any event is sent when the archive's rate says the range holds more,
else (a denser archive than its interval says) the answer ends with the error after ``max_events``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gridstat.core import filtering
from gridstat.core.model import split_variable_name
from gridstat.errors import GridStatError, ValidationError

DEFAULT_MAX_SPAN_MS = 24 * 3600 * 1000
DEFAULT_MAX_EVENTS = 500_000
#: Timestamps below this are not milliseconds since the Unix epoch (seconds given by mistake, or 0).
MIN_TIMESTAMP_MS = 946_684_800_000  # 2000-01-01T00:00:00Z
MAX_TIMESTAMP_MS = 32_503_680_000_000  # 3000-01-01T00:00:00Z
MAX_INTERVAL_MS = 24 * 3600 * 1000


class SpanTooLong(ValidationError):
    """``to_ms - from_ms`` is longer than the server's ``max_span_ms``."""

    reason = "SpanTooLong"


class TooManyEvents(ValidationError):
    """The answer would hold more than ``max_events`` events."""

    reason = "TooManyEvents"


@dataclass(frozen=True, slots=True)
class Bounds:
    """What one answer may cover: its span and its events (the server's ``--max-span-s``, ``--max-events``)."""

    max_span_ms: int = DEFAULT_MAX_SPAN_MS
    max_events: int = DEFAULT_MAX_EVENTS

    def __post_init__(self) -> None:
        if isinstance(self.max_span_ms, bool) or not isinstance(self.max_span_ms, int) or self.max_span_ms < 1:
            raise ValidationError(f"max_span_ms must be a positive number of milliseconds, got {self.max_span_ms!r}",
                                  field="max_span_ms")
        if isinstance(self.max_events, bool) or not isinstance(self.max_events, int) or self.max_events < 1:
            raise ValidationError(f"max_events must be a positive number of events, got {self.max_events!r}",
                                  field="max_events")


@dataclass(frozen=True, slots=True)
class Query:
    """A checked query: ``[from_ms, to_ms]`` both inclusive; ``interval_ms`` 0 = every archived event;
    ``max_events`` the effective bound (the caller's, never above the server's)."""

    variable: str
    from_ms: int
    to_ms: int
    interval_ms: int
    max_events: int


def _whole(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{name} must be a whole number, got {value!r}", field=name)
    return value


def validate(variable: str, *, from_ms: int, to_ms: int, interval_ms: int = 0, max_events: int = 0,
             bounds: Bounds = Bounds()) -> Query:
    """The query checked against ``bounds``; :class:`ValidationError` (or :class:`SpanTooLong`) naming
    the field and the value otherwise."""
    if not isinstance(variable, str) or not variable:
        raise ValidationError("variable must be publisher/variable, got an empty name", field="variable")
    split_variable_name(variable)  # ValidationError(field="variable") when not publisher/variable
    from_ms, to_ms = _whole(from_ms, "from_ms"), _whole(to_ms, "to_ms")
    interval_ms, max_events = _whole(interval_ms, "interval_ms"), _whole(max_events, "max_events")
    for name, ts in (("from_ms", from_ms), ("to_ms", to_ms)):
        if not MIN_TIMESTAMP_MS <= ts <= MAX_TIMESTAMP_MS:
            raise ValidationError(f"{name} {ts} is not milliseconds since the Unix epoch between 2000 and 3000 "
                                  "(seconds given by mistake?)", field=name)
    if from_ms >= to_ms:
        raise ValidationError(f"from_ms {from_ms} must be before to_ms {to_ms}", field="from_ms")
    span = to_ms - from_ms
    if span > bounds.max_span_ms:
        raise SpanTooLong(f"the span {span} ms ({span / 3.6e6:.3g} h) is longer than this server's "
                          f"{bounds.max_span_ms} ms ({bounds.max_span_ms / 3.6e6:.3g} h): ask for shorter ranges",
                          field="to_ms")
    if not 0 <= interval_ms <= MAX_INTERVAL_MS:
        raise ValidationError(f"interval_ms must be 0 (every archived event) .. {MAX_INTERVAL_MS}, got {interval_ms}",
                              field="interval_ms")
    if max_events < 0:
        raise ValidationError(f"max_events must be 0 (the server's bound) or positive, got {max_events}",
                              field="max_events")
    effective = min(max_events, bounds.max_events) if max_events else bounds.max_events
    return Query(variable, from_ms, to_ms, interval_ms, effective)


@dataclass(frozen=True, slots=True)
class Rule:
    """The filter one part of an answer was made with (what the reply's ``HistoryAnswer`` says)."""

    interval_ms: int  # applied, rounded like live; 0 = every archived event
    archive_interval_ms: int
    pub_interval_ms: int
    frames_per_s: int
    keep: Callable[[int], bool] | None
    notes: tuple[str, ...] = ()


def rule_for(query: Query, *, archive_interval_ms: int, pub_interval_ms: int | None,
             frames_per_s: int | None) -> Rule:
    """The live filter for ``query`` over an archive made at ``archive_interval_ms`` of a publication
    at ``pub_interval_ms`` (``frames_per_s``); see the module docstring for the cases."""
    notes: list[str] = []
    archive = max(0, int(archive_interval_ms))
    fps = int(frames_per_s or 0)
    if pub_interval_ms is None:
        pub = archive
        notes.append("the archived records carry no publication interval (written before it was archived): "
                     f"filtered with the archive's interval {archive} ms as the publication's")
    else:
        pub = int(pub_interval_ms)
    if query.interval_ms == 0:
        return Rule(0, archive, pub, fps, None, tuple(notes))
    if pub <= 0:
        notes.append("an aperiodic (alert) variable: every archived event, no rate filter")
        return Rule(0, archive, pub, fps, None, tuple(notes))
    try:
        if fps:
            filtering.check_frames_per_s(fps)
        interval = filtering.round_down_interval(query.interval_ms, pub, fps)
    except ValidationError:
        notes.append(f"the archived publication parameters (pub_interval_ms={pub}, frames_per_s={fps}) are not "
                     "valid: every archived event, no rate filter")
        return Rule(0, archive, pub, fps, None, tuple(notes))
    if interval != query.interval_ms:
        unit = "frames" if fps else "publication intervals"
        notes.append(f"interval {query.interval_ms} ms rounded to {interval} ms (whole {unit}, as live)")
    if archive and interval < archive:
        notes.append(f"interval {interval} ms is below the archive's {archive} ms: answered at the archive's "
                     "interval (every archived event)")
        return Rule(archive, archive, pub, fps, None, tuple(notes))
    scale, width, half = filtering.filter_scale(pub, fps)
    scaled = filtering.scaled_interval(interval, pub, fps)
    if archive:
        scaled_archive = filtering.scaled_interval(archive, pub, fps) if archive >= pub else scaled
        if scaled % scaled_archive:
            notes.append(f"interval {interval} ms is not a multiple of the archive's {archive} ms: the live "
                         "answer's events the archive did not keep are missing")

    def keep(ts_ms: int) -> bool:
        return (ts_ms * scale + half) % scaled < width

    return Rule(interval, archive, pub, fps, keep, tuple(notes))


def _period_ms(rule: Rule) -> float:
    """The time between two events of an answer made with ``rule`` (frames: 1000/R ms each)."""
    ms = rule.interval_ms or rule.archive_interval_ms or rule.pub_interval_ms
    if rule.frames_per_s and ms > 0 and rule.pub_interval_ms > 0:
        return filtering.frames_in(ms, rule.frames_per_s) * 1000 / rule.frames_per_s
    return float(ms)


@dataclass(slots=True)
class Answering:
    """One answer: picks the rule when the archive's parameters are known, counts events against the bound."""

    query: Query
    rules: list[Rule] = field(default_factory=list)
    sent: int = 0

    @property
    def rule(self) -> Rule | None:
        return self.rules[-1] if self.rules else None

    def choose(self, *, archive_interval_ms: int, pub_interval_ms: int | None,
               frames_per_s: int | None) -> Callable[[int], bool] | None:
        """The keep-predicate for the archive's parameters; :class:`TooManyEvents` before anything is sent
        when the archive's own rate says the range holds more events than the bound."""
        rule = rule_for(self.query, archive_interval_ms=archive_interval_ms, pub_interval_ms=pub_interval_ms,
                        frames_per_s=frames_per_s)
        if not self.rules:
            period = _period_ms(rule)
            if period > 0:
                expected = int((self.query.to_ms - self.query.from_ms) / period + 1e-6) + 1
                if expected > self.query.max_events:
                    span = self.query.to_ms - self.query.from_ms
                    raise TooManyEvents(
                        f"about {expected} events of {self.query.variable} at {period:.4g} ms in {span} ms: more than "
                        f"max_events {self.query.max_events}; ask for a shorter range or a longer interval",
                        field="max_events")
        self.rules.append(rule)
        return rule.keep

    def room(self) -> int:
        """Events that may still be sent."""
        return self.query.max_events - self.sent

    def count(self, n: int) -> None:
        self.sent += n

    def over(self) -> GridStatError:
        return TooManyEvents(f"the archive holds more than max_events {self.query.max_events} events of "
                             f"{self.query.variable} in [{self.query.from_ms}, {self.query.to_ms}]: the answer "
                             f"stopped after {self.sent}; ask for a shorter range", field="max_events")

    def notes(self) -> list[str]:
        out: list[str] = []
        for r in self.rules:
            out.extend(n for n in r.notes if n not in out)
        if len(self.rules) > 1:
            out.append("the archive's subscription changed within the range: each part filtered with its own "
                       "parameters")
        return out
