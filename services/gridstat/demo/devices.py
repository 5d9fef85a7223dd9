"""Simulated PMUs that speak IEEE C37.118 in the embedded runner (docs/topology.md, ``c37118``).

A publisher of the topology with ``c37118:`` is a simulated device (``gateways.simulated``) serving
C37.118 on 127.0.0.1 and a ``PmuGateway`` that reads it as the standard's client and publishes its
channels through the publisher's edge router: the demo's data crosses the real protocol, with the
device's own timestamps and STAT words, at an exact frame rate (docs/frame-rates.md). The device's
station is named as the publisher, so the gateway publishes ``<publisher>/freq``, ``dfreq`` and the
analogs with the publisher's certificate; its phasors (V1 ...) are left unpublished unless a
subscription would need them (``only``), as an SDK publisher sends only what is subscribed.
"""

from __future__ import annotations

import asyncio
import contextlib

from gridstat.client import PublicationHandle, Publisher
from gridstat.core.aio import create_guarded_task
from gridstat.core.tls import TlsFiles
from gridstat.demo import topology as topo
from gridstat.errors import ChannelUnavailable
from gridstat.gateways.pmu import GatewayOptions, PmuGateway
from gridstat.gateways.simulated import DeviceServer, SimulatedDevice, Station

#: How long a device's gateway may take to register its variables at start.
REGISTER_TIMEOUT_S = 30.0


class DeviceEndpoint:
    """One simulated C37.118 PMU and the gateway that publishes it; the ``PublisherEndpoint`` API."""

    def __init__(self, spec: topo.Publisher, edge_control: str, tls: TlsFiles | None = None) -> None:
        assert spec.device is not None
        self.spec = spec
        self.edge_control = edge_control
        self.tls = tls
        d = spec.device
        self.idcode = spec.publisher_id % 0xFFFE + 1
        self.server = DeviceServer(SimulatedDevice(
            [Station(spec.name, self.idcode, d.phasors, len(d.analogs), 0, 60, d.analogs)], idcode=self.idcode,
            frames_per_s=d.frames_per_s))
        self.gateway: PmuGateway | None = None
        self.publisher: Publisher | None = None
        self.handles: dict[str, PublicationHandle] = {}
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        """Start the device and its gateway; return once every variable of the topology is registered
        with the leaf broker (subscriptions to them are admitted next)."""
        await self.server.start()
        self.gateway = PmuGateway(
            GatewayOptions("127.0.0.1", self.server.port, self.edge_control, self.idcode, retry_initial_s=0.2,
                           retry_max_s=2.0, healthy_after_s=5.0),
            tls=self.tls, only=frozenset(v.full_name for v in self.spec.variables),
            attributes=self.spec.attributes)  # its station's (docs/topology.md, "Stations")
        self._task = create_guarded_task(self.gateway.run(self._stop), name=f"pmu-gateway-{self.spec.name}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REGISTER_TIMEOUT_S
        while True:
            handles = {v.full_name: self.gateway.publishers.handle(v.full_name) for v in self.spec.variables}
            if all(handles.values()):
                break
            if loop.time() > deadline or self._task.done():
                missing = sorted(n for n, h in handles.items() if h is None)
                raise ChannelUnavailable(f"C37.118 device {self.spec.name!r}: its gateway did not register "
                                         f"{', '.join(missing)} in {REGISTER_TIMEOUT_S:g} s (state "
                                         f"{self.gateway.stats.state})", field="publisher")
            await asyncio.sleep(0.05)
        self.handles = {n: h for n, h in handles.items() if h is not None}
        self.publisher = next(iter(self.handles.values())).publisher

    def start_sending(self, wanted: set[str]) -> int:
        """Publish the variables some subscription asks for (the device streams all its channels; the
        gateway sends only these, so edge routers see no event nobody routes); how many."""
        names = frozenset(v.full_name for v in self.spec.variables if v.full_name in wanted)
        if self.gateway is not None:
            self.gateway.publishers.restrict(names)
        return len(names)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, 10)
        await self.server.stop()
