"""The bound on the leaf broker's concurrent admissions (broker.gate; docs/security.md, "Admission bound")."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from gridstat.broker import gate as gates
from gridstat.broker.gate import AdmissionGate, caller_of, retry_after_ms_of, retry_status
from gridstat.core.tls import IDENTITY_KEY


class Aborted(Exception):
    pass


class Context:
    def __init__(self, *, peer_ids: tuple[str, ...] = (), relayed: tuple[str, ...] = (),
                 peer: str = "ipv4:127.0.0.1:5555") -> None:
        self.peer_ids, self.relayed, self._peer = peer_ids, relayed, peer
        self.trailing: tuple[tuple[str, Any], ...] = ()
        self.code: grpc.StatusCode | None = None
        self.details = ""

    def auth_context(self) -> dict[str, list[bytes]]:
        return {"x509_common_name": [i.encode() for i in self.peer_ids[:1]],
                "x509_subject_alternative_name": [i.encode() for i in self.peer_ids[1:]]} if self.peer_ids else {}

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return tuple((IDENTITY_KEY, i) for i in self.relayed)

    def peer(self) -> str:
        return self._peer

    def set_trailing_metadata(self, md: tuple[tuple[str, Any], ...]) -> None:
        self.trailing = md

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        raise Aborted


def test_limits_per_caller_and_global() -> None:
    g = AdmissionGate(limit=3, per_caller=2)
    assert g.try_enter("a") == "" and g.try_enter("a") == ""
    assert g.try_enter("a") == "caller"  # its own bound, though the broker has room
    assert g.try_enter("b") == ""
    assert g.try_enter("c") == "global"
    g.leave("a", 0.01)
    assert g.try_enter("c") == ""
    assert g.refused == {"caller": 1, "global": 1} and g.passed == 4 and g.in_flight == 3
    for caller in ("a", "b", "c"):
        g.leave(caller, 0.01)
    assert g.in_flight == 0 and g.callers() == 0
    with pytest.raises(ValueError):
        AdmissionGate(limit=0)


def test_refusal_is_resource_exhausted_with_a_retry_hint() -> None:
    g = AdmissionGate(limit=1, per_caller=1, retry_after_ms=150)
    ctx = Context()
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow() -> str:
        started.set()
        await release.wait()
        return "done"

    async def main() -> str:
        first = asyncio.create_task(g.run(Context(), "a", slow))
        await started.wait()
        with pytest.raises(Aborted):
            await g.run(ctx, "b", slow)
        release.set()
        return await first

    assert asyncio.run(main()) == "done"
    assert ctx.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "retry after 150 ms" in ctx.details and ctx.details.startswith("BrokerBusy:")
    md = dict(ctx.trailing)
    assert md["gridstat-reason"] == "BrokerBusy" and md["gridstat-retry-after-ms"] == "150"
    assert retry_after_ms_of(md["grpc-status-details-bin"]) == 150
    assert g.in_flight == 0 and g.refused["global"] == 1


def test_a_failing_call_frees_its_slot() -> None:
    g = AdmissionGate(limit=1, per_caller=1)

    async def boom() -> None:
        raise RuntimeError("x")

    with pytest.raises(RuntimeError):
        asyncio.run(g.run(Context(), "a", boom))
    assert g.in_flight == 0 and g.try_enter("a") == ""


def test_retry_hint_follows_the_admissions_duration() -> None:
    g = AdmissionGate(limit=4, per_caller=2, retry_after_ms=50)
    assert g.retry_after("global") == 50
    for _ in range(100):
        g.try_enter("a")
        g.leave("a", 0.4)  # admissions taking 400 ms
    assert 350 <= g.retry_after("global") <= 400
    assert 700 <= g.retry_after("caller") <= 800  # its own two slots to free
    for _ in range(100):
        g.try_enter("a")
        g.leave("a", 60.0)
    assert g.retry_after("caller") == gates.MAX_RETRY_AFTER_MS


@pytest.mark.parametrize("ms", [1, 999, 1000, 1500, 10_000])
def test_retry_status_round_trip(ms: int) -> None:
    assert retry_after_ms_of(retry_status(8, "busy", ms)) == ms


def test_caller_identity() -> None:
    def proxy(ids: tuple[str, ...]) -> bool:
        return any(i.startswith("router") for i in ids)

    # mTLS: the certificate, whatever name the request declares
    assert caller_of(Context(peer_ids=("ems",)), "pmu1", proxy) == "cert:ems"
    # behind an edge proxy: the relayed client identity
    assert caller_of(Context(peer_ids=("router",), relayed=("ems",)), "ems", proxy) == "cert:ems"
    assert caller_of(Context(peer_ids=("router",), relayed=("-",)), "x", proxy) == "cert:-"
    # a platform component calling for itself: one caller per client it names
    assert caller_of(Context(peer_ids=("router",)), "ems", proxy) == "cert:router/ems"
    # insecure mode: the declared name, else the peer address
    assert caller_of(Context(), "ems", None) == "name:ems"
    assert caller_of(Context(), "", None) == "peer:ipv4:127.0.0.1:5555"
