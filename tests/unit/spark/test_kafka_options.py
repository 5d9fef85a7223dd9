"""The Spark jobs' pass-through of Kafka client options (spark/telemetry_io.py; docs/telemetry.md, "Kafka security")."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "spark"))
import telemetry_io as tio

JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="gs" '
        'password="pw=with=equals";')


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--kafka", required=True)
    tio.add_kafka_options(p)
    return p


def test_options_are_parsed_with_equals_in_the_value() -> None:
    assert tio.parse_kafka_options(["kafka.security.protocol=SASL_SSL", "kafka.sasl.mechanism=SCRAM-SHA-512",
                                    f"kafka.sasl.jaas.config={JAAS}"]) == {
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": JAAS}


@pytest.mark.parametrize("item", ["kafka.security.protocol", "=SSL", "security.protocol=SSL",
                                  "kafka.bootstrap.servers=x:9092", "subscribe=t"])
def test_bad_options_are_refused(item: str) -> None:
    with pytest.raises(ValueError, match="--kafka-option"):
        tio.parse_kafka_options([item])


def test_a_job_takes_them_from_the_command_line_and_a_file(tmp_path: Path) -> None:
    f = tmp_path / "kafka.properties"
    f.write_text(f"# the password stays off the command line\nkafka.sasl.jaas.config={JAAS}\n\n"
                 "kafka.security.protocol=SSL\n")
    p = _parser()
    args = p.parse_args(["--kafka", "k:9093", "--kafka-options-file", str(f),
                         "--kafka-option", "kafka.security.protocol=SASL_SSL",
                         "--kafka-option", "kafka.ssl.truststore.type=PEM"])
    try:
        options = tio.use_kafka_options(p, args)
        assert options == tio.KAFKA_OPTIONS == {"kafka.sasl.jaas.config": JAAS, "kafka.security.protocol": "SASL_SSL",
                                                "kafka.ssl.truststore.type": "PEM"}  # the command line wins
    finally:
        tio.KAFKA_OPTIONS.clear()


def test_a_bad_option_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _parser()
    with pytest.raises(SystemExit) as info:
        tio.use_kafka_options(p, p.parse_args(["--kafka", "k:9093", "--kafka-option", "ssl.truststore.type=PEM"]))
    assert info.value.code == 2 and "kafka.<name>" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tio.use_kafka_options(p, p.parse_args(["--kafka", "k:9093", "--kafka-options-file", str(tmp_path / "no")]))
    assert tio.KAFKA_OPTIONS == {}


def test_every_job_takes_them() -> None:
    spark = Path(tio.__file__).parent
    for job in ("archive_analytics", "archive_ingest", "model_validation", "qos_alerts", "qos_compliance"):
        text = (spark / f"{job}.py").read_text()
        assert "tio.add_kafka_options(p)" in text and "tio.use_kafka_options(p, args)" in text, job
