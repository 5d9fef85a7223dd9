"""A bound on the leaf broker's concurrent admissions, per caller and in all (docs/security.md, "Admission bound").

Every call that plans paths or reserves capacity (Subscribe, ChangeSubscription, ReserveSegment,
ChangeMode, CreateCondensation, SetFlooding) passes the gate first. A call over either limit is
refused at once with ``RESOURCE_EXHAUSTED`` and a retry hint, before it costs anything: the message
says when to retry, the trailing metadata carries ``gridstat-retry-after-ms`` (relayed by the edge
proxies like every ``gridstat-*`` key) and ``grpc-status-details-bin``, a ``google.rpc.Status`` with a
``google.rpc.RetryInfo`` (the richer error model gRPC clients read with ``grpc_status.rpc_status``).

Without the gate a burst waits in the broker's lock queue until the callers' deadlines pass, and
the callers see ``DEADLINE_EXCEEDED`` or, when they give up first, ``CANCELLED`` (docs/benchmarks.md,
"Admission burst"). With it the broker works on at most ``limit`` admissions at a time, at most
``per_caller`` of them for one caller, so one flooding client cannot hold the slots every other
client needs.

Who the caller is: with mTLS its certificate identity (the relayed client identity when the peer is
a trusted edge proxy, ``broker.authz.IdentityBinding``); without, the client name the request
declares, else the peer address (insecure mode: a client varying its name is bound only by the
global limit).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2

from gridstat.core.rpc import FIELD_KEY, REASON_KEY
from gridstat.core.tls import peer_identities, relayed_identities

T = TypeVar("T")
log = logging.getLogger(__name__)

#: Defaults of ``--admission-limit``, ``--admission-limit-per-caller`` and ``--admission-retry-after-ms``.
DEFAULT_LIMIT = 128
DEFAULT_PER_CALLER = 32
DEFAULT_RETRY_AFTER_MS = 100
#: The hint never says more than this.
MAX_RETRY_AFTER_MS = 10_000
RETRY_AFTER_KEY = "gridstat-retry-after-ms"
STATUS_DETAILS_KEY = "grpc-status-details-bin"
REASON = "BrokerBusy"
#: Refusals are logged at most this often (a flood is one line per period, with the counts).
LOG_EVERY_S = 10.0


#: gRPC core cancels calls that arrive faster than the Python server takes them once more than
#: ``grpc.server.max_pending_requests`` (default 1000; hard limit 3000) wait: the client sees CANCELLED,
#: which no handler can turn into RESOURCE_EXHAUSTED (docs/benchmarks.md, "Admission burst"). The
#: broker's server should be built with these options (``grpc.aio.server(options=server_options())``).
MAX_PENDING_CALLS = 20_000


def server_options(max_pending: int = MAX_PENDING_CALLS) -> list[tuple[str, int]]:
    return [("grpc.server.max_pending_requests", max_pending),
            ("grpc.server.max_pending_requests_hard_limit", max_pending)]


class AdmissionGate:
    """Counts admissions in flight in all and per caller; refuses what is over a limit (module docstring)."""

    def __init__(self, *, limit: int = DEFAULT_LIMIT, per_caller: int = DEFAULT_PER_CALLER,
                 retry_after_ms: int = DEFAULT_RETRY_AFTER_MS) -> None:
        if limit < 1 or per_caller < 1 or retry_after_ms < 1:
            raise ValueError("admission limits and the retry hint must be >= 1")
        self.limit = limit
        self.per_caller = min(per_caller, limit)
        self.retry_after_ms = retry_after_ms
        self.in_flight = 0
        self._by_caller: Counter[str] = Counter()
        #: Refusals by scope ("global": the broker's limit, "caller": the caller's own), and calls let in.
        self.refused: Counter[str] = Counter()
        self.passed = 0
        #: Moving average of an admission's duration (s), for the retry hint.
        self._avg_s = 0.0
        self._logged_at = -LOG_EVERY_S

    # -- the counting ------------------------------------------------------------------------
    def try_enter(self, caller: str) -> str:
        """'' when the call may go on (then ``leave`` it), else the scope of the refusal."""
        if self._by_caller[caller] >= self.per_caller:
            scope = "caller"
        elif self.in_flight >= self.limit:
            scope = "global"
        else:
            self.in_flight += 1
            self._by_caller[caller] += 1
            self.passed += 1
            return ""
        self.refused[scope] += 1
        return scope

    def leave(self, caller: str, seconds: float) -> None:
        self.in_flight -= 1
        n = self._by_caller[caller] - 1
        if n > 0:
            self._by_caller[caller] = n
        else:
            del self._by_caller[caller]
        self._avg_s += 0.1 * (seconds - self._avg_s)

    @contextlib.contextmanager
    def slot(self, caller: str) -> Iterator[str]:
        """``with gate.slot(caller) as refused:`` -- refused is '' inside a held slot."""
        refused = self.try_enter(caller)
        if refused:
            yield refused
            return
        t0 = time.monotonic()
        try:
            yield ""
        finally:
            self.leave(caller, time.monotonic() - t0)

    def retry_after(self, scope: str) -> int:
        """Milliseconds after which a retry has a fair chance: about the time a slot takes to free (the
        average admission; for a caller over its own bound, the time its own calls take), at least the
        configured hint."""
        avg_ms = self._avg_s * 1000
        want = avg_ms * (self.per_caller if scope == "caller" else 1)
        return int(min(MAX_RETRY_AFTER_MS, max(self.retry_after_ms, want)))

    def callers(self) -> int:
        return len(self._by_caller)

    def stats(self) -> dict[str, int]:
        return {"in_flight": self.in_flight, "callers": self.callers(), "passed": self.passed,
                "refused_global": self.refused["global"], "refused_caller": self.refused["caller"],
                "limit": self.limit, "per_caller": self.per_caller}

    # -- gRPC --------------------------------------------------------------------------------
    async def run(self, context: Any, caller: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call`` in a slot, or end the RPC with RESOURCE_EXHAUSTED and the retry hint."""
        with self.slot(caller) as refused:
            if not refused:
                return await call()
        await self.refuse(context, refused)

    async def refuse(self, context: Any, scope: str) -> NoReturn:
        ms = self.retry_after(scope)
        whose = (f"this caller already has {self.per_caller} admissions in progress" if scope == "caller"
                 else f"the broker has {self.limit} admissions in progress")
        message = f"{REASON}: {whose}; retry after {ms} ms"
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            log.warning("admissions refused as busy so far: %d over the broker's bound (%d), %d over a caller's "
                        "(%d); %d in progress", self.refused["global"], self.limit, self.refused["caller"],
                        self.per_caller, self.in_flight)
        code = grpc.StatusCode.RESOURCE_EXHAUSTED
        # the hint three ways: our key, google.rpc.RetryInfo, and gRPC's own retry pushback (a client whose
        # retry policy covers RESOURCE_EXHAUSTED waits that long before its next attempt)
        context.set_trailing_metadata(((REASON_KEY, REASON), (FIELD_KEY, ""), (RETRY_AFTER_KEY, str(ms)),
                                       (STATUS_DETAILS_KEY, retry_status(code.value[0], message, ms)),
                                       ("grpc-retry-pushback-ms", str(ms))))
        await context.abort(code, message)
        raise AssertionError("unreachable: abort raises")


def caller_of(context: Any, declared: str, is_proxy: Callable[[tuple[str, ...]], bool] | None) -> str:
    """The caller's identity for the per-caller bound (module docstring). ``is_proxy`` is given with mTLS."""
    if is_proxy is not None:
        peer = peer_identities(context)
        if peer:
            if is_proxy(peer):
                relayed = relayed_identities(context)
                if relayed and not is_proxy(relayed):
                    return f"cert:{relayed[0]}"
                # a platform component calling for the clients it names: one caller per named client
                return f"cert:{peer[0]}/{declared}" if declared else f"cert:{peer[0]}"
            return f"cert:{peer[0]}"
    if declared:
        return f"name:{declared}"
    try:
        return f"peer:{context.peer()}"
    except Exception:  # pragma: no cover - not a server context
        return "peer:?"


# -- google.rpc.Status with a google.rpc.RetryInfo (googleapis-common-protos) ---------------------
def retry_status(code: int, message: str, retry_after_ms: int) -> bytes:
    """A serialized ``google.rpc.Status`` whose one detail is a ``google.rpc.RetryInfo``."""
    seconds, ms = divmod(retry_after_ms, 1000)
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds, nanos=ms * 1_000_000)))
    return bytes(status_pb2.Status(code=code, message=message, details=[detail]).SerializeToString())


def retry_after_ms_of(status_details: bytes) -> int | None:
    """The RetryInfo delay (ms) in a serialized ``google.rpc.Status``, None if it has none (clients, tests)."""
    info = error_details_pb2.RetryInfo()
    for detail in status_pb2.Status.FromString(status_details).details:
        if detail.Unpack(info):
            return int(info.retry_delay.seconds) * 1000 + int(info.retry_delay.nanos) // 1_000_000
    return None
