"""TLS and SASL for every Kafka client of GridStat (docs/telemetry.md, "Kafka security").

One small, frozen configuration shared by the exporter (every role's ``--kafka`` and ``gridstat
archive``), the history service's archive reader and the archive loader. :func:`add_arguments`
adds the same options to every parser that has ``--kafka``; :meth:`KafkaSecurity.from_args` reads
them (and ``GRIDSTAT_KAFKA_SASL_USERNAME`` / ``GRIDSTAT_KAFKA_SASL_PASSWORD``) and checks them,
naming the flag in every ``ValidationError``; :meth:`KafkaSecurity.client_kwargs` gives aiokafka's
``security_protocol``, ``ssl_context`` and ``sasl_*`` arguments.

The security protocol is derived, never given (Kafka's names, docs/telemetry.md):

* nothing: ``PLAINTEXT``;
* ``--kafka-tls-ca``: ``SSL`` (the broker's certificate is verified against that CA, host name
  included); with ``--kafka-tls-cert/--kafka-tls-key`` the client also shows its own certificate;
* ``--kafka-tls-ca`` and ``--kafka-sasl-mechanism``: ``SASL_SSL``;
* ``--kafka-sasl-mechanism`` without TLS: refused, unless ``--kafka-allow-plaintext-sasl``
  (``SASL_PLAINTEXT``, with a warning: PLAIN then sends the password in clear, and every record
  crosses the network readable).

The password comes from a file (``--kafka-sasl-password-file``, e.g. a mounted Secret) or from
``GRIDSTAT_KAFKA_SASL_PASSWORD``, never from the command line (where ``ps`` shows it).

aiokafka's bootstrap logs why a connection failed and raises a bare "Unable to bootstrap";
:func:`capturing_connect_errors` keeps the cause (a refused password, a certificate that does not
verify) so that the callers say it: :func:`describe_failure`.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import logging
import os
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gridstat.errors import ValidationError

from .errors import KafkaUnavailable

log = logging.getLogger(__name__)

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
USERNAME_ENV = "GRIDSTAT_KAFKA_SASL_USERNAME"
PASSWORD_ENV = "GRIDSTAT_KAFKA_SASL_PASSWORD"
#: A password file larger than this is not a password file.
MAX_PASSWORD_FILE_BYTES = 4096


class KafkaAuthenticationFailed(KafkaUnavailable):
    """Kafka refused the client's SASL credentials or mechanism, or its TLS handshake.

    A ``KafkaUnavailable`` (callers that wait for Kafka keep waiting: a rotated Secret may fix it),
    with its own reason so that it is told apart in logs, counters and gRPC trailers."""

    reason = "KafkaAuthenticationFailed"


def add_arguments(g: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The Kafka security options, for every parser that has ``--kafka``."""
    g.add_argument("--kafka-tls-ca", default="", metavar="PEM",
                   help="TLS to Kafka: verify the brokers' certificates against this CA (security protocol SSL, "
                        "or SASL_SSL with --kafka-sasl-mechanism)")
    g.add_argument("--kafka-tls-cert", default="", metavar="PEM",
                   help="client certificate shown to Kafka (mutual TLS; with --kafka-tls-key)")
    g.add_argument("--kafka-tls-key", default="", metavar="PEM", help="private key of --kafka-tls-cert")
    g.add_argument("--kafka-sasl-mechanism", default="", choices=["", *MECHANISMS],
                   metavar="{" + ",".join(MECHANISMS) + "}",
                   help=f"authenticate to Kafka with SASL; user from --kafka-sasl-username or ${USERNAME_ENV}, "
                        f"password from --kafka-sasl-password-file or ${PASSWORD_ENV}")
    g.add_argument("--kafka-sasl-username", default="", metavar="USER",
                   help=f"SASL user name (default ${USERNAME_ENV})")
    g.add_argument("--kafka-sasl-password-file", default="", metavar="FILE",
                   help=f"file holding the SASL password (default ${PASSWORD_ENV}); never on the command line")
    # Taken only to refuse it: without it argparse would read `--kafka-sasl-password SECRET` as an
    # abbreviation of --kafka-sasl-password-file (docs.python.org/3/library/argparse.html#allow-abbrev).
    g.add_argument("--kafka-sasl-password", default=None, help=argparse.SUPPRESS)
    g.add_argument("--kafka-allow-plaintext-sasl", action="store_true",
                   help="allow SASL without --kafka-tls-ca (SASL_PLAINTEXT: records, and with PLAIN the password, "
                        "cross the network in clear); for a trusted test network only")


@dataclass(frozen=True)
class KafkaSecurity:
    """How a Kafka client connects: TLS files and SASL credentials (all empty: plaintext).

    Args:
        ca_file: CA the brokers' certificates are verified against; set means TLS.
        cert_file / key_file: the client's own certificate and key (mutual TLS), both or neither.
        sasl_mechanism: ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``; empty means no SASL.
        sasl_username / sasl_password: the SASL credentials (the password is never in ``repr``).
        allow_plaintext_sasl: SASL without TLS (``SASL_PLAINTEXT``) is refused unless this is set.
    """

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)
    allow_plaintext_sasl: bool = False

    def __post_init__(self) -> None:
        for flag, path in (("kafka_tls_ca", self.ca_file), ("kafka_tls_cert", self.cert_file),
                           ("kafka_tls_key", self.key_file)):
            if path and not Path(path).is_file():
                raise ValidationError(f"--{flag.replace('_', '-')} {path!r}: no such file", field=flag)
        if bool(self.cert_file) != bool(self.key_file):
            flag = "kafka_tls_key" if self.cert_file else "kafka_tls_cert"
            raise ValidationError("--kafka-tls-cert and --kafka-tls-key go together", field=flag)
        if self.cert_file and not self.ca_file:
            raise ValidationError("--kafka-tls-cert needs --kafka-tls-ca (the CA that verifies Kafka)",
                                  field="kafka_tls_ca")
        if self.sasl_mechanism:
            if self.sasl_mechanism not in MECHANISMS:
                raise ValidationError(f"--kafka-sasl-mechanism {self.sasl_mechanism!r} is not one of "
                                      f"{', '.join(MECHANISMS)}", field="kafka_sasl_mechanism")
            if not self.sasl_username:
                raise ValidationError(f"--kafka-sasl-mechanism {self.sasl_mechanism} needs a user name: "
                                      f"--kafka-sasl-username or ${USERNAME_ENV}", field="kafka_sasl_username")
            if not self.sasl_password:
                raise ValidationError(f"--kafka-sasl-mechanism {self.sasl_mechanism} needs a password: "
                                      f"--kafka-sasl-password-file or ${PASSWORD_ENV}",
                                      field="kafka_sasl_password_file")
            if not self.ca_file and not self.allow_plaintext_sasl:
                raise ValidationError("SASL without TLS sends every record (and with PLAIN the password) in clear: "
                                      "give --kafka-tls-ca, or --kafka-allow-plaintext-sasl on a trusted test network",
                                      field="kafka_tls_ca")
        elif self.sasl_username or self.sasl_password:
            raise ValidationError("a SASL user name or password without --kafka-sasl-mechanism",
                                  field="kafka_sasl_mechanism")

    @property
    def tls(self) -> bool:
        return bool(self.ca_file)

    @property
    def security_protocol(self) -> str:
        """Kafka's security protocol: PLAINTEXT, SSL, SASL_SSL or SASL_PLAINTEXT."""
        if self.sasl_mechanism:
            return "SASL_SSL" if self.tls else "SASL_PLAINTEXT"
        return "SSL" if self.tls else "PLAINTEXT"

    def describe(self) -> str:
        """For logs: the protocol, and the mechanism and user (never the password)."""
        if self.sasl_mechanism:
            return f"{self.security_protocol} {self.sasl_mechanism} as {self.sasl_username!r}"
        return self.security_protocol

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client's TLS context (None without TLS); a ValidationError naming the flag if a file is not
        what it should be (not PEM, a key that does not match the certificate)."""
        if not self.tls:
            return None
        from aiokafka.helpers import create_ssl_context

        if not _loads_ca(self.ca_file):
            raise ValidationError(f"--kafka-tls-ca {self.ca_file!r}: not a PEM CA certificate", field="kafka_tls_ca")
        try:
            if self.cert_file:
                context: ssl.SSLContext = create_ssl_context(cafile=self.ca_file, certfile=self.cert_file,
                                                             keyfile=self.key_file)
            else:
                context = create_ssl_context(cafile=self.ca_file)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ValidationError(f"--kafka-tls-cert/--kafka-tls-key: the client certificate or its key cannot be "
                                  f"loaded (not PEM, or not a pair): {exc}", field="kafka_tls_cert") from exc
        return context

    def client_kwargs(self) -> dict[str, Any]:
        """aiokafka's keyword arguments (producer, consumer, admin client) for this configuration."""
        kwargs: dict[str, Any] = {"security_protocol": self.security_protocol}
        context = self.ssl_context()
        if context is not None:
            kwargs["ssl_context"] = context
        if self.sasl_mechanism:
            # aiokafka takes SCRAM's credentials in the sasl_plain_* arguments too
            kwargs.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.sasl_username,
                          sasl_plain_password=self.sasl_password)
        return kwargs

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> KafkaSecurity:
        """From :func:`add_arguments`' options and the environment; a parser without them gives plaintext."""
        env = os.environ if environ is None else environ
        if getattr(args, "kafka_sasl_password", None) is not None:  # its value is never echoed
            raise ValidationError("--kafka-sasl-password: a password is never given on the command line (ps shows "
                                  f"it to every user): use --kafka-sasl-password-file or ${PASSWORD_ENV}",
                                  field="kafka_sasl_password_file")
        mechanism = str(getattr(args, "kafka_sasl_mechanism", "") or "").upper()
        username = str(getattr(args, "kafka_sasl_username", "") or "")
        password_file = str(getattr(args, "kafka_sasl_password_file", "") or "")
        username = username or (env.get(USERNAME_ENV, "") if mechanism else "")
        password = _read_password(password_file) if password_file else \
            (env.get(PASSWORD_ENV, "") if mechanism else "")
        if password_file and not mechanism:
            raise ValidationError("--kafka-sasl-password-file without --kafka-sasl-mechanism",
                                  field="kafka_sasl_mechanism")
        security = cls(ca_file=str(getattr(args, "kafka_tls_ca", "") or ""),
                       cert_file=str(getattr(args, "kafka_tls_cert", "") or ""),
                       key_file=str(getattr(args, "kafka_tls_key", "") or ""),
                       sasl_mechanism=mechanism, sasl_username=username, sasl_password=password,
                       allow_plaintext_sasl=bool(getattr(args, "kafka_allow_plaintext_sasl", False)))
        security.ssl_context()  # the files load: a bad one is an invalid option now, not a retry loop later
        if security.security_protocol == "SASL_PLAINTEXT":
            log.warning("Kafka: SASL over plaintext (--kafka-allow-plaintext-sasl): every record%s crosses the "
                        "network in clear", " and the password" if mechanism == "PLAIN" else "")
        return security


PLAINTEXT = KafkaSecurity()


def _loads_ca(path: str) -> bool:
    try:
        ssl.create_default_context(cafile=path)
    except (ssl.SSLError, OSError, ValueError):
        return False
    return True


def _read_password(path: str) -> str:
    try:
        p = Path(path)
        if p.stat().st_size > MAX_PASSWORD_FILE_BYTES:
            raise ValidationError(f"--kafka-sasl-password-file {path!r} is larger than {MAX_PASSWORD_FILE_BYTES} "
                                  "bytes: not a password file", field="kafka_sasl_password_file")
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"--kafka-sasl-password-file {path!r} cannot be read: {exc}",
                              field="kafka_sasl_password_file") from exc
    password = text.rstrip("\r\n")  # `echo secret > file` adds a newline; a Secret's file has none
    if not password:
        raise ValidationError(f"--kafka-sasl-password-file {path!r} is empty", field="kafka_sasl_password_file")
    return password


# -- why a connection failed ------------------------------------------------------------------------

_captured: contextvars.ContextVar[list[BaseException] | None] = contextvars.ContextVar(
    "gridstat_kafka_connect_errors", default=None)


class _ConnectErrorFilter(logging.Filter):
    """Keeps the cause aiokafka's bootstrap logs ('Unable connect to "%s:%s": %s') for the client being
    started in this task (:func:`capturing_connect_errors`), and drops that record: the caller says it."""

    def filter(self, record: logging.LogRecord) -> bool:
        sink = _captured.get()
        if sink is None or not str(record.msg).startswith("Unable connect to"):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        if args and isinstance(args[-1], BaseException):
            sink.append(args[-1])
        return False


@contextlib.contextmanager
def capturing_connect_errors() -> Iterator[list[BaseException]]:
    """Around a client's ``start()`` (awaited in this task): the errors of its bootstrap connections."""
    from aiokafka import client  # its bootstrap logs on this logger (named "aiokafka" in 0.14)

    client_log: logging.Logger = client.log
    if not any(isinstance(f, _ConnectErrorFilter) for f in client_log.filters):
        client_log.addFilter(_ConnectErrorFilter())
    sink: list[BaseException] = []
    token = _captured.set(sink)
    try:
        yield sink
    finally:
        _captured.reset(token)


def failure_reason(exc: BaseException | None, causes: list[BaseException]) -> str:
    """``authentication`` (SASL refused), ``tls`` (a handshake that failed) or ``unavailable``."""
    from aiokafka.errors import IllegalSaslStateError, SaslAuthenticationFailed, UnsupportedSaslMechanismError

    for err in [*causes, *([exc] if exc is not None else [])]:
        if isinstance(err, (SaslAuthenticationFailed, UnsupportedSaslMechanismError, IllegalSaslStateError)):
            return "authentication"
        if isinstance(err, ssl.SSLError):
            return "tls"
    return "unavailable"


def describe_failure(bootstrap: str, security: KafkaSecurity, exc: BaseException | None,
                     causes: list[BaseException]) -> tuple[str, str]:
    """(reason, message) for a client that could not start: the message names the cause and what to check."""
    reason = failure_reason(exc, causes)
    cause = causes[-1] if causes else exc
    text = f"{type(cause).__name__}: {cause}" if cause is not None and str(cause) else type(cause).__name__
    if reason == "authentication":
        return reason, (f"Kafka at {bootstrap} refused the SASL login ({security.describe()}): {text}; check "
                        f"--kafka-sasl-username/--kafka-sasl-password-file (or ${USERNAME_ENV}/${PASSWORD_ENV}) "
                        "and the mechanism")
    if reason == "tls":
        return reason, (f"TLS to Kafka at {bootstrap} failed ({security.describe()}): {text}; check --kafka-tls-ca "
                        "(and --kafka-tls-cert/--kafka-tls-key), and that the address is a TLS listener")
    return reason, f"Kafka at {bootstrap} is unavailable ({security.describe()}): {text}"


def unavailable(bootstrap: str, security: KafkaSecurity, exc: BaseException | None,
                causes: list[BaseException]) -> KafkaUnavailable:
    """The error to raise for a client that could not start (``KafkaAuthenticationFailed`` for SASL or TLS)."""
    reason, message = describe_failure(bootstrap, security, exc, causes)
    if reason == "unavailable":
        return KafkaUnavailable(message, field="kafka")
    return KafkaAuthenticationFailed(message, field="kafka")
