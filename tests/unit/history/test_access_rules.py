"""Who may ask the history service (core.access RULES; docs/security.md, "Control by role")."""

from __future__ import annotations

from gridstat.core import access
from gridstat.v1 import history_pb2


def test_every_history_rpc_has_a_rule() -> None:
    service = history_pb2.DESCRIPTOR.services_by_name["History"]
    for method in service.methods:
        assert f"/gridstat.v1.History/{method.name}" in access.RULES, method.name


def test_clients_observers_and_administrators_query_readers_ask_for_health() -> None:
    ac = access.AccessControl()
    grants = access.Grants()
    client, observer, admin, router, broker = (grants.roles_of((n,)) for n in (
        "pmu7", "observer", "admin", "router", "broker"))
    for roles in (client, observer, admin):
        assert ac.permits("/gridstat.v1.History/Query", roles)
    for roles in (router, broker):
        assert not ac.permits("/gridstat.v1.History/Query", roles)
    assert ac.permits("/gridstat.v1.History/Health", observer)
    assert not ac.permits("/gridstat.v1.History/Health", client)
