"""What the operator commands share: options, the channel to a broker or router, gRPC error mapping.

Exit codes of ``gridstat sub|topology|routes``:

* 0: done;
* 2: usage or validation error, or a request the broker refused as invalid (``InvalidArgument``,
  ``NotFound``, ``AlreadyExists``, ...);
* 3: the broker rejected the subscription (``gridstat sub add``: ``NoFeasiblePath``,
  ``LatencyUnattainable``, ``CapacityExceeded``, ``UnknownVariable``, ``TypeMismatch``, ...);
* 4: the broker (or, for ``gridstat routes``, the router) is unavailable or did not answer in time.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from gridstat.core.tls import TlsFiles
from gridstat.errors import GridStatError, ValidationError
from gridstat.v1 import broker_pb2_grpc as bpb_grpc

T = TypeVar("T")

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_REJECTED = 3
EXIT_UNAVAILABLE = 4

BROKER_ENV = "GRIDSTAT_BROKER"
#: Defaults of --tls-ca/--tls-cert/--tls-key (used when none of the three options is given).
TLS_ENV = ("GRIDSTAT_TLS_CA", "GRIDSTAT_TLS_CERT", "GRIDSTAT_TLS_KEY")
DEFAULT_BROKER = "127.0.0.1:7700"
DEFAULT_TIMEOUT_S = 5.0
EXIT_CODES_HELP = "exit codes: 0 ok, 2 usage/validation, 3 subscription rejected, 4 broker (or router) unavailable"

#: Reasons with which a broker refuses a subscription it understood (exit 3 from ``sub add``).
REJECTION_REASONS = frozenset({
    "AdmissionRejected", "NoFeasiblePath", "LatencyUnattainable", "CapacityExceeded",
    "UnknownVariable", "TypeMismatch", "Unauthorized",
})


class CommandFailed(GridStatError):
    """A command failed in a way that has its own exit code (3 or 4, or 2 for a refused request)."""

    def __init__(self, message: str, *, exit_code: int, reason: str | None = None, field: str | None = None) -> None:
        super().__init__(message, reason=reason, field=field)
        self.exit_code = exit_code

    def __str__(self) -> str:
        return Exception.__str__(self)


def add_common_arguments(p: argparse.ArgumentParser, *, output: bool = True) -> None:
    p.epilog = EXIT_CODES_HELP
    g = p.add_argument_group("connection")
    g.add_argument("--broker", default=None, metavar="HOST:PORT",
                   help=f"the QoS broker (default: ${BROKER_ENV}, else {DEFAULT_BROKER})")
    g.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help=f"deadline of each call (default {DEFAULT_TIMEOUT_S:g} s)")
    g.add_argument("--tls-ca", default="", metavar="PEM",
                   help="CA that signed the broker's certificate: use TLS (default: $GRIDSTAT_TLS_CA; for a running "
                        "'gridstat up', its certificates: docs/security.md)")
    g.add_argument("--tls-cert", default="", metavar="PEM",
                   help="client certificate (mutual TLS; default: $GRIDSTAT_TLS_CERT)")
    g.add_argument("--tls-key", default="", metavar="PEM",
                   help="private key of --tls-cert (default: $GRIDSTAT_TLS_KEY)")
    if output:
        p.add_argument("--output", "-o", choices=("table", "json"), default="table", help="output format")


def parse_address(value: str, what: str = "broker") -> str:
    """Check ``HOST:PORT`` (``[v6]:PORT`` too) and return it unchanged."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValidationError(f"{what} address {value!r} is not HOST:PORT", field=what)
    return value.strip()


def broker_address(value: str | None, environ: dict[str, str] | None = None) -> str:
    """``--broker``, else ``$GRIDSTAT_BROKER``, else ``127.0.0.1:7700``."""
    env = os.environ if environ is None else environ
    return parse_address(value or env.get(BROKER_ENV) or DEFAULT_BROKER)


def check_timeout(value: float) -> float:
    if not value > 0:
        raise ValidationError(f"--timeout must be positive, not {value:g}", field="timeout")
    return value


@dataclass(frozen=True)
class Tls:
    """TLS settings of the client: ``ca`` alone checks the server; with ``cert`` and ``key`` it is mTLS."""

    ca: str = ""
    cert: str = ""
    key: str = ""

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Tls | None:
        """The options, else ``$GRIDSTAT_TLS_CA/CERT/KEY``; None when neither names a file (then
        ``open_channel`` looks for a running ``gridstat up`` serving the address)."""
        tls = cls(args.tls_ca, args.tls_cert, args.tls_key)
        if not (tls.ca or tls.cert or tls.key):
            env = os.environ if environ is None else environ
            tls = cls(*(env.get(name, "") for name in TLS_ENV))
        if bool(tls.cert) != bool(tls.key):
            raise ValidationError("--tls-cert and --tls-key go together", field="tls_key" if tls.cert else "tls_cert")
        return tls if (tls.ca or tls.cert) else None

    def credentials(self) -> grpc.ChannelCredentials:
        return TlsFiles(self.cert, self.key, self.ca).channel_credentials()


def local_demo_tls(address: str) -> Tls | None:
    """The ``admin`` certificate of a running ``gridstat up`` whose broker or router serves ``address``
    (``gridstat.demo.localtls``), so that the documented commands work against the secure-by-default
    demo without options; None for any other address (a plaintext broker run by hand stays plaintext)."""
    from gridstat.demo import localtls

    certs = localtls.lookup(address)
    if certs is None:
        return None
    return Tls(str(certs.ca), str(certs.cert(localtls.ADMIN)), str(certs.key(localtls.ADMIN)))


def open_channel(address: str, tls: Tls | None) -> grpc.Channel:
    """Plaintext when no TLS was asked for and ``address`` is not a running ``gridstat up``'s."""
    if tls is None:
        tls = local_demo_tls(address)
    if tls is None:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, tls.credentials())


def broker_stub(args: argparse.Namespace) -> tuple[str, grpc.Channel, bpb_grpc.QoSBrokerStub]:
    """The broker's address (``--broker``, else the environment), an open channel and its QoSBroker stub."""
    address = broker_address(args.broker)
    channel = open_channel(address, Tls.from_args(args))
    return address, channel, bpb_grpc.QoSBrokerStub(channel)  # type: ignore[no-untyped-call]


def metadata_value(metadata: object, key: str) -> str:
    """A value of gRPC (trailing) metadata, ``""`` when absent."""
    for item in metadata or ():  # type: ignore[attr-defined]
        k, v = (item.key, item.value) if hasattr(item, "key") else item
        if k == key:
            return v.decode() if isinstance(v, bytes) else str(v)
    return ""


@dataclass(frozen=True)
class RpcFailure:
    """What a failed gRPC call said: status code, details and the ``gridstat-*`` trailing metadata."""

    code: grpc.StatusCode
    details: str
    reason: str = ""
    field: str = ""

    @classmethod
    def of(cls, exc: grpc.RpcError) -> RpcFailure:
        code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
        details = (exc.details() if hasattr(exc, "details") else "") or ""
        trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
        return cls(code, details, metadata_value(trailing, "gridstat-reason"),
                   metadata_value(trailing, "gridstat-field"))

    @property
    def message(self) -> str:
        """The details without a leading ``Reason:`` that repeats the reason."""
        if self.reason and self.details.startswith(f"{self.reason}: "):
            return self.details[len(self.reason) + 2:]
        return self.details


def failure_to_error(f: RpcFailure, *, target: str, rejections: bool = False) -> CommandFailed:
    """Map a failed call on ``target`` (e.g. ``broker at 127.0.0.1:7700``) to a message and an exit code."""
    if f.code == grpc.StatusCode.UNAVAILABLE:
        return CommandFailed(f"{target} is unavailable ({f.details})" if f.details else f"{target} is unavailable",
                             exit_code=EXIT_UNAVAILABLE, reason="Unavailable")
    if f.code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return CommandFailed(f"{target} is unavailable: no answer before the deadline (--timeout)",
                             exit_code=EXIT_UNAVAILABLE, reason="Unavailable")
    reason = f.reason or _code_reason(f.code)
    text = f"{target} refused the request: {reason}: {f.message or f.code.name}"
    if f.field:
        text += f" (field {f.field})"
    rejected = rejections and (reason in REJECTION_REASONS or f.code in (
        grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.FAILED_PRECONDITION))
    return CommandFailed(text, exit_code=EXIT_REJECTED if rejected else EXIT_USAGE, reason=reason,
                         field=f.field or None)


def _code_reason(code: grpc.StatusCode) -> str:
    """A reason word for a status without ``gridstat-reason`` metadata: ``NOT_FOUND`` -> ``NotFound``."""
    return "".join(part.capitalize() for part in code.name.split("_"))


def report_error(command: str, exc: BaseException, exit_code: int, *, output: str | None = None) -> None:
    """A failed command's error: one line on stderr, and with ``-o json`` also one JSON object on stdout
    (``{"error": {"command", "exit_code", "reason", "field", "message"}}``), so a script parses every
    outcome from stdout alone."""
    print(f"gridstat {command}: error: {exc}", file=sys.stderr, flush=True)
    if output == "json":
        reason = getattr(exc, "reason", None) or type(exc).__name__
        message = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
        print(json.dumps({"error": {"command": command, "exit_code": exit_code, "reason": reason,
                                    "field": getattr(exc, "field", None) or None, "message": message}},
                         separators=(",", ":")), flush=True)


def guarded(command: str, body: Callable[[], int], *, output: str | None = None) -> int:
    """Run ``body``; a :class:`CommandFailed` is reported like main's errors and gives its own exit code."""
    try:
        return body()
    except CommandFailed as exc:
        report_error(command, exc, exc.exit_code, output=output)
        return exc.exit_code


def call(target: str, fn: Callable[[], T], *, rejections: bool = False) -> T:
    """Make one gRPC call; a failure becomes a :class:`CommandFailed` with its exit code."""
    try:
        return fn()
    except grpc.RpcError as exc:
        raise failure_to_error(RpcFailure.of(exc), target=target, rejections=rejections) from None


def broker_call(args: argparse.Namespace, method: str, request: object, *, min_timeout_s: float = 0.0,
                rejections: bool = False) -> Any:
    """One ``QoSBroker`` call (``method``) to ``--broker`` (else the environment) within ``--timeout``, or
    ``min_timeout_s`` if longer; its reply. A failure becomes a :class:`CommandFailed` (:func:`call`)."""
    timeout = check_timeout(args.timeout)
    address, channel, stub = broker_stub(args)
    with channel:
        return call(f"broker at {address}", functools.partial(getattr(stub, method), request,
                                                              timeout=max(timeout, min_timeout_s)),
                    rejections=rejections)


def emit(output: str, data: object, view: Callable[[Any], object]) -> None:
    """``data`` on stdout: JSON with ``-o json``, else ``view(data)`` as a table (:func:`print_table`)."""
    if output == "json":
        from gridstat.cli.formatting import to_json

        print(to_json(data))
    else:
        print_table(view(data))


def print_table(renderable: object) -> None:
    """Print a rich renderable on stdout; wide when stdout is not a terminal, so pipes get whole rows."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=200, soft_wrap=False)
    console.print(renderable)
