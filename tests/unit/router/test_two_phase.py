"""Prepare / commit / abort of route batches: what the leaf broker's two-phase install relies on."""

from __future__ import annotations

import pytest

from gridstat.errors import DuplicateName, NotFound, ValidationError
from gridstat.router.channels import ChannelKind
from gridstat.router.process import RouteInstall, RouterConfig, StatusRouter
from gridstat.router.tables import Route


def router() -> StatusRouter:
    r = StatusRouter(RouterConfig(name="r", router_id=1))
    r.add_channel("a", peer_id=2, kind=ChannelKind.ROUTER, address=("127.0.0.1", 40000))
    r.add_channel("b", peer_id=3, kind=ChannelKind.ROUTER, address=("127.0.0.1", 40001))
    return r


def inst(rid: str, var: int = 1, ch: str = "a", sub: int = 20) -> RouteInstall:
    return RouteInstall(Route(rid, var, 0, ch, sub, 1), 10)


def test_prepare_touches_nothing_and_commit_applies_whole() -> None:
    r = router()
    r.install_routes([inst("old")])
    version = r.table.table_version
    assert r.prepare_routes("t1", [inst("x"), inst("y", ch="b")], [("old", 1, 0)]) == 3
    assert r.table.table_version == version and [x.route_id for x in r.table.routes()] == ["old"]
    assert r.commit_routes("t1") == (2, 1)
    assert sorted(x.route_id for x in r.table.routes()) == ["x", "y"]
    with pytest.raises(NotFound):
        r.commit_routes("t1")  # a transaction commits once


def test_prepare_rejects_invalid_batches_and_holds_nothing() -> None:
    r = router()
    with pytest.raises(NotFound):
        r.prepare_routes("t", [inst("x"), inst("y", ch="nope")])
    with pytest.raises(NotFound):
        r.prepare_routes("t", [], [("ghost", 1, 0)])
    with pytest.raises(ValidationError):
        r.prepare_routes("", [inst("x")])
    assert not r.abort_routes("t")
    r.prepare_routes("t", [inst("x")])
    with pytest.raises(DuplicateName):
        r.prepare_routes("t", [inst("z")])


def test_abort_and_expiry_leave_nothing_behind() -> None:
    r = router()
    r.prepare_routes("t1", [inst("x")])
    assert r.abort_routes("t1")
    r.prepare_routes("t2", [inst("y")], ttl_ms=1)
    assert r.expire_staged(now=10**12) == 1
    with pytest.raises(NotFound):
        r.commit_routes("t2")
    assert len(r.table) == 0


def test_commit_fails_whole_when_a_channel_went_away_after_prepare() -> None:
    r = router()
    r.prepare_routes("t", [inst("x", ch="a"), inst("y", ch="b")])
    r.remove_channel("b")
    with pytest.raises(NotFound):
        r.commit_routes("t")
    assert len(r.table) == 0
