"""A microbenchmark of the C37.118 hot path: parsing data frames of one configuration.

Not a timed test (tests/unit/gateways/test_c37118_data.py runs it a few times to keep it working); by
hand::

    .venv/bin/python tests/unit/gateways/c37118_bench.py

It prints the time per frame for the captured four-PMU PDC stream (c37118_samples) through the
compiled ``DataLayout`` and through the whole ``StreamDecoder`` (splitting and CHK included).
"""

from __future__ import annotations

import time

import c37118_samples as samples

from gridstat.gateways.c37118 import ConfigFrame, DataLayout, StreamDecoder, parse_frame
from gridstat.gateways.c37118.framing import read_head


def bench_data_frames(iterations: int = 20_000) -> dict[str, float]:
    """Microseconds per data frame: ``layout`` (DataLayout.unpack alone) and ``decoder`` (the stream API)."""
    config = parse_frame(samples.FOUR_PMU_CFG2)
    assert isinstance(config, ConfigFrame)
    layout = DataLayout(config)
    frame = samples.FOUR_PMU_DATA
    head = read_head(frame)
    start = time.perf_counter()
    for _ in range(iterations):
        layout.unpack(frame, head)
    layout_us = (time.perf_counter() - start) / iterations * 1e6
    decoder = StreamDecoder()
    decoder.configure(config)
    chunk = frame * 64
    rounds = max(1, iterations // 64)
    start = time.perf_counter()
    for _ in range(rounds):
        decoder.feed(chunk)
    decoder_us = (time.perf_counter() - start) / (rounds * 64) * 1e6
    assert decoder.drops.total == 0
    return {"layout": layout_us, "decoder": decoder_us}


if __name__ == "__main__":
    result = bench_data_frames()
    print(f"4-PMU data frame ({len(samples.FOUR_PMU_DATA)} bytes, 45 phasors): "
          f"{result['layout']:.1f} us parse, {result['decoder']:.1f} us through the decoder")
