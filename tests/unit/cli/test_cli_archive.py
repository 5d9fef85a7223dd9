"""``gridstat archive``: its variable list and its options are checked before anything connects."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridstat.cli import main as cli_main
from gridstat.cli.archive import parse_variables
from gridstat.cli.subscribe import listen_and_advertise
from gridstat.errors import ValidationError


def test_each_variable_takes_its_own_interval_or_the_default() -> None:
    assert parse_variables(["pmu1/freq:20", "pmu2/vmag"], 100) == [("pmu1/freq", 20), ("pmu2/vmag", 100)]


@pytest.mark.parametrize("specs", [["pmu1"], ["pmu1/freq:x"], ["pmu1/freq:0"], ["pmu1/freq", "pmu1/freq:50"]])
def test_bad_variable_lists_are_refused(specs: list[str]) -> None:
    with pytest.raises(ValidationError):
        parse_variables(specs, 100)


def test_archive_is_a_subcommand_with_the_telemetry_options() -> None:
    args = cli_main.build_parser("archive").parse_args(
        ["archive", "--edge", "127.0.0.1:7801", "--kafka", "127.0.0.1:9092", "--metrics-port", "0", "pmu1/freq:20"])
    assert (args.edge, args.kafka, args.metrics_port, args.variables) == (
        "127.0.0.1:7801", "127.0.0.1:9092", 0, ["pmu1/freq:20"])


def test_archive_without_kafka_exits_with_a_usage_error(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRIDSTAT_KAFKA", raising=False)
    assert cli_main.main(["archive", "--edge", "127.0.0.1:1", "pmu1/freq"]) == 2
    assert "needs --kafka" in capsys.readouterr().err


def test_a_missing_tls_file_or_half_a_key_pair_exits_with_a_usage_error(capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Path) -> None:
    base = ["archive", "--edge", "127.0.0.1:1", "--kafka", "127.0.0.1:9", "pmu1/freq"]
    assert cli_main.main([*base, "--tls-ca", str(tmp_path / "nope.pem")]) == 2
    assert "--tls-ca" in capsys.readouterr().err
    assert cli_main.main([*base, "--tls-cert", str(tmp_path / "c.pem")]) == 2
    assert "--tls-cert and --tls-key go together" in capsys.readouterr().err


def test_in_a_pod_the_archive_listens_everywhere_and_registers_the_pods_address() -> None:
    """As `gridstat subscribe` (docs/kubernetes.md, "Telemetry, archive and Spark jobs")."""
    args = cli_main.build_parser("archive").parse_args(["archive", "--edge", "e:1", "pmu1/freq"])
    assert listen_and_advertise(args.listen_host, args.advertise_host, {"POD_IP": "10.88.0.7"}) == \
        ("0.0.0.0", "10.88.0.7")
    assert listen_and_advertise(args.listen_host, args.advertise_host, {}) == ("127.0.0.1", "127.0.0.1")
