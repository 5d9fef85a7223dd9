"""A small typed wrapper around ``sttpapi`` (module ``sttp``, IEEE 2664), imported lazily.

GridStat does not need numpy: ``sttpapi`` (and numpy, which it needs) is the optional extra
``gridstat[sttp]`` and is imported only when an STTP gateway starts (:func:`load`). The library speaks
the protocol; this module only adapts it (docs/sttp.md, "How the library is used"):

* ``ServingPublisher``: the library's ``DataPublisher`` listening on a chosen address (the library
  itself always binds every interface) with connections that read the subscriber's ``throttled`` and
  ``publishInterval`` (the library ignores them) and filter by them (``mapping.throttle_passes``). Its
  sockets block, so measurements go through a bounded queue to one sending thread: the event loop
  never waits for a slow STTP client, and a full queue is a counted drop.
* ``SourceSubscriber``: the library's ``Subscriber`` connected to an STTP publisher, its metadata read
  into ``mapping.SourceMeasurement`` records and its measurements handed on as plain tuples.

The private attributes used here (``_server_socket``, ``_accept_connections``' shape, the subscribe
command's layout) are those of sttpapi 0.7.6, pinned in services/constraints.txt.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import import_module
from types import ModuleType
from typing import Any

from gridstat.errors import ValidationError
from gridstat.gateways.sttp import mapping

log = logging.getLogger(__name__)

#: Batches waiting for the sending thread at most; one more is dropped (``queue_full``).
MAX_QUEUED_BATCHES = 1024
#: (signal ID, ticks, value, state flags): one measurement as the wrapper passes it.
Point = tuple[uuid.UUID, int, float, int]


def load() -> dict[str, ModuleType]:
    """The sttpapi modules used, or ValidationError naming what to install."""
    names = {"dataset": "sttp.data.dataset", "measurement": "sttp.transport.measurement",
             "datapublisher": "sttp.transport.datapublisher", "connection": "sttp.transport.subscriberconnection",
             "constants": "sttp.transport.constants",
             "subscriber": "sttp.subscriber", "config": "sttp.config", "settings": "sttp.settings"}
    try:
        return {k: import_module(v) for k, v in names.items()}
    except ImportError as exc:
        raise ValidationError(f"the STTP gateways need the sttpapi package ({exc}): pip install 'gridstat[sttp]'",
                              field="sttp") from None


# -- metadata ---------------------------------------------------------------------------------------

def build_metadata(variables: Sequence[mapping.ServedVariable], *, node: str = "GridStat") -> Any:
    """The publisher's metadata DataSet (DeviceDetail, MeasurementDetail, PhasorDetail) of the served
    variables, in the schema of sttpapi's ``MetadataTemplate.xml``; the library builds the
    ActiveMeasurements table that filter expressions select from it."""
    mods = load()
    template = os.path.join(os.path.dirname(mods["subscriber"].__file__ or ""), "MetadataTemplate.xml")
    with open(template, encoding="utf-8") as f:
        dataset, err = mods["dataset"].DataSet.from_xml(f.read())
    if err is not None:
        raise ValidationError(f"sttpapi's metadata template does not parse: {err}", field="sttp")
    # Naive UTC: sttpapi's XML writer (``xsdformat``) garbles an aware time's offset ("+00:Z").
    now = datetime.now(UTC).replace(tzinfo=None)
    devices = dataset.table("DeviceDetail")
    for device, rate in mapping.device_rates(variables).items():
        row = devices.create_row()
        row["UniqueID"] = uuid.uuid5(mapping.SIGNAL_NAMESPACE, f"device:{device}")
        row["Acronym"] = device
        row["Name"] = device
        row["IsConcentrator"] = False
        row["AccessID"] = 0
        row["ProtocolName"] = "GridStat"
        row["FramesPerSecond"] = rate
        row["CompanyAcronym"] = node
        row["Enabled"] = True
        row["UpdatedOn"] = now
        devices.add_row(row)
    measurements = dataset.table("MeasurementDetail")
    phasors = dataset.table("PhasorDetail")
    key = 0
    phasor_ids: dict[str, int] = {}
    for v in variables:
        for p in v.points:
            key += 1
            row = measurements.create_row()
            row["DeviceAcronym"] = p.device
            row["ID"] = f"{node}:{key}"
            row["SignalID"] = p.signal_id
            row["PointTag"] = p.point_tag
            row["SignalReference"] = p.point_tag
            row["SignalAcronym"] = p.signal_type
            row["Description"] = p.description
            row["Internal"] = True
            row["Enabled"] = True
            row["UpdatedOn"] = now
            if p.component:
                index = phasor_ids.setdefault(v.full_name, len(phasor_ids) + 1)
                row["PhasorSourceIndex"] = index
                if p.component == "magnitude":
                    prow = phasors.create_row()
                    prow["ID"] = index
                    prow["DeviceAcronym"] = p.device
                    prow["Label"] = v.full_name
                    prow["Type"] = "I" if p.signal_type.startswith("I") else "V"
                    prow["Phase"] = "+"
                    prow["SourceIndex"] = index
                    prow["UpdatedOn"] = now
                    phasors.add_row(prow)
            measurements.add_row(row)
    return dataset


# -- serving ------------------------------------------------------------------------------------

class ServingPublisher:
    """The library's publisher on ``host:port``, throttling per connection, fed from a bounded queue."""

    def __init__(self, variables: Sequence[mapping.ServedVariable], *, max_connections: int = 64) -> None:
        mods = load()
        self._measurement_class = mods["measurement"].Measurement
        self._state_flags = mods["constants"].StateFlags
        self._served = {p.signal_id: v for v in variables for p in v.points}
        #: Counts by reason, written by the library's threads (Counter updates are atomic enough for counts).
        self.drops: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self._queue: queue.Queue[list[Point] | None] = queue.Queue(MAX_QUEUED_BATCHES)
        self._thread: threading.Thread | None = None
        self._host = "127.0.0.1"
        self.port = 0
        self.publisher = _publisher_class(mods)(self, mods)
        self.publisher.maximum_allowed_connections = max_connections
        self.publisher.statusmessage_callback = lambda message: log.debug("sttp: %s", message)
        self.publisher.errormessage_callback = self._error
        self.publisher.define_metadata(build_metadata(variables))

    def define(self, variables: Sequence[mapping.ServedVariable]) -> None:
        """Serve ``variables`` from now on: the metadata defined again, and the library tells every
        client (CONFIGURATIONCHANGED; a client then asks for the metadata and subscribes again).
        Blocks on the clients' sockets: call it off the event loop."""
        self.publisher.define_metadata(build_metadata(variables))
        self._served = {p.signal_id: v for v in variables for p in v.points}

    def _error(self, message: str) -> None:
        self.counts["library_errors"] += 1
        log.info("sttp publisher: %s", message)

    def served(self, signal_id: uuid.UUID) -> mapping.ServedVariable | None:
        return self._served.get(signal_id)

    def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0: any free port) and start sending; the port bound."""
        self.port = self.publisher.start_on(host, port)
        self._thread = threading.Thread(target=self._send_loop, name="sttp-publisher", daemon=True)
        self._thread.start()
        return self.port

    def offer(self, batch: list[Point]) -> bool:
        """Queue one batch for the STTP clients (any thread; never blocks)."""
        try:
            self._queue.put_nowait(batch)
        except queue.Full:
            self.drops["queue_full"] += len(batch)
            return False
        return True

    def _send_loop(self) -> None:
        make = self._measurement_class
        state = self._state_flags
        while True:
            batch = self._queue.get()
            if batch is None:
                return
            out = []
            for sid, ticks, value, flags in batch:
                m = make()
                m.signalid = sid
                m.timestamp = _uint64(ticks)
                m.value = _float64(value)
                m.flags = state(flags)
                out.append(m)
            try:
                self.publisher.publish_measurements(out)
            except Exception as exc:  # the library's failure must not end the sending thread
                self.drops["publish_error"] += len(out)
                log.warning("sttp publish failed: %s", exc)

    @property
    def clients(self) -> int:
        with self.publisher._subscriber_connections_lock:
            return len(self.publisher._subscriber_connections)

    def stop(self) -> None:
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None
        with contextlib.suppress(OSError):
            self.publisher.dispose()


def _uint64(n: int) -> Any:
    import numpy as np  # with sttpapi only (the optional extra)

    return np.uint64(n)


def _float64(x: float) -> Any:
    import numpy as np

    return np.float64(x)


_PUBLISHER_CLASS: type[Any] | None = None


def _publisher_class(mods: dict[str, ModuleType]) -> type[Any]:
    """``DataPublisher`` subclassed to bind a chosen address and make throttling connections (made
    once, on first use, since the base classes exist only once sttpapi is imported)."""
    global _PUBLISHER_CLASS
    if _PUBLISHER_CLASS is not None:
        return _PUBLISHER_CLASS
    base_publisher = mods["datapublisher"].DataPublisher
    base_connection = mods["connection"].SubscriberConnection

    class ThrottlingConnection(base_connection):  # type: ignore[misc,valid-type]
        """A subscriber connection that reads ``throttled``/``publishInterval`` and filters by them."""

        throttle_ms = 0

        def _handle_subscribe(self, data: bytearray) -> None:
            owner: ServingPublisher = self._parent.owner
            try:
                length = int.from_bytes(bytes(data[1:5]), "big")
                text = bytes(data[5:5 + length]).decode("utf-8", "replace")
                self.throttle_ms = mapping.throttle_interval_ms(mapping.connection_parameters(text))
            except (ValidationError, IndexError) as exc:
                owner.drops["bad_subscribe"] += 1
                log.info("sttp subscriber %s: %s", self._connection_id, exc)
                self.throttle_ms = 0
            if self.throttle_ms:
                owner.counts["throttled_subscriptions"] += 1
            owner.counts["subscriptions"] += 1
            super()._handle_subscribe(data)

        def publish_measurements(self, measurements: list[Any]) -> None:
            throttle = self.throttle_ms
            if throttle:
                owner: ServingPublisher = self._parent.owner
                kept = []
                for m in measurements:
                    served = owner.served(m.signalid)
                    ms, _ = mapping.ms_of_ticks(int(m.timestamp))
                    if served is None or mapping.throttle_passes(ms, throttle, served):
                        kept.append(m)
                measurements = kept
            if measurements:
                super().publish_measurements(measurements)

    class BoundPublisher(base_publisher):  # type: ignore[misc,valid-type]
        def __init__(self, owner: ServingPublisher, _mods: dict[str, ModuleType]) -> None:
            super().__init__()
            self.owner = owner

        def start_on(self, host: str, port: int) -> int:
            """``DataPublisher.start`` on ``host`` instead of every interface."""
            if self.is_started:
                raise ValidationError("the STTP publisher is already started", field="state")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
                sock.listen(16)
            except OSError:
                sock.close()
                raise
            self._server_socket = sock
            self._port = _uint16(sock.getsockname()[1])
            self._started, self._stopped, self._shuttingdown = True, False, False
            self._accept_thread = threading.Thread(target=self._accept_connections, name="sttp-accept", daemon=True)
            self._accept_thread.start()
            return int(sock.getsockname()[1])

        def _accept_connections(self) -> None:
            while self._started and not self._shuttingdown:
                try:
                    client, address = self._server_socket.accept()
                except OSError:
                    return
                with self._subscriber_connections_lock:
                    full = 0 <= self._maximum_allowed_connections <= len(self._subscriber_connections)
                if full:
                    self.owner.counts["clients_refused"] += 1
                    with contextlib.suppress(OSError):
                        client.close()
                    continue
                connection = ThrottlingConnection(self, client, address)
                with self._subscriber_connections_lock:
                    self._subscriber_connections.add(connection)
                connection.start()
                self.owner.counts["clients_total"] += 1

        def stop(self) -> None:
            """The library's stop, with every client's socket shut down first and its reading thread
            let end: the library closes a socket under a thread blocked reading it, which then prints
            a traceback (EBADF) on stderr."""
            sock = self._server_socket
            self._shuttingdown = True
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._subscriber_connections_lock:
                connections = list(self._subscriber_connections)
            for c in connections:
                with contextlib.suppress(OSError):
                    c._socket.shutdown(socket.SHUT_RDWR)
            for c in connections:
                reader = c._read_thread
                if reader is not None and reader is not threading.current_thread():
                    reader.join(timeout=1.0)
            super().stop()

    _PUBLISHER_CLASS = BoundPublisher
    return BoundPublisher


def _uint16(n: int) -> Any:
    import numpy as np

    return np.uint16(n)


# -- republishing ---------------------------------------------------------------------------------

class SourceSubscriber:
    """The library's subscriber to one STTP publisher: metadata and measurements to callbacks (which
    run on the library's threads: the caller hands them to its own loop)."""

    def __init__(self, address: str, filter_expression: str, *,
                 on_metadata: Callable[[list[mapping.SourceMeasurement]], None],
                 on_measurements: Callable[[list[Point]], None],
                 on_connection: Callable[[bool], None],
                 retry_interval_s: float = 1.0, max_retry_interval_s: float = 30.0) -> None:
        mods = load()
        self.address = address
        self.subscriber = mods["subscriber"].Subscriber()
        self.subscriber.statusmessage_logger = lambda message: log.debug("sttp: %s", message)
        self.subscriber.errormessage_logger = lambda message: log.info("sttp subscriber: %s", message)
        self._on_metadata = on_metadata
        self._on_measurements = on_measurements
        self.subscriber.connectionestablished_receiver = lambda: on_connection(True)
        self.subscriber.connectionterminated_receiver = lambda: on_connection(False)
        self.subscriber.metadatanotification_receiver = self._metadata
        # The publisher's metadata changed: ask for it again; the library subscribes again once it
        # arrives (Config.autosubscribe), so new measurements are planned and registered.
        self.subscriber.configurationchanged_receiver = self._configuration_changed
        self.subscriber.set_newmeasurements_receiver(self._measurements)
        self.subscriber.subscribe(filter_expression, mods["settings"].Settings())
        self._config = mods["config"].Config(maxretries=-1, retryinterval=retry_interval_s,
                                             maxretryinterval=max_retry_interval_s, autoreconnect=True)
        self._thread: threading.Thread | None = None
        self.connect_error = ""
        self.configuration_changes = 0
        self._stopping = False

    def start(self) -> None:
        """Connect in the background (the library's connect blocks while it retries)."""
        def connect() -> None:
            err = self.subscriber.connect(self.address, self._config)
            if err is not None and not self._stopping:
                self.connect_error = str(err)
                log.warning("sttp: cannot connect to %s: %s", self.address, err)

        self._thread = threading.Thread(target=connect, name="sttp-connect", daemon=True)
        self._thread.start()

    def _configuration_changed(self) -> None:
        self.configuration_changes += 1
        self.subscriber.request_metadata()

    def _metadata(self, _dataset: Any) -> None:
        cache = self.subscriber.metadatacache
        rates = {d.acronym: int(d.framespersecond or 0) for d in cache.device_records}
        records = [mapping.SourceMeasurement(
            signal_id=m.signalid, point_tag=str(m.pointtag or ""), device=str(m.deviceacronym or ""),
            signal_type=str(m.signalacronym or ""), description=str(m.description or ""),
            frames_per_s=rates.get(m.deviceacronym, 0)) for m in cache.measurement_records]
        self._on_metadata(records)

    def _measurements(self, measurements: list[Any]) -> None:
        self._on_measurements([(m.signalid, int(m.timestamp), float(m.value), int(m.flags)) for m in measurements])

    def stop(self) -> None:
        self._stopping = True  # the connect attempt it cancels is no failure to report
        # Auto-reconnect off first: sttpapi's disconnect thread joins its reconnect thread, which, in a
        # connect attempt, joins the disconnect thread -- both then wait for ever, and so does the
        # process's exit (they are not daemon threads). Cancelled here, no attempt is left to join.
        connector = getattr(getattr(self.subscriber, "_datasubscriber", None), "connector", None)
        if connector is not None:
            with contextlib.suppress(Exception):
                connector.cancel()
        with contextlib.suppress(Exception):
            self.subscriber.disconnect()
        with contextlib.suppress(Exception):
            self.subscriber.dispose()
