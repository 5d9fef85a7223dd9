"""Roles of certificate identities and the per-method rules (core.access; docs/security.md, "Control by role")."""

from __future__ import annotations

import pytest

from gridstat.core import access
from gridstat.errors import ValidationError
from gridstat.v1 import admission_pb2, broker_pb2, condensation_pb2, edge_pb2, history_pb2, router_pb2

MODULES = (admission_pb2, broker_pb2, condensation_pb2, edge_pb2, history_pb2, router_pb2)


def every_rpc() -> list[str]:
    return [f"/{service.full_name}/{method.name}"
            for module in MODULES for service in module.DESCRIPTOR.services_by_name.values()
            for method in service.methods]


def test_every_rpc_of_every_service_has_a_rule_and_every_rule_an_rpc() -> None:
    rpcs = every_rpc()
    assert len(rpcs) > 60
    missing = [m for m in rpcs if m not in access.RULES]
    assert not missing, f"RPCs without an access rule (core/access.py RULES): {missing}"
    stale = [m for m in access.RULES if m not in rpcs]
    assert not stale, f"rules for RPCs that do not exist: {stale}"
    assert all(roles and roles <= set(access.ROLES) for roles in access.RULES.values())


def test_a_clients_certificate_cannot_change_the_routing() -> None:
    ac = access.AccessControl()
    client = access.Grants().roles_of(("pmu1",))
    assert client == {access.CLIENT}
    for method in ("QoSBroker/AddRouter", "QoSBroker/RemoveRouter", "QoSBroker/DefineMode",
                   "RouterControl/ListRoutes", "RouterControl/ListChannels", "RouterControl/RemoveRoutes",
                   "AdmissionControl/Admit", "Segments/ReserveSegment"):
        assert not ac.permits(f"/gridstat.v1.{method}", client), method
    for method in ("QoSBroker/Subscribe", "QoSBroker/ListSubscriptions", "EdgeProxy/RegisterClient"):
        assert ac.permits(f"/gridstat.v1.{method}", client), method


def test_a_routers_control_api_answers_its_broker_and_read_only_calls_to_administrators() -> None:
    ac = access.AccessControl()
    broker, admin, observer = (access.Grants().roles_of((n,)) for n in ("broker", "gridstat-operator", "observer"))
    assert ac.permits("/gridstat.v1.RouterControl/InstallRoutes", broker)
    assert not ac.permits("/gridstat.v1.RouterControl/InstallRoutes", admin)
    assert ac.permits("/gridstat.v1.RouterControl/ListRoutes", admin)
    assert ac.permits("/gridstat.v1.RouterControl/GetStats", observer)
    assert not ac.permits("/gridstat.v1.QoSBroker/AddRouter", observer)
    assert ac.permits("/gridstat.v1.QoSBroker/AddRouter", admin)


def test_an_unknown_method_is_refused() -> None:
    ac = access.AccessControl()
    assert not ac.permits("/gridstat.v1.QoSBroker/Backdoor", frozenset(access.ROLES))


def test_grants_from_flags_and_policy_files() -> None:
    g = access.Grants.parse(["admin=ops-*", "observer=grafana"])
    assert g.roles_of(("ops-alice",)) == {access.ADMIN}
    assert g.roles_of(("grafana",)) == {access.OBSERVER}
    assert g.roles_of(("ops-alice", "grafana")) == {access.ADMIN, access.OBSERVER}
    assert g.roles_of(("broker",)) == {access.BROKER}  # the defaults stay
    p = access.Grants.from_dict({"broker": "cloud-*"}, base=g)
    assert p.roles_of(("cloud-a",)) == {access.BROKER} and p.roles_of(("ops-x",)) == {access.ADMIN}
    assert access.Grants({}).roles_of(("admin",)) == {access.CLIENT}


def test_a_routers_broker_identity_replaces_the_broker_role_only() -> None:
    # by default every cloud's leaf broker (gridstat-broker-<cloud>, broker-<cloud>) is a broker
    assert access.Grants().roles_of(("gridstat-broker-east",)) == {access.BROKER}
    assert access.Grants().roles_of(("broker-west",)) == {access.BROKER}
    g = access.Grants().replacing(access.BROKER, ["gridstat-broker-east"])
    assert g.roles_of(("gridstat-broker-east",)) == {access.BROKER}
    assert g.roles_of(("gridstat-broker-west",)) == {access.CLIENT}
    assert g.roles_of(("broker",)) == {access.CLIENT} and g.roles_of(("parent",)) == {access.CLIENT}
    assert g.roles_of(("admin",)) == {access.ADMIN}  # other roles keep their patterns
    assert access.Grants.parse(["broker=ops-broker"], base=g).roles_of(("ops-broker",)) == {access.BROKER}
    for bad in ([], [""]):
        with pytest.raises(ValidationError):
            access.Grants().replacing(access.BROKER, bad)
    with pytest.raises(ValidationError):
        access.Grants().replacing(access.CLIENT, ["x"])


def test_router_broker_identity_option_needs_mtls_and_a_pattern() -> None:
    from gridstat.router import main as router_main

    assert router_main._broker_grants([]) == access.Grants()
    assert router_main._broker_grants([" b-1 "]).roles_of(("b-1",)) == {access.BROKER}
    with pytest.raises(ValidationError) as err:
        router_main._broker_grants(["  "])
    assert err.value.field == "broker_identity"


@pytest.mark.parametrize("item, field", [("admin", "grant"), ("boss=x", "grant"), ("client=x", "grant"),
                                         ("admin=", "grant")])
def test_bad_grants_name_the_option(item: str, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        access.Grants.parse([item])
    assert err.value.field == field and item in str(err.value)


def test_bad_policy_roles_name_the_field() -> None:
    with pytest.raises(ValidationError) as err:
        access.Grants.from_dict({"root": ["x"]}, where="policy.roles")
    assert err.value.field == "policy.roles.root"
    with pytest.raises(ValidationError) as err:
        access.Grants.from_dict({"admin": [1]}, where="policy.roles")
    assert err.value.field == "policy.roles.admin"
    from gridstat.broker.authz import Policy

    assert Policy.from_dict({"roles": {"admin": ["ops"]}}).roles.roles_of(("ops",)) == {access.ADMIN}


def test_refusals_name_the_method_and_identity() -> None:
    text = access._refusal("/gridstat.v1.QoSBroker/AddRouter", ("pmu1",), frozenset((access.CLIENT,)))
    assert "QoSBroker.AddRouter" in text and "'pmu1'" in text and "admin or broker" in text
