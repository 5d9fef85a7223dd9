"""``gridstat goose-gateway``'s options and map checks, its stats line, and its Prometheus metrics
(drop reasons served from 0)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from gridstat.cli import goose_gateway
from gridstat.cli.main import SUBCOMMANDS, build_parser
from gridstat.errors import ValidationError
from gridstat.gateways.goose import DropReason, GooseStats
from gridstat.telemetry.goose import DROP_REASONS, GooseCollector

MAP = ("subscribe:\n  - gocbRef: IED1/LLN0$GO$gcb1\n    members:\n"
       "      - {index: 0, variable: bay1/closed, kind: boolean}\n")


def _args(tmp: Path, *extra: str, text: str = MAP) -> argparse.Namespace:
    path = tmp / "map.yaml"
    path.write_text(text)
    return build_parser("goose-gateway").parse_args(["goose-gateway", "--interface", "lo", "--map", str(path),
                                                     "--edge", "127.0.0.1:7801", *extra])


def test_registered_and_checked(tmp_path: Path) -> None:
    assert SUBCOMMANDS["goose-gateway"][0] == "gridstat.cli.goose_gateway"
    m = goose_gateway.check(_args(tmp_path, "--name", "bay1-goose", "--metrics-port", "0"))
    assert [b.gocb_ref for b in m.subscribe] == ["IED1/LLN0$GO$gcb1"]
    for bad, field in ((("--priority", "7"), "priority"), (("--edge", "nope"), "edge"),
                       (("--latency-ms", "0"), "latency")):
        with pytest.raises(ValidationError, match=field):
            goose_gateway.check(_args(tmp_path, *bad))
    with pytest.raises(ValidationError, match="neither subscribe nor publish"):
        goose_gateway.check(_args(tmp_path, text="{}\n"))


def test_metrics_serve_every_drop_reason_from_zero() -> None:
    stats = GooseStats()
    stats.drops.add(DropReason.DUPLICATE, 3)
    stats.points_published = 7
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GooseCollector("goose-gateway", "g1", stats.as_dict))
    text = generate_latest(registry).decode()
    assert set(DROP_REASONS) == {r.value for r in DropReason}
    for reason in DROP_REASONS:
        n = 3.0 if reason == "duplicate" else 0.0
        assert f'gridstat_goose_drops_total{{gateway="g1",reason="{reason}",role="goose-gateway"}} {n}' in text
    assert 'gridstat_goose_points_published_total{gateway="g1",role="goose-gateway"} 7.0' in text
