"""Exactly once from a killed exporter to parquet through real Kafka and Spark (docs/telemetry.md, "Exactly once").

A Kafka of its own (real Apache Kafka, ``kafkaprocs``; the measurements topic made with three
partitions, the variables keyed over them) so that the records in it are exactly this test's.
One archive exporter (a real process, ``exporterproc.py``) exports three variables' measurements
while ``spark/archive_ingest.py`` ingests them under ``spark-submit``:

1. the exporter is killed (SIGKILL) part-way and started again under the same name: the same
   ``exporter`` id, a new ``epoch``, ``sequence`` from 1 again;
2. records are produced a second (and third) time, byte for byte, by a new producer session --
   what the exporter's resend after a failed batch does when Kafka had written the first try;
3. the ingest job is killed (SIGKILL, driver and JVM) mid-stream and restarted on its checkpoint
   (in the suite's Spark session); copies of records it had committed before the kill arrive only
   after the restart.

The parquet table then holds every record that is in Kafka once -- each record Kafka
acknowledged to the exporters, and none they did not emit -- although Kafka holds copies. The
same job without its de-duplication, over the same Kafka, writes every copy: the control that
shows the copies are really there. A record of schema version 1 (from an exporter before the
upgrade), in Kafka twice, is read too, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import jsonschema
import pytest

from gridstat.telemetry import records

from .kafkaprocs import ROOT, KafkaProc, consume, start_kafka

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

Key = tuple[str, int, int]
EXPORTER_PROC = Path(__file__).with_name("exporterproc.py")
VARIABLES = 3
PARTITIONS = 3
FIELD = re.compile(r"(\w+)=(\S+)")


class Lines:
    """A child's stdout, read line by line on a thread (so the test never blocks on it)."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line.strip())

    def last(self, word: str) -> dict[str, str] | None:
        for line in reversed(list(self.lines)):
            if line.startswith(word + " "):
                return dict(FIELD.findall(line))
        return None

    def join(self) -> None:
        self._thread.join(timeout=10)


class Exporter:
    """One run of ``exporterproc.py``: what it says it emitted and what Kafka acknowledged."""

    def __init__(self, kafka: str, source: str, pmu: str, base_ms: int, first: int, count: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(EXPORTER_PROC), "--kafka", kafka, "--source", source, "--pmu", pmu,
             "--base-ms", str(base_ms), "--first", str(first), "--count", str(count),
             "--variables", str(VARIABLES), "--pause-s", "0.05"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        assert self.proc.stdout is not None
        self.out = Lines(self.proc.stdout)
        head = self.wait_for(lambda: self.out.last("EXPORTER"), 30)
        self.exporter, self.epoch = head["exporter"], int(head["epoch"])

    def wait_for(self, probe: Any, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = probe()
            if got:
                return got
            assert self.proc.poll() is None or self.out.last("DONE"), "\n".join(self.out.lines[-20:])
            time.sleep(0.05)
        raise AssertionError(f"exporter: nothing within {timeout_s} s:\n" + "\n".join(self.out.lines[-20:]))

    def sequence(self, word: str) -> int:
        line = self.out.last(word)
        return int(line["sequence"]) if line else 0

    @property
    def acked(self) -> set[Key]:
        """Keys of every record Kafka acknowledged (gap records included: they go to another topic)."""
        line = self.out.last("ACKED") or {"sequence": "0", "lost": "0"}
        assert line["lost"] == "0", line
        return {(self.exporter, self.epoch, s) for s in range(1, int(line["sequence"]) + 1)}

    @property
    def emitted(self) -> set[Key]:
        return {(self.exporter, self.epoch, s) for s in range(1, self.sequence("EMITTED") + 1)}

    def kill_while_sending(self) -> None:
        """SIGKILL while a chunk is emitted and not yet acknowledged (buffered or in flight)."""
        self.wait_for(lambda: self.out.lines[-1].startswith("EMITTED"), 30)
        self.kill()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.out.join()

    def wait_done(self, timeout_s: float) -> None:
        self.proc.wait(timeout=timeout_s)
        self.out.join()
        assert self.proc.returncode == 0 and self.out.last("DONE"), "\n".join(self.out.lines[-20:])


def kafka_records(bootstrap: str, exporter: str) -> list[tuple[bytes | None, bytes, dict[str, Any]]]:
    """Every copy of ``exporter``'s records now in the measurements topic: key, value bytes, parsed."""
    out = []
    for key, value in asyncio.run(consume(bootstrap, records.TOPICS.measurements, timeout_s=30)):
        r = json.loads(value)
        if r.get("exporter") == exporter:
            out.append((key, value, r))
    return out


def key_of(r: Any) -> Key:
    return (r["exporter"], int(r["epoch"]), int(r["sequence"]))


async def create_topic(bootstrap: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(records.TOPICS.measurements, PARTITIONS, 1)])
    finally:
        await admin.close()


async def produce_again(bootstrap: str, copies: list[tuple[bytes | None, bytes]]) -> None:
    """Produce records once more, byte for byte, from a new producer session (a resend after a failed batch)."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    try:
        acks = [await producer.send(records.TOPICS.measurements, value=v, key=k) for k, v in copies]
        await asyncio.gather(*acks)
    finally:
        await producer.stop()


def ingested_offsets(ckpt: Path) -> int:
    """Kafka offsets (all partitions) up to which the query's micro-batches are committed, from its checkpoint."""
    done = [int(f) for f in os.listdir(ckpt / "commits") if f.isdigit()] if (ckpt / "commits").is_dir() else []
    if not done:
        return 0
    # offsets/N: a version line, the batch's metadata, then each source's end offsets as JSON
    ends = json.loads((ckpt / "offsets" / str(max(done))).read_text().splitlines()[2])
    return sum(sum(parts.values()) for parts in ends.values())


def table_rows(spark: Any, table: Path, exporter: str) -> list[Any]:
    """The rows of ``exporter`` in the committed part of the table (none before a batch with files is committed)."""
    from pyspark.errors import AnalysisException

    try:
        df = spark.read.parquet(str(table))
    except AnalysisException as exc:  # no table yet, or no file committed yet: nothing to infer a schema from
        if "UNABLE_TO_INFER_SCHEMA" in str(exc) or "PATH_NOT_FOUND" in str(exc):
            return []
        raise
    return (df.where(f"exporter = '{exporter}'")
            .select("exporter", "epoch", "sequence", "event_ts_ms", "value_num", "version").collect())


@pytest.fixture
def own_kafka(tmp_path: Path) -> Iterator[KafkaProc]:
    k = start_kafka(tmp_path / "kafka")
    try:
        asyncio.run(create_topic(k.bootstrap))
        yield k
    finally:
        k.stop()


def test_each_record_is_in_parquet_once_across_exporter_and_ingest_kills(
        own_kafka: KafkaProc, spark: Any, spark_jobs: Path, tmp_path: Path) -> None:
    import archive_ingest

    kafka = own_kafka
    t_start = time.monotonic()
    tag = uuid.uuid4().hex[:6]
    source, pmu = f"hist-eo{tag}", f"pmueo{tag}"
    exporter_id = f"archive/{source}"
    base_ms = (records.now_ms() // 100) * 100
    table, ckpt = tmp_path / "measurements", tmp_path / "ckpt"
    timings: dict[str, float] = {}

    # The ingest job under spark-submit, 50 offsets per micro-batch: it lags behind the exporter.
    with open(tmp_path / "ingest.log", "wb") as log:
        job = subprocess.Popen([str(ROOT / "scripts" / "spark-submit.sh"), str(ROOT / "spark" / "archive_ingest.py"),
                                "--kafka", kafka.bootstrap, "--out", str(table), "--checkpoint", str(ckpt),
                                "--trigger-ms", "200", "--max-offsets-per-trigger", "50"],
                               stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
    assert job.stdout is not None
    job_out = Lines(job.stdout)
    first = second = None
    try:
        deadline = time.monotonic() + 180
        while not job_out.last("STREAMING") and time.monotonic() < deadline:
            assert job.poll() is None, (tmp_path / "ingest.log").read_text()[-3000:]
            time.sleep(0.2)
        assert job_out.last("STREAMING"), (tmp_path / "ingest.log").read_text()[-3000:]
        timings["ingest_started_s"] = time.monotonic() - t_start

        # 1. The exporter, killed part-way: everything up to its last ACKED line is in Kafka.
        first = Exporter(kafka.bootstrap, source, pmu, base_ms, first=0, count=100_000)
        exporting = first
        exporting.wait_for(lambda: exporting.sequence("ACKED") >= 900, 120)
        first.kill_while_sending()
        timings["first_exporter_killed_s"] = time.monotonic() - t_start
        assert first.sequence("EMITTED") < 100_000  # it was killed, not done

        # 2. Copies of every 7th record, while the ingest job runs: some of their originals are
        # ingested already, some not yet.
        in_kafka = kafka_records(kafka.bootstrap, exporter_id)
        copied_early = [(k, v) for k, v, r in in_kafka if r["sequence"] % 7 == 0]
        asyncio.run(produce_again(kafka.bootstrap, copied_early))

        # 3. The ingest job is killed mid-stream, once it has committed some of these records.
        deadline = time.monotonic() + 180
        while ingested_offsets(ckpt) < 150 and time.monotonic() < deadline:
            assert job.poll() is None, (tmp_path / "ingest.log").read_text()[-3000:]
            time.sleep(0.05)
        assert job.poll() is None, (tmp_path / "ingest.log").read_text()[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)  # a crash: no clean stop, likely mid-batch
        job.wait(timeout=30)
        job_out.join()
        if first is not None and first.proc.poll() is None:
            first.kill()
    timings["ingest_killed_s"] = time.monotonic() - t_start
    at_kill = table_rows(spark, table, exporter_id)
    committed_at_kill = {key_of(r) for r in at_kill}
    assert len(at_kill) == len(committed_at_kill)  # exactly once so far, too

    try:
        # 4. The exporter again, under the same name: same id, a new epoch; it finishes cleanly.
        second = Exporter(kafka.bootstrap, source, pmu, base_ms, first=first.sequence("EMITTED") // VARIABLES + 1,
                          count=100)
        second.wait_done(120)
    finally:
        if second is not None and second.proc.poll() is None:
            second.kill()
    timings["second_exporter_done_s"] = time.monotonic() - t_start

    # 5. Copies that reach Kafka only now: of records committed before the ingest was killed (their
    # originals are known only to the checkpoint's state), of the new epoch's records, and third
    # copies of some copied before.
    in_kafka = kafka_records(kafka.bootstrap, exporter_id)
    late = sorted(committed_at_kill)[::5][:40]
    latest = {key_of(r): (k, v) for k, v, r in in_kafka}
    copied_late = ([latest[k] for k in late]
                   + [(k, v) for k, v, r in in_kafka if r["epoch"] == second.epoch and r["sequence"] % 10 == 0]
                   + copied_early[:10])
    asyncio.run(produce_again(kafka.bootstrap, copied_late))
    # A record of schema version 1 (an exporter from before the upgrade), twice.
    old = {**records.measurement(variable=f"{pmu}/old", variable_id=9, event_ts_ms=base_ms, value=60.0,
                                 value_type="float", received_ms=base_ms + 5, interval_ms=100),
           "version": 1, "role": "archive", "source": f"old-{tag}", "instance": "0123456789abcdef", "seq": 7}
    jsonschema.validate(old, json.loads(records.schema_path("measurement", 1).read_text()))
    asyncio.run(produce_again(kafka.bootstrap, [(f"{pmu}/old".encode(), json.dumps(old).encode())] * 2))

    # 6. The ingest job restarted on its checkpoint (the same job code, in the suite's Spark session).
    t_run = time.monotonic()
    query = archive_ingest.start(spark, kafka.bootstrap, str(table), str(ckpt), trigger_ms=200)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    timings["restarted_ingest_s"] = time.monotonic() - t_run

    # The control: the same job without its de-duplication, on a checkpoint of its own.
    control = tmp_path / "control"
    query = archive_ingest.start(spark, kafka.bootstrap, str(control), str(tmp_path / "control-ckpt"),
                                 trigger_ms=200, dedup_horizon=None, query_name="gridstat_archive_ingest_control")
    try:
        query.processAllAvailable()
    finally:
        query.stop()

    in_kafka = kafka_records(kafka.bootstrap, exporter_id)
    copies = Counter(key_of(r) for _, _, r in in_kafka)
    rows = table_rows(spark, table, exporter_id)
    keys = [key_of(r) for r in rows]
    in_control = Counter(key_of(r) for r in table_rows(spark, control, exporter_id))

    # Kafka holds copies (the control writes each of them) ...
    assert {k for k, n in copies.items() if n > 1} >= {key_of(json.loads(v)) for _, v in copied_early + copied_late}
    assert in_control == copies and sum(in_control.values()) > len(in_control)
    # ... the table each record once: all that Kafka holds, all that Kafka acknowledged, nothing not emitted.
    assert len(keys) == len(set(keys)), [k for k, n in Counter(keys).items() if n > 1][:10]
    assert set(keys) == set(copies)
    # A gap record (after a retried batch) takes a sequence number too, on the gaps topic.
    gaps = {key_of(json.loads(v)) for _, v in asyncio.run(consume(kafka.bootstrap, records.TOPICS.gaps, timeout_s=5))
            if json.loads(v).get("exporter") == exporter_id}
    acked, emitted = (first.acked | second.acked) - gaps, first.emitted | second.emitted
    assert acked <= set(keys) <= emitted, (len(acked - set(keys)), len(set(keys) - emitted))
    # The copies that arrived after the restart, of records committed before it, are not in twice.
    in_table = Counter(keys)
    assert all(copies[k] >= 2 and in_table[k] == 1 for k in late)
    # Two epochs of one exporter, each numbered from 1; the rows are the records of their keys.
    assert {e for _, e, _ in keys} == {first.epoch, second.epoch} and second.epoch > first.epoch
    assert min(s for _, e, s in keys if e == second.epoch) == 1 == min(s for _, e, s in keys if e == first.epoch)
    sent = {key_of(r): (r["event_ts_ms"], r["value_num"]) for _, _, r in in_kafka}
    assert all(sent[key_of(r)] == (r["event_ts_ms"], r["value_num"]) and r["version"] == 2 for r in rows)
    # The version 1 record is read as version 2 columns, once.
    (old_row,) = table_rows(spark, table, f"archive/old-{tag}")
    assert (old_row["epoch"], old_row["sequence"], old_row["version"]) == (-int("0123456789abcde", 16), 7, 1)
    # The ingest job really was killed mid-stream: Kafka held records of the first epoch it had not committed.
    assert 100 <= len(committed_at_kill) < len({k for k in keys if k[1] == first.epoch})

    lost_at_kill = len(first.emitted) - len({k for k in keys if k[1] == first.epoch})
    print(f"records {len(keys)} (epochs {first.epoch}: {len(first.emitted)} emitted, {len(first.acked)} acknowledged, "
          f"{lost_at_kill} lost in the kill; {second.epoch}: {len(second.emitted)}); copies in Kafka "
          f"{sum(copies.values()) - len(copies)}; in the table at the ingest kill {len(committed_at_kill)}; "
          + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
