"""The options of ``gridstat sttp-server`` and ``gridstat sttp-gateway`` (docs/sttp.md): defaults,
loopback unless ``--allow-remote``, every bad value refused with its flag named (exit 2), and sttpapi
an optional extra: imported only when a gateway starts, its absence a clear error."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from gridstat.cli import main as cli_main
from gridstat.cli import sttp_gateway, sttp_server
from gridstat.core.model import FLOAT
from gridstat.errors import ValidationError
from gridstat.gateways.pdc.configs import PHASOR_TYPE
from gridstat.gateways.sttp import library


def server_args(*extra: str) -> argparse.Namespace:
    return cli_main.build_parser("sttp-server").parse_args(
        ["sttp-server", "--name", "sttp1", "--edge", "127.0.0.1:7802", "--interval-ms", "33", *extra])


def gateway_args(*extra: str) -> argparse.Namespace:
    return cli_main.build_parser("sttp-gateway").parse_args(
        ["sttp-gateway", "--source", "127.0.0.1:7175", "--edge", "127.0.0.1:7801", *extra])


def test_server_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_IP", raising=False)
    o = sttp_server.options_of(server_args("--where", "signal='FREQ'", "--variables", "s1/va:phasor,s1/p"))
    assert o.where == "signal = 'FREQ'"  # rendered by the expression parser
    assert list(o.variables) == [("s1/va", PHASOR_TYPE), ("s1/p", FLOAT)]
    assert (o.listen, o.interval_ms, o.latency_ms, o.redundancy, o.follow_s, o.subscriber_host) == \
        (("127.0.0.1", 7165), 33, 50, 1, 1.0, "127.0.0.1")
    remote = sttp_server.options_of(server_args("--where", "kind='freq'", "--listen", "0.0.0.0:7165",
                                                "--allow-remote"))
    assert remote.listen == ("0.0.0.0", 7165)


@pytest.mark.parametrize(("extra", "field", "text"), [
    ((), "where", "give --where or --variables"),
    (("--where", "kind = 'freq' or"), "where", "column 17"),
    (("--where", "kind='freq'", "--listen", "10.0.0.1:7165"), "listen", "beyond loopback"),
    (("--where", "kind='freq'", "--interval-ms", "0"), "interval_ms", "--interval-ms must be at least 1, not 0"),
    (("--where", "kind='freq'", "--max-clients", "0"), "max_clients", "not 0"),
    (("--where", "kind='freq'", "--follow-s", "-1"), "follow_s", "--follow-s"),
    (("--variables", "s1/va:struct"), "variables", "type 'struct'"),
])
def test_server_refuses_bad_options_naming_the_flag(extra: tuple[str, ...], field: str, text: str) -> None:
    with pytest.raises(ValidationError, match=text) as err:
        sttp_server.options_of(server_args(*extra))
    assert err.value.field == field


def test_gateway_defaults() -> None:
    o = sttp_gateway.options_of(gateway_args())
    assert (o.source, o.edge, o.filter_expression, o.frames_per_s, o.publisher) == \
        ("127.0.0.1:7175", "127.0.0.1:7801", sttp_gateway.DEFAULT_FILTER, 0, None)
    o = sttp_gateway.options_of(gateway_args("--source", "pmu.example:7175", "--allow-remote", "--publisher",
                                             "relay", "--frames-per-s", "60", "--filter", "PPA:1; PPA:2"))
    assert (o.source, o.publisher, o.frames_per_s, o.filter_expression) == \
        ("pmu.example:7175", "relay", 60, "PPA:1; PPA:2")


@pytest.mark.parametrize(("extra", "field", "text"), [
    (("--source", "10.0.0.5:7175"), "source", "beyond loopback"),
    (("--source", "127.0.0.1"), "source", "not HOST:PORT"),
    (("--source", "127.0.0.1:70000"), "source", "not HOST:PORT"),
    (("--frames-per-s", "401"), "frames_per_s", "--frames-per-s must be 1..400"),
    (("--priority", "7"), "priority", "--priority must be 0..6"),
    (("--publisher", "bad name"), "publisher", "publisher 'bad name' must be"),
    (("--filter", "  "), "filter", "--filter is empty"),
])
def test_gateway_refuses_bad_options_naming_the_flag(extra: tuple[str, ...], field: str, text: str) -> None:
    with pytest.raises(ValidationError, match=text) as err:
        sttp_gateway.options_of(gateway_args(*extra))
    assert err.value.field == field


def test_gridstat_imports_neither_sttpapi_nor_numpy_until_a_gateway_starts() -> None:
    code = ("import sys, gridstat.gateways, gridstat.gateways.sttp, gridstat.cli.sttp_server, "
            "gridstat.cli.sttp_gateway; print(sorted(m for m in ('sttp', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_without_sttpapi_both_commands_say_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> object:
        raise ImportError(f"No module named {name.split('.')[0]!r}")

    monkeypatch.setattr(library, "import_module", missing)
    for options_of, args in ((sttp_server.options_of, server_args("--where", "kind='freq'")),
                             (sttp_gateway.options_of, gateway_args())):
        with pytest.raises(ValidationError, match=r"need the sttpapi package .*pip install 'gridstat\[sttp\]'") as err:
            options_of(args)
        assert err.value.field == "sttp"
