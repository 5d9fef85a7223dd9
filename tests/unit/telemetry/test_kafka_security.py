"""The Kafka security options (telemetry/kafka_security.py; docs/telemetry.md, "Kafka security")."""

from __future__ import annotations

import argparse
import logging
import ssl
from pathlib import Path

import pytest

from gridstat.demo import certs as demo_certs
from gridstat.errors import ValidationError
from gridstat.history import main as history_main
from gridstat.telemetry import kafka_security, roles
from gridstat.telemetry.kafka_security import KafkaSecurity


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> demo_certs.CertDir:
    return demo_certs.ensure(tmp_path_factory.mktemp("certs"), ["client"], days=2).certs


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    roles.add_arguments(p)
    return p.parse_args(["--kafka", "127.0.0.1:9093", *argv])


def test_nothing_is_plaintext() -> None:
    s = KafkaSecurity.from_args(_args(), environ={})
    assert s == kafka_security.PLAINTEXT and s.client_kwargs() == {"security_protocol": "PLAINTEXT"}


def test_a_ca_is_ssl_and_a_client_certificate_is_loaded(certs: demo_certs.CertDir) -> None:
    s = KafkaSecurity.from_args(_args("--kafka-tls-ca", str(certs.ca), "--kafka-tls-cert", str(certs.cert("client")),
                                      "--kafka-tls-key", str(certs.key("client"))), environ={})
    kw = s.client_kwargs()
    assert kw["security_protocol"] == "SSL" and isinstance(kw["ssl_context"], ssl.SSLContext)
    assert kw["ssl_context"].check_hostname and kw["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    assert "sasl_mechanism" not in kw


def test_sasl_ssl_with_a_password_file_and_the_user_from_the_environment(certs: demo_certs.CertDir,
                                                                         tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("hunter2\n")
    s = KafkaSecurity.from_args(_args("--kafka-tls-ca", str(certs.ca), "--kafka-sasl-mechanism", "SCRAM-SHA-512",
                                      "--kafka-sasl-password-file", str(pw)),
                                environ={kafka_security.USERNAME_ENV: "gs", kafka_security.PASSWORD_ENV: "other"})
    kw = s.client_kwargs()
    assert kw["security_protocol"] == "SASL_SSL" and kw["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kw["sasl_plain_username"] == "gs" and kw["sasl_plain_password"] == "hunter2"  # the file wins
    assert "hunter2" not in repr(s) and "hunter2" not in s.describe()


def test_password_from_the_environment(certs: demo_certs.CertDir) -> None:
    s = KafkaSecurity.from_args(_args("--kafka-tls-ca", str(certs.ca), "--kafka-sasl-mechanism", "PLAIN",
                                      "--kafka-sasl-username", "u"), environ={kafka_security.PASSWORD_ENV: "p"})
    assert s.sasl_password == "p" and s.security_protocol == "SASL_SSL"


def test_sasl_without_tls_needs_the_loud_flag(caplog: pytest.LogCaptureFixture) -> None:
    env = {kafka_security.USERNAME_ENV: "u", kafka_security.PASSWORD_ENV: "p"}
    with pytest.raises(ValidationError) as info:
        KafkaSecurity.from_args(_args("--kafka-sasl-mechanism", "PLAIN"), environ=env)
    assert info.value.field == "kafka_tls_ca" and "--kafka-allow-plaintext-sasl" in str(info.value)
    with caplog.at_level(logging.WARNING):
        s = KafkaSecurity.from_args(_args("--kafka-sasl-mechanism", "PLAIN", "--kafka-allow-plaintext-sasl"),
                                    environ=env)
    assert s.security_protocol == "SASL_PLAINTEXT" and "in clear" in caplog.text


@pytest.mark.parametrize(("argv", "field"), [
    (["--kafka-tls-ca", "/nonexistent/ca.pem"], "kafka_tls_ca"),
    (["--kafka-tls-cert", "CERT"], "kafka_tls_key"),
    (["--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-tls-ca", "CA"], "kafka_sasl_username"),
    (["--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-tls-ca", "CA", "--kafka-sasl-username", "u"],
     "kafka_sasl_password_file"),
    (["--kafka-sasl-mechanism", "PLAIN", "--kafka-tls-ca", "CA", "--kafka-sasl-username", "u",
      "--kafka-sasl-password-file", "/nonexistent/pw"], "kafka_sasl_password_file"),
    (["--kafka-sasl-username", "u"], "kafka_sasl_mechanism"),
    (["--kafka-sasl-password", "hunter2"], "kafka_sasl_password_file"),
])
def test_bad_options_name_their_flag(certs: demo_certs.CertDir, argv: list[str], field: str) -> None:
    subst = {"CA": str(certs.ca), "CERT": str(certs.cert("client"))}
    with pytest.raises(ValidationError) as info:
        KafkaSecurity.from_args(_args(*[subst.get(a, a) for a in argv]), environ={})
    assert info.value.field == field, info.value
    assert "hunter2" not in str(info.value)


def test_an_unknown_mechanism_and_files_that_are_not_pem(certs: demo_certs.CertDir, tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as info:
        KafkaSecurity(ca_file=str(certs.ca), sasl_mechanism="GSSAPI", sasl_username="u", sasl_password="p")
    assert info.value.field == "kafka_sasl_mechanism"
    with pytest.raises(SystemExit):  # argparse refuses it too
        _args("--kafka-sasl-mechanism", "GSSAPI")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(ValidationError) as info:
        KafkaSecurity(ca_file=str(junk)).client_kwargs()
    assert info.value.field == "kafka_tls_ca"
    with pytest.raises(ValidationError) as info:  # a key that is not the certificate's
        KafkaSecurity(ca_file=str(certs.ca), cert_file=str(certs.cert("client")),
                      key_file=str(certs.ca)).client_kwargs()
    assert info.value.field == "kafka_tls_cert"
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ValidationError, match="is empty"):
        KafkaSecurity.from_args(_args("--kafka-tls-ca", str(certs.ca), "--kafka-sasl-mechanism", "PLAIN",
                                      "--kafka-sasl-username", "u", "--kafka-sasl-password-file", str(empty)),
                                environ={})


def test_every_parser_with_kafka_has_the_same_options() -> None:
    ours = {"--kafka-tls-ca", "--kafka-tls-cert", "--kafka-tls-key", "--kafka-sasl-mechanism",
            "--kafka-sasl-username", "--kafka-sasl-password-file", "--kafka-allow-plaintext-sasl"}
    for add in (roles.add_arguments, history_main.add_arguments):
        p = argparse.ArgumentParser()
        add(p)
        assert ours <= set(p._option_string_actions), add


def test_role_telemetry_passes_the_security_to_its_exporter(certs: demo_certs.CertDir) -> None:
    tel = roles.RoleTelemetry.from_args("router", "r1", _args("--kafka-tls-ca", str(certs.ca)))
    assert tel.exporter is not None and tel.exporter.config.security.security_protocol == "SSL"
