"""The served stream's configuration, built from the variables' metadata (docs/pdc-server.md, "CFG").

Each served variable is a ``Channel``: its station (attribute ``station``, else the publisher), its
channel name (the variable's name), what it measures (attribute ``kind``, else its type) and the
station's IDCODE and nominal frequency. ``ServedConfig`` groups the channels into one PMU block per
station, in the order the stations first appear, and builds CFG-1, CFG-2 and CFG-3 of the stream
(C37.118.2-2011 6.4): FORMAT float and polar for every block (a float value round-trips exactly when
it is a 32-bit float), DATA_RATE the served rate, TIME_BASE the server's.

Within a block the channels go where Table 5 puts them: phasors, FREQ, DFREQ, analogs, digital words.
A block without a ``freq`` (``dfreq``) channel sends FREQ (DFREQ) as NaN, the standard's "absent" for a
float (6.3.1). ``slot`` numbers the channels in the order they were given; the aligner fills slots and
``pack`` lays them out in a data frame.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import struct
import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gridstat.core.model import StatusVariable, StructType, TypeSpec, ValueType, split_variable_name
from gridstat.errors import ValidationError
from gridstat.gateways.c37118 import (
    AnalogKind,
    AnalogScale,
    AnalogUnit,
    Cfg3Details,
    ConfigFrame,
    DataFormat,
    DataFrame,
    DataLayout,
    DigitalUnit,
    FrameType,
    HeaderFrame,
    PhasorComponent,
    PhasorKind,
    PhasorScale,
    PhasorUnit,
    PmuConfig,
    PmuData,
    build_cfg3_frames,
    build_frame,
)
from gridstat.gateways.c37118.measurements import decode_stat
from gridstat.gateways.c37118.timestamps import TIME_QUALITIES

#: The struct type of a phasor variable: magnitude (volts or amperes) and angle (radians), polar as
#: the served FORMAT (6.4, Table 9).
PHASOR_TYPE = TypeSpec(ValueType.STRUCT, StructType("phasor", (("magnitude", "float64"), ("angle", "float64"))))
#: Every block: phasors float and polar, analogs float, FREQ/DFREQ float (FORMAT 0x000F).
SERVED_FORMAT = DataFormat(phasors_polar=True, phasors_float=True, analogs_float=True, freq_float=True)
DEFAULT_TIME_BASE = 1_000_000
#: CFG-1/2 STN and CHNAM are 16 bytes (6.4, Table 8): longer names are cut there (CFG-3 keeps them whole).
NAME16 = 16
_BITS_PER_WORD = 16
_F32_MAX = struct.unpack(">f", b"\x7f\x7f\xff\xff")[0]
NAN = float("nan")
#: Units of a current phasor (attribute ``units``); anything else is a voltage.
_CURRENT_UNITS = frozenset({"a", "ka", "ma", "amp", "amps", "ampere", "amperes"})
_COMPONENTS = {"zero": PhasorComponent.ZERO_SEQUENCE, "positive": PhasorComponent.POSITIVE_SEQUENCE,
               "negative": PhasorComponent.NEGATIVE_SEQUENCE, "a": PhasorComponent.PHASE_A,
               "b": PhasorComponent.PHASE_B, "c": PhasorComponent.PHASE_C,
               **{c.name.lower(): c for c in PhasorComponent}}
_ANALOG_KINDS = {"point_on_wave": AnalogKind.POINT_ON_WAVE, "rms": AnalogKind.RMS, "peak": AnalogKind.PEAK}

#: A slot's value as the data frame carries it: (magnitude, angle) for a phasor, a float for FREQ,
#: DFREQ and analogs, an int (16-bit word) for a digital.
Value = tuple[float, float] | float | int


class ChannelKind(enum.Enum):
    """Where a variable goes in its station's block (6.3, Table 5)."""

    PHASOR = "phasor"
    FREQ = "freq"
    DFREQ = "dfreq"
    ANALOG = "analog"
    DIGITAL = "digital"


@dataclass(frozen=True, slots=True)
class Channel:
    """One served variable and what its metadata says about it."""

    variable: str
    station: str
    name: str
    kind: ChannelKind
    #: Attribute ``idcode``; None: the server assigns one (stable: ``ServedConfig``).
    idcode: int | None = None
    #: Attribute ``nominal_frequency_hz`` (FNOM: 50 or 60); None: not said (60).
    nominal_frequency_hz: int | None = None
    #: Phasors: voltage or current, from attribute ``units``.
    phasor_kind: PhasorKind = PhasorKind.VOLTAGE
    #: Phasors: CFG-3 PHSCALE's component, from attribute ``component`` (zero, positive, negative, a, b, c).
    component: PhasorComponent = PhasorComponent.POSITIVE_SEQUENCE
    #: Analogs: ANUNIT's kind, from attribute ``analog_kind`` (point_on_wave, rms, peak).
    analog_kind: int = AnalogKind.POINT_ON_WAVE
    #: Fields of a phasor struct: (magnitude, angle) names.
    phasor_fields: tuple[str, str] = ("magnitude", "angle")
    #: CFG-3 PMU_LAT, PMU_LON, PMU_ELEV from attributes ``latitude_deg``, ``longitude_deg``, ``elevation_m``.
    location: tuple[float, float, float] = (math.inf, math.inf, math.inf)
    #: CHNAM: attribute ``channel`` (the device's own name, as ``gridstat pmu-gateway`` keeps it), else ``name``.
    chnam: str = ""
    #: Digitals: DIGUNIT's masks from attributes ``normal_status`` and ``valid_inputs`` (6.4, Table 9);
    #: default: no normal state declared, every input valid.
    digital_unit: tuple[int, int] = (0, 0xFFFF)

    @property
    def channel_name(self) -> str:
        return self.chnam or self.name

    def convert(self, value: object) -> Value | None:
        """The value a data frame carries for ``value`` (as the SDK decodes the variable's type);
        None when it cannot be carried (a wrong shape)."""
        kind = self.kind
        try:
            if kind is ChannelKind.PHASOR:
                if not isinstance(value, Mapping):
                    return None
                mag, ang = self.phasor_fields
                return f32(float(value[mag])), f32(float(value[ang]))
            if kind is ChannelKind.DIGITAL:
                if isinstance(value, bool | int):
                    return int(value) & 0xFFFF  # the 16-bit word (6.3, Table 5: DIGITAL)
                return None
            if isinstance(value, bool | int | float):
                return f32(float(value))
        except (KeyError, TypeError, ValueError, OverflowError):
            return None
        return None


def f32(x: float) -> float:
    """``x`` as a 32-bit float field can carry it: beyond its range, an infinity of the same sign
    (``struct.pack('>f')`` would refuse it)."""
    if math.isfinite(x) and abs(x) > _F32_MAX:
        return math.copysign(math.inf, x)
    return x


def _attribute_int(attributes: Mapping[str, str], key: str, variable: str, lo: int, hi: int) -> int | None:
    text = attributes.get(key)
    if text is None:
        return None
    n = lo - 1
    for base in (10, 16):  # decimal, or hexadecimal with 0x (DIGUNIT masks as pmu-gateway writes them)
        try:
            n = int(text.strip(), base)
            break
        except ValueError:
            continue
    if not lo <= n <= hi:
        raise ValidationError(f"attribute {key}={text!r} of {variable} is not an integer in {lo}..{hi}",
                              field=f"attributes.{key}")
    return n


def _attribute_float(attributes: Mapping[str, str], key: str) -> float:
    """An optional CFG-3 float (location): infinity when absent or not a number (Table 10: unspecified)."""
    try:
        return float(attributes.get(key, "inf"))
    except ValueError:
        return math.inf


def _phasor_fields(type_: TypeSpec, variable: str) -> tuple[str, str]:
    st = type_.struct_type
    if st is not None and len(st.fields) == 2:
        names = [f for f, _ in st.fields]
        if set(names) == {"magnitude", "angle"}:
            return "magnitude", "angle"
        if all(t.startswith(("float", "int", "uint")) for _, t in st.fields):
            return names[0], names[1]
    raise ValidationError(f"{variable} is a phasor but its type {type_.name!r} is not a struct of (magnitude, "
                          f"angle)", field="type")


def channel_of(variable: str, type_: TypeSpec, attributes: Mapping[str, str]) -> Channel:
    """The channel of ``variable`` (``publisher/name``) of type ``type_``, with its attributes.

    Raises:
        ValidationError: an attribute the stream cannot be built with (``kind`` unknown, or not
            possible for the type; ``idcode`` not in 1..65534; ``nominal_frequency_hz`` not 50 or 60).
    """
    publisher, name = split_variable_name(variable)
    kind_text = attributes.get("kind", "").strip().lower()
    if kind_text:
        try:
            kind = ChannelKind(kind_text)
        except ValueError:
            raise ValidationError(f"attribute kind={kind_text!r} of {variable} is not one of "
                                  f"{[k.value for k in ChannelKind]}", field="attributes.kind") from None
    elif type_.kind is ValueType.STRUCT:
        kind = ChannelKind.PHASOR
    elif type_.kind is ValueType.FLOAT:
        kind = ChannelKind.ANALOG
    else:
        kind = ChannelKind.DIGITAL
    fields: tuple[str, str] = ("magnitude", "angle")
    if kind is ChannelKind.PHASOR:
        fields = _phasor_fields(type_, variable)
    elif type_.kind is ValueType.STRUCT:
        raise ValidationError(f"{variable} of struct type {type_.name!r} is not a phasor; only phasors are "
                              f"structs", field="type")
    elif kind is not ChannelKind.DIGITAL and type_.kind is not ValueType.FLOAT:
        raise ValidationError(f"{variable} ({kind.value}) must be a float, not {type_.name}", field="type")
    fnom = _attribute_int(attributes, "nominal_frequency_hz", variable, 50, 60)
    if fnom is not None and fnom not in (50, 60):
        raise ValidationError(f"attribute nominal_frequency_hz={fnom} of {variable} is neither 50 nor 60 "
                              f"(6.4, Table 9: FNOM)", field="attributes.nominal_frequency_hz")
    units = attributes.get("units", "").strip().lower()
    normal = _attribute_int(attributes, "normal_status", variable, 0, 0xFFFF)
    valid = _attribute_int(attributes, "valid_inputs", variable, 0, 0xFFFF)
    return Channel(
        variable=variable,
        station=attributes.get("station", "").strip() or publisher,
        name=name,
        kind=kind,
        idcode=_attribute_int(attributes, "idcode", variable, 1, 0xFFFE),
        nominal_frequency_hz=fnom,
        phasor_kind=PhasorKind.CURRENT if units in _CURRENT_UNITS else PhasorKind.VOLTAGE,
        component=_COMPONENTS.get(attributes.get("component", "").strip().lower(), PhasorComponent.POSITIVE_SEQUENCE),
        analog_kind=_ANALOG_KINDS.get(attributes.get("analog_kind", "").strip().lower(), AnalogKind.POINT_ON_WAVE),
        phasor_fields=fields,
        location=(_attribute_float(attributes, "latitude_deg"), _attribute_float(attributes, "longitude_deg"),
                  _attribute_float(attributes, "elevation_m")),
        chnam=attributes.get("channel", "").strip(),
        digital_unit=(0 if normal is None else normal, 0xFFFF if valid is None else valid),
    )


def channel_of_variable(var: StatusVariable) -> Channel:
    """The channel of a subscribed variable (``Subscription.variable``: type and attributes from the broker)."""
    return channel_of(var.full_name, var.type, var.attributes)


def _cut(name: str) -> str:
    """A CFG-1/2 name: ASCII (GridStat's names are), at most 16 bytes."""
    return name.encode("ascii", "replace").decode("ascii")[:NAME16]


def _digit_names(name: str) -> tuple[str, ...]:
    """CHNAM of a digital word's 16 bits (6.4, Table 8), bit 0 first: ``name.0`` .. ``name.15``."""
    return tuple(f"{name[:NAME16 - len(str(b)) - 1]}.{b}" for b in range(_BITS_PER_WORD))


def assign_idcodes(stations: Sequence[str], given: Mapping[str, int]) -> dict[str, int]:
    """Each station's IDCODE: ``given`` (its attribute), else one derived from its name (CRC-32 into
    1..65534, the next free one on a collision, stations taken in name order), so a station keeps its
    IDCODE across restarts while the set of stations stays the same."""
    out = dict(given)
    used = set(out.values())
    for station in sorted(s for s in stations if s not in out):
        code = zlib.crc32(station.encode()) % 0xFFFE + 1
        while code in used:
            code = code % 0xFFFE + 1
        out[station] = code
        used.add(code)
    return out


@dataclass(frozen=True, slots=True)
class StationBlock:
    """One PMU block: its station and the slots of its channels, by kind, in block order."""

    station: str
    idcode: int
    nominal_frequency_hz: int
    phasors: tuple[int, ...]
    freq: int | None
    dfreq: int | None
    analogs: tuple[int, ...]
    digitals: tuple[int, ...]
    location: tuple[float, float, float]

    @property
    def slots(self) -> tuple[int, ...]:
        extra = tuple(s for s in (self.freq, self.dfreq) if s is not None)
        return self.phasors + extra + self.analogs + self.digitals


class ServedConfig:
    """CFG-1, CFG-2 and CFG-3 of the served stream and the layout of its data frames.

    Raises ValidationError at construction for channels that cannot form a stream: none, two
    variables of the same name, two ``freq`` (or ``dfreq``) channels in a station, stations whose
    channels disagree on ``idcode`` or ``nominal_frequency_hz``, two stations with one IDCODE.
    """

    def __init__(self, channels: Sequence[Channel], *, idcode: int, frames_per_s: int,
                 time_base: int = DEFAULT_TIME_BASE, name: str = "gridstat", freq_float: bool = True) -> None:
        if not channels:
            raise ValidationError("a stream needs at least one variable", field="variables")
        if not 1 <= idcode <= 0xFFFE:
            raise ValidationError(f"stream IDCODE {idcode} is not in 1..65534", field="idcode")
        if not 1 <= frames_per_s <= 0x7FFF:
            raise ValidationError(f"frames_per_s {frames_per_s} is not in 1..32767 (DATA_RATE)", field="frames_per_s")
        if not 1 <= time_base <= 0xFF_FFFF:
            raise ValidationError(f"time_base {time_base} is not in 1..16777215 (TIME_BASE)", field="time_base")
        seen: set[str] = set()
        for c in channels:
            if c.variable in seen:
                raise ValidationError(f"{c.variable} is served twice", field="variables")
            seen.add(c.variable)
        self.channels = tuple(channels)
        self.idcode = idcode
        self.frames_per_s = frames_per_s
        self.time_base = time_base
        self.name = name
        #: FREQ/DFREQ as floats (Hz, Hz/s), or 16-bit (mHz off FNOM, Hz/s x 100: 6.3, Table 6), which
        #: PDCs that read a float FREQ as a deviation (pypmu) need; docs/pdc-server.md.
        self.data_format = dataclasses.replace(SERVED_FORMAT, freq_float=freq_float)
        self.blocks = self._blocks()
        #: Station block index of each slot.
        self.slot_stations = tuple(self._station_of_slot())
        self.config2 = self._config(FrameType.CFG2)
        self.config1 = self._config(FrameType.CFG1)
        self.config3 = self._config(FrameType.CFG3)
        self.layout = DataLayout(self.config2)

    def _blocks(self) -> tuple[StationBlock, ...]:
        order: list[str] = []
        by_station: dict[str, list[int]] = {}
        given: dict[str, int] = {}
        fnoms: dict[str, int] = {}
        for slot, c in enumerate(self.channels):
            if c.station not in by_station:
                order.append(c.station)
                by_station[c.station] = []
            by_station[c.station].append(slot)
            if c.idcode is not None and given.setdefault(c.station, c.idcode) != c.idcode:
                raise ValidationError(f"station {c.station}: variables disagree on its idcode "
                                      f"({given[c.station]} and {c.idcode})", field="attributes.idcode")
            if c.nominal_frequency_hz is not None and \
                    fnoms.setdefault(c.station, c.nominal_frequency_hz) != c.nominal_frequency_hz:
                raise ValidationError(f"station {c.station}: variables disagree on nominal_frequency_hz",
                                      field="attributes.nominal_frequency_hz")
        owners: dict[int, str] = {}
        for station, code in given.items():
            if owners.setdefault(code, station) != station:
                raise ValidationError(f"stations {owners[code]} and {station} both have idcode {code}",
                                      field="attributes.idcode")
        idcodes = assign_idcodes(order, given)
        blocks = []
        for station in order:
            slots = by_station[station]
            kinds = {k: [s for s in slots if self.channels[s].kind is k] for k in ChannelKind}
            for k in (ChannelKind.FREQ, ChannelKind.DFREQ):
                if len(kinds[k]) > 1:
                    names = ", ".join(self.channels[s].variable for s in kinds[k])
                    raise ValidationError(f"station {station} has more than one {k.value} channel: {names}",
                                          field="attributes.kind")
            located = next((self.channels[s].location for s in slots
                            if any(math.isfinite(v) for v in self.channels[s].location)),
                           (math.inf, math.inf, math.inf))
            blocks.append(StationBlock(
                station=station, idcode=idcodes[station], nominal_frequency_hz=fnoms.get(station, 60),
                phasors=tuple(kinds[ChannelKind.PHASOR]),
                freq=kinds[ChannelKind.FREQ][0] if kinds[ChannelKind.FREQ] else None,
                dfreq=kinds[ChannelKind.DFREQ][0] if kinds[ChannelKind.DFREQ] else None,
                analogs=tuple(kinds[ChannelKind.ANALOG]), digitals=tuple(kinds[ChannelKind.DIGITAL]),
                location=located))
        return tuple(blocks)

    def _station_of_slot(self) -> list[int]:
        out = [0] * len(self.channels)
        for i, block in enumerate(self.blocks):
            for s in block.slots:
                out[s] = i
        return out

    def _config(self, frame_type: FrameType) -> ConfigFrame:
        cfg3 = frame_type is FrameType.CFG3
        ch = self.channels

        def names(slots: tuple[int, ...]) -> tuple[str, ...]:
            return tuple(ch[s].channel_name if cfg3 else _cut(ch[s].channel_name) for s in slots)

        pmus = []
        for b in self.blocks:
            digital_names = tuple(n for s in b.digitals for n in _digit_names(ch[s].channel_name))
            details = None
            if cfg3:
                lat, lon, elev = b.location
                details = Cfg3Details(
                    global_pmu_id=uuid.uuid5(uuid.NAMESPACE_URL, f"gridstat:station:{b.station}").bytes,
                    phasor_scales=tuple(PhasorScale(ch[s].phasor_kind, ch[s].component) for s in b.phasors),
                    analog_scales=tuple(AnalogScale() for _ in b.analogs),
                    latitude_deg=lat, longitude_deg=lon, elevation_m=elev)
            pmus.append(PmuConfig(
                station_name=b.station if cfg3 else _cut(b.station),
                idcode=b.idcode,
                data_format=self.data_format,
                phasor_names=names(b.phasors),
                analog_names=names(b.analogs),
                digital_names=digital_names,
                phasor_units=() if cfg3 else tuple(PhasorUnit(ch[s].phasor_kind, 0) for s in b.phasors),
                analog_units=() if cfg3 else tuple(AnalogUnit(ch[s].analog_kind, 0) for s in b.analogs),
                digital_units=tuple(DigitalUnit(*ch[s].digital_unit) for s in b.digitals),
                nominal_frequency_hz=b.nominal_frequency_hz,
                cfg3=details,
            ))
        return ConfigFrame(frame_type, self.idcode, 0, 0, self.time_base, tuple(pmus), self.frames_per_s)

    # -- frames -------------------------------------------------------------------------------------
    def config_frames(self, frame_type: FrameType, soc: int, fracsec: int) -> list[bytes]:
        """CFG-1, CFG-2 or CFG-3 (a series when it does not fit one frame) stamped ``soc``/``fracsec``."""
        base = {FrameType.CFG1: self.config1, FrameType.CFG2: self.config2}.get(frame_type, self.config3)
        config = ConfigFrame(base.frame_type, base.idcode, soc, fracsec, base.time_base, base.pmus, base.data_rate)
        if frame_type is FrameType.CFG3:
            return build_cfg3_frames(config)
        return [build_frame(config)]

    def header_frame(self, soc: int, fracsec: int) -> bytes:
        """A header frame (6.5): what the stream is, in text (cut at the frame's limit)."""
        lines = [f"GridStat pdc-server {self.name}: {len(self.blocks)} stations, {len(self.channels)} variables, "
                 f"{self.frames_per_s} frames/s"]
        lines += [f"{b.station} IDCODE {b.idcode}: " + ", ".join(self.channels[s].variable for s in b.slots)
                  for b in self.blocks]
        text = "\n".join(lines)[:60_000]
        return build_frame(HeaderFrame(self.idcode, soc, fracsec, text.encode("latin-1", "replace").decode("latin-1")))

    def pack(self, soc: int, fracsec: int, time_quality: int, values: Sequence[Value | None],
             stats: Sequence[int]) -> bytes:
        """A data frame: ``values`` by slot (None: absent, NaN or 0 for a digital word), ``stats``
        by station block."""
        pmus = []
        freq_float = self.data_format.freq_float
        for b, stat in zip(self.blocks, stats, strict=True):
            freq = _float(values[b.freq]) if b.freq is not None else NAN
            dfreq = _float(values[b.dfreq]) if b.dfreq is not None else NAN
            pmus.append(PmuData(
                stat=decode_stat(stat),
                phasors=tuple(_phasor(values[s]) for s in b.phasors),
                freq=freq if freq_float else _int16((freq - b.nominal_frequency_hz) * 1000),
                dfreq=dfreq if freq_float else _int16(dfreq * 100),
                analogs=tuple(_float(values[s]) for s in b.analogs),
                digitals=tuple(_word(values[s]) for s in b.digitals),
                config=self.config2.pmus[0],
            ))
        frame = DataFrame(self.idcode, soc, fracsec, tuple(pmus), self.config2, TIME_QUALITIES[time_quality & 0x7F])
        return self.layout.pack(frame)


def _phasor(v: Value | None) -> tuple[float, float]:
    return v if isinstance(v, tuple) else (NAN, NAN)


def _float(v: Value | None) -> float:
    return float(v) if isinstance(v, float | int) else NAN


def _int16(x: float) -> int:
    """A 16-bit FREQ or DFREQ: rounded, clamped to the field; NaN is 0x8000, absent (6.3.1)."""
    if x != x:
        return -0x8000
    return max(-0x7FFF, min(0x7FFF, round(x)))


def _word(v: Value | None) -> int:
    return v if isinstance(v, int) else 0


__all__ = ["PHASOR_TYPE", "Channel", "ChannelKind", "ServedConfig", "StationBlock", "Value",
           "assign_idcodes", "channel_of", "channel_of_variable", "f32"]
