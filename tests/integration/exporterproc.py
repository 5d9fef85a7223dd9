"""A real exporter process for the exactly-once tests: archive records of one PMU through ``TelemetryExporter``.

    python tests/integration/exporterproc.py --kafka HOST:PORT --source NAME --pmu PMU --first K --count N

Emits ``measurement`` records (variables ``PMU/v0`` ... ``PMU/v<V-1>``, one record each per
100 ms instant from instant ``K``) in chunks, and after each chunk waits until Kafka
acknowledged it (``flush``), printing::

    EXPORTER exporter=ID epoch=E                    once, at start
    EMITTED sequence=S                              the chunk up to S is emitted (buffered)
    ACKED sequence=S lost=L                         everything up to S is acknowledged by Kafka (L lost so far)
    DONE sequence=S lost=L                          after a clean stop

so that a test that kills this process (SIGKILL) knows which records Kafka acknowledged: every
``sequence`` up to the last ``ACKED`` line, and maybe some up to the last ``EMITTED`` one.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from gridstat.telemetry import ExporterConfig, TelemetryExporter, records


async def run(args: argparse.Namespace) -> int:
    exp = TelemetryExporter(ExporterConfig(bootstrap=args.kafka, role="archive", source=args.source,
                                           request_timeout_ms=5000))
    print(f"EXPORTER exporter={exp.exporter_id} epoch={exp.epoch}", flush=True)
    await exp.start()
    variables = [f"{args.pmu}/v{j}" for j in range(args.variables)]
    k = args.first
    end = args.first + args.count
    while k < end:
        for _ in range(min(args.chunk, end - k)):
            ts = args.base_ms + 100 * k
            for j, var in enumerate(variables):
                exp.emit(records.TOPICS.measurements, records.measurement(
                    variable=var, variable_id=j + 1, event_ts_ms=ts, value=60.0 + (k % 10) / 1000,
                    value_type="float", received_ms=ts + 5, interval_ms=100), key=var)
            k += 1
        print(f"EMITTED sequence={exp.last_sequence}", flush=True)
        await exp.flush(30)
        print(f"ACKED sequence={exp.last_sequence} lost={exp.stats.lost_total}", flush=True)
        await asyncio.sleep(args.pause_s)
    await exp.stop()
    print(f"DONE sequence={exp.last_sequence} lost={exp.stats.lost_total}", flush=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kafka", required=True)
    p.add_argument("--source", required=True, help="the archive's name: the exporter id is archive/SOURCE")
    p.add_argument("--pmu", required=True)
    p.add_argument("--base-ms", type=int, required=True, help="event time of instant 0")
    p.add_argument("--first", type=int, default=0, help="first instant")
    p.add_argument("--count", type=int, required=True, help="instants to export")
    p.add_argument("--variables", type=int, default=1, help="variables of the PMU (records per instant)")
    p.add_argument("--chunk", type=int, default=10, help="instants emitted between two flushes")
    p.add_argument("--pause-s", type=float, default=0.02, help="pause after each acknowledged chunk")
    return asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
