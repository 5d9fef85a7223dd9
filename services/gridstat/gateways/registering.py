"""What the device gateways share on the GridStat side: registering their variables.

A ``VariableRegistrar`` owns one SDK ``Publisher`` per publisher name (over one shared ``EdgeSession``
to the edge router's control port), the variables wanted, registered and refused for good, and the
handles by ``publisher/variable``. ``want(spec)`` records a variable; ``run`` registers what is wanted
and not registered yet (or registered, or refused, as another spec), for ever, retrying with a capped
back-off while the edge router or its broker is away, and logging state changes only. The one thing
a gateway says itself is how a variable is registered (``register``: periodic at its interval, an
alert with ``alert=True`` and its ``min_interval_ms``, which attributes); the publishing hot paths stay
in each gateway's ``publishing.py`` and read ``handles`` directly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from gridstat.client import EdgeSession, PublicationHandle, Publisher
from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError, ValidationError

#: Refusals that retrying cannot fix (the request is wrong or not allowed): the variable is left out.
PERMANENT_REASONS = frozenset({"InvalidArgument", "TypeMismatch", "Unauthorized", "PermissionDenied",
                               "Unauthenticated", "AlreadyExists", "ValidationError"})

#: The first retry's delay after a failure that retrying can fix (doubled up to ``retry_max_s``).
RETRY_INITIAL_S = 0.5


class VariableSpec(Protocol):
    """What the registrar needs of a gateway's variable (its mapping's frozen spec)."""

    @property
    def publisher(self) -> str: ...

    @property
    def full_name(self) -> str: ...


class RegistrationStats(Protocol):
    """The counters every gateway's stats keep about registering."""

    publishers: int
    registrations: int
    registration_errors: int


SpecT = TypeVar("SpecT", bound=VariableSpec)

#: How a gateway registers one variable with its publisher.
Register = Callable[[Publisher, SpecT], Awaitable[PublicationHandle]]


class VariableRegistrar(Generic[SpecT]):
    """Publishers by name, handles by ``publisher/variable``, and the back-off loop registering them."""

    def __init__(self, edge: str, register: Register[SpecT], *, stats: RegistrationStats,
                 tls: TlsFiles | None = None, timeout_s: float = 10.0, retry_max_s: float = 10.0,
                 log: logging.Logger | None = None) -> None:
        self.edge = edge
        self.stats = stats
        self.tls = tls
        self.timeout_s = timeout_s
        self.retry_max_s = retry_max_s
        self.log = log or logging.getLogger(__name__)
        self.publishers: dict[str, Publisher] = {}
        #: The registered variables by ``publisher/variable`` (the hot paths read it; owners may alias it).
        self.handles: dict[str, PublicationHandle] = {}
        self.wanted: dict[str, SpecT] = {}
        #: The spec each variable was registered with (a wanted spec that differs is registered again).
        self.registered: dict[str, SpecT] = {}
        #: Variables the broker refused for good (TypeMismatch, ...): not asked again until they change.
        self.refused: dict[str, SpecT] = {}
        #: Bumped whenever a handle comes or goes (what owners make from the handles is made again).
        self.version = 0
        self._register = register
        self._session: EdgeSession | None = None
        self._wake = asyncio.Event()
        self._last_error = ""

    def want(self, spec: SpecT) -> None:
        """Register ``spec`` (in the background, by ``run``)."""
        self.wanted[spec.full_name] = spec
        self._wake.set()

    def wake(self) -> None:
        """Look at what is wanted again (after the owner changed ``wanted`` or ``registered``)."""
        self._wake.set()

    def forget(self, full_name: str) -> None:
        """Drop a variable's handle (it is not published until registered again)."""
        if self.handles.pop(full_name, None) is not None:
            self.version += 1

    def pending(self) -> list[SpecT]:
        """What is wanted and neither registered nor refused as it is now."""
        registered, refused = self.registered, self.refused
        return [s for n, s in self.wanted.items() if registered.get(n) != s and refused.get(n) != s]

    async def run(self) -> None:
        """Register what is wanted, for ever (cancel to stop)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.settle()

    async def settle(self) -> None:
        """Register what is wanted until each is registered or refused for good."""
        delay_s = RETRY_INITIAL_S
        while todo := self.pending():
            spec = todo[0]
            try:
                for spec in todo:
                    await self.register(spec)
            except GridStatError as exc:
                self.stats.registration_errors += 1
                if isinstance(exc, ValidationError) or exc.reason in PERMANENT_REASONS:
                    self.refused[spec.full_name] = spec
                    self.log.error("%s refused: %s", spec.full_name, exc)
                    continue
                self._note(f"registering with edge router {self.edge} failed: {exc}")
                await asyncio.sleep(delay_s)
                delay_s = min(self.retry_max_s, delay_s * 2)
            else:
                delay_s = RETRY_INITIAL_S
                self._note("")

    async def register(self, spec: SpecT) -> None:
        """Register one variable now (connecting its publisher first); raises GridStatError."""
        pub = self.publishers.get(spec.publisher)
        if pub is None:
            if self._session is None:
                self._session = EdgeSession(self.edge, tls=self.tls, timeout_s=self.timeout_s, attempts=1)
            pub = await Publisher.connect(spec.publisher, self.edge, tls=self.tls, session=self._session)
            self.publishers[spec.publisher] = pub
            self.stats.publishers = len(self.publishers)
        handle = await self._register(pub, spec)
        name = spec.full_name
        self.handles[name] = handle
        self.version += 1
        self.registered[name] = spec
        self.refused.pop(name, None)
        self.stats.registrations += 1

    def _note(self, error: str) -> None:
        """Log a failure when it differs from the last one, and the recovery (state changes only)."""
        if error != self._last_error:
            if error:
                self.log.warning("%s", error)
            elif self._last_error:
                self.log.warning("registering with edge router %s works again", self.edge)
            self._last_error = error

    async def close(self) -> None:
        """Stop every publisher and close the edge session."""
        for pub in self.publishers.values():
            await pub.stop()
        self.publishers.clear()
        self.handles.clear()
        self.version += 1
        if self._session is not None:
            await self._session.close()
            self._session = None
