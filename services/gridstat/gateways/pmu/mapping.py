"""Which status variable each channel of a C37.118 stream becomes, and how its values are read.

A configuration (CFG-2 or CFG-3, C37.118.2-2011 6.4) names a station (STN) per PMU block and a channel
name (CHNAM) per phasor, analog and digital bit. Each channel becomes the status variable
``<station>/<channel>`` (publisher = station): phasors of the struct type ``phasor`` (magnitude in volts
or amperes, angle in radians), FREQ as ``<station>/freq`` (Hz), DFREQ as ``<station>/dfreq`` (Hz/s),
each analog a float and each digital status word an int named after its bit 0 (``digital<i>`` when
that bit has no name). Names are made to fit GridStat's name rule (``sanitize_name``) and may be
replaced by a map file (``load_name_map``). docs/pmu-gateway.md, "Variables", says the same.

``plan_stream`` turns a configuration into a ``StreamPlan``: per PMU block, the ``ChannelSpec`` of each
variable (name, type, interval, attributes) in the order ``BlockPlan.values`` yields the values of a
data frame's block.
"""

from __future__ import annotations

import cmath
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gridstat.core import yamldoc
from gridstat.core.model import (
    FLOAT,
    INT,
    MAX_FRAMES_PER_S,
    StructType,
    TypeSpec,
    ValueType,
    check_name,
    split_variable_name,
)
from gridstat.errors import ValidationError
from gridstat.gateways.c37118 import (
    AnalogKind,
    ConfigFrame,
    PhasorComponent,
    PhasorKind,
    PmuConfig,
    PmuData,
)
from gridstat.gateways.c37118.measurements import ANGLE_PER_BIT_RAD, PHUNIT_PER_BIT

#: The value type of a phasor channel: magnitude (V or A) and angle (rad), both float64.
PHASOR = TypeSpec(ValueType.STRUCT, StructType("phasor", (("magnitude", "float64"), ("angle", "float64"))))

#: 16-bit fields mark absent data with 0x8000 (C37.118.2-2011 6.3.1); a float field uses NaN.
ABSENT_INT16 = -0x8000
NAN = float("nan")
_MAX_NAME = 128
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.:-]")
_ATTRIBUTE_LEN = 256

#: ANUNIT's kind byte as the ``units`` attribute of an analog (6.4, Table 9).
ANALOG_UNITS: dict[int, str] = {AnalogKind.POINT_ON_WAVE: "point-on-wave", AnalogKind.RMS: "rms",
                                AnalogKind.PEAK: "peak"}
#: PHSCALE's component bits (CFG-3, Table 11) as the ``phase`` attribute, for the phase components.
PHASES = {PhasorComponent.PHASE_A: "A", PhasorComponent.PHASE_B: "B", PhasorComponent.PHASE_C: "C"}


def sanitize_name(raw: str, fallback: str) -> str:
    """``raw`` made to fit GridStat's name rule (gridstat.core.model.NAME_PATTERN): every other
    character becomes ``_``, leading characters other than a letter or digit are dropped and the name
    is cut at 128 characters; ``fallback`` when nothing is left."""
    name = _BAD_CHARS.sub("_", raw.strip())
    start = 0
    while start < len(name) and not name[start].isalnum():
        start += 1
    name = name[start:start + _MAX_NAME]
    return name if name else fallback


def _attribute_text(raw: str) -> str:
    text = "".join(c if c.isprintable() else "?" for c in raw)
    return text[:_ATTRIBUTE_LEN]


# -- the map file -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class NameMap:
    """Names given by the operator: ``"STN/CHNAM" -> ("publisher", "variable")`` and ``"STN" -> publisher``.

    Keys are the names as the configuration spells them (padding stripped); FREQ and DFREQ are
    ``STN/FREQ`` and ``STN/DFREQ``, a digital word is named by its bit 0 (``STN/DIGITAL<i>`` when that
    bit has no name)."""

    channels: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    stations: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, data: object, source: str = "<map>", lines: Mapping[str, int] | None = None) -> NameMap:
        """A map from a document: one mapping of strings. ValidationError names the line and key."""
        if not isinstance(data, Mapping):
            raise ValidationError(f"{source}: (document): a map is a mapping of \"STN/CHNAM\" (or \"STN\") to "
                                  f"\"publisher/variable\" (or \"publisher\"), not {yamldoc.kind_of(data)}",
                                  field="(document)")
        channels: dict[str, tuple[str, str]] = {}
        stations: dict[str, str] = {}
        for key, value in data.items():
            where = f"{source}:{(lines or {}).get(str(key), '?')}: {key}"
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValidationError(f"{where}: keys and values are strings", field=str(key))
            try:
                if "/" in value:
                    channels[key] = split_variable_name(value)
                else:
                    stations[key] = check_name(value, what="publisher")
            except ValidationError as exc:
                raise ValidationError(f"{where}: {exc.args[0]}", field=str(key)) from None
        return cls(channels, stations)


def load_name_map(path: str | Path) -> NameMap:
    """Read a map file (YAML, or JSON, which YAML reads too); ValidationError with file:line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"--map {str(p)!r}: cannot read it: {exc}", field="map") from None
    data, lines = yamldoc.load(text, str(p), ValidationError)
    return NameMap.parse(data, str(p), lines)


# -- plans ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChannelSpec:
    """One status variable of a stream: what the gateway registers."""

    #: The channel as the configuration names it (the map file's key).
    key: str
    publisher: str
    variable: str
    #: ``phasor``, ``freq``, ``dfreq``, ``analog`` or ``digital``.
    kind: str
    type: TypeSpec
    interval_ms: int
    #: DATA_RATE when positive (frames per second), else 0 (the period is ``interval_ms``).
    frames_per_s: int
    attributes: tuple[tuple[str, str], ...]

    @property
    def full_name(self) -> str:
        return f"{self.publisher}/{self.variable}"

    @property
    def attributes_dict(self) -> dict[str, str]:
        return dict(self.attributes)


class BlockPlan:
    """The variables of one PMU block and how a data frame's block becomes their values."""

    __slots__ = ("_angle_unit", "_direct_polar", "_int_freq", "_int_phasors", "_magnitude_scales", "channels",
                 "config", "full_names", "index", "station", "stream_idcode")

    def __init__(self, stream_idcode: int, index: int, config: PmuConfig, channels: tuple[ChannelSpec, ...]) -> None:
        self.stream_idcode = stream_idcode
        self.index = index
        self.config = config
        self.station = config.station_name
        self.channels = channels
        #: ``publisher/variable`` of each channel (the hot path looks handles up by it).
        self.full_names = tuple(c.full_name for c in channels)
        fmt = config.data_format
        self._int_phasors = not fmt.phasors_float
        self._int_freq = not fmt.freq_float
        # Polar phasors without CFG-3's rotation are read as sent (no trip through a complex number).
        self._direct_polar = fmt.phasors_polar and config.cfg3 is None
        self._angle_unit = ANGLE_PER_BIT_RAD if self._int_phasors else 1.0
        self._magnitude_scales = tuple(u.scale_1e_5 * PHUNIT_PER_BIT if self._int_phasors else 1.0
                                       for u in config.phasor_units) if self._direct_polar else ()

    def values(self, data: PmuData) -> list[object]:
        """The values of ``data`` in ``channels`` order, in engineering units (C37.118.2-2011 6.3,
        Table 6): phasors as ``{"magnitude", "angle"}``, then FREQ, DFREQ, analogs, digital words.
        Absent data (0x8000 in a 16-bit field, 6.3.1) becomes NaN."""
        out: list[object] = []
        int_ph = self._int_phasors
        if self._direct_polar:
            unit = self._angle_unit
            for (mag, ang), scale in zip(data.phasors, self._magnitude_scales, strict=True):
                if int_ph and ang == ABSENT_INT16:
                    out.append({"magnitude": NAN, "angle": NAN})
                else:
                    out.append({"magnitude": mag * scale, "angle": ang * unit})
        elif data.phasors:
            for (a, b), z in zip(data.phasors, data.phasor_values(), strict=True):
                if int_ph and (a == ABSENT_INT16 or b == ABSENT_INT16):
                    out.append({"magnitude": NAN, "angle": NAN})
                else:
                    out.append({"magnitude": abs(z), "angle": cmath.phase(z)})
        if self._int_freq:
            out.append(NAN if data.freq == ABSENT_INT16 else data.frequency_hz())
            out.append(NAN if data.dfreq == ABSENT_INT16 else data.rocof_hz_per_s())
        else:
            out.append(float(data.freq))
            out.append(float(data.dfreq))
        if data.analogs:
            if self.config.data_format.analogs_float:
                out.extend(data.analog_values())
            else:
                out.extend(NAN if raw == ABSENT_INT16 else v
                           for raw, v in zip(data.analogs, data.analog_values(), strict=True))
        out.extend(data.digitals)
        return out


@dataclass(frozen=True)
class StreamPlan:
    """Every variable of one stream (IDCODE), by PMU block."""

    idcode: int
    blocks: tuple[BlockPlan, ...]
    interval_ms: int
    frames_per_s: int
    config: ConfigFrame

    @property
    def channels(self) -> list[ChannelSpec]:
        return [c for b in self.blocks for c in b.channels]


def rate_of(config: ConfigFrame) -> tuple[int, int]:
    """``(interval_ms, frames_per_s)`` of DATA_RATE (6.4, Table 9: > 0 frames per second, < 0 seconds
    per frame); ValidationError for 0 or a rate above GridStat's MAX_FRAMES_PER_S."""
    rate = config.data_rate
    if rate > 0:
        if rate > MAX_FRAMES_PER_S:
            raise ValidationError(f"DATA_RATE {rate} frames/s is above the {MAX_FRAMES_PER_S} frames/s GridStat "
                                  f"can filter exactly", field="DATA_RATE")
        return 1000 // rate, rate
    if rate < 0:
        return -rate * 1000, 0
    raise ValidationError("DATA_RATE 0 is no rate", field="DATA_RATE")


#: The ``signal`` attribute: the signal type acronyms openPDC and STTP use (FREQ, DFDT, ALOG, DIGI), and
#: for a phasor variable, which carries magnitude and angle together, VPHS or IPHS (docs/pmu-gateway.md).
SIGNALS = {"freq": "FREQ", "dfreq": "DFDT", "analog": "ALOG", "digital": "DIGI"}


def _phasor_attributes(pmu: PmuConfig, i: int) -> list[tuple[str, str]]:
    if pmu.cfg3 is not None:
        scale = pmu.cfg3.phasor_scales[i]
        current = scale.kind is PhasorKind.CURRENT
        out = [("units", "A" if current else "V"), ("signal", "IPHS" if current else "VPHS"),
               ("component", scale.component.name.lower())]
        phase = PHASES.get(scale.component)
        if phase is not None:
            out.append(("phase", phase))
        return out
    kind = pmu.phasor_units[i].kind if i < len(pmu.phasor_units) else PhasorKind.VOLTAGE
    current = kind is PhasorKind.CURRENT
    return [("units", "A" if current else "V"), ("signal", "IPHS" if current else "VPHS")]


def _analog_attributes(pmu: PmuConfig, i: int) -> list[tuple[str, str]]:
    if i < len(pmu.analog_units):
        kind = pmu.analog_units[i].kind
        return [("units", ANALOG_UNITS.get(int(kind), f"user-{int(kind)}"))]
    return []


def plan_stream(config: ConfigFrame, names: NameMap | None = None) -> StreamPlan:
    """The variables of a CFG-2 or CFG-3 configuration. Two channels that would get the same name keep
    it in configuration order; the later ones get ``_2``, ``_3``... ValidationError for a DATA_RATE
    GridStat cannot serve (``rate_of``)."""
    names = names or NameMap()
    interval_ms, frames_per_s = rate_of(config)
    used: set[str] = set()
    blocks: list[BlockPlan] = []
    for index, pmu in enumerate(config.pmus):
        stn = pmu.station_name
        publisher = names.stations.get(stn) or sanitize_name(stn, f"pmu{pmu.idcode}")
        common = [("station", _attribute_text(stn)), ("idcode", str(pmu.idcode)),
                  ("stream_idcode", str(config.idcode)), ("nominal_frequency_hz", str(pmu.nominal_frequency_hz))]
        channels: list[ChannelSpec] = []

        def add(key_name: str, default: str, fallback: str, kind: str, type_: TypeSpec,
                extra: list[tuple[str, str]], raw_name: str, *, _pub: str = publisher, _stn: str = stn,
                _common: list[tuple[str, str]] = common, _out: list[ChannelSpec] = channels) -> None:
            key = f"{_stn}/{key_name}"
            pub, var = names.channels.get(key) or (_pub, sanitize_name(default, fallback))
            base, n = var, 1
            while f"{pub}/{var}" in used:
                n += 1
                suffix = f"_{n}"
                var = base[:_MAX_NAME - len(suffix)] + suffix
            used.add(f"{pub}/{var}")
            signal = SIGNALS.get(kind)
            attrs = (*_common, ("kind", kind), ("channel", _attribute_text(raw_name)),
                     *((("signal", signal),) if signal else ()), *extra)
            _out.append(ChannelSpec(key, pub, var, kind, type_, interval_ms, frames_per_s, attrs))

        for i, name in enumerate(pmu.phasor_names):
            add(name, name, f"phasor{i}", "phasor", PHASOR, _phasor_attributes(pmu, i), name)
        add("FREQ", "freq", "freq", "freq", FLOAT, [("units", "Hz")], "FREQ")
        add("DFREQ", "dfreq", "dfreq", "dfreq", FLOAT, [("units", "Hz/s")], "DFREQ")
        for i, name in enumerate(pmu.analog_names):
            add(name, name, f"analog{i}", "analog", FLOAT, _analog_attributes(pmu, i), name)
        for i, unit in enumerate(pmu.digital_units):
            bit0 = pmu.digital_names[16 * i] if 16 * i < len(pmu.digital_names) else ""
            label = bit0 if bit0.strip() else f"DIGITAL{i}"
            add(label, bit0, f"digital{i}", "digital", INT,
                [("normal_status", f"0x{unit.normal_status:04x}"), ("valid_inputs", f"0x{unit.valid_inputs:04x}")],
                label)
        blocks.append(BlockPlan(config.idcode, index, pmu, tuple(channels)))
    return StreamPlan(config.idcode, tuple(blocks), interval_ms, frames_per_s, config)


def is_absent(value: object) -> bool:
    """NaN, or a phasor of NaNs: a value the device marked absent."""
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, dict):
        return any(isinstance(v, float) and math.isnan(v) for v in value.values())
    return False
