"""A local CA and one certificate per identity, made with ``cryptography`` (docs/security.md,
"Certificates (embedded mode)").

The same files as ``scripts/gen-certs.sh`` (which uses the openssl CLI): ``ca.pem``/``ca.key`` and
``NAME.pem``/``NAME.key`` for each identity, EC P-256, ``CN=NAME`` with the subject alternative names
127.0.0.1, ::1, localhost and ``DNS:NAME``, usable as server and as client. ``ensure`` makes what is
missing and reuses what is still good, so ``gridstat up`` generates its certificates on the first
start only: a certificate is made again when it is missing, does not parse, does not belong to its
key, was not issued by the current CA, names another identity, lacks one of the extra names asked for,
or expires within a day (a new CA renews every certificate). Extra names (``sans``) are further DNS
subject alternative names of an identity: a SCADA gateway's certificate carries the publisher names it
publishes under, since the broker binds a publisher's name to its certificate (docs/topology.md, "Gateways").
Every file is 0600 and the directory 0700. Concurrent callers on one
directory take turns (a lock file).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gridstat.core import certs as core_certs
from gridstat.demo.localtls import CertDir
from gridstat.errors import ValidationError

#: The identities the roles use (docs/security.md: role-based access maps these names to roles): the
#: parent broker, every router and its edge proxy, the admission controller, the administrator (the
#: CLI, the demo's own management calls), a condensation host. Each leaf broker has its own,
#: ``localtls.leaf_broker_identity(cloud)``.
ROLE_IDENTITIES = ("parent", "router", "admission", "admin", "condense")
CA_NAME = "gridstat local CA"
DEFAULT_DAYS = 825  # as scripts/gen-certs.sh (GRIDSTAT_CERT_DAYS)
#: A certificate expiring sooner than this is made again.
RENEW_BEFORE = dt.timedelta(days=1)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


@dataclass
class Result:
    """What ``ensure`` did: the directory, and which identities it made and which it reused."""

    certs: CertDir
    created: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    new_ca: bool = False


def check_name(name: str) -> str:
    if not NAME_RE.match(name) or name == "ca":
        raise ValidationError(f"certificate identity {name!r} must be 1-63 letters, digits, '.', '_' or '-' "
                              "(not 'ca')", field="name")
    return name


def ensure(directory: str | os.PathLike[str], names: Iterable[str], *, days: int = DEFAULT_DAYS,
           now: dt.datetime | None = None, sans: Mapping[str, Sequence[str]] | None = None) -> Result:
    """Make the CA and a certificate for each of ``names`` in ``directory`` unless good ones are there;
    ``sans`` gives an identity further names its certificate carries (DNS subject alternative names)."""
    wanted = list(dict.fromkeys(check_name(n) for n in names))
    extra = {n: tuple(dict.fromkeys(check_name(x) for x in (sans or {}).get(n, ()) if x != n)) for n in wanted}
    if days < 2:
        raise ValidationError(f"certificates must be valid for at least 2 days, not {days}", field="days")
    now = now or dt.datetime.now(dt.UTC)
    certs = CertDir(Path(directory))
    _private_dir(certs.path)
    out = Result(certs)
    with _locked(certs.path / ".lock"):
        ca = _load_ca(certs, now)
        if ca is None:
            ca = _make_ca(certs, days, now)
            out.new_ca = True
        for name in wanted:
            if _leaf_ok(certs, name, ca[0], now, extra[name]):
                out.reused.append(name)
            else:
                _make_leaf(certs, name, ca, days, now, extra[name])
                out.created.append(name)
    return out


# -- files -------------------------------------------------------------------------------------------
def _private_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path, 0o700)  # exactly: the umask may have taken bits away, an old directory may have more
    except OSError as exc:
        raise ValidationError(f"cannot create the certificate directory {str(path)!r}: {exc.strerror}",
                              field="certs_dir") from exc


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _write_private(path: Path, data: bytes) -> None:
    """Write by rename (a reader sees the old or the new file, never half), mode 0600."""
    tmp = path.with_name(path.name + ".new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _tighten(*paths: Path) -> None:
    for p in paths:
        with contextlib.suppress(OSError):
            if p.stat().st_mode & 0o077:
                os.chmod(p, 0o600)


def _load(cert_path: Path, key_path: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        return None
    _tighten(cert_path, key_path)
    return cert, key


def _current(cert: x509.Certificate, now: dt.datetime) -> bool:
    return cert.not_valid_before_utc <= now and cert.not_valid_after_utc - RENEW_BEFORE > now


# -- the CA ------------------------------------------------------------------------------------------
def _load_ca(certs: CertDir, now: dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    loaded = _load(certs.ca, certs.ca_key)
    if loaded is None or not _current(loaded[0], now):
        return None
    try:
        if not loaded[0].extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            return None
    except x509.ExtensionNotFound:
        return None
    return loaded


def _make_ca(certs: CertDir, days: int, now: dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    _write_private(certs.ca_key, core_certs.key_pem(key))
    _write_private(certs.ca, cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


# -- one identity ------------------------------------------------------------------------------------
def _leaf_ok(certs: CertDir, name: str, ca: x509.Certificate, now: dt.datetime, extra: Sequence[str] = ()) -> bool:
    loaded = _load(certs.cert(name), certs.key(name))
    if loaded is None:
        return False
    cert = loaded[0]
    try:
        cert.verify_directly_issued_by(ca)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound):
        return False
    cns = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    dns = sans.get_values_for_type(x509.DNSName)
    return _current(cert, now) and cns == [name] and name in dns and all(x in dns for x in extra)


def _make_leaf(certs: CertDir, name: str, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], days: int,
               now: dt.datetime, extra: Sequence[str] = ()) -> None:
    cert, key = core_certs.build_leaf(ca[0], ca[1], name, days=days, now=now,
                                      sans=(*core_certs.LOOPBACK_SANS, *extra))
    # Key first, then certificate, each by rename: a server rotating its files never sees half a pair
    # it would use (core.tls checks that they belong together).
    _write_private(certs.key(name), core_certs.key_pem(key))
    _write_private(certs.cert(name), cert.public_bytes(serialization.Encoding.PEM))


