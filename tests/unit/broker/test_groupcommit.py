"""GroupCommit: concurrent changes share one transaction; failures reach exactly their waiters."""

from __future__ import annotations

import asyncio

import pytest

from gridstat.broker import groupcommit, installer
from gridstat.broker.groupcommit import GroupCommit
from gridstat.broker.installer import RouterChange, RouterUnavailable
from gridstat.broker.state import DesiredRoute


def change(router: str, rid: str) -> dict[str, RouterChange]:
    return {router: RouterChange(install=(DesiredRoute(rid, 1, 0, "x", 10, 1, 10, False, 1),))}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, RouterChange]]:
    seen: list[dict[str, RouterChange]] = []

    async def fake(links: object, changes: dict[str, RouterChange], **_: object) -> None:
        seen.append(changes)
        await asyncio.sleep(0.01)
        if any(r.route_id == "bad" for c in changes.values() for r in c.install):
            raise RouterUnavailable("router r2 refused", field="router")

    monkeypatch.setattr(installer, "apply_transaction", fake)
    monkeypatch.setattr(groupcommit, "GROUP_COMMIT_QUIET_S", 0.005)
    return seen


async def test_concurrent_changes_are_grouped_and_persisted_once(calls: list[dict[str, RouterChange]]) -> None:
    persisted: list[list[object]] = []
    taken: list[list[str]] = []
    gc = GroupCommit({}, persist=lambda recs: persisted.append(list(recs)), taken=taken.append)
    await asyncio.gather(*(gc.apply(change(f"r{i % 3}", f"s{i}")) for i in range(30)))
    # All 30 were queued before the writer ran: one transaction, one write to storage.
    assert len(calls) == 1 and sorted(calls[0]) == ["r0", "r1", "r2"]
    assert sum(len(r.install) for r in calls[0].values()) == 30
    assert len(persisted) == 1 and len(persisted[0]) == 30 and sorted(taken[0]) == ["r0", "r1", "r2"]
    # While one transaction is in flight, the next changes wait and then go together.
    first = asyncio.ensure_future(gc.apply(change("r0", "t0")))
    await asyncio.sleep(0.002)
    await asyncio.gather(first, *(gc.apply(change("r1", f"t{i}")) for i in range(1, 10)))
    assert [sum(len(r.install) for r in c.values()) for c in calls[1:]] == [1, 9]


async def test_a_failing_change_fails_alone(calls: list[dict[str, RouterChange]]) -> None:
    gc = GroupCommit({}, persist=lambda recs: None, taken=lambda routers: None)
    first = asyncio.ensure_future(gc.apply(change("r1", "warm")))
    await asyncio.sleep(0)
    results = await asyncio.gather(gc.apply(change("r1", "ok1")), gc.apply(change("r2", "bad")),
                                   gc.apply(change("r1", "ok2")), return_exceptions=True)
    await first
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], RouterUnavailable)


async def test_an_unexpected_error_reaches_every_waiter(monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(links: object, changes: object, **_: object) -> None:
        raise KeyError("r9")

    monkeypatch.setattr(installer, "apply_transaction", broken)
    gc = GroupCommit({}, persist=lambda recs: None, taken=lambda routers: None)
    with pytest.raises(KeyError):
        await asyncio.wait_for(gc.apply(change("r1", "a")), timeout=2)
    # The writer is not stuck: the next change is attempted (and fails the same way).
    with pytest.raises(KeyError):
        await asyncio.wait_for(gc.apply(change("r1", "b")), timeout=2)
