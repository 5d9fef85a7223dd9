"""The one image runs every role (docs/kubernetes.md): a broker, four routers, the topology job and
two endpoints, each its own container from gridstat:dev with host networking, pass events end to end.

The engine is the project's own (scripts/docker.sh: Debian's docker.io, no bridge, no iptables);
the image is built by scripts/build-image.sh. Without the image the test is skipped locally and
fails under CI, where .ci/run builds it first.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gridstat.core.ports import free_port

from ..fixtures import environment

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[3]
IMAGE = os.environ.get("GRIDSTAT_IMAGE", "gridstat:dev")
ENDPOINT = Path(__file__).with_name("endpoint.py")
ROUTERS = [("e1", 1, "edge"), ("i1", 2, "internal"), ("i2", 3, "internal"), ("e2", 4, "edge")]


@pytest.fixture(scope="module")
def docker_host() -> Iterator[str]:
    started = subprocess.run([str(ROOT / "scripts" / "docker.sh"), "start"], capture_output=True, text=True)
    if started.returncode != 0:
        message = f"no Docker engine: {started.stderr.strip()}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    host = re.search(r"socket=(\S+)", started.stdout)
    assert host is not None
    url = f"unix://{host.group(1)}"
    inspect = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, text=True,
                             env={**os.environ, "DOCKER_HOST": url})
    if inspect.returncode != 0:
        message = f"image {IMAGE} is not built: run scripts/build-image.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    _remove_leftovers(url)
    with environment(DOCKER_HOST=url, TESTCONTAINERS_RYUK_DISABLED="true"):
        yield url


def _remove_leftovers(url: str) -> None:
    """Containers of an earlier session that was killed (Ryuk is off): named gridstat-test-*-<pid>
    with that pid gone. A concurrent session's containers (its pid alive) are left alone."""
    env = {**os.environ, "DOCKER_HOST": url}
    names = subprocess.run(["docker", "ps", "-a", "--filter", "name=gridstat-test-", "--format", "{{.Names}}"],
                           capture_output=True, text=True, env=env).stdout.split()
    for name in names:
        pid = name.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, env=env)


def logs(container: object) -> str:
    out, err = container.get_logs()  # type: ignore[attr-defined]
    return (out or b"").decode(errors="replace") + (err or b"").decode(errors="replace")


def wait_log(container: object, pattern: str, timeout_s: float = 30.0) -> re.Match[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = re.search(pattern, logs(container))
        if m:
            return m
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} not in the logs: {logs(container)[-2000:]}")


def test_every_role_runs_from_the_one_image_and_events_flow_end_to_end(docker_host: str, tmp_path: Path) -> None:
    from testcontainers.core.container import DockerContainer

    broker_port = free_port()
    ports = {name: (free_port(socket.SOCK_DGRAM), free_port()) for name, _, _ in ROUTERS}
    topology = {"clouds": [{"name": "A", "broker": f"127.0.0.1:{broker_port}",
                            "routers": [{"name": n, "id": i, "role": r, "host": "127.0.0.1",
                                         "eventPort": ports[n][0], "controlPort": ports[n][1]}
                                        for n, i, r in ROUTERS],
                            "links": [{"a": "e1", "b": "i1", "latencyMs": 1}, {"a": "i1", "b": "e2", "latencyMs": 1},
                                      {"a": "e1", "b": "i2", "latencyMs": 2}, {"a": "i2", "b": "e2", "latencyMs": 2}]}]}
    (tmp_path / "topology.yaml").write_text(yaml.safe_dump(topology))
    os.chmod(tmp_path, 0o755)
    started: list[DockerContainer] = []

    def run(name: str, *command: str, mount: bool = False) -> DockerContainer:
        c = DockerContainer(IMAGE).with_name(f"gridstat-test-{name}-{os.getpid()}").with_kwargs(network_mode="host")
        if mount:
            c = c.with_volume_mapping(str(tmp_path), "/work", "ro")
        c = c.with_command(list(command))
        c.start()
        started.append(c)
        return c

    try:
        broker = run("broker", "gridstat", "broker", "--name", "A", "--port", str(broker_port),
                     "--state", "/tmp/A.sqlite")
        wait_log(broker, r"READY name=A")
        for name, rid, role in ROUTERS:
            event, control = ports[name]
            proxy = ("--broker", f"127.0.0.1:{broker_port}") if role == "edge" else ()
            r = run(name, "gridstat", "router", "--name", name, "--id", str(rid), "--role", role,
                    "--port", str(event), "--control-port", str(control), *proxy)
            wait_log(r, rf"READY name={name}")
        job = run("topology", "python3", "-m", "gridstat_operator.topology", "--file", "/work/topology.yaml",
                  "--timeout-s", "60", mount=True)
        wait_log(job, r"topology applied")
        check = run("topology-check", "python3", "-m", "gridstat_operator.topology", "--file", "/work/topology.yaml",
                    "--check", "--timeout-s", "30", mount=True)
        wait_log(check, r"topology complete")
        (tmp_path / "endpoint.py").write_text(ENDPOINT.read_text())
        publisher = run("pmu1", "python3", "/work/endpoint.py", "publish", f"127.0.0.1:{ports['e1'][1]}",
                        mount=True)
        wait_log(publisher, "PUBLISHING")
        subscriber = run("ems", "python3", "/work/endpoint.py", "subscribe", f"127.0.0.1:{ports['e2'][1]}",
                         mount=True)
        wait_log(subscriber, "SUBSCRIBED")
        m = wait_log(subscriber, r"RECEIVED (1[0-9]{2}|[2-9][0-9]{2})", timeout_s=30)  # 100+ events at 50/s
        assert int(m.group(1)) >= 100
    finally:
        for c in reversed(started):
            try:
                c.stop()
            except Exception:  # a container that already exited
                pass


def test_the_charts_router_command_starts_router_n_from_its_configmap(docker_host: str, tmp_path: Path) -> None:
    """Pod N of a cloud's router StatefulSet runs router N: the chart's shell command, taken from
    `helm template` and expanded as the kubelet would ($$ -> $), in the image with the ConfigMap's
    files mounted and HOSTNAME set as in the pod."""
    from testcontainers.core.container import DockerContainer

    tools = subprocess.run([str(ROOT / "scripts" / "k8s-tools.sh"), "env"], capture_output=True, text=True).stdout
    path = re.search(r"export PATH=(\S+):\$PATH", tools)
    helm_env = {**os.environ, "PATH": f"{path.group(1)}:{os.environ['PATH']}"} if path else dict(os.environ)
    event, control, metrics = free_port(socket.SOCK_DGRAM), free_port(), free_port()
    rendered = subprocess.run(
        ["helm", "template", "rel", str(ROOT / "charts" / "gridstat"), "--namespace", "grid",
         "--set", f"router.eventPort={event}", "--set", f"router.controlPort={control}",
         "--set", f"router.metricsPort={metrics}"], capture_output=True, text=True, env=helm_env)
    if rendered.returncode != 0:
        pytest.fail(f"helm template failed (is helm built? scripts/k8s-tools.sh): {rendered.stderr}")
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "rel-gridstat-router-a"]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "rel-gridstat-router-a"]
    container = sts["spec"]["template"]["spec"]["containers"][0]
    routers = tmp_path / "routers"
    routers.mkdir()
    for key, value in cm["data"].items():
        (routers / key).write_text(value)
    # The chart's default is mTLS (docs/kubernetes.md, "Security"): the pod mounts its role's certificate.
    from gridstat.demo import certs

    pki = tmp_path / "pki"
    certs.ensure(pki, ["gridstat-router"])
    tls = tmp_path / "tls"
    tls.mkdir()
    for src, dst in (("gridstat-router.pem", "tls.crt"), ("gridstat-router.key", "tls.key"), ("ca.pem", "ca.crt")):
        (tls / dst).write_bytes((pki / src).read_bytes())
        os.chmod(tls / dst, 0o644)  # the image's user (10001) reads them, as the Secret's mode lets it
    os.chmod(tmp_path, 0o755)
    command = [a.replace("$$", "$") for a in container["command"] + container["args"]]
    c = (DockerContainer(IMAGE).with_name(f"gridstat-test-router-n-{os.getpid()}")
         .with_kwargs(network_mode="host", hostname="rel-gridstat-router-a-1", read_only=True,
                      entrypoint=command[0])
         .with_tmpfs_mount("/tmp")
         .with_volume_mapping(str(routers), "/etc/gridstat/routers", "ro")
         .with_volume_mapping(str(tls), "/etc/gridstat/tls", "ro")
         .with_command(command[1:]))
    c.start()
    try:
        wait_log(c, rf"READY name=i1 port={event} control_port={control}")  # ordinal 1 is i1
    finally:
        c.stop()
