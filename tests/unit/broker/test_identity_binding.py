"""Client names bound to mTLS certificate identities (broker.authz.IdentityBinding, core.tls)."""

from __future__ import annotations

from typing import Any

import pytest

from gridstat.broker.authz import IdentityBinding
from gridstat.core.tls import ANONYMOUS, IDENTITY_KEY, peer_identities, relayed_identities
from gridstat.errors import Unauthorized


class Context:
    def __init__(self, cn: str = "", sans: tuple[str, ...] = (), relayed: tuple[str, ...] = ()) -> None:
        self._auth: dict[str, list[bytes]] = {}
        if cn:
            self._auth["x509_common_name"] = [cn.encode()]
            self._auth["x509_subject_alternative_name"] = [s.encode() for s in sans]
        self._md = (*((IDENTITY_KEY, r) for r in relayed), ("other", "x"))

    def auth_context(self) -> dict[str, list[bytes]]:
        return self._auth

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._md


def test_identities_are_the_cn_then_dns_sans_without_localhost_and_addresses() -> None:
    ctx = Context("pmu1", ("127.0.0.1", "::1", "localhost", "pmu1", "pmu1-out"))
    assert peer_identities(ctx) == ("pmu1", "pmu1-out")
    assert peer_identities(Context()) == ()
    assert peer_identities(object()) == ()  # no auth_context at all
    assert relayed_identities(Context(relayed=("ems",))) == ("ems",)


@pytest.mark.parametrize(("ctx", "declared", "ok"), [
    (Context("pmu1"), "pmu1", True),
    (Context("pmu1", ("pmu1-out",)), "pmu1-out", True),
    (Context("rogue"), "pmu1", False),
    (Context("rogue", relayed=("pmu1",)), "pmu1", False),  # only a proxy's metadata counts
    (Context("router", relayed=("pmu1",)), "pmu1", True),
    (Context("router", relayed=("rogue",)), "pmu1", False),
    (Context("router"), "ems", True),  # a trusted certificate calling for itself: the operator
    (Context("router", relayed=("router",)), "condense", True),  # a platform component behind a proxy
    (Context("router", relayed=(ANONYMOUS,)), "pmu1", False),  # a client without a certificate
    (Context("e1", relayed=("ems",)), "ems", True),  # a registered router's name
    (Context(), "pmu1", False),  # no client certificate
])
def test_check(ctx: Any, declared: str, ok: bool) -> None:
    binding = IdentityBinding(routers=lambda: {"e1", "e2"})
    if ok:
        assert binding.check(ctx, declared, field="name") == declared
    else:
        with pytest.raises(Unauthorized) as exc:
            binding.check(ctx, declared, field="publication.publisher")
        assert exc.value.field == "publication.publisher"
        assert binding.refused == 1


def test_trusted_proxy_patterns() -> None:
    binding = IdentityBinding(("edge-*",))
    assert binding.check(Context("edge-7", relayed=("ems",)), "ems", field="name") == "ems"
    with pytest.raises(Unauthorized):
        binding.check(Context("router", relayed=("ems",)), "ems", field="name")
