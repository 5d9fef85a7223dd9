"""Argument parsing, addresses, TLS options and the mapping of gRPC failures to messages and exit codes."""

from __future__ import annotations

import argparse
from pathlib import Path

import grpc
import pytest

from gridstat.cli import common
from gridstat.cli.main import build_parser, main
from gridstat.errors import ValidationError


def parse(*argv: str) -> argparse.Namespace:
    return build_parser(argv[0]).parse_args(list(argv))


def test_sub_add_options() -> None:
    args = parse("sub", "add", "pmu/freq", "--subscriber", "ops", "--edge", "e2", "--interval-ms", "100",
                 "--latency-ms", "40", "--mode", "0", "1", "--mode", "3", "--type", "float", "-o", "json")
    assert (args.action, args.variable, args.subscriber, args.edge) == ("add", "pmu/freq", "ops", "e2")
    assert (args.interval_ms, args.latency_ms, args.redundancy, args.priority) == (100, 40, 1, 1)
    assert args.mode == [0, 1, 3] and args.value_type == "float" and args.output == "json"
    assert args.broker is None and args.timeout == common.DEFAULT_TIMEOUT_S


def test_other_commands_parse() -> None:
    assert parse("sub", "list", "--subscriber", "ops").subscriber == "ops"
    assert parse("sub", "rm", "sub-1", "--broker", "h:1").subscription_id == "sub-1"
    assert parse("topology", "show", "--output", "json").output == "json"
    args = parse("routes", "r1", "--timeout", "1.5", "--tls-ca", "ca.pem")
    assert (args.router, args.timeout, args.tls_ca) == ("r1", 1.5, "ca.pem")


@pytest.mark.parametrize("argv", [
    ["sub"],
    ["sub", "add", "pmu/freq", "--edge", "e2", "--interval-ms", "1", "--latency-ms", "1"],  # no --subscriber
    ["sub", "add", "pmu/freq", "--subscriber", "s", "--edge", "e2", "--interval-ms", "x", "--latency-ms", "1"],
    ["sub", "add", "pmu/freq", "--subscriber", "s", "--edge", "e2", "--interval-ms", "1", "--latency-ms", "1",
     "--type", "string"],
    ["topology", "show", "--output", "yaml"],
    ["routes"],
])
def test_usage_errors_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2


def test_validation_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["sub", "add", "pmufreq", "--subscriber", "s", "--edge", "e2", "--interval-ms", "100",
               "--latency-ms", "10"])
    assert rc == 2
    assert "PUBLISHER/VARIABLE" in capsys.readouterr().err
    assert main(["topology", "show", "--broker", "nohost"]) == 2
    assert main(["topology", "show", "--timeout", "0"]) == 2


def test_broker_address_precedence() -> None:
    assert common.broker_address("h:1", {"GRIDSTAT_BROKER": "e:2"}) == "h:1"
    assert common.broker_address(None, {"GRIDSTAT_BROKER": "e:2"}) == "e:2"
    assert common.broker_address(None, {}) == common.DEFAULT_BROKER == "127.0.0.1:7700"
    assert common.parse_address("[::1]:7700") == "[::1]:7700"
    for bad in ("h", "h:", ":1", "h:0", "h:70000", "h:x"):
        with pytest.raises(ValidationError):
            common.parse_address(bad)


def tls_args(ca: str = "", cert: str = "", key: str = "") -> argparse.Namespace:
    return argparse.Namespace(tls_ca=ca, tls_cert=cert, tls_key=key)


def test_tls_options(tmp_path: Path) -> None:
    assert common.Tls.from_args(tls_args()) is None
    assert common.Tls.from_args(tls_args(ca="ca.pem")) == common.Tls(ca="ca.pem")
    with pytest.raises(ValidationError):
        common.Tls.from_args(tls_args(cert="c.pem"))
    with pytest.raises(ValidationError):
        common.Tls.from_args(tls_args(key="k.pem"))
    with pytest.raises(ValidationError) as info:
        common.Tls(ca=str(tmp_path / "missing.pem")).credentials()
    assert info.value.field == "tls_ca"
    with pytest.raises(ValidationError):
        common.Tls(cert=str(tmp_path / "c.pem"), key=str(tmp_path / "k.pem")).credentials()


def test_unavailable_maps_to_exit_4() -> None:
    err = common.failure_to_error(common.RpcFailure(grpc.StatusCode.UNAVAILABLE, "connection refused"),
                                  target="broker at h:1")
    assert err.exit_code == common.EXIT_UNAVAILABLE
    assert str(err) == "broker at h:1 is unavailable (connection refused)"
    late = common.failure_to_error(common.RpcFailure(grpc.StatusCode.DEADLINE_EXCEEDED, ""), target="broker at h:1")
    assert late.exit_code == common.EXIT_UNAVAILABLE and "broker at h:1 is unavailable" in str(late)


def test_refusals_carry_the_reason() -> None:
    f = common.RpcFailure(grpc.StatusCode.NOT_FOUND, "NotFound: no subscription 'x'", "NotFound", "subscription_id")
    assert f.message == "no subscription 'x'"
    err = common.failure_to_error(f, target="broker at h:1")
    assert err.exit_code == common.EXIT_USAGE and err.reason == "NotFound"
    assert str(err) == "broker at h:1 refused the request: NotFound: no subscription 'x' (field subscription_id)"
    bare = common.failure_to_error(common.RpcFailure(grpc.StatusCode.PERMISSION_DENIED, "no"), target="t")
    assert bare.reason == "PermissionDenied"


def test_rejections_exit_3_only_for_subscribe() -> None:
    f = common.RpcFailure(grpc.StatusCode.FAILED_PRECONDITION, "too slow", "LatencyUnattainable")
    assert common.failure_to_error(f, target="t", rejections=True).exit_code == common.EXIT_REJECTED
    assert common.failure_to_error(f, target="t").exit_code == common.EXIT_USAGE
    invalid = common.RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, "bad", "InvalidArgument", "qos")
    assert common.failure_to_error(invalid, target="t", rejections=True).exit_code == common.EXIT_USAGE
    unknown = common.RpcFailure(grpc.StatusCode.NOT_FOUND, "no such variable", "UnknownVariable")
    assert common.failure_to_error(unknown, target="t", rejections=True).exit_code == common.EXIT_REJECTED


def test_metadata_value() -> None:
    md = (("gridstat-reason", "CapacityExceeded"), ("gridstat-field", b"qos"))
    assert common.metadata_value(md, "gridstat-reason") == "CapacityExceeded"
    assert common.metadata_value(md, "gridstat-field") == "qos"
    assert common.metadata_value(None, "gridstat-reason") == ""
