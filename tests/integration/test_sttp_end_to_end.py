"""The STTP gateways between real routers and sttpapi's own Publisher and Subscriber (docs/sttp.md).

The second test: ``gridstat sttp-server`` started before any variable matches its where-expression
serves the variables registered later, after the metadata is defined again, to a subscriber that
asked again.

sttpapi's ``Publisher`` (the "device": one device PMU1 at 30 frames/s, five measurements) ->
``gridstat sttp-gateway`` (republishes them as variables through edge router e1) -> a real leaf broker
and two real routers -> ``gridstat sttp-server`` (a query subscription ``source = 'sttp'`` at e2, plus a
phasor published by an SDK publisher) -> sttpapi ``Subscriber``s with FILTER expressions, one of them
throttled. Every value and timestamp the subscribers read equals the published one, the metadata
(point tags, signal types, devices, signal IDs) is what docs/sttp.md says, a filter selects exactly
its measurements, and the throttled subscriber gets exactly GridStat's rate filter's frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gridstat.client import Publisher
from gridstat.core import clock, filtering
from gridstat.core.model import FLOAT
from gridstat.gateways.pdc import PHASOR_TYPE
from gridstat.gateways.sttp import mapping

from .brokerprocs import edge_pair

pytestmark = pytest.mark.integration

sttp_publisher = pytest.importorskip("sttp.publisher")
from sttp.config import Config  # noqa: E402 -- after the importorskip
from sttp.data.dataset import DataSet  # noqa: E402
from sttp.settings import Settings  # noqa: E402
from sttp.subscriber import Subscriber  # noqa: E402
from sttp.transport.measurement import Measurement  # noqa: E402

RATE = 30
SECONDS = 3
#: The source's measurements: point tag, signal type.
SOURCE = [("PMU1:FREQ", "FREQ"), ("PMU1:DFDT", "DFDT"), ("PMU1:VA.MAG", "VPHM"), ("PMU1:VA.ANG", "VPHA"),
          ("PMU1:P", "ALOG")]
SOURCE_IDS = {tag: uuid.uuid5(uuid.NAMESPACE_URL, f"test:{tag}") for tag, _ in SOURCE}
THROTTLE_S = 0.2


def source_value(tag: str, s: int, k: int) -> float:
    """Float32-exact values (STTP's compact measurements carry 32-bit values)."""
    base = {"PMU1:FREQ": 60.0, "PMU1:DFDT": 0.0, "PMU1:VA.MAG": 230.0, "PMU1:VA.ANG": -90.0, "PMU1:P": 100.0}[tag]
    return base + s + k / 64


def source_metadata() -> Any:
    template = Path(sttp_publisher.__file__).parent / "MetadataTemplate.xml"
    dataset, err = DataSet.from_xml(template.read_text())
    assert err is None
    device = dataset.table("DeviceDetail").create_row()
    for column, value in (("UniqueID", uuid.uuid4()), ("Acronym", "PMU1"), ("Name", "PMU 1"), ("ProtocolName", "STTP"),
                          ("FramesPerSecond", RATE), ("Enabled", True)):
        device[column] = value
    dataset.table("DeviceDetail").add_row(device)
    table = dataset.table("MeasurementDetail")
    for i, (tag, signal_type) in enumerate(SOURCE):
        row = table.create_row()
        for column, value in (("DeviceAcronym", "PMU1"), ("ID", f"PMU1:{i + 1}"), ("SignalID", SOURCE_IDS[tag]),
                              ("PointTag", tag), ("SignalReference", tag), ("SignalAcronym", signal_type),
                              ("Description", f"test {tag}"), ("Internal", True), ("Enabled", True)):
            row[column] = value
        table.add_row(row)
    return dataset


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def process(*argv: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """A child in its own process group, stopped by group on the way out."""
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, start_new_session=True)
    try:
        yield proc
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if proc.returncode is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), 5.0)


async def line_where(stream: asyncio.StreamReader, test: Any, timeout_s: float) -> str:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while loop.time() < end:
        raw = await asyncio.wait_for(stream.readline(), max(0.1, end - loop.time()))
        if not raw:
            raise EOFError("the process closed its stdout")
        text = raw.decode().strip()
        if test(text):
            return text
    raise AssertionError("no such line")


class Reader:
    """An sttpapi Subscriber collecting (point tag, ticks, value) and its metadata."""

    def __init__(self, port: int, expression: str, settings: Any) -> None:
        self.got: list[tuple[uuid.UUID, int, float]] = []
        self.lock = threading.Lock()
        self.subscriber = Subscriber()
        self.subscriber.statusmessage_logger = None
        self.subscriber.errormessage_logger = None
        self.subscriber.connectionestablished_receiver = None
        self.subscriber.connectionterminated_receiver = None
        self.subscribed = threading.Event()
        #: The signal IDs of the last subscription the publisher confirmed.
        self.signal_ids: set[uuid.UUID] = set()
        self.subscriber.set_subscriptionupdated_receiver(self._subscribed)
        self.subscriber.set_newmeasurements_receiver(self._add)
        # What an STTP application does when the publisher's metadata changes: ask for it again (the
        # library then subscribes again with the same filter expression).
        self.subscriber.configurationchanged_receiver = self.subscriber.request_metadata
        self.subscriber.subscribe(expression, settings)
        self.port = port

    def _subscribed(self, cache: Any) -> None:
        self.signal_ids = set(cache.signalids)
        self.subscribed.set()

    def _add(self, measurements: list[Any]) -> None:
        with self.lock:
            self.got += [(m.signalid, int(m.timestamp), float(m.value)) for m in measurements]

    def connect(self) -> None:
        assert self.subscriber.connect(f"127.0.0.1:{self.port}", Config(maxretries=5)) is None

    def by_tag(self) -> dict[str, dict[int, float]]:
        cache = self.subscriber.metadatacache
        out: dict[str, dict[int, float]] = {}
        with self.lock:
            for sid, ticks, value in self.got:
                record = cache.find_measurement_signalid(sid)
                assert record is not None, sid
                out.setdefault(record.pointtag, {})[ticks] = value
        return out

    def close(self) -> None:
        # Auto-reconnect off before the disconnect (as library.SourceSubscriber.stop): sttpapi's disconnect
        # and reconnect threads can otherwise wait for each other for ever.
        with contextlib.suppress(Exception):
            self.subscriber._datasubscriber.connector.cancel()
        with contextlib.suppress(Exception):
            self.subscriber.disconnect()
        self.subscriber.dispose()


def served_tag(source_tag: str) -> str:
    """What docs/sttp.md says a source point tag becomes, served again: PMU1:FREQ -> PMU1/FREQ."""
    return "PMU1/" + source_tag.split(":", 1)[1]


# sttpapi's TSSC encoder (in the source Publisher here) overflows numpy scalars on purpose and warns.
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
async def test_values_timestamps_and_metadata_survive_sttp_to_gridstat_to_sttp(tmp_path: Path) -> None:
    publisher = sttp_publisher.Publisher()
    for attr in ("statusmessage_logger", "errormessage_logger", "clientconnected_receiver",
                 "clientdisconnected_receiver"):
        setattr(publisher, attr, None)
    publisher.define_metadata(source_metadata())
    source_port = free_port()
    publisher.start(source_port)
    readers: list[Reader] = []
    sdk: Publisher | None = None
    try:
        with edge_pair(tmp_path) as (_broker, routers):
            e1 = f"127.0.0.1:{routers['e1'].control_port}"
            e2 = f"127.0.0.1:{routers['e2'].control_port}"
            # A phasor from an SDK publisher: served as two measurements (VPHM, VPHA in degrees).
            sdk = await Publisher.connect("sub1", e1)
            va = await sdk.register("va", PHASOR_TYPE, 1000 // RATE, frames_per_s=RATE,
                                    attributes={"signal": "VPHS", "station": "SUB1", "units": "V"})
            gateway_argv = [sys.executable, "-m", "gridstat.cli.main", "sttp-gateway", "--source",
                            f"127.0.0.1:{source_port}", "--edge", e1, "--stats-every-s", "0.2", "-o", "json",
                            "--exit-with-parent"]
            async with process(*gateway_argv) as gateway:
                assert gateway.stdout is not None
                await line_where(gateway.stdout, lambda t: t.startswith("READY"), 30)
                await line_where(gateway.stdout, lambda t: t.startswith("{") and json.loads(t)["registered"] == 5,
                                 60)
                server_argv = [sys.executable, "-m", "gridstat.cli.main", "sttp-server", "--name", "sttp1",
                               "--edge", e2, "--where", "source = 'sttp'", "--variables", "sub1/va:phasor",
                               "--interval-ms", str(1000 // RATE), "--listen", "127.0.0.1:0",
                               "--stats-every-s", "0", "--connect-timeout-s", "30", "--exit-with-parent"]
                async with process(*server_argv) as server:
                    assert server.stdout is not None
                    ready = await line_where(server.stdout, lambda t: t.startswith("READY"), 60)
                    assert "variables=6 measurements=7 unserved=0" in ready, ready
                    port = int(ready.split("listen=127.0.0.1:")[1].split()[0])
                    freq = Reader(port, "FILTER ActiveMeasurements WHERE SignalType = 'FREQ'", Settings())
                    throttled = Reader(port, "FILTER ActiveMeasurements WHERE Device = 'PMU1'",
                                       Settings(throttled=True, publishinterval=THROTTLE_S))
                    phasor = Reader(port, "FILTER ActiveMeasurements WHERE Device = 'SUB1'", Settings())
                    readers = [freq, throttled, phasor]
                    for r in readers:
                        await asyncio.to_thread(r.connect)
                    for r in readers:
                        assert await asyncio.to_thread(r.subscribed.wait, 15)
                    soc0 = clock.now_ms() // 1000 + 1
                    # Times in whole milliseconds (frame k at k·1000//30 ms), which sttpapi's TSSC
                    # codec carries exactly (docs/sttp.md, "Values and timestamps").
                    published: dict[int, tuple[int, int]] = {}
                    for s in range(SECONDS):
                        for k in range(RATE):
                            ts = (soc0 + s) * 1000 + k * 1000 // RATE
                            ticks = mapping.ticks_of_ms(ts)
                            delay = (ts - clock.now_ms()) / 1000
                            if delay > 0:
                                await asyncio.sleep(delay)
                            batch = []
                            for tag, _ in SOURCE:
                                m = Measurement()
                                m.signalid, m.timestamp, m.value = SOURCE_IDS[tag], ticks, source_value(tag, s, k)
                                batch.append(m)
                            publisher.publish_measurements(batch)
                            va.publish({"magnitude": 230.0 + k / 32, "angle": (k % 8) / 8 - 0.5}, ts)
                            published[ticks] = (s, k)
                    await asyncio.sleep(1.0)
                    results = [r.by_tag() for r in readers]
                    metadata = [list(r.subscriber.metadatacache.measurement_records) for r in readers]
                    devices = {d.acronym: d.framespersecond for d in freq.subscriber.metadatacache.device_records}
    finally:
        for r in readers:
            await asyncio.to_thread(r.close)
        if sdk is not None:
            await sdk.stop()
        publisher.stop()
        publisher.dispose()
    freq_got, throttled_got, phasor_got = results

    # Metadata: every served measurement, its point tag, signal type, device and signal ID (docs/sttp.md).
    records = {m.pointtag: m for m in metadata[0]}
    expected = {served_tag(tag): signal_type for tag, signal_type in SOURCE}
    expected |= {"sub1/va.magnitude": "VPHM", "sub1/va.angle": "VPHA"}
    assert {t: r.signalacronym for t, r in records.items()} == expected
    for tag, record in records.items():
        assert record.signalid == mapping.signal_id(tag)
        assert record.deviceacronym == ("SUB1" if tag.startswith("sub1/") else "PMU1")

    assert devices == {"PMU1": RATE, "SUB1": RATE}

    # The filter selects exactly its measurements.
    assert set(freq_got) == {"PMU1/FREQ"}
    assert set(throttled_got) == {served_tag(tag) for tag, _ in SOURCE}
    assert set(phasor_got) == {"sub1/va.magnitude", "sub1/va.angle"}

    # Values and timestamps equal; every frame after the first second arrived (full rate).
    late = {t for t, (s, _) in published.items() if s >= 1}
    assert late <= set(freq_got["PMU1/FREQ"]), f"{len(late - set(freq_got['PMU1/FREQ']))} frames missing"
    for ticks, value in freq_got["PMU1/FREQ"].items():
        s, k = published[ticks]
        assert value == source_value("PMU1:FREQ", s, k)
    for ticks, value in phasor_got["sub1/va.magnitude"].items():
        assert value == 230.0 + published[ticks][1] / 32
    for ticks, value in phasor_got["sub1/va.angle"].items():
        k = published[ticks][1]
        assert math.isclose(value, math.degrees((k % 8) / 8 - 0.5), rel_tol=1e-6, abs_tol=1e-4)
    assert late <= set(phasor_got["sub1/va.angle"])

    # Throttled to 200 ms: exactly GridStat's rate filter's frames (6 of 30 per second), values equal.
    period = 1000 // RATE
    granted = filtering.granted_interval_ms(round(THROTTLE_S * 1000), period, RATE)
    keep = {t for t in published if filtering.should_forward(mapping.ms_of_ticks(t)[0], period, granted, RATE)}
    assert len(keep & late) == (SECONDS - 1) * (RATE // filtering.frames_in(granted, RATE))  # 5 a second
    for tag, _ in SOURCE:
        got = throttled_got[served_tag(tag)]
        assert set(got) <= keep, f"{tag}: frames beyond the throttle"
        assert keep & late <= set(got), f"{tag}: throttled frames missing"
        for ticks, value in got.items():
            s, k = published[ticks]
            assert value == source_value(tag, s, k)


async def test_variables_registered_later_are_served_after_the_metadata_changes(tmp_path: Path) -> None:
    readers: list[Reader] = []
    sdk: Publisher | None = None
    try:
        with edge_pair(tmp_path) as (_broker, routers):
            e1 = f"127.0.0.1:{routers['e1'].control_port}"
            e2 = f"127.0.0.1:{routers['e2'].control_port}"
            server_argv = [sys.executable, "-m", "gridstat.cli.main", "sttp-server", "--name", "sttp2", "--edge", e2,
                           "--where", "signal = 'FREQ'", "--interval-ms", str(1000 // RATE), "--follow-s", "0.3",
                           "--listen", "127.0.0.1:0", "--stats-every-s", "0.3", "-o", "json",
                           "--connect-timeout-s", "30", "--exit-with-parent"]
            async with process(*server_argv) as server:
                assert server.stdout is not None
                # Nothing matches yet: the server starts with empty metadata.
                ready = await line_where(server.stdout, lambda t: t.startswith("READY"), 60)
                assert "variables=0 measurements=0" in ready, ready
                port = int(ready.split("listen=127.0.0.1:")[1].split()[0])
                reader = Reader(port, "FILTER ActiveMeasurements WHERE SignalType = 'FREQ'", Settings())
                readers.append(reader)
                await asyncio.to_thread(reader.connect)  # its subscription selects nothing yet
                sdk = await Publisher.connect("sub1", e1)
                attributes = {"signal": "FREQ", "station": "SUB1"}
                handles = {}
                for name in ("f1", "f2"):
                    handles[f"sub1/{name}"] = await sdk.register(name, FLOAT, 1000 // RATE, frames_per_s=RATE,
                                                                 attributes=attributes)
                await line_where(server.stdout, lambda t: t.startswith("{") and json.loads(t)["variables"] == 2, 30)
                wanted = {mapping.signal_id("sub1/f1"), mapping.signal_id("sub1/f2")}
                for _ in range(150):  # f1 and f2 may come in one change or two: the subscription of both
                    if reader.signal_ids == wanted:
                        break
                    await asyncio.sleep(0.1)
                assert reader.signal_ids == wanted, "no subscription of both after the change"
                soc0 = clock.now_ms() // 1000 + 1
                stamps: list[int] = []
                for k in range(RATE):
                    ts = soc0 * 1000 + k * 1000 // RATE
                    delay = (ts - clock.now_ms()) / 1000
                    if delay > 0:
                        await asyncio.sleep(delay)
                    for i, h in enumerate(handles.values()):
                        h.publish(100.0 * i + k / 8, ts)
                    stamps.append(ts)
                await asyncio.sleep(1.0)
                got = reader.by_tag()
                records = {m.pointtag: m.signalacronym for m in reader.subscriber.metadatacache.measurement_records}
    finally:
        for r in readers:
            await asyncio.to_thread(r.close)
        if sdk is not None:
            await sdk.stop()
    assert records == {"sub1/f1": "FREQ", "sub1/f2": "FREQ"}
    for i, tag in enumerate(("sub1/f1", "sub1/f2")):
        expected = {mapping.ticks_of_ms(ts): 100.0 * i + k / 8 for k, ts in enumerate(stamps)}
        assert {t: v for t, v in got[tag].items() if t in expected} == expected, tag
