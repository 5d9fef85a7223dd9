"""The chart's history service (templates/058-Deployment-history.yaml; docs/history.md), rendered by helm."""

from __future__ import annotations

import base64

import pytest

from .test_chart import SECURE, TWO_CLOUDS, helm, render, tools  # noqa: F401 - tools is a fixture

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

NAME = "rel-gridstat-history"
ON = ("--set", "history.enabled=true", "--set", r"history.kafka=kafka-0.data:9092\,kafka-1.data:9092")


def test_off_by_default(tools: dict[str, str]) -> None:  # noqa: F811
    docs = render(tools, TWO_CLOUDS)
    assert not [d for d in docs if "history" in d["metadata"]["name"]]


def test_a_workload_with_its_service_policy_and_certificate(tools: dict[str, str]) -> None:  # noqa: F811
    docs = render(tools, extra=(*ON, "--set", "history.maxEvents=2000000"))  # a certificate per role
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    deploy = by[("Deployment", NAME)]
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == NAME and by[("ServiceAccount", NAME)]["automountServiceAccountToken"] is False
    (c,) = pod["containers"]
    assert c["args"][:2] == ["gridstat", "history-server"]
    tls = "/etc/gridstat/tls/"
    for flag in ("--kafka=kafka-0.data:9092,kafka-1.data:9092", "--topic=gridstat.archive.measurements",
                 "--listen=0.0.0.0:7950", "--max-span-s=86400", "--max-events=2000000", "--metrics-host=0.0.0.0",
                 "--metrics-port=9109",
                 f"--tls-cert={tls}tls.crt", f"--tls-key={tls}tls.key", f"--tls-client-ca={tls}ca.crt"):
        assert flag in c["args"], flag
    assert {"startupProbe", "readinessProbe", "livenessProbe"} <= set(c)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"grpc": 7950, "metrics": 9109}
    (secret_volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert secret_volume["secret"]["secretName"] == "rel-gridstat-tls-history"
    secret = by[("Secret", "rel-gridstat-tls-history")]
    assert secret["metadata"]["annotations"]["gridstat.io/identity"] == "gridstat-history"
    assert base64.b64decode(secret["data"]["tls.crt"]).startswith(b"-----BEGIN CERTIFICATE-----")
    service = by[("Service", NAME)]
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"grpc": 7950, "metrics": 9109}
    assert service["metadata"]["labels"]["gridstat.io/scrape-job"] == "gridstat-history"  # its ServiceMonitor's job
    policy = by[("NetworkPolicy", NAME)]
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "history"
    rule, metrics = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "grpc", "protocol": "TCP"}] and rule["from"] == [{"podSelector": {}}]
    assert metrics["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    monitors = render(tools, extra=(*ON, "--set", "serviceMonitor.enabled=true",
                                    "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"))
    jobs = {d["spec"]["selector"]["matchLabels"]["gridstat.io/scrape-job"] for d in monitors
            if d["kind"] == "ServiceMonitor"}
    assert "gridstat-history" in jobs, jobs


def test_a_shared_secret_grants_the_component_identities(tools: dict[str, str]) -> None:  # noqa: F811
    docs = render(tools, TWO_CLOUDS, SECURE, extra=ON)  # tls.secretName: one Secret for every role
    (deploy,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == NAME]
    pod = deploy["spec"]["template"]["spec"]
    (secret_volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert secret_volume["secret"]["secretName"] == "gridstat-tls"
    assert any(a.startswith("--grant=") for a in pod["containers"][0]["args"])


def test_plaintext_only_when_tls_is_off(tools: dict[str, str]) -> None:  # noqa: F811
    docs = render(tools, extra=(*ON, "--set", "tls.enabled=false", "--set", "security.insecure=true"))
    (deploy,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == NAME]
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any(a.startswith("--tls") for a in args)


@pytest.mark.parametrize(("sets", "message"), [
    (("--set", "history.enabled=true"), "history.kafka"),
    ((*ON, "--set", "history.maxEvents=0"), "maxEvents"),
    ((*ON, "--set", "history.port=70000"), "port"),
    ((*ON, "--set", "history.topic=bad topic"), "topic"),
])
def test_bad_values_are_refused_with_the_field_named(tools: dict[str, str], sets: tuple[str, ...],  # noqa: F811
                                                     message: str) -> None:
    from pathlib import Path

    chart = Path(__file__).resolve().parents[3] / "charts" / "gridstat"
    proc = helm(tools, "template", "rel", str(chart), *sets, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_lint_strict_passes_with_history_on(tools: dict[str, str]) -> None:  # noqa: F811
    from pathlib import Path

    chart = Path(__file__).resolve().parents[3] / "charts" / "gridstat"
    helm(tools, "lint", "--strict", str(chart), *ON)


def test_its_objects_pass_kubernetes_validate(tools: dict[str, str], tmp_path) -> None:  # noqa: F811
    import subprocess
    import sys

    import yaml

    from .test_chart import K8S_VERSION

    docs = [d for d in render(tools, extra=ON) if "history" in d["metadata"]["name"]]
    assert {d["kind"] for d in docs} == {"ServiceAccount", "Service", "Deployment", "NetworkPolicy", "Secret"}
    out = tmp_path / "history.yaml"
    out.write_text(yaml.safe_dump_all(docs))
    proc = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "--kubernetes-version",
                           K8S_VERSION, str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(" passed for resource ") == len(docs), proc.stdout
