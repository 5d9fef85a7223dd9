"""Issue a leaf certificate from a CA (docs/security.md): the one X.509 recipe of the project.

``gridstat up`` makes its local CA and every role's and client's certificate with it
(``demo.certs``); ``gridstat chaos run --kube`` issues its client pods' certificates from the CA the
Helm chart generated (``chaos.kube``). EC P-256 keys; the name is the common name and a DNS SAN (the
identity ``core.access`` gives a role and the broker binds a client's calls to); usable as server
and client.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gridstat.errors import ValidationError

#: SANs every certificate of the embedded mode carries besides its name (servers on 127.0.0.1).
LOOPBACK_SANS = ("127.0.0.1", "::1", "localhost")


Leaf = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]


def build_leaf(ca_cert: x509.Certificate, ca_key: CertificateIssuerPrivateKeyTypes, name: str, *, days: int,
               now: dt.datetime, sans: Sequence[str] = LOOPBACK_SANS) -> Leaf:
    """A certificate for ``name`` (CN, and a DNS SAN after ``sans``: IP addresses or DNS names) signed by
    the CA, valid from 5 minutes before ``now`` for ``days`` (never past the CA), with its new key."""
    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = []
    for s in sans:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(s)))
        except ValueError:
            alt.append(x509.DNSName(s))
    alt.append(x509.DNSName(name))
    not_after = min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=True,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(_authority_key_id(ca_cert, ca_key), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


def _authority_key_id(ca_cert: x509.Certificate,
                      ca_key: CertificateIssuerPrivateKeyTypes) -> x509.AuthorityKeyIdentifier:
    """The CA's own subject key identifier when it has one: verifiers match the two byte for byte, and
    CAs compute it differently (Helm's genCA, built with Go, takes SHA-256; RFC 5280's method 1 SHA-1)."""
    try:
        ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:
        return x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def issue_pem(ca_cert_pem: bytes, ca_key_pem: bytes, name: str, *, days: int = 30,
              sans: Sequence[str] = ()) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) for ``name`` from a CA given as PEM (any key type the CA has: the Helm
    chart's ``genCA`` makes RSA); ValidationError if the CA does not load."""
    try:
        ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
        ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    except ValueError as exc:
        raise ValidationError(f"the CA does not load: {exc}", field="ca") from None
    if not isinstance(ca_key, CertificateIssuerPrivateKeyTypes.__args__):  # type: ignore[attr-defined]
        raise ValidationError(f"the CA's key ({type(ca_key).__name__}) cannot sign certificates", field="ca")
    cert, key = build_leaf(ca_cert, ca_key, name, days=days, now=dt.datetime.now(dt.UTC), sans=sans)
    return cert.public_bytes(serialization.Encoding.PEM), key_pem(key)
