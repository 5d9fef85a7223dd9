"""A router farm: many status routers, each with its own UDP socket and control server, in one process.

The admission benchmark needs a 200-router cloud; 200 router processes would not fit
two cores, so a few farm processes each host a share of them. Every router is a real
``StatusRouter`` behind a real ``RouterControl`` gRPC server, so the broker under test
cannot tell the difference; only the event forwarding of co-hosted routers shares a
core, which this benchmark does not measure.

``python -m gridstat.bench.farm --names r0,r1,... --first-id 1`` prints one
``READY name=.. port=.. control_port=..`` line per router, then ``FARM READY``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal

from gridstat.core.aio import exit_with_parent, install_fast_loop
from gridstat.router.control import serve
from gridstat.router.process import RouterConfig, StatusRouter


async def _run(names: list[str], first_id: int) -> None:
    routers = []
    servers = []
    for i, name in enumerate(names):
        router = StatusRouter(RouterConfig(name=name, router_id=first_id + i, ping_interval_ms=1000,
                                           failure_timeout_ms=5000))
        await router.start()
        server, port = await serve(router, "127.0.0.1", 0)
        routers.append(router)
        servers.append(server)
        print(f"READY name={name} port={router.address[1]} control_port={port}", flush=True)
    gc.freeze()
    print("FARM READY", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for server in servers:
        await server.stop(grace=0)
    for router in routers:
        await router.stop()


def main() -> None:
    p = argparse.ArgumentParser(prog="gridstat.bench.farm")
    p.add_argument("--names", required=True, help="comma-separated router names")
    p.add_argument("--first-id", type=int, required=True)
    args = p.parse_args()
    exit_with_parent()
    install_fast_loop()
    asyncio.run(_run(args.names.split(","), args.first_id))


if __name__ == "__main__":
    main()
