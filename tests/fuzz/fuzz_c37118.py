"""Atheris harness over the C37.118 codec (gridstat.gateways.c37118): every frame type and the stream API.

Contract checked for every input:

* ``StreamDecoder.feed`` and ``receive_datagram`` raise nothing, fed at once or in two pieces, with
  configurations known for the sample streams (so data frames get parsed against them);
* the splitter accounts for every byte (in a frame, discarded, or pending), keeps at most
  ``max_frame_size`` bytes pending, and returns only frames whose CHK is right;
* ``parse_frame`` raises nothing but ``FrameError``, with a ``DropReason``;
* whatever parses builds, and what it builds parses and builds again to the same bytes (so the
  builders accept every value the parsers produce);
* every frame the decoder returns builds.

Each input is also tried with SYNC, FRAMESIZE and CHK made right, so the fuzzer explores the fields
behind the CRC.

Run by hand::

    .venv/bin/python tests/fuzz/fuzz_c37118.py --write-seeds /tmp/c37-corpus
    .venv/bin/python tests/fuzz/fuzz_c37118.py -runs=200000 /tmp/c37-corpus

tests/fuzz/test_atheris.py runs it bounded under pytest.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "gateways"))

with atheris.instrument_imports(include=["gridstat"]):
    from gridstat.gateways.c37118 import (
        Cfg3Details,
        ConfigFrame,
        DataFormat,
        DataLayout,
        DropReason,
        FrameError,
        FrameType,
        PhasorScale,
        PmuConfig,
        StreamDecoder,
        build_cfg3_frames,
        build_frame,
        crc_ccitt,
        parse_frame,
    )

import c37118_samples as samples

MAX_FRAME_SIZE = 4096
CFG3 = ConfigFrame(FrameType.CFG3, 7, 1, 2, 1000, (PmuConfig(
    "S", 7, DataFormat(phasors_polar=True, freq_float=True), ("V",), (),
    cfg3=Cfg3Details(phasor_scales=(PhasorScale(),))),), 10)
CONFIGS = [parse_frame(raw) for raw in (samples.PYPMU_CFG2, samples.UDP_CFG2, samples.TCP_CFG2, samples.FOUR_PMU_CFG2)]
CONFIGS.append(CFG3)
LAYOUTS = [DataLayout(c) for c in CONFIGS if isinstance(c, ConfigFrame)]


def _decoder() -> StreamDecoder:
    decoder = StreamDecoder(max_frame_size=MAX_FRAME_SIZE)
    for c in CONFIGS:
        assert isinstance(c, ConfigFrame)
        decoder.configure(c)
    return decoder


def _check_stream(data: bytes, cut: int) -> None:
    decoder = _decoder()
    frames = decoder.feed(data[:cut]) + decoder.feed(data[cut:])
    splitter = decoder.splitter
    if splitter.pending_bytes > MAX_FRAME_SIZE:
        raise AssertionError(f"{splitter.pending_bytes} bytes pending")
    for f in frames:
        build_frame(f)
    decoder.close()
    if splitter.bytes_in != len(data) or splitter.drops.discarded_bytes > len(data):
        raise AssertionError("bytes not accounted for")
    decoder.receive_datagram(data)


def _check_parse(data: bytes) -> None:
    for layout in (None, *LAYOUTS):
        try:
            frame = parse_frame(data, config=layout)
        except FrameError as exc:
            if not isinstance(exc.drop_reason, DropReason):
                raise AssertionError(f"FrameError without a DropReason: {exc!r}") from exc
            continue
        if crc_ccitt(data[:-2]) != int.from_bytes(data[-2:], "big"):
            raise AssertionError("parsed a frame whose CHK is wrong")
        once = build_frame(frame)
        twice = build_frame(parse_frame(once, config=layout))
        if once != twice:
            raise AssertionError(f"build/parse not stable for {data.hex()}")


def _sealed(data: bytes) -> bytes:
    """``data`` made a well-framed frame: 0xAA first, FRAMESIZE its length, CHK right -- so the fuzzer
    reaches the fields behind the CRC, which it could not forge itself."""
    body = b"\xaa" + data[1:2] + (len(data) & 0xFFFF).to_bytes(2, "big") + data[4:-2]
    return body + crc_ccitt(body).to_bytes(2, "big")


def TestOneInput(data: bytes) -> None:  # atheris looks for this name
    _check_stream(data, data[0] % (len(data) + 1) if data else 0)
    _check_parse(data)
    if 16 <= len(data) <= 0xFFFF:
        sealed = _sealed(data)
        _check_parse(sealed)
        _check_stream(sealed * 2, len(sealed) + data[-1] % 7)


def seeds() -> list[bytes]:
    """Valid frames of every type, a CFG-3 series, and a stream with garbage in it."""
    singles = [samples.PYPMU_CFG2, samples.PYPMU_DATA, samples.PYPMU_DATA_TWO_PMUS, samples.PYPMU_HEADER,
               samples.PYPMU_COMMAND, samples.UDP_CFG2, samples.UDP_DATA, samples.TCP_CFG2, samples.FOUR_PMU_DATA,
               build_frame(CFG3)]
    series = build_cfg3_frames(CFG3, max_frame_size=24)
    return [*singles, b"".join(series), samples.UDP_COMMANDS,
            b"\x88" * 6 + samples.PYPMU_CFG2 + samples.PYPMU_DATA + b"\xaa\x01\x40" + samples.PYPMU_DATA]


if __name__ == "__main__":
    from atheris_main import run  # this directory is on the path of a script run from it

    run(sys.argv, seeds, TestOneInput)
