"""A publisher or subscriber endpoint, run *inside* the gridstat image by the container test.

    python3 endpoint.py publish EDGE_CONTROL       registers pmu1/freq (float, 20 ms) and publishes
    python3 endpoint.py subscribe EDGE_CONTROL     subscribes to pmu1/freq; prints RECEIVED <n> as events arrive

Only the SDK that ships in the image is used (gridstat.client), talking to its edge router's
control port, which proxies to the leaf broker, as a real PMU or EMS application would.
"""

import asyncio
import math
import sys

from gridstat.client import Publisher, Subscriber
from gridstat.core.model import TypeSpec

FLOAT = TypeSpec.parse("float")


async def publish(edge: str) -> None:
    pub = await Publisher.connect("pmu1", edge)
    handle = await pub.register("freq", FLOAT, 20)
    print("PUBLISHING", flush=True)
    await pub.run_periodic(handle, lambda ts: 60.0 + 0.01 * math.sin(ts / 1000.0))


async def subscribe(edge: str) -> None:
    sub = await Subscriber.connect("ems", edge)
    received = 0

    def on_event(_sub: object, _holder: object) -> None:
        nonlocal received
        received += 1
        if received % 10 == 0:
            print(f"RECEIVED {received}", flush=True)

    for _ in range(100):  # the publisher's variable may not be registered yet
        try:
            await sub.subscribe_remote("pmu1/freq", FLOAT, interval_ms=20, latency_ms=50, on_event=on_event)
            break
        except Exception as exc:  # UnknownVariable until the publisher registers
            print(f"WAITING {type(exc).__name__}: {exc}", flush=True)
            await asyncio.sleep(0.2)
    print("SUBSCRIBED", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run({"publish": publish, "subscribe": subscribe}[sys.argv[1]](sys.argv[2]))
