"""``gridstat iec104-gateway``'s options (cli/iec104_gateway.py): what a chart passes, and each mistake
refused with its flag named."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gridstat.cli import iec104_gateway as cli
from gridstat.errors import ValidationError
from gridstat.gateways.iec104.asdu import GLOBAL_ADDRESS


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(["--edge", "127.0.0.1:7801", *argv])


def test_defaults_and_what_a_chart_passes(tmp_path: Path) -> None:
    o = cli.options_of(parse("--outstation", "127.0.0.1"))
    assert (o.host, o.port, o.common_addresses, o.k, o.w, o.t1_s) == ("127.0.0.1", 2404, (GLOBAL_ADDRESS,), 12, 8, 15)
    args = parse("--outstation", "rtu7.grid.example:2405", "--allow-remote", "--name", "rtu7", "--common-address",
                 "7", "--common-address", "8", "--common-address", "7", "--metrics-port", "9100")
    o = cli.options_of(args)
    assert (o.host, o.port, o.common_addresses, args.metrics_port) == ("rtu7.grid.example", 2405, (7, 8), 9100)
    f = tmp_path / "m.yaml"
    f.write_text("points:\n  - {ca: 7, ioa: 1, kind: float}\n")
    points = cli.points_of(parse("--outstation", "127.0.0.1", "--map", str(f), "--only-mapped", "--interval-ms", "250"))
    assert points.only_mapped and points.interval_ms == 250 and len(points.declared()) == 1


@pytest.mark.parametrize(("argv", "field"), [
    (("--outstation", "10.0.0.7:2404"), "outstation"),
    (("--outstation", "127.0.0.1:0"), "outstation"),
    (("--outstation", "127.0.0.1", "--common-address", "0"), "common_address"),
    (("--outstation", "127.0.0.1", "--priority", "7"), "priority"),
    (("--outstation", "127.0.0.1", "--interval-ms", "0"), "interval_ms"),
    (("--outstation", "127.0.0.1", "--t1-s", "0"), "t1_s"),
    (("--outstation", "127.0.0.1", "--t1-s", "5"), "t2_s"),
    (("--outstation", "127.0.0.1", "--k", "4", "--w", "8"), "k"),
    (("--outstation", "127.0.0.1", "--retry-initial-s", "60"), "retry_initial_s"),
    (("--outstation", "127.0.0.1", "--edge", "nowhere"), "edge"),
])
def test_mistakes_name_their_flag(argv: tuple[str, ...], field: str) -> None:
    with pytest.raises(ValidationError) as exc:
        cli.options_of(parse(*argv))
    assert exc.value.field == field


def test_only_mapped_needs_a_map() -> None:
    with pytest.raises(ValidationError) as exc:
        cli.points_of(parse("--outstation", "127.0.0.1", "--only-mapped"))
    assert exc.value.field == "only_mapped"
