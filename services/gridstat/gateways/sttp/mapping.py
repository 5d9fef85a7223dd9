"""Pure mappings between GridStat status variables and STTP (IEEE 2664) measurements (docs/sttp.md).

Nothing here imports the ``sttpapi`` library: these functions are the whole of what the gateway
decides, and are tested without a socket.

* **Serving** (``gridstat sttp-server``): a variable becomes one measurement, or two for a phasor
  (magnitude and angle, as STTP and openPDC carry them). Its point tag is the variable's full name
  (``publisher/variable``, with ``.magnitude`` / ``.angle`` for a phasor's two), its signal ID a UUID-5
  of the point tag in :data:`SIGNAL_NAMESPACE` (stable across restarts and servers), its signal type
  the ``signal`` attribute (docs/queries.md), its device the ``station`` attribute or the publisher.
* **Republishing** (``gridstat sttp-gateway``): a measurement of an STTP publisher's metadata becomes
  a float variable ``<device>/<point tag>``, with the metadata kept as attributes.
* **Time and quality**: STTP timestamps are ticks (100 ns since 0001-01-01 UTC); GridStat's are
  milliseconds since the Unix epoch (README, "Clocks"), with STAT and the device's own fraction of a
  second in the DEVICE_TIME option (docs/wire-format.md 3.5): the republishing gateway keeps an STTP
  tick there exactly, and the state flags STAT can hold. The server sends whole milliseconds and no
  flags (docs/sttp.md, "Values and timestamps", on why).
* **Throttling**: an STTP subscriber's ``throttled=true;publishInterval=S`` is a subscription
  interval, filtered with GridStat's own rule (dissertation 4.2.1, ``core/filtering.py``).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gridstat.core import filtering
from gridstat.core.model import ATTRIBUTE_LEN, MAX_FRAMES_PER_S, ValueType, split_variable_name
from gridstat.errors import ValidationError
from gridstat.gateways.pmu.mapping import sanitize_name

#: The namespace of served signal IDs: ``uuid5(SIGNAL_NAMESPACE, point_tag)``. Fixed for good: a
#: changed namespace would change every signal ID an STTP subscriber may have stored.
SIGNAL_NAMESPACE = uuid.UUID("6f1d3c2e-8a47-5b0e-9c61-2b7d4e9a0f35")

#: Ticks (100 ns) from 0001-01-01 to 1970-01-01 UTC: .NET's ``DateTime`` epoch, which STTP uses.
UNIX_EPOCH_TICKS = 621_355_968_000_000_000
TICKS_PER_MS = 10_000
#: Ticks a second: the TIME_BASE of the DEVICE_TIME option the republishing gateway adds, so that a
#: measurement's time survives whole (docs/wire-format.md 3.5; TIME_BASE is 24 bits, 10^7 fits).
TICKS_PER_S = 10_000_000

#: STTP measurement state flags (IEEE 2664; sttp.transport.constants.StateFlags) the republishing
#: gateway carries into C37.118 STAT (Table 6): bad data as a data error, bad time as sync lost.
BADDATA = 0x1
BADTIME = 0x10000
STAT_DATA_ERROR_NO_INFO = 0x4000
STAT_SYNC_LOST = 0x2000

#: Signal type acronyms of openPDC's SignalType table (STTP ActiveMeasurements.SignalType).
SIGNAL_TYPES = frozenset({"FREQ", "DFDT", "VPHM", "VPHA", "IPHM", "IPHA", "ALOG", "DIGI", "CALC", "STAT",
                          "ALRM", "QUAL", "FLAG"})
#: A phasor variable's ``signal`` (docs/queries.md) and its two STTP signal types.
PHASOR_SIGNALS: Mapping[str, tuple[str, str]] = {"VPHS": ("VPHM", "VPHA"), "IPHS": ("IPHM", "IPHA")}
#: The pmu-gateway's ``kind`` attribute (docs/pmu-gateway.md 3) for variables without ``signal``.
KIND_SIGNALS: Mapping[str, str] = {"freq": "FREQ", "dfreq": "DFDT", "analog": "ALOG", "digital": "DIGI"}
#: ``kind`` of a republished variable, so that ``gridstat pdc-server`` reads it (docs/pdc-server.md 2).
SIGNAL_KINDS: Mapping[str, str] = {v: k for k, v in KIND_SIGNALS.items()}
#: Engineering units by signal type, as the sttpapi publisher derives them for ActiveMeasurements.
SIGNAL_UNITS: Mapping[str, str] = {"FREQ": "Hz", "DFDT": "Hz/s", "VPHM": "V", "IPHM": "A", "VPHA": "Degrees",
                                   "IPHA": "Degrees"}
CURRENT_UNITS = frozenset({"A", "kA", "mA", "Amps"})
#: The fields of a phasor struct (gateways/pdc/configs.py PHASOR_TYPE).
PHASOR_FIELDS = ("magnitude", "angle")


# -- time ---------------------------------------------------------------------------------------

def ticks_of_ms(ts_ms: int) -> int:
    """A GridStat timestamp as STTP ticks (exact)."""
    return UNIX_EPOCH_TICKS + ts_ms * TICKS_PER_MS


def ms_of_ticks(ticks: int) -> tuple[int, bool]:
    """STTP ticks as a GridStat timestamp, and whether it was exact (no sub-millisecond part cut off)."""
    ms, rest = divmod(int(ticks) - UNIX_EPOCH_TICKS, TICKS_PER_MS)
    return ms, rest == 0


def device_time_of_ticks(ticks: int, flags: int) -> tuple[int, int, int]:
    """``(stat, fracsec, time_base)`` of the DEVICE_TIME option for an STTP measurement's time and
    flags: the ticks within the second on a TIME_BASE of 10^7 (exact), time quality 0."""
    sub = (int(ticks) - UNIX_EPOCH_TICKS) % TICKS_PER_S
    return stat_of_state_flags(flags), sub, TICKS_PER_S


def stat_of_state_flags(flags: int) -> int:
    """The STAT word of an STTP measurement's state flags (C37.118.2 Table 6): BADDATA is "error, no
    information about data" (bits 15-14 = 01), BADTIME is sync lost (bit 13); the other flags have no
    place in STAT and are not carried."""
    stat = 0
    if int(flags) & BADDATA:
        stat |= STAT_DATA_ERROR_NO_INFO
    if int(flags) & BADTIME:
        stat |= STAT_SYNC_LOST
    return stat


# -- serving: variables -> measurements ---------------------------------------------------------

def signal_id(point_tag: str) -> uuid.UUID:
    """The stable signal ID of a served point tag."""
    return uuid.uuid5(SIGNAL_NAMESPACE, point_tag)


@dataclass(frozen=True)
class ServedPoint:
    """One STTP measurement served from a GridStat variable (a row of MeasurementDetail)."""

    signal_id: uuid.UUID
    point_tag: str
    signal_type: str
    #: Device acronym: the ``station`` attribute, else the publisher.
    device: str
    #: The variable's ``publisher/variable``.
    variable: str
    #: ``""`` for a scalar, ``"magnitude"`` or ``"angle"`` for a phasor's two measurements.
    component: str = ""
    description: str = ""
    frames_per_s: int = 0


@dataclass(frozen=True)
class ServedVariable:
    """A served variable and its measurements, in the order of :func:`values_of`."""

    full_name: str
    points: tuple[ServedPoint, ...]
    #: The variable's publication interval and frame rate (what throttling filters by).
    interval_ms: int
    frames_per_s: int
    #: The interval the gateway's subscription delivers (0: every publication).
    served_interval_ms: int = 0

    @property
    def served_frames_per_s(self) -> int:
        """The rate the variable is served at: whole device frames of the subscription's interval
        (docs/frame-rates.md), else ``1000 / interval``, at least 1."""
        interval = self.served_interval_ms or self.interval_ms
        if self.frames_per_s:
            return max(1, self.frames_per_s // filtering.frames_in(max(interval, 1), self.frames_per_s))
        return max(1, round(1000 / interval)) if interval > 0 else 1


def scalar_signal_type(kind: ValueType, attributes: Mapping[str, str]) -> str:
    """The signal type of a non-phasor variable: ``signal`` if it is one of STTP's, else from ``kind``,
    else ``DIGI`` for an int or bool and ``CALC`` (a calculated value) for a float."""
    signal = attributes.get("signal", "").strip().upper()
    if signal in SIGNAL_TYPES:
        return signal
    by_kind = KIND_SIGNALS.get(attributes.get("kind", "").strip().lower())
    if by_kind is not None:
        return by_kind
    return "CALC" if kind is ValueType.FLOAT else "DIGI"


def serve_variable(full_name: str, type_kind: ValueType, *, attributes: Mapping[str, str],
                   interval_ms: int, frames_per_s: int = 0, served_interval_ms: int = 0,
                   struct_fields: tuple[str, ...] = ()) -> ServedVariable:
    """The measurements of one variable. A struct is served only as a phasor (its fields
    ``magnitude`` and ``angle``); any other struct raises ``ValidationError`` (field ``type``)."""
    publisher, _ = split_variable_name(full_name)
    device = attributes.get("station", "").strip() or publisher
    description = attributes.get("description", "") or attributes.get("channel", "")
    if type_kind is ValueType.STRUCT:
        if tuple(struct_fields) != PHASOR_FIELDS:
            raise ValidationError(f"{full_name}: a struct of fields {list(struct_fields)} has no STTP measurement; "
                                  f"only a phasor (magnitude, angle) is served", field="type")
        signal = attributes.get("signal", "").strip().upper()
        if signal not in PHASOR_SIGNALS:
            signal = "IPHS" if attributes.get("units", "").strip() in CURRENT_UNITS else "VPHS"
        types = PHASOR_SIGNALS[signal]
        points = tuple(ServedPoint(signal_id(f"{full_name}.{part}"), f"{full_name}.{part}", t, device, full_name,
                                   part, description, frames_per_s)
                       for part, t in zip(PHASOR_FIELDS, types, strict=True))
    else:
        points = (ServedPoint(signal_id(full_name), full_name, scalar_signal_type(type_kind, attributes), device,
                              full_name, "", description, frames_per_s),)
    return ServedVariable(full_name, points, interval_ms, frames_per_s, served_interval_ms)


def values_of(served: ServedVariable, value: object) -> list[float] | None:
    """The measurements' values of one event, in ``served.points`` order; None for a value that does
    not fit (counted by the caller). A phasor's angle goes from radians (GridStat, docs/pmu-gateway.md
    3) to degrees (STTP's VPHA/IPHA)."""
    try:
        if len(served.points) == 2:
            if not isinstance(value, Mapping):
                return None
            return [float(value["magnitude"]), math.degrees(float(value["angle"]))]
        if isinstance(value, bool | int | float):
            return [float(value)]
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    return None


def device_rates(variables: Iterable[ServedVariable]) -> dict[str, int]:
    """Each device's FramesPerSecond (DeviceDetail): the highest rate its variables are served at."""
    out: dict[str, int] = {}
    for v in variables:
        rate = v.served_frames_per_s
        for p in v.points:
            out[p.device] = max(out.get(p.device, 0), rate)
    return out


# -- throttling -----------------------------------------------------------------------------------

def connection_parameters(text: str) -> dict[str, str]:
    """An STTP connection string (``key=value;key={...};...``) as a dictionary with lower-case keys;
    braces around a value are removed. Braces nest, so a filter expression may hold ``;``."""
    out: dict[str, str] = {}
    depth = 0
    start = 0
    parts: list[str] = []
    for i, c in enumerate(text):
        if c == "{":
            depth += 1
        elif c == "}":
            depth = max(0, depth - 1)
        elif c == ";" and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep:
            continue
        value = value.strip()
        if value.startswith("{") and value.endswith("}"):
            value = value[1:-1]
        out[key.strip().lower()] = value
    return out


def throttle_interval_ms(parameters: Mapping[str, str]) -> int:
    """The interval a throttled STTP subscription asks for, in milliseconds (0: not throttled).
    ``publishInterval`` is in seconds; a throttled subscription with a bad one raises ValidationError."""
    if parameters.get("throttled", "").strip().lower() not in ("true", "1"):
        return 0
    raw = parameters.get("publishinterval", "")
    try:
        seconds = float(raw)
    except ValueError:
        raise ValidationError(f"publishInterval {raw!r} is not a number of seconds", field="publishInterval") \
            from None
    if not math.isfinite(seconds) or seconds <= 0:
        return 0  # STTP: a throttled subscription without an interval sends every value
    return max(1, round(seconds * 1000))


def throttle_passes(ts_ms: int, throttle_ms: int, served: ServedVariable) -> bool:
    """Whether an event of ``served`` at ``ts_ms`` goes to a subscriber throttled at ``throttle_ms``:
    GridStat's rate filter with the throttle as the subscription interval (rounded down to whole
    publication intervals or device frames, dissertation 4.2)."""
    if throttle_ms <= 0 or served.interval_ms <= 0:
        return True
    granted = filtering.granted_interval_ms(throttle_ms, served.interval_ms, served.frames_per_s)
    return filtering.should_forward(ts_ms, served.interval_ms, granted, served.frames_per_s)


# -- republishing: measurements -> variables ------------------------------------------------------

@dataclass(frozen=True)
class SourceMeasurement:
    """What the gateway reads of one measurement of an STTP publisher's metadata."""

    signal_id: uuid.UUID
    point_tag: str
    device: str
    signal_type: str
    description: str = ""
    #: The device's FramesPerSecond (DeviceDetail), 0 when unknown.
    frames_per_s: int = 0


@dataclass(frozen=True)
class RepublishedVariable:
    """A GridStat float variable that republishes one STTP measurement."""

    signal_id: uuid.UUID
    publisher: str
    variable: str
    frames_per_s: int
    interval_ms: int
    attributes: Mapping[str, str] = field(default_factory=dict)

    @property
    def full_name(self) -> str:
        return f"{self.publisher}/{self.variable}"


def _text(raw: str) -> str:
    """An attribute value: printable, at most ATTRIBUTE_LEN characters (core/model.py)."""
    return "".join(c if c.isprintable() else "?" for c in raw)[:ATTRIBUTE_LEN]


def republished_name(m: SourceMeasurement, *, publisher: str | None = None) -> tuple[str, str]:
    """``(publisher, variable)`` of a measurement, made to fit GridStat's name rule (docs/pmu-gateway.md
    3, "Names"): the device acronym and the point tag without a leading ``<device>/`` or
    ``<device>:``; with one ``publisher`` for every device, the whole point tag (the device in it
    keeps the names of several devices apart)."""
    device = m.device.strip()
    pub = sanitize_name(publisher or device, "sttp")
    tag = m.point_tag.strip()
    for prefix in (f"{device}/", f"{device}:"):
        if publisher is None and device and tag.startswith(prefix) and len(tag) > len(prefix):
            tag = tag[len(prefix):]
            break
    return pub, sanitize_name(tag, f"m{m.signal_id.hex[:12]}")


def plan_republish(measurements: Iterable[SourceMeasurement], *, frames_per_s: int = 0,
                   publisher: str | None = None) -> tuple[list[RepublishedVariable], dict[uuid.UUID, str]]:
    """The variables of an STTP publisher's measurements, in order, and the measurements refused with
    why (``no_rate``: neither ``frames_per_s`` nor the device's FramesPerSecond gives a rate). Two
    measurements that end up with one name keep it in order; the later ones get ``_2``, ``_3``, ..."""
    out: list[RepublishedVariable] = []
    refused: dict[uuid.UUID, str] = {}
    taken: set[str] = set()
    seen: set[uuid.UUID] = set()
    for m in measurements:
        if m.signal_id in seen:
            continue
        seen.add(m.signal_id)
        rate = frames_per_s or m.frames_per_s
        if not 1 <= rate <= MAX_FRAMES_PER_S:
            refused[m.signal_id] = "no_rate"
            continue
        pub, name = republished_name(m, publisher=publisher)
        base, n = name, 1
        while f"{pub}/{name}" in taken:
            n += 1
            suffix = f"_{n}"
            name = base[:128 - len(suffix)] + suffix
        taken.add(f"{pub}/{name}")
        signal = m.signal_type.strip().upper()
        attributes = {"source": "sttp", "signal_id": str(m.signal_id), "point_tag": _text(m.point_tag),
                      "station": _text(m.device)}
        if signal:
            attributes["signal"] = _text(signal)
        if signal in SIGNAL_KINDS:
            attributes["kind"] = SIGNAL_KINDS[signal]
        if signal in SIGNAL_UNITS:
            attributes["units"] = SIGNAL_UNITS[signal]
        if m.description:
            attributes["description"] = _text(m.description)
        out.append(RepublishedVariable(m.signal_id, pub, name, rate, filtering.nominal_interval_ms(rate),
                                       attributes))
    return out, refused
