"""Every Kafka client of GridStat over TLS and SASL, against a real Kafka (docs/telemetry.md, "Kafka security").

The module's own Kafka (KRaft, one node, the jars of ``scripts/kafka.sh fetch``) listens on 127.0.0.1
only, on ports of its own: ``SSL`` with client certificates required, ``SASL_SSL`` with
SCRAM-SHA-512 (the user made at format time, ``kafka-storage format --add-scram``), and a
``PLAINTEXT`` listener between the node and itself. Certificates come from the project's own CA
recipe (``demo.certs``, as ``gridstat up``). Then:

* a real router process, started with ``--kafka-tls-ca --kafka-sasl-mechanism SCRAM-SHA-512`` and its
  credentials in ``GRIDSTAT_KAFKA_SASL_USERNAME/PASSWORD``, exports its counters over SASL_SSL, read
  back over SASL_SSL;
* the archive path: the exporter writes measurements over SASL_SSL, the archive loader makes the
  topic, and ``gridstat history-server`` reads them over SSL with a client certificate, answering the
  SDK;
* a wrong password is a clear error, counted by reason and logged, and no crash: the exporter buffers
  as it does while Kafka is away; the history service answers ``KafkaAuthenticationFailed``; a CA
  that did not sign Kafka's certificate is a ``tls`` failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gridstat.client import HistoryClient
from gridstat.core.ports import free_port, port_answers
from gridstat.demo import certs as demo_certs
from gridstat.errors import GridStatError
from gridstat.telemetry import ExporterConfig, TelemetryExporter, archive_loading, records
from gridstat.telemetry.archive_reading import ArchiveReader
from gridstat.telemetry.kafka_security import KafkaAuthenticationFailed, KafkaSecurity

from .kafkaprocs import ROOT, wait_ready
from .routerprocs import start_router

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

USER = "gridstat-test"
PASSWORD = "s3cret-" + uuid.uuid4().hex[:8]


@dataclass
class SecureKafka:
    plaintext: str  # the node's own listener (inter-broker); the tests use the two below
    ssl: str  # SSL, client certificate required
    sasl_ssl: str  # SASL_SSL, SCRAM-SHA-512
    certs: demo_certs.CertDir
    password_file: Path

    def sasl(self, password: str = PASSWORD) -> KafkaSecurity:
        return KafkaSecurity(ca_file=str(self.certs.ca), sasl_mechanism="SCRAM-SHA-512", sasl_username=USER,
                             sasl_password=password)

    def mtls(self, name: str = "history") -> KafkaSecurity:
        return KafkaSecurity(ca_file=str(self.certs.ca), cert_file=str(self.certs.cert(name)),
                             key_file=str(self.certs.key(name)))


def _properties(d: Path, ports: dict[str, int], certs: demo_certs.CertDir, keystore: Path) -> str:
    p = ports
    return f"""\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{p['controller']}
listeners=PLAINTEXT://127.0.0.1:{p['plaintext']},SSL://127.0.0.1:{p['ssl']},SASL_SSL://127.0.0.1:{p['sasl_ssl']},\
CONTROLLER://127.0.0.1:{p['controller']}
advertised.listeners=PLAINTEXT://127.0.0.1:{p['plaintext']},SSL://127.0.0.1:{p['ssl']},\
SASL_SSL://127.0.0.1:{p['sasl_ssl']}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
ssl.keystore.type=PEM
ssl.keystore.location={keystore}
ssl.truststore.type=PEM
ssl.truststore.location={certs.ca}
listener.name.ssl.ssl.client.auth=required
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
log.dirs={d / 'data'}
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
"""


@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    d = tmp_path_factory.mktemp("kafka-secure")
    certs = demo_certs.ensure(d / "certs", ["kafka", "history", "router"], days=2).certs
    keystore = d / "kafka-keystore.pem"  # Kafka's PEM keystore: the key, then the certificate
    keystore.write_bytes(certs.key("kafka").read_bytes() + certs.cert("kafka").read_bytes())
    keystore.chmod(0o600)
    fetched = subprocess.run([str(ROOT / "scripts" / "kafka.sh"), "fetch"], capture_output=True, text=True,
                             timeout=900, check=True)
    libs = fetched.stdout.strip().splitlines()[-1]
    ports = {k: free_port() for k in ("plaintext", "ssl", "sasl_ssl", "controller")}
    props = d / "server.properties"
    props.write_text(_properties(d, ports, certs, keystore))
    java = ["java", "-cp", f"{libs}/*"]
    cluster_id = subprocess.run([*java, "kafka.tools.StorageTool", "random-uuid"], capture_output=True, text=True,
                                check=True, timeout=60).stdout.strip()
    fmt = subprocess.run([*java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props),
                          "--add-scram", f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]"],
                         capture_output=True, text=True, timeout=60)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
    log = open(d / "kafka.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([*java[:1], "-Xmx384m", "-Xms64m", "-XX:+UseG1GC",
                             f"-Dlog4j2.configurationFile={ROOT / 'infra' / 'kafka' / 'log4j2.yaml'}", *java[1:],
                             "kafka.Kafka", str(props)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    password_file = d / "kafka-password"
    password_file.write_text(PASSWORD + "\n")  # as `echo` writes it: the newline is not the password's
    password_file.chmod(0o600)
    try:
        deadline = time.monotonic() + 60
        while not all(port_answers(p) for p in ports.values()):
            assert proc.poll() is None, (d / "kafka.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the secured Kafka did not open its ports in 60 s"
            time.sleep(0.2)
        wait_ready(f"127.0.0.1:{ports['plaintext']}", timeout_s=30)
        yield SecureKafka(f"127.0.0.1:{ports['plaintext']}", f"127.0.0.1:{ports['ssl']}",
                          f"127.0.0.1:{ports['sasl_ssl']}", certs, password_file)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


async def _consume(bootstrap: str, security: KafkaSecurity, topic: str, *, min_records: int,
                   timeout_s: float = 30.0, source: str = "") -> list[dict[str, Any]]:
    """The records of ``topic`` (of ``source`` only, if given), read from the start until ``min_records``."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", **security.client_kwargs())
    await consumer.start()
    out: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(out) < min_records and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=300)
            for msgs in batch.values():
                for m in msgs:
                    record = json.loads(m.value)
                    if not source or record.get("source") == source:
                        out.append(record)
    finally:
        await consumer.stop()
    return out


def test_a_router_exports_over_sasl_ssl_with_its_credentials_from_the_environment(
        secure_kafka: SecureKafka, monkeypatch: pytest.MonkeyPatch) -> None:
    k = secure_kafka
    monkeypatch.setenv("GRIDSTAT_KAFKA_SASL_USERNAME", USER)
    monkeypatch.setenv("GRIDSTAT_KAFKA_SASL_PASSWORD", PASSWORD)
    router = start_router("sec-r1", 71, extra=("--kafka", k.sasl_ssl, "--kafka-tls-ca", str(k.certs.ca),
                                              "--kafka-sasl-mechanism", "SCRAM-SHA-512",
                                              "--telemetry-interval-ms", "200"))
    try:
        got = asyncio.run(_consume(k.sasl_ssl, k.sasl(), records.TOPICS.counters, min_records=3, source="sec-r1"))
    finally:
        router.stop()
    assert len(got) >= 3, "no counters of the router arrived over SASL_SSL"
    assert {r["role"] for r in got} == {"router"} and all(r["exporter"] == "router/sec-r1" for r in got)


def test_a_password_on_the_command_line_is_not_an_option_and_a_bad_file_names_its_flag(
        secure_kafka: SecureKafka, tmp_path: Path) -> None:
    k = secure_kafka
    base = [sys.executable, "-m", "gridstat.cli.main", "history-server", "--kafka", k.sasl_ssl, "--listen",
            "127.0.0.1:0", "--kafka-tls-ca", str(k.certs.ca), "--kafka-sasl-mechanism", "SCRAM-SHA-512",
            "--kafka-sasl-username", USER]
    env = {k_: v for k_, v in os.environ.items() if not k_.startswith("GRIDSTAT_KAFKA_SASL")}
    out = subprocess.run([*base, "--kafka-sasl-password", PASSWORD], capture_output=True, text=True, env=env,
                         timeout=30)
    assert out.returncode == 2 and "never given on the command line" in out.stderr, out.stderr
    assert PASSWORD not in out.stderr
    out = subprocess.run([*base, "--kafka-sasl-password-file", str(tmp_path / "missing")], capture_output=True,
                         text=True, env=env, timeout=30)
    assert out.returncode == 2 and "--kafka-sasl-password-file" in out.stderr, out.stderr


def test_the_exporter_writes_over_sasl_ssl_and_the_history_service_reads_over_mtls(secure_kafka: SecureKafka) -> None:
    k = secure_kafka
    topic = "gridstat.test.secure-archive"
    base_ms = (int(time.time()) - 120) * 1000

    async def archive() -> TelemetryExporter:
        assert await archive_loading.create_topic(k.sasl_ssl, topic, partitions=2, security=k.sasl())
        exp = TelemetryExporter(ExporterConfig(bootstrap=k.sasl_ssl, role="archive", source="sec-archive",
                                               security=k.sasl()))
        await exp.start()
        for i in range(600):
            ts = base_ms + 100 * i
            exp.emit(topic, records.measurement(variable="spmu/freq", variable_id=1, event_ts_ms=ts,
                                                value=60.0 + i / 1000, value_type="float", received_ms=ts + 3,
                                                interval_ms=100), key="spmu/freq", timestamp_ms=ts)
        await exp.flush(30)
        await exp.stop()
        return exp

    exp = asyncio.run(archive())
    assert exp.stats.lost_total == 0 and exp.stats.sent[topic] == 600 and not exp.stats.connect_failures

    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "history-server", "--kafka", k.ssl,
                             "--topic", topic, "--listen", "127.0.0.1:0", "--kafka-tls-ca", str(k.certs.ca),
                             "--kafka-tls-cert", str(k.certs.cert("history")),
                             "--kafka-tls-key", str(k.certs.key("history")), "--exit-with-parent"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY"), line + (proc.stderr.read() if proc.stderr else "")
        addr = f"127.0.0.1:{line.split('port=', 1)[1].split()[0]}"

        async def fetch() -> list[Any]:
            client = await HistoryClient.connect(addr)
            try:
                return list(await client.fetch("spmu/freq", from_ms=base_ms, to_ms=base_ms + 59_999))
            finally:
                await client.close()

        events = asyncio.run(fetch())
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    assert [e.timestamp_ms for e in events] == [base_ms + 100 * i for i in range(600)]
    assert events[10].value == pytest.approx(60.010)
    assert proc.stderr is not None and "does not answer" not in proc.stderr.read()


def test_a_wrong_password_is_counted_and_logged_and_the_exporter_buffers(
        secure_kafka: SecureKafka, caplog: pytest.LogCaptureFixture) -> None:
    k = secure_kafka

    async def run() -> TelemetryExporter:
        exp = TelemetryExporter(ExporterConfig(bootstrap=k.sasl_ssl, role="router", source="sec-wrong",
                                               security=k.sasl("not-the-password")))
        await exp.start()
        for i in range(5):
            exp.emit(records.TOPICS.counters, {"n": i})
        deadline = time.monotonic() + 20
        while exp.stats.connect_failures["authentication"] < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert exp.buffered == 5 and not exp.stats.connected
        await exp.stop(timeout_s=0.5)
        return exp

    with caplog.at_level(logging.WARNING, logger="gridstat.telemetry.exporting"):
        exp = asyncio.run(run())
    assert exp.stats.connect_failures["authentication"] >= 2, exp.stats
    assert "refused the SASL login" in exp.stats.last_error and "SCRAM-SHA-512" in exp.stats.last_error
    assert "not-the-password" not in exp.stats.last_error
    assert exp.stats.lost["stopped"] == 5 and exp.stats.sent.total() == 0
    warnings = [r.getMessage() for r in caplog.records if "refused the SASL login" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once while it keeps failing the same way, not at every retry


def test_the_history_service_says_a_refused_login_and_a_foreign_ca(secure_kafka: SecureKafka, tmp_path: Path) -> None:
    k = secure_kafka
    wrong = ArchiveReader(k.sasl_ssl, security=k.sasl("not-the-password"), request_timeout_ms=5000)
    problem = asyncio.run(wrong.problem())
    assert isinstance(problem, KafkaAuthenticationFailed) and "refused the SASL login" in problem.message

    other = demo_certs.ensure(tmp_path / "other-ca", ["history"], days=2).certs
    foreign = ArchiveReader(k.ssl, security=KafkaSecurity(ca_file=str(other.ca)), request_timeout_ms=5000)
    problem = asyncio.run(foreign.problem())
    assert isinstance(problem, KafkaAuthenticationFailed) and "TLS to Kafka" in problem.message, problem

    # the service itself: a warning at start, and every query fails with the reason, the process stays up
    env = {**os.environ, "GRIDSTAT_KAFKA_SASL_USERNAME": USER}
    bad = tmp_path / "bad-password"
    bad.write_text("not-the-password")
    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "history-server", "--kafka", k.sasl_ssl,
                             "--listen", "127.0.0.1:0", "--kafka-tls-ca", str(k.certs.ca), "--kafka-sasl-mechanism",
                             "SCRAM-SHA-512", "--kafka-sasl-password-file", str(bad), "--kafka-timeout-ms", "5000",
                             "--exit-with-parent"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY"), line + (proc.stderr.read() if proc.stderr else "")
        addr = f"127.0.0.1:{line.split('port=', 1)[1].split()[0]}"

        async def fetch() -> None:
            client = await HistoryClient.connect(addr)
            try:
                await client.fetch("spmu/freq", from_ms=1_795_000_000_000, to_ms=1_795_000_060_000)
            finally:
                await client.close()

        with pytest.raises(GridStatError) as info:
            asyncio.run(fetch())
        assert info.value.reason == "KafkaAuthenticationFailed", info.value
        assert proc.poll() is None
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert "refused the SASL login" in err and "not-the-password" not in err, err
