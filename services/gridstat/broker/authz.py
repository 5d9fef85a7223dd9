"""Who may publish and who may subscribe to which variables: the leaf broker's policy (docs/security.md).

``gridstat broker --policy FILE`` (YAML or JSON)::

    default: deny            # allow (the default) or deny, for clients no rule names
    publish:
      - clients: ["pmu*"]    # fnmatch patterns on the publisher's name
        variables: ["pmu*/*"]  # fnmatch patterns on "publisher/variable"
    subscribe:
      - clients: [ems, "dash-*"]
        variables: ["pmu1/*", "sub*/voltage"]
    roles:                   # certificate identities given roles beyond the defaults (core.access)
      admin: ["ops-*"]
      observer: [grafana]

A request is allowed when a rule of its action names the client and the variable; a client that no
rule of the action names gets ``default``. A refusal is ``Unauthorized`` naming the field (a
Subscribe gets a reply with ``admitted=false`` and that reason; nothing is reserved or installed).
The file is read again when it changes (checked at most once a second): no restart needed.

Who the client is (``IdentityBinding``): with TLS and a client CA (``--tls-client-ca``) the broker
trusts the verified client certificate, not the name in the request. A client's certificate is
verified by its edge router's proxy, which relays its identities (common name, DNS SANs) in the
``gridstat-client-identity`` metadata (``-`` for a client without a certificate); the broker believes
that metadata only from a peer whose own certificate names an edge proxy (``--trusted-proxy``, default
``router``, or a registered router's name); any other peer is itself the client. A trusted certificate
that calls for itself (no relayed identity: the operator) or is relayed by a proxy (the condensation
host) is a platform component and acts for the client it names: it could relay any identity anyway.
A request whose client name is not one of those identities is refused as ``Unauthorized`` naming the
field, and the policy is then evaluated against that (certificate) identity. Without mTLS the name in
the request is believed (insecure mode, logged once at startup; docs/security.md).
"""

from __future__ import annotations

import fnmatch
import json
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gridstat.core.access import CLIENT, Grants
from gridstat.core.tls import ANONYMOUS, peer_identities, relayed_identities
from gridstat.errors import Unauthorized, ValidationError

ACTIONS = ("publish", "subscribe")


@dataclass(frozen=True)
class Rule:
    clients: tuple[str, ...]
    variables: tuple[str, ...]

    def names(self, client: str) -> bool:
        return any(fnmatch.fnmatchcase(client, p) for p in self.clients)

    def allows(self, variable: str) -> bool:
        return any(fnmatch.fnmatchcase(variable, p) for p in self.variables)


@dataclass(frozen=True)
class Policy:
    default_allow: bool = True
    publish: tuple[Rule, ...] = ()
    subscribe: tuple[Rule, ...] = ()
    #: Roles given to certificate identities beyond the defaults (``roles:``; core.access).
    roles: Grants = field(default_factory=Grants)

    @classmethod
    def from_dict(cls, doc: Any) -> Policy:
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            raise ValidationError("a policy is a mapping with default, publish and subscribe", field="policy")
        unknown = set(doc) - {"default", "roles", *ACTIONS}
        if unknown:
            raise ValidationError(f"unknown policy keys {sorted(unknown)}", field=f"policy.{sorted(unknown)[0]}")
        default = doc.get("default", "allow")
        if default not in ("allow", "deny"):
            raise ValidationError(f"policy default must be allow or deny, got {default!r}", field="policy.default")
        rules: dict[str, tuple[Rule, ...]] = {}
        for action in ACTIONS:
            items = doc.get(action)
            if items is None:
                items = []
            if not isinstance(items, list):
                raise ValidationError(f"policy {action} must be a list of rules", field=f"policy.{action}")
            out = []
            for i, item in enumerate(items):
                where = f"policy.{action}[{i}]"
                if not isinstance(item, dict) or set(item) - {"clients", "variables"}:
                    raise ValidationError(f"{where} must have only clients and variables", field=where)
                pats = {}
                for key in ("clients", "variables"):
                    v = item.get(key)
                    if isinstance(v, str):
                        v = [v]
                    if not isinstance(v, list) or not v or not all(isinstance(p, str) and p for p in v):
                        raise ValidationError(f"{where}.{key} must be a non-empty list of patterns",
                                              field=f"{where}.{key}")
                    pats[key] = tuple(v)
                out.append(Rule(pats["clients"], pats["variables"]))
            rules[action] = tuple(out)
        roles = Grants.from_dict(doc.get("roles"), where="policy.roles")
        return cls(default == "allow", rules["publish"], rules["subscribe"], roles)

    def allowed(self, action: str, client: str, variable: str) -> bool:
        rules = self.publish if action == "publish" else self.subscribe
        named = [r for r in rules if r.names(client)]
        if not named:
            return self.default_allow
        return any(r.allows(variable) for r in named)

    def check(self, action: str, client: str, variable: str, *, field: str) -> None:
        if not self.allowed(action, client, variable):
            raise Unauthorized(f"{client!r} may not {action} {variable!r} (broker policy)", field=field)


def parse(text: str, source: str = "policy") -> Policy:
    import yaml

    try:
        doc = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ValidationError(f"{source}: not YAML or JSON: {exc}", field="policy") from None
    return Policy.from_dict(doc)


class PolicyFile:
    """A policy read from a file and read again when the file changes (a bad new version is logged
    by the caller's error and the last good one stays)."""

    def __init__(self, path: str | Path, *, recheck_s: float = 1.0) -> None:
        self.path = Path(path)
        self.recheck_s = recheck_s
        self._mtime = self.path.stat().st_mtime_ns
        self.policy = parse(self.path.read_text(), str(self.path))
        self._checked = time.monotonic()
        self.reload_errors = 0

    def current(self) -> Policy:
        now = time.monotonic()
        if now - self._checked >= self.recheck_s:
            self._checked = now
            try:
                mtime = self.path.stat().st_mtime_ns
                if mtime != self._mtime:
                    self._mtime = mtime
                    self.policy = parse(self.path.read_text(), str(self.path))
            except (OSError, ValidationError):
                self.reload_errors += 1  # keep the last good policy
        return self.policy

    def check(self, action: str, client: str, variable: str, *, field: str) -> None:
        self.current().check(action, client, variable, field=field)


#: Certificate identities trusted to relay their clients' identities (the edge routers' proxies).
DEFAULT_PROXIES = ("router",)


class IdentityBinding:
    """Binds the client names in requests to verified mTLS certificate identities (module docstring)."""

    def __init__(self, proxies: Collection[str] = DEFAULT_PROXIES,
                 routers: Callable[[], Collection[str]] = tuple) -> None:
        self.proxies = tuple(proxies)
        self._routers = routers
        #: Refusals by reason, for stats and tests.
        self.refused = 0

    def is_proxy(self, identities: tuple[str, ...]) -> bool:
        routers = self._routers()
        return any(i in routers or any(fnmatch.fnmatchcase(i, p) for p in self.proxies) for i in identities)

    def listing_scope(self, context: Any,
                      roles_of: Callable[[tuple[str, ...]], frozenset[str]]) -> tuple[str, ...] | None:
        """Whose subscriptions a caller may list: a client (direct, or relayed by an edge proxy) only its
        own identities'; administrators, brokers, observers and platform components everyone's (None)."""
        peer = peer_identities(context)
        if self.is_proxy(peer):
            ids = relayed_identities(context)
            return None if not ids or self.is_proxy(ids) else ids
        return None if roles_of(peer) - {CLIENT} else peer

    def check(self, context: Any, declared: str, *, field: str) -> str:
        """The principal of a request declaring client ``declared``; Unauthorized naming ``field`` if the
        certificate does not carry that name."""
        peer = peer_identities(context)
        if not peer:
            self.refused += 1
            raise Unauthorized(f"client {declared!r}: no verified client certificate", field=field)
        if self.is_proxy(peer):
            ids = relayed_identities(context)
            # A trusted certificate calling for itself (the operator, a topology sidecar) or relayed by an
            # edge proxy (the condensation host): platform components holding the proxies' certificate,
            # which could relay any identity anyway, act for the client they name.
            if not ids or self.is_proxy(ids):
                return declared
            if ids == (ANONYMOUS,):
                self.refused += 1
                raise Unauthorized(f"client {declared!r}: no client certificate at edge proxy {peer[0]!r}",
                                   field=field)
        else:
            ids = peer
        if declared not in ids:
            self.refused += 1
            raise Unauthorized(f"client name {declared!r} is not the certificate identity {ids[0]!r}", field=field)
        return declared
