"""A 60 frames/s variable through real routers (docs/frame-rates.md): subscribers asking for every
frame, every 2nd, 3rd and 6th, and one per second, each get exactly those frames, evenly spaced,
with no frame doubled or missing at second boundaries, on a path of three routers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gridstat.client import Holder, Publisher, Subscriber, Subscription
from gridstat.core import clock, filtering, wire
from gridstat.core.model import FLOAT

from . import brokerprocs

pytestmark = pytest.mark.integration

RATE = 60
ROUTERS = [("e1", 1, "edge"), ("c1", 2, "internal"), ("e2", 3, "edge")]
LINKS = [("e1", "c1", 1.0), ("c1", "e2", 1.0)]
#: frames per delivered event, and the interval asked for in milliseconds
ASKED = {1: 16, 2: 33, 3: 50, 6: 100, 60: 1000}


def frame_ms(k: int) -> int:
    return 1000 * k // RATE  # as a device stamps it: SOC*1000 + FRACSEC*1000 // TIME_BASE


async def test_every_nth_frame_through_three_routers(tmp_path: Path) -> None:
    proxied = brokerprocs.cloud(tmp_path, ROUTERS, LINKS, proxied=("e1", "e2"))
    _broker, routers = await asyncio.to_thread(proxied.__enter__)
    pub = None
    readers: list[Subscriber] = []
    try:
        pub = await Publisher.connect("pmu1", f"127.0.0.1:{routers['e1'].control_port}")
        handle = await pub.register("freq", FLOAT, filtering.nominal_interval_ms(RATE), frames_per_s=RATE,
                                    attributes={"units": "Hz", "station": "pmu1"})
        assert handle.variable.frames_per_s == RATE
        got: dict[int, list[int]] = {n: [] for n in ASKED}
        subs: dict[int, Subscription] = {}
        for n, asked in ASKED.items():
            def on_event(_s: Subscription, h: Holder, n: int = n) -> None:
                got[n].append(h.timestamp_ms)

            # One subscriber per interval: a subscriber holds one subscription per variable.
            readers.append(await Subscriber.connect(f"pdc{n}", f"127.0.0.1:{routers['e2'].control_port}"))
            subs[n] = await readers[-1].subscribe_remote("pmu1/freq", FLOAT, interval_ms=asked, latency_ms=500,
                                                 on_event=on_event)
            assert subs[n].interval_ms == filtering.frame_interval_ms(n, RATE)
            assert subs[n].variable.frames_per_s == RATE and subs[n].variable.attributes["units"] == "Hz"
        # Real time, frame by frame, stamped as a device stamps them, with its STAT and FRACSEC.
        loop = asyncio.get_running_loop()
        end = loop.time() + 4.5
        k = (clock.now_ms() * RATE) // 1000
        sent: list[int] = []
        while loop.time() < end:
            while frame_ms(k) <= clock.now_ms():
                count = k % RATE
                handle.publish(50.0 + k % 7, frame_ms(k),
                               options=[wire.device_time(0, count * 1_000_000 // RATE, 1_000_000)])
                sent.append(k)
                k += 1
            await asyncio.sleep(0.004)
        await asyncio.sleep(0.3)
        # The routes reach the routers while the first frames go out: judge from the first frame each
        # subscriber got to the last one sent.
        for n, stamps in got.items():
            assert stamps, f"every {n}th frame: nothing arrived"
            frames = [(t * RATE + 500) // 1000 for t in stamps]
            assert [frame_ms(f) for f in frames] == stamps
            expected = [f for f in range(frames[0], sent[-1] + 1) if f % n == 0]
            assert frames == expected, f"every {n}th frame: got {len(frames)} of {len(expected)}"
            assert subs[n].stats.gaps == 0 and subs[n].stats.duplicates == 0
        # Several second boundaries crossed, and the 1 s subscription is on them.
        assert len(got[1]) >= 3 * RATE and all(t % 1000 == 0 for t in got[60])
        assert len(got[60]) >= 3
    finally:
        if pub is not None:
            await pub.stop()
        for reader in readers:
            await reader.stop()
        await asyncio.to_thread(proxied.__exit__, None, None, None)
