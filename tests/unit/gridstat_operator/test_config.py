"""The operator's broker settings from the environment (gridstat_operator.config)."""

from __future__ import annotations

import pytest

from gridstat_operator import config


def test_clouds_default_cloud_and_root_broker() -> None:
    c = config.OperatorConfig.from_env({"GRIDSTAT_BROKERS": "A=a.svc:7700, B=b.svc:7700",
                                        "GRIDSTAT_ROOT_BROKER": "p.svc:7700", "GRIDSTAT_DRIFT_CHECK_S": "30"})
    assert dict(c.brokers) == {"A": "a.svc:7700", "B": "b.svc:7700"}
    assert c.default_cloud == "A" and c.broker_for("") == "a.svc:7700" and c.broker_for("B") == "b.svc:7700"
    assert c.root_broker == "p.svc:7700" and c.drift_check_s == 30 and c.tls is None
    single = config.OperatorConfig.from_env({"GRIDSTAT_BROKERS": "127.0.0.1:7700"})
    assert single.default_cloud == "default" and single.root_broker == "127.0.0.1:7700"


@pytest.mark.parametrize("value", ["", "A=nohost", "A=h:port", "=h:1"])
def test_a_bad_broker_list_is_refused(value: str) -> None:
    with pytest.raises(config.ConfigError):
        config.OperatorConfig.from_env({"GRIDSTAT_BROKERS": value})


def test_the_default_cloud_must_be_listed() -> None:
    with pytest.raises(config.ConfigError, match="GRIDSTAT_DEFAULT_CLOUD"):
        config.OperatorConfig.from_env({"GRIDSTAT_BROKERS": "A=h:1", "GRIDSTAT_DEFAULT_CLOUD": "B"})


def test_the_entry_point_adds_only_the_defaults_not_given() -> None:
    from gridstat_operator import main

    env = {"POD_NAMESPACE": "grid", "GRIDSTAT_OPERATOR_PEERING": "rel"}
    assert main.kopf_args([], env) == ["run", "-m", "gridstat_operator.handlers", "--namespace", "grid",
                                       "--peering", "rel", "--liveness", "http://0.0.0.0:8080/healthz"]
    given = ["--namespace=other", "--peering=p", "--liveness=http://0.0.0.0:9/healthz"]
    assert main.kopf_args(given, env) == ["run", "-m", "gridstat_operator.handlers", *given]
    assert "--peering" not in main.kopf_args(["-A", "--standalone"], env)
