"""The certificates ``gridstat up`` makes (gridstat.demo.certs) and how the CLI finds a running demo's
(gridstat.demo.localtls): identities, SANs, validity, permissions, reuse and renewal."""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gridstat.cli import common
from gridstat.core import certs as core_certs
from gridstat.demo import certs, localtls
from gridstat.errors import ValidationError


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_every_identity_gets_a_ca_signed_server_and_client_certificate(tmp_path: Path) -> None:
    result = certs.ensure(tmp_path / "c", [*certs.ROLE_IDENTITIES, "broker-A", "pmu1", "ems"])
    assert result.new_ca and result.reused == []
    assert result.created == ["parent", "router", "admission", "admin", "condense", "broker-A", "pmu1", "ems"]
    ca = load(result.certs.ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for name in result.created:
        cert = load(result.certs.cert(name))
        cert.verify_directly_issued_by(ca)
        assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == [name]
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert san.get_values_for_type(x509.DNSName) == ["localhost", name]
        assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1"),
                                                            ipaddress.ip_address("::1")]
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        now = dt.datetime.now(dt.UTC)
        assert cert.not_valid_before_utc <= now and cert.not_valid_after_utc > now + dt.timedelta(days=800)
        # what core.tls loads: the certificate and its key belong together, the CA parses
        result.certs.tls(name).check_files()
    ctx = ssl.create_default_context(cafile=str(result.certs.ca))
    ctx.load_cert_chain(str(result.certs.cert("broker-A")), str(result.certs.key("broker-A")))


def test_files_are_0600_and_the_directory_0700_even_with_a_loose_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        (tmp_path / "c").mkdir(mode=0o755)
        result = certs.ensure(tmp_path / "c", ["admin"])
    finally:
        os.umask(old)
    assert stat.S_IMODE(result.certs.path.stat().st_mode) == 0o700
    for p in result.certs.path.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    os.chmod(result.certs.key("admin"), 0o644)  # a loosened file is tightened on the next start
    certs.ensure(tmp_path / "c", ["admin"])
    assert stat.S_IMODE(result.certs.key("admin").stat().st_mode) == 0o600


def test_a_second_start_reuses_and_renews_only_what_is_missing_expiring_or_foreign(tmp_path: Path) -> None:
    d = tmp_path / "c"
    first = certs.ensure(d, ["broker", "router", "pmu1"])
    pems = {p.name: p.read_bytes() for p in d.glob("*.pem")}
    again = certs.ensure(d, ["broker", "router", "pmu1", "ems"])
    assert (again.new_ca, again.created, again.reused) == (False, ["ems"], ["broker", "router", "pmu1"])
    assert {p.name: p.read_bytes() for p in d.glob("*.pem") if p.name in pems} == pems
    # missing, or not parsing, or not belonging to its key: made again
    first.certs.cert("broker").unlink()
    first.certs.key("router").write_bytes(core_certs.key_pem(certs.ec.generate_private_key(certs.ec.SECP256R1())))
    first.certs.cert("pmu1").write_text("half a file")
    assert sorted(certs.ensure(d, ["broker", "router", "pmu1", "ems"]).created) == ["broker", "pmu1", "router"]
    # a certificate of another CA: made again
    other = certs.ensure(tmp_path / "other", ["ems"]).certs
    for f in (other.cert("ems"), other.key("ems")):
        (d / f.name).write_bytes(f.read_bytes())
    again = certs.ensure(d, ["ems"])
    assert again.created == ["ems"] and not again.new_ca
    load(first.certs.cert("ems")).verify_directly_issued_by(load(first.certs.ca))
    # expiring within a day (seen from 825 days later): everything, the CA first
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=825)
    renewed = certs.ensure(d, ["broker", "ems"], now=later)
    assert renewed.new_ca and renewed.created == ["broker", "ems"]


def test_names_that_are_no_identity_are_refused(tmp_path: Path) -> None:
    for bad in ("", "ca", "../x", "a b", "x" * 64):
        with pytest.raises(ValidationError):
            certs.ensure(tmp_path / "c", [bad])


def test_gen_certs_layout_is_shared(tmp_path: Path) -> None:
    d = localtls.CertDir(tmp_path)
    assert (d.ca, d.cert("pmu1"), d.key("pmu1")) == (tmp_path / "ca.pem", tmp_path / "pmu1.pem",
                                                   tmp_path / "pmu1.key")
    assert d.cli_flags() == f"--tls-ca {tmp_path}/ca.pem --tls-cert {tmp_path}/admin.pem --tls-key {tmp_path}/admin.key"


def test_default_certs_dir_follows_the_state_dir_or_xdg_state_home(tmp_path: Path) -> None:
    assert localtls.default_certs_dir("/s") == Path("/s/certs")
    assert localtls.default_certs_dir(None, {"XDG_STATE_HOME": "/x"}) == Path("/x/gridstat/up/certs")


def test_the_cli_finds_a_running_demo_by_address_only(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path)}
    result = certs.ensure(tmp_path / "certs", ["admin"])
    path = localtls.register(result.certs, ["127.0.0.1:7001", "localhost:7002"], environ=env)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert localtls.lookup("127.0.0.1:7001", env) == result.certs
    assert localtls.lookup("localhost:7001", env) == result.certs
    assert localtls.lookup("127.0.0.1:7002", env) == result.certs
    assert localtls.lookup("127.0.0.1:7700", env) is None  # a broker run by hand: plaintext as before
    path.unlink()
    assert localtls.lookup("127.0.0.1:7001", env) is None
    # a record left by a dead process (or a recycled pid) is ignored
    localtls.register(result.certs, ["127.0.0.1:7001"], environ=env)
    doc = path.read_text().replace('"started": ', '"started": 1')
    path.write_text(doc)
    assert localtls.lookup("127.0.0.1:7001", env) is None


def test_cli_tls_options_default_from_the_environment() -> None:
    args = argparse.Namespace(tls_ca="", tls_cert="", tls_key="")
    env = {"GRIDSTAT_TLS_CA": "ca.pem", "GRIDSTAT_TLS_CERT": "a.pem", "GRIDSTAT_TLS_KEY": "a.key"}
    assert common.Tls.from_args(args, env) == common.Tls("ca.pem", "a.pem", "a.key")
    assert common.Tls.from_args(args, {}) is None
    given = argparse.Namespace(tls_ca="mine.pem", tls_cert="", tls_key="")
    assert common.Tls.from_args(given, env) == common.Tls(ca="mine.pem")  # options win, all three


def test_a_client_name_that_is_a_role_identity_is_refused() -> None:
    from gridstat.demo.main import check_client_names
    from gridstat.errors import ValidationError

    check_client_names(["pmu-a1", "ems", "brokerage-feed"])
    for name, role in (("broker-A", "broker"), ("admin", "admin"), ("router", "router"), ("gridstat-parent", "broker")):
        with pytest.raises(ValidationError) as err:
            check_client_names(["pmu-a1", name])
        assert repr(name) in str(err.value) and f"of the {role} role" in str(err.value), err.value
