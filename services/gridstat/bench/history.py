"""``gridstat bench history``: a 1-hour window of a 60 Hz variable out of a 24-hour archive (docs/history.md).

Fills a real Kafka (started through scripts/kafka.sh, or ``--kafka``) with ``--hours`` (24) of one
60 frames/s variable, ``pmu1/freq`` (86,400 x 60 = 5,184,000 records), interleaved in time with
``--others`` (3) other variables at 10 Hz in the same topic: the same measurement JSON the
``Archiver`` writes (``records.measurement`` with the exporter's stamps), lz4-compressed, the event
time as the Kafka record timestamp, each record in its key's partition, written in bulk
(``telemetry.archive_loading``). Then it starts ``gridstat history-server`` and times ``--reps`` (5)
queries of distinct 1-hour windows at full rate (216,000 events) and at 100 ms (36,000 events)
through the SDK's ``HistoryClient.fetch``: wall time from the request to the last event decoded,
on the client. The reader alone (in process, no gRPC) is timed too, to show where the time goes.

Bytes per event on disk: the topic's log segments (``du`` of its partition folders, a broker this
bench started) divided by the records written; used for the sizing table of docs/history.md.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gridstat.bench import report
from gridstat.telemetry import archive_loading, records
from gridstat.telemetry.archive_reading import ArchiveReader, ReadStats
from gridstat.telemetry.localkafka import LocalKafka
from gridstat.telemetry.records import TOPICS

Log = Callable[[str], None]
VARIABLE = "pmu1/freq"
FRAMES_PER_S = 60
TARGET_S = 1.0
WEEK_MS = 7 * 24 * 3600 * 1000


def frame_ts(base_ms: int, frame: int, fps: int) -> int:
    """Frame ``frame`` after ``base_ms`` (a whole second) in milliseconds, rounded to the nearest."""
    return base_ms + (2000 * frame + fps) // (2 * fps)


def _value_json(variable: str, variable_id: int, ts: int, value: float, interval_ms: int, pub_ms: int, fps: int,
                seq: int, epoch: int) -> bytes:
    rec = records.measurement(variable=variable, variable_id=variable_id, event_ts_ms=ts, value=value,
                              value_type="float", received_ms=ts + 3, interval_ms=interval_ms,
                              pub_interval_ms=pub_ms, frames_per_s=fps, ts_ms=ts + 3)
    # What TelemetryExporter.emit stamps on every record.
    rec["role"], rec["source"], rec["exporter"] = "archive", "bench", "archive/bench"
    rec["epoch"], rec["sequence"] = epoch, seq
    return json.dumps(rec, separators=(",", ":"), allow_nan=False).encode()


def archive_rows(start_ms: int, hours: float, others: int) -> Iterator[tuple[bytes, int, bytes]]:
    """The archive's records in time order: ``VARIABLE`` at 60 frames/s, ``others`` variables at 10 Hz."""
    key = VARIABLE.encode()
    other_keys = [(f"pmu{i + 2}/freq".encode(), i + 2) for i in range(others)]
    epoch = start_ms * 1000
    seq = 0
    pub_ms = 1000 // FRAMES_PER_S
    for s in range(int(hours * 3600)):
        base = start_ms + s * 1000
        others_at = {base + k * 100 for k in range(10)} if other_keys else set()
        for f in range(FRAMES_PER_S):
            ts = frame_ts(base, f, FRAMES_PER_S)
            seq += 1
            yield key, ts, _value_json(VARIABLE, 1, ts, 60.0 + 0.02 * math.sin(ts / 7000.0), pub_ms, pub_ms,
                                       FRAMES_PER_S, seq, epoch)
            if ts in others_at:
                for k, vid in other_keys:
                    seq += 1
                    yield k, ts, _value_json(k.decode(), vid, ts, 59.99, 100, 100, 0, seq, epoch)


def _topic_bytes(data_dir: Path, topic: str) -> int:
    total = 0
    for part in data_dir.glob(f"{topic}-*"):
        for f in part.iterdir():
            if f.suffix == ".log":
                total += f.stat().st_size
    return total


async def _time_reader(bootstrap: str, frm: int, to: int, interval: int) -> tuple[float, int, ReadStats]:
    from gridstat.history import querying

    reader = ArchiveReader(bootstrap)
    q = querying.validate(VARIABLE, from_ms=frm, to_ms=to, interval_ms=interval)
    ans = querying.Answering(q)
    stats = ReadStats()
    t0 = time.perf_counter()
    n = 0
    async for b in reader.read(VARIABLE, from_ms=frm, to_ms=to, stats=stats, choose=lambda p: ans.choose(
            archive_interval_ms=p.interval_ms, pub_interval_ms=p.pub_interval_ms, frames_per_s=p.frames_per_s)):
        n += len(b)
    return time.perf_counter() - t0, n, stats


async def _time_client(server: str, frm: int, to: int, interval: int) -> tuple[float, int]:
    from gridstat.client.history import HistoryClient

    client = await HistoryClient.connect(server)
    try:
        await client.health()  # connected before the clock starts
        t0 = time.perf_counter()
        events = await client.fetch(VARIABLE, from_ms=frm, to_ms=to, interval_ms=interval)
        return time.perf_counter() - t0, len(events)
    finally:
        await client.close()


def _start_server(bootstrap: str, log: Log) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "gridstat.cli.main", "history-server", "--kafka", bootstrap,
                             "--listen", "127.0.0.1:0", "--exit-with-parent"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError(f"history-server did not start: {line!r}")
    port = dict(kv.split("=", 1) for kv in line.split()[1:])["port"]
    log(f"history: {line.strip()}")
    return proc, f"127.0.0.1:{port}"


def run_history_bench(*, hours: float = 24.0, others: int = 3, reps: int = 5, partitions: int = 1,
                      kafka: str | None = None, log: Log) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="gridstat-bench-history-"))
    local: LocalKafka | None = None
    if kafka is None:
        local = LocalKafka(tmp / "kafka")
        log(f"history: starting Kafka in {tmp / 'kafka'}")
        local.start()
        kafka = local.bootstrap
    res: dict[str, Any] = {"hours": hours, "others": others, "reps": reps, "partitions": partitions}
    try:
        now = int(time.time()) * 1000
        start_ms = now - int(hours * 3600) * 1000
        created = asyncio.run(archive_loading.create_topic(kafka, TOPICS.measurements, partitions=partitions,
                                                           retention_ms=WEEK_MS))
        if not created:
            log(f"history: {TOPICS.measurements} exists already in {kafka}: adding to it")
        log(f"history: loading {hours:g} h of {VARIABLE} at {FRAMES_PER_S} frames/s and {others} others at 10 Hz")
        t0 = time.perf_counter()
        n = asyncio.run(archive_loading.load(kafka, TOPICS.measurements, archive_rows(start_ms, hours, others),
                                             progress=lambda k: log(f"history: {k:,} records")))
        res["load_s"] = time.perf_counter() - t0
        res["records"] = n
        res["target_records"] = int(hours * 3600) * FRAMES_PER_S
        log(f"history: {n:,} records in {res['load_s']:.0f} s")
        if local is not None:
            time.sleep(2.0)
            size = _topic_bytes(local.directory / "data", TOPICS.measurements)
            res["log_bytes"] = size
            res["bytes_per_event"] = size / n if n else 0.0
        res["load"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        proc, server = _start_server(kafka, log)
        try:
            span_h = max(1, int(hours)) - 1
            for name, interval in (("full rate", 0), ("100 ms", 100)):
                walls, readers, counts, scans = [], [], set(), []
                for i in range(reps):
                    h = (1 + 4 * i) % max(1, span_h)
                    frm = start_ms + h * 3_600_000 + 1
                    to = frm + 3_600_000 - 1
                    wall, got = asyncio.run(_time_client(server, frm, to, interval))
                    rwall, rgot, stats = asyncio.run(_time_reader(kafka, frm, to, interval))
                    walls.append(wall)
                    readers.append(rwall)
                    counts.add((got, rgot))
                    scans.append(stats.scanned)
                    log(f"history: {name} window {i + 1}: {got:,} events, {wall:.3f} s through gRPC, "
                        f"reader alone {rwall:.3f} s ({stats.scanned:,} records read)")
                res[name] = {"walls": walls, "readers": readers, "counts": sorted(counts), "scanned": scans}
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        res["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    finally:
        if local is not None:
            local.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # the broker's log: hundreds of MiB
    return res


def history_report(res: dict[str, Any], facts: dict[str, str]) -> str:
    rows = []
    ok_all = True
    for name in ("full rate", "100 ms"):
        r = res[name]
        med, worst = statistics.median(r["walls"]), max(r["walls"])
        ok = worst <= TARGET_S
        ok_all = ok_all and ok
        events = ", ".join(f"{a:,}" for a, _ in r["counts"])
        rows.append([name, events, f"{med:.3f}", f"{worst:.3f}", f"{statistics.median(r['readers']):.3f}",
                     f"{statistics.median(r['scanned']):,.0f}", report.pf(ok)])
    bpe = res.get("bytes_per_event")
    size = (f"{res['log_bytes'] / 2**20:,.0f} MiB of log segments for {res['records']:,} records: "
            f"**{bpe:.1f} bytes per event** on disk (lz4, JSON)") if bpe else "log size not measured (--kafka)"
    lines = [
        "## History queries (gridstat bench history)",
        "",
        f"{report.facts_md(facts)} Load average after loading: {res['load']}; after the queries: {res['load_after']}.",
        "",
        f"A {res['hours']:g}-hour archive of `{VARIABLE}` at {FRAMES_PER_S} frames/s ({res['target_records']:,} "
        f"records) and {res['others']} other variables at 10 Hz in the same topic ({res['partitions']} partition(s)), "
        f"{res['records']:,} records in all, loaded in {res['load_s']:.0f} s. {size}.",
        "",
        f"Queries of {res['reps']} distinct 1-hour windows through `gridstat history-server` and the SDK's "
        "`HistoryClient.fetch` (wall time from the request to the last event decoded; the reader alone, in "
        f"process without gRPC, beside it). Target: <= {TARGET_S:g} s.",
        "",
        report.table(["rate", "events", "median s", "max s", "reader alone, median s", "records read", "<= 1 s"],
                     rows),
        "",
        "Records read are the records of the partition from `offsets_for_times(from)` to the first of the "
        "variable past `to` (the other variables' records in between included), not the whole archive.",
    ]
    if not ok_all:
        lines += ["", "The target was missed on this run; see the figures above."]
    return "\n".join(lines)
