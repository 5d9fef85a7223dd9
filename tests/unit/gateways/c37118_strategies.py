"""Hypothesis strategies for valid C37.118 frames: any configuration the standard allows (within small
counts), and data frames for it."""

from __future__ import annotations

from hypothesis import strategies as st

from gridstat.gateways.c37118 import (
    AnalogScale,
    AnalogUnit,
    Cfg3Details,
    Command,
    CommandFrame,
    ConfigFragment,
    ConfigFrame,
    DataFormat,
    DataFrame,
    DigitalUnit,
    FrameType,
    HeaderFrame,
    MessageTimeQuality,
    PhasorComponent,
    PhasorKind,
    PhasorModification,
    PhasorScale,
    PhasorUnit,
    PmuConfig,
    PmuData,
    TimeQuality,
)
from gridstat.gateways.c37118.measurements import decode_stat

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
i16 = st.integers(-0x8000, 0x7FFF)
u24 = st.integers(0, 0xFF_FFFF)
i32 = st.integers(-(2**31), 2**31 - 1)
socs = st.integers(0, 0xFFFF_FFFF)
fracsecs = st.integers(0, 0xFF_FFFF)
time_bases = st.integers(1, 0xFF_FFFF)
f32 = st.floats(width=32, allow_nan=False)
versions = st.integers(1, 15)

time_qualities = st.builds(TimeQuality, st.sampled_from(MessageTimeQuality), st.booleans(), st.booleans(),
                           st.booleans())
data_formats = st.builds(DataFormat, st.booleans(), st.booleans(), st.booleans(), st.booleans())

# CFG-1/2 names: 16 bytes of ASCII (Latin-1 kept); trailing spaces and NULs are padding.
names16 = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=16).filter(
    lambda s: not s.endswith((" ", "\x00")))
# CFG-3 names: up to 255 bytes of UTF-8.
names_utf8 = st.text(max_size=24).filter(lambda s: len(s.encode()) <= 255)
latin1_text = st.text(st.characters(min_codepoint=0, max_codepoint=0xFF), max_size=300)

phasor_units = st.builds(PhasorUnit, st.sampled_from(PhasorKind), u24)
analog_units = st.builds(AnalogUnit, u8, st.integers(-(2**23), 2**23 - 1))
digital_units = st.builds(DigitalUnit, u16, u16)
phasor_scales = st.builds(PhasorScale, st.sampled_from(PhasorKind), st.sampled_from(PhasorComponent),
                          u16.map(PhasorModification), u8, f32, f32)
analog_scales = st.builds(AnalogScale, f32, f32)


@st.composite
def pmu_configs(draw: st.DrawFn, *, cfg3: bool, max_channels: int = 4) -> PmuConfig:
    names = names_utf8 if cfg3 else names16
    n_ph = draw(st.integers(0, max_channels))
    n_an = draw(st.integers(0, max_channels))
    n_dg = draw(st.integers(0, 2))
    details = None
    if cfg3:
        details = Cfg3Details(
            global_pmu_id=draw(st.binary(min_size=16, max_size=16)),
            phasor_scales=tuple(draw(st.lists(phasor_scales, min_size=n_ph, max_size=n_ph))),
            analog_scales=tuple(draw(st.lists(analog_scales, min_size=n_an, max_size=n_an))),
            latitude_deg=draw(f32), longitude_deg=draw(f32), elevation_m=draw(f32),
            service_class=draw(st.sampled_from("MPX\x00")),
            window_us=draw(i32), group_delay_us=draw(i32),
        )
    return PmuConfig(
        station_name=draw(names),
        idcode=draw(u16),
        data_format=draw(data_formats),
        phasor_names=tuple(draw(st.lists(names, min_size=n_ph, max_size=n_ph))),
        analog_names=tuple(draw(st.lists(names, min_size=n_an, max_size=n_an))),
        digital_names=tuple(draw(st.lists(names, min_size=16 * n_dg, max_size=16 * n_dg))),
        phasor_units=() if cfg3 else tuple(draw(st.lists(phasor_units, min_size=n_ph, max_size=n_ph))),
        analog_units=() if cfg3 else tuple(draw(st.lists(analog_units, min_size=n_an, max_size=n_an))),
        digital_units=tuple(draw(st.lists(digital_units, min_size=n_dg, max_size=n_dg))),
        nominal_frequency_hz=draw(st.sampled_from([50, 60])),
        config_count=draw(u16),
        cfg3=details,
    )


@st.composite
def config_frames(draw: st.DrawFn, *, frame_types: tuple[FrameType, ...] = (FrameType.CFG1, FrameType.CFG2,
                                                                            FrameType.CFG3),
                  max_pmus: int = 3, max_channels: int = 4) -> ConfigFrame:
    frame_type = draw(st.sampled_from(frame_types))
    pmus = draw(st.lists(pmu_configs(cfg3=frame_type is FrameType.CFG3, max_channels=max_channels), min_size=1,
                         max_size=max_pmus))
    return ConfigFrame(frame_type, draw(u16), draw(socs), draw(fracsecs), draw(time_bases), tuple(pmus), draw(i16),
                       draw(time_qualities), draw(versions))


@st.composite
def pmu_data(draw: st.DrawFn, config: PmuConfig) -> PmuData:
    fmt = config.data_format
    if fmt.phasors_float:
        phasor = st.tuples(f32, f32)
    elif fmt.phasors_polar:
        phasor = st.tuples(u16, i16)
    else:
        phasor = st.tuples(i16, i16)
    freq = f32 if fmt.freq_float else i16
    analog = f32 if fmt.analogs_float else i16
    return PmuData(
        decode_stat(draw(u16)),
        tuple(draw(st.lists(phasor, min_size=config.phasor_count, max_size=config.phasor_count))),
        draw(freq), draw(freq),
        tuple(draw(st.lists(analog, min_size=config.analog_count, max_size=config.analog_count))),
        tuple(draw(st.lists(u16, min_size=config.digital_word_count, max_size=config.digital_word_count))),
        config,
    )


@st.composite
def data_frames(draw: st.DrawFn, config: ConfigFrame | None = None) -> DataFrame:
    if config is None:
        config = draw(config_frames(frame_types=(FrameType.CFG2, FrameType.CFG3)))
    blocks = tuple(draw(pmu_data(p)) for p in config.pmus)
    return DataFrame(config.idcode, draw(socs), draw(fracsecs), blocks, config, draw(time_qualities), draw(versions))


header_frames = st.builds(HeaderFrame, u16, socs, fracsecs, latin1_text, time_qualities, versions)
command_frames = st.builds(CommandFrame, u16, socs, fracsecs, st.one_of(st.sampled_from(Command), u16),
                           st.binary(max_size=64), time_qualities, versions)
config_fragments = st.builds(ConfigFragment, u16, socs, fracsecs, st.integers(1, 0xFFFF), st.binary(max_size=200),
                             time_qualities, versions)
