"""Who may call which gRPC method: roles given to certificate identities (docs/security.md, "Control by role").

Every gRPC server of every role (router control and edge proxy, leaf and parent brokers, admission
controller) runs the calls it receives through :class:`AccessControl` when it requires client
certificates (mTLS). The caller's verified certificate identities (common name, DNS SANs:
``core.tls.peer_identities``) get roles from :class:`Grants` (fnmatch patterns per role; the defaults
below, plus ``--grant ROLE=PATTERN`` and a broker policy file's ``roles:``); an identity no pattern names
is a ``client``. :data:`RULES` says, for every method of every service, which roles may call it: a
method without a rule is refused (fail closed), and the test suite checks that every RPC in the
protos has one. A refusal is ``PERMISSION_DENIED`` naming the method, the identity and its roles, and
is counted (``denied()``, exported as ``gridstat_rpc_denied_total``).

The roles:

* ``broker`` -- leaf and parent QoS brokers: the only callers of a router's control API that change
  it, of the admission controller and of the brokers' segment protocol; brokers of the hierarchy
  manage each other (a parent defines modes in its children, reserves inter-cloud segments);
* ``admin`` -- the operator and administrators: broker management (routers, channels, modes,
  flooding, condensation functions, topology) and read-only calls everywhere;
* ``router`` -- a router's edge proxy relaying its clients' calls to the leaf broker (the broker
  then binds each call to the relayed client identity: ``broker.authz.IdentityBinding``);
* ``observer`` -- read-only calls (listings, statistics, health) for dashboards and tools;
* ``client`` -- publishers and subscribers: their own registrations, publications, subscriptions
  and listings, nothing else.
"""

from __future__ import annotations

import fnmatch
import inspect
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from gridstat.core.tls import peer_identities
from gridstat.errors import ValidationError

ADMIN, BROKER, ROUTER, OBSERVER, CLIENT = "admin", "broker", "router", "observer", "client"
ROLES = (ADMIN, BROKER, ROUTER, OBSERVER, CLIENT)

#: Identities each role has without any configuration: the names ``scripts/gen-certs.sh`` and
#: ``gridstat up`` give their certificates, and the Helm chart's per-role certificates.
DEFAULT_GRANTS: Mapping[str, tuple[str, ...]] = {
    ADMIN: ("admin", "operator", "gridstat-admin", "gridstat-operator"),
    # gridstat-broker-<cloud>: the chart's per-cloud leaf broker certificates, broker-<cloud> gridstat up's
    BROKER: ("broker", "broker-*", "parent", "gridstat-broker", "gridstat-broker-*", "gridstat-parent"),
    ROUTER: ("router", "gridstat-router"),
    OBSERVER: ("observer", "gridstat-observer"),
}


@dataclass(frozen=True)
class Grants:
    """Role -> fnmatch patterns of certificate identities (CN or DNS SAN) that have it."""

    patterns: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_GRANTS))

    def roles_of(self, identities: Iterable[str]) -> frozenset[str]:
        """Every role whose patterns name one of ``identities``; ``{client}`` when none does."""
        ids = tuple(identities)
        roles = frozenset(role for role, pats in self.patterns.items()
                          if any(fnmatch.fnmatchcase(i, p) for i in ids for p in pats))
        return roles or frozenset((CLIENT,))

    def plus(self, extra: Mapping[str, Iterable[str]]) -> Grants:
        merged = {role: tuple(pats) for role, pats in self.patterns.items()}
        for role, pats in extra.items():
            merged[role] = (*merged.get(role, ()), *pats)
        return Grants(merged)

    def replacing(self, role: str, patterns: Iterable[str]) -> Grants:
        """These grants with ``role`` held by ``patterns`` only (a router's ``--broker-identity``)."""
        pats = tuple(patterns)
        if role not in ROLES or role == CLIENT:
            raise ValidationError(f"unknown role {role!r}", field="role")
        if not pats or not all(pats):
            raise ValidationError(f"the {role} role needs at least one identity pattern", field=role)
        return Grants({**self.patterns, role: pats})

    @classmethod
    def parse(cls, items: Iterable[str], base: Grants | None = None) -> Grants:
        """``ROLE=PATTERN`` strings (``--grant``) added to ``base`` (default: the defaults)."""
        extra: dict[str, list[str]] = {}
        for item in items:
            role, sep, pattern = item.partition("=")
            role, pattern = role.strip(), pattern.strip()
            if not sep or not pattern:
                raise ValidationError(f"--grant {item!r}: expected ROLE=PATTERN, e.g. admin=ops-*", field="grant")
            if role not in ROLES or role == CLIENT:
                raise ValidationError(f"--grant {item!r}: unknown role {role!r}; one of "
                                      f"{', '.join(r for r in ROLES if r != CLIENT)} (unnamed identities are "
                                      "clients)", field="grant")
            extra.setdefault(role, []).append(pattern)
        return (base or cls()).plus(extra)

    @classmethod
    def from_dict(cls, doc: Any, *, where: str = "roles", base: Grants | None = None) -> Grants:
        """A policy file's ``roles:`` mapping (role -> list of patterns) added to ``base``."""
        if doc is None:
            return base or cls()
        if not isinstance(doc, dict):
            raise ValidationError(f"{where} must map roles to lists of identity patterns", field=where)
        extra: dict[str, list[str]] = {}
        for role, pats in doc.items():
            if role not in ROLES or role == CLIENT:
                raise ValidationError(f"{where}: unknown role {role!r}; one of "
                                      f"{', '.join(r for r in ROLES if r != CLIENT)}", field=f"{where}.{role}")
            if isinstance(pats, str):
                pats = [pats]
            if not isinstance(pats, list) or not all(isinstance(p, str) and p for p in pats):
                raise ValidationError(f"{where}.{role} must be a list of identity patterns", field=f"{where}.{role}")
            extra[role] = list(pats)
        return (base or cls()).plus(extra)


# -- the rules -------------------------------------------------------------------------------------

_ANY_READER = frozenset((ADMIN, BROKER, OBSERVER))
_CLIENTS = frozenset((CLIENT, ROUTER, ADMIN, BROKER))
_MANAGERS = frozenset((ADMIN, BROKER))
_BROKERS = frozenset((BROKER,))


def _service(name: str, rules: Mapping[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    return {f"/gridstat.v1.{name}/{method}": roles for method, roles in rules.items()}


#: Full method name -> roles that may call it. Every RPC of every service has a rule.
RULES: Mapping[str, frozenset[str]] = {
    # A router's control API: changed by its leaf broker only; read by administrators and observers.
    **_service("RouterControl", {
        **{m: _BROKERS for m in (
            "AddChannel", "RemoveChannel", "UpdateChannel", "SetChannelShaping", "InstallRoutes",
            "RemoveRoutes", "PrepareRoutes", "CommitRoutes", "AbortRoutes", "SetPubInterval", "SetMode",
            "PrepareMode", "NotifyMode", "SetFlooding", "RemoveFlooding", "SetupCondensation",
            "TerminateCondensation")},
        **{m: _ANY_READER for m in ("ListRoutes", "ListChannels", "GetStats", "Health", "WatchLinks")},
    }),
    # An edge router's proxy: what clients ask their broker through their edge router.
    **_service("EdgeProxy", {m: frozenset((CLIENT, ADMIN)) for m in (
        "RegisterClient", "UnregisterClient", "RegisterPublication", "UnregisterPublication", "Subscribe",
        "Unsubscribe", "ChangeSubscription", "ListSubscriptions", "SetFloodAll", "ListModes", "SubscribeQuery",
        "UnsubscribeQuery", "ListQueries")}),
    **_service("QoSBroker", {
        # Clients' own calls (bound to the client's certificate by broker.authz.IdentityBinding), relayed
        # by edge proxies, made for clients by administrators, and by a parent for inter-cloud segments.
        **{m: _CLIENTS for m in (
            "RegisterClient", "UnregisterClient", "RegisterPublication", "UnregisterPublication", "Subscribe",
            "Unsubscribe", "ChangeSubscription", "ListSubscriptions", "ListPublications", "SetFloodAll",
            "ListModes", "CreateCondensation", "RemoveCondensation", "ListCondensations", "SubscribeQuery",
            "UnsubscribeQuery", "ListQueries")},
        # Management of the cloud and the hierarchy.
        **{m: _MANAGERS for m in (
            "AddRouter", "RemoveRouter", "AddChannel", "RemoveChannel", "AddInterCloudChannel",
            "RemoveInterCloudChannel", "AddChildBroker", "RemoveChildBroker", "DefineMode", "ChangeMode",
            "SetFlooding", "RemoveFlooding")},
        **{m: _ANY_READER | {ROUTER} for m in ("GetTopology", "Health", "ListFlooding")},
        # A router announcing its start: only makes the broker check it (docs/redundancy.md, "Healing").
        "AnnounceRouter": frozenset({ROUTER, ADMIN}),
    }),
    # The brokers' inter-cloud segment protocol.
    **_service("Segments", {m: _BROKERS for m in (
        "ReserveSegment", "CommitSegment", "AbortSegment", "ResolveVariable", "ReportBroken", "ListVariables")}),
    # The admission controller: consulted by leaf brokers; its state read by administrators.
    **_service("AdmissionControl", {
        **{m: _BROKERS for m in (
            "Advertise", "Unadvertise", "SyncAdvertisements", "DeclareResources", "GetRequirement", "Admit",
            "Release")},
        "GetState": _ANY_READER,
    }),
    # The history service: archived values for clients (the SDK's gap filling) and readers (docs/history.md).
    **_service("History", {"Query": frozenset((CLIENT, OBSERVER, ADMIN)), "Health": _ANY_READER}),
}

# -- counting --------------------------------------------------------------------------------------

_lock = threading.Lock()
_denied: Counter[tuple[str, str]] = Counter()


def denied() -> dict[tuple[str, str], int]:
    """Refused calls in this process since it started, by (method, caller's roles joined by ``+``)."""
    with _lock:
        return dict(_denied)


def _count(method: str, roles: str) -> None:
    with _lock:
        _denied[(method, roles)] += 1


# -- the interceptor -------------------------------------------------------------------------------

def short_method(method: str) -> str:
    """``/gridstat.v1.QoSBroker/AddRouter`` -> ``QoSBroker.AddRouter``."""
    service, _, name = method.rpartition("/")
    return f"{service.rpartition('.')[2]}.{name}"


def caller_roles(grants: Grants, context: object) -> tuple[tuple[str, ...], frozenset[str]]:
    identities = peer_identities(context)
    return identities, grants.roles_of(identities)


def _refusal(method: str, identities: tuple[str, ...], roles: frozenset[str]) -> str:
    who = identities[0] if identities else "(no certificate)"
    return (f"{short_method(method)} refused for {who!r} (role {'+'.join(sorted(roles))}): it needs "
            f"{' or '.join(sorted(RULES.get(method, frozenset()))) or 'a rule (none exists: refused)'} "
            "(docs/security.md, 'Control by role')")


class AccessControl(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses every call whose caller has none of the roles :data:`RULES` names for the method."""

    def __init__(self, grants: Grants | Callable[[], Grants] | None = None,
                 rules: Mapping[str, frozenset[str]] = RULES) -> None:
        #: The grants, or a function returning the current ones (a broker's policy file is re-read).
        self.grants = grants or Grants()
        self.rules = rules

    def current_grants(self) -> Grants:
        return self.grants if isinstance(self.grants, Grants) else self.grants()

    def permits(self, method: str, roles: frozenset[str]) -> bool:
        return not self.rules.get(method, frozenset()).isdisjoint(roles)

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return None
        method: str = details.method
        return _guard(handler, lambda context: self._check(method, context))

    async def _check(self, method: str, context: Any) -> None:
        identities, roles = caller_roles(self.current_grants(), context)
        if not self.permits(method, roles):
            _count(short_method(method), "+".join(sorted(roles)))
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, _refusal(method, identities, roles))


async def _result(value: Any) -> Any:
    """A servicer method's answer: grpc.aio servicers may be coroutines or plain functions."""
    return await value if inspect.isawaitable(value) else value


async def _items(stream: Any) -> AsyncIterator[Any]:
    if hasattr(stream, "__aiter__"):
        async for item in stream:
            yield item
    else:
        for item in stream:
            yield item


def _guard(handler: grpc.RpcMethodHandler,
           check: Callable[[Any], Awaitable[None]]) -> grpc.RpcMethodHandler:
    """The same handler, with ``check`` awaited before the servicer sees the call."""
    ser, de = handler.response_serializer, handler.request_deserializer
    if handler.unary_unary is not None:
        inner_uu = handler.unary_unary

        async def unary_unary(request: Any, context: Any) -> Any:
            await check(context)
            return await _result(inner_uu(request, context))

        return grpc.unary_unary_rpc_method_handler(unary_unary, request_deserializer=de, response_serializer=ser)
    if handler.unary_stream is not None:
        inner_us = handler.unary_stream

        async def unary_stream(request: Any, context: Any) -> AsyncIterator[Any]:
            await check(context)
            async for item in _items(inner_us(request, context)):
                yield item

        return grpc.unary_stream_rpc_method_handler(unary_stream, request_deserializer=de, response_serializer=ser)
    if handler.stream_unary is not None:
        inner_su = handler.stream_unary

        async def stream_unary(requests: Any, context: Any) -> Any:
            await check(context)
            return await _result(inner_su(requests, context))

        return grpc.stream_unary_rpc_method_handler(stream_unary, request_deserializer=de, response_serializer=ser)
    inner_ss = handler.stream_stream

    async def stream_stream(requests: Any, context: Any) -> AsyncIterator[Any]:
        await check(context)
        async for item in _items(inner_ss(requests, context)):
            yield item

    return grpc.stream_stream_rpc_method_handler(stream_stream, request_deserializer=de, response_serializer=ser)


def interceptors(tls_client_ca: str,
                 grants: Grants | Callable[[], Grants] | None) -> list[grpc.aio.ServerInterceptor]:
    """The interceptors of a role's gRPC server: access control when it verifies client certificates
    (without mTLS there is no identity to give a role: insecure mode, docs/security.md)."""
    return [AccessControl(grants)] if tls_client_ca else []


def add_arguments(p: Any) -> None:
    """``--grant ROLE=PATTERN`` (repeatable) on every role with a gRPC server."""
    p.add_argument("--grant", action="append", default=[], metavar="ROLE=PATTERN",
                   help="with --tls-client-ca: give certificate identities matching PATTERN (fnmatch on CN or DNS "
                        "SAN) a role (admin, broker, router, observer) in addition to the defaults; any other "
                        "identity is a client (docs/security.md, 'Control by role')")
