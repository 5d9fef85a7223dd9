"""``gridstat history``: times and options (cli/history.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridstat.cli import main as cli_main
from gridstat.cli.history import iso, parse_time
from gridstat.errors import ValidationError

NOW = 1_795_000_000_000


@pytest.mark.parametrize(("text", "ms"), [
    ("now", NOW),
    ("-10m", NOW - 600_000),
    ("-2h", NOW - 7_200_000),
    ("-30s", NOW - 30_000),
    ("-1d", NOW - 86_400_000),
    ("-500ms", NOW - 500),
    ("-1.5h", NOW - 5_400_000),
    ("1795000000123", 1_795_000_000_123),
    ("2026-11-25T08:26:40Z", 1_795_595_200_000),
    ("2026-11-25T08:26:40", 1_795_595_200_000),  # no offset: UTC
    ("2026-11-25T10:26:40+02:00", 1_795_595_200_000),
    ("2026-11-25T08:26:40.250Z", 1_795_595_200_250),
])
def test_times(text: str, ms: int) -> None:
    assert parse_time(text, field="from", now_ms=NOW) == ms


@pytest.mark.parametrize("text", ["yesterday", "1795000000", "-10x", "10m", "", "2026-13-01T00:00:00Z"])
def test_bad_times_name_the_option(text: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_time(text, field="to", now_ms=NOW)
    assert info.value.field == "to"


@given(st.integers(min_value=10**12, max_value=4 * 10**12))
def test_iso_reads_back(ms: int) -> None:
    assert parse_time(iso(ms), field="from") == ms


def test_bad_input_exits_2_with_a_json_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main.main(["history", "pmu1/freq", "--from", "yesterday", "--server", "127.0.0.1:1", "--json"])
    assert code == 2
    err = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["error"]
    assert err["field"] == "from" and err["reason"] == "InvalidArgument"


def test_a_bad_server_address_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["history", "pmu1/freq", "--from=-10m", "--server", "nohost", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["field"] == "server"


def test_an_unreachable_server_exits_4(capsys: pytest.CaptureFixture[str]) -> None:
    from gridstat.core.ports import free_port

    code = cli_main.main(["history", "pmu1/freq", "--from=-10m", "--server", f"127.0.0.1:{free_port()}",
                          "--timeout", "3", "--json"])
    assert code == 4
    assert json.loads(capsys.readouterr().out)["error"]["exit_code"] == 4


def test_history_server_options_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["history-server", "--kafka", ""]) == 2
    assert "--kafka" in capsys.readouterr().err
    assert cli_main.main(["history-server", "--kafka", "127.0.0.1:9092", "--listen", "nowhere"]) == 2
    assert cli_main.main(["history-server", "--kafka", "127.0.0.1:9092", "--max-span-s", "0"]) == 2
    assert cli_main.main(["history-server", "--kafka", "127.0.0.1:9092", "--max-events", "0"]) == 2
