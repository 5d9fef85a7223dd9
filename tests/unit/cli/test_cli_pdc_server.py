"""``gridstat pdc-server``'s options (docs/pdc-server.md): variables and types, every bound checked
with the flag named, the subscriber's socket on the pod's address in a pod."""

from __future__ import annotations

import argparse

import pytest

from gridstat.cli import main as cli_main
from gridstat.cli.pdc_server import options_of
from gridstat.core.model import FLOAT, INT
from gridstat.errors import ValidationError
from gridstat.gateways.pdc.configs import PHASOR_TYPE


def args_of(*extra: str) -> argparse.Namespace:
    return cli_main.build_parser("pdc-server").parse_args(
        ["pdc-server", "--name", "cc", "--edge", "127.0.0.1:7801", "--variables", "s1/va:phasor,s1/freq",
         "--variables", "s1/brk:int", "--frames-per-s", "30", *extra])


def test_variables_keep_their_order_and_types(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_IP", raising=False)
    o = options_of(args_of("--freq-format", "int16"))
    assert list(o.variables) == [("s1/va", PHASOR_TYPE), ("s1/freq", FLOAT), ("s1/brk", INT)]
    assert (o.frames_per_s, o.freq_float, o.subscriber_host, o.listen) == (30, False, "127.0.0.1",
                                                                          ("127.0.0.1", 4712))


def test_in_a_pod_the_subscriber_socket_is_on_the_pod_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_IP", "10.244.0.17")
    assert options_of(args_of()).subscriber_host == "10.244.0.17"


@pytest.mark.parametrize(("extra", "field"), [
    (("--frames-per-s", "0"), "frames_per_s"), (("--wait-ms", "-1"), "wait_ms"),
    (("--listen", "10.0.0.1:4712"), "listen"), (("--time-base", "0"), "time_base"),
])
def test_bad_options_name_the_flag(extra: tuple[str, ...], field: str) -> None:
    with pytest.raises(ValidationError) as e:
        options_of(args_of(*extra))
    assert field in (e.value.field or "") or field.replace("_", "-") in str(e.value)
