"""The pure parts of ``gridstat chaos --kube`` (chaos.kube): manifests, parsing kubectl output and the
subscriber's stats, choosing the router to break. No cluster."""

from __future__ import annotations

import json

from gridstat.chaos.kube import (
    TLS_ARGS,
    TLS_DIR,
    Names,
    channel_up_samples,
    choose_victim,
    container_id,
    delivery,
    device_of_ip,
    disjoint,
    down_interval,
    is_container_init,
    last_stats,
    leader_operator,
    netns_with_ip,
    normal_paths,
    pod_ready,
    publisher_pod,
    ready_now,
    restart_count,
    routers_from_configmaps,
    routes_mention,
    subscriber_pod,
    subscription,
)


def test_routers_map_to_the_statefulset_pod_of_their_configmap_key() -> None:
    cms = [{"metadata": {"name": "chaos-gridstat-router-a", "labels": {"gridstat.io/cloud": "A"}},
            "data": {"0": "--name e1 --id 1 --role edge --broker b:7700", "1": "--name i1 --id 2 --role internal",
                     "extra": "--name nope"}},
           {"metadata": {"name": "chaos-gridstat-router-b", "labels": {"gridstat.io/cloud": "B"}},
            "data": {"1": "--name b2 --id 12 --role border"}}]
    got = routers_from_configmaps(cms)
    assert sorted(got) == ["b2", "e1", "i1"]
    assert got["i1"].pod == "chaos-gridstat-router-a-1" and got["i1"].cloud == "A"
    assert got["b2"].pod == "chaos-gridstat-router-b-1" and got["b2"].statefulset == "chaos-gridstat-router-b"


def test_client_manifests_are_restricted_pods_and_a_k2_subscription() -> None:
    n = Names()
    pub = publisher_pod(n, "ns", "e1.svc:7801", 20)
    sub = subscriber_pod(n, "ns", "e2.svc:7801", 20)
    assert pub["metadata"]["name"] == "chaos-pmu" and sub["metadata"]["name"] == "chaos-ems"
    args = sub["spec"]["containers"][0]["args"]
    assert args[:2] == ["gridstat", "subscribe"] and "chaos-pmu/freq" in args and "chaos-pmu/angle" in args
    assert "--admit" not in args  # the operator admits the Subscription
    pargs = pub["spec"]["containers"][0]["args"]
    assert pargs[pargs.index("--edge") + 1] == "e1.svc:7801" and pargs.count("--variable") == 2
    for pod in (pub, sub):
        assert pod["spec"]["securityContext"]["runAsNonRoot"] and pod["spec"]["restartPolicy"] == "Never"
        assert pod["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gridstat-chaos"
    s = subscription(n.subscription, "ns", n.full_variable, subscriber=n.subscriber, edge="e2", cloud="A",
                     interval_ms=20, latency_ms=50, redundancy=2)
    assert s["metadata"]["name"] == "chaos-ems-freq" and s["spec"]["qos"]["redundancy"] == 2
    assert s["spec"]["variables"] == ["chaos-pmu/freq"]


def test_client_pods_of_a_secure_release_present_their_certificate() -> None:
    n = Names()
    pub = publisher_pod(n, "ns", "e1.svc:7801", 20, tls_secret="gridstat-client-chaos-pmu")
    c = pub["spec"]["containers"][0]
    assert c["args"][-6:] == list(TLS_ARGS) and c["volumeMounts"] == [
        {"name": "tls", "mountPath": TLS_DIR, "readOnly": True}]
    assert pub["spec"]["volumes"][0]["secret"]["secretName"] == "gridstat-client-chaos-pmu"
    assert pub["spec"]["securityContext"]["fsGroup"] == 10001  # the key is readable by the non-root user
    plain = publisher_pod(n, "ns", "e1.svc:7801", 20)
    assert "--tls-cert" not in plain["spec"]["containers"][0]["args"] and "volumes" not in plain["spec"]


def test_a_client_certificate_from_the_releases_ca_names_the_client() -> None:
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    from gridstat.core import certs

    # An RSA CA, as Helm's genCA makes, whose subject key identifier is not RFC 5280's SHA-1 (Go's is
    # truncated SHA-256): the leaf's authority key identifier must repeat it, or verifiers find no issuer.
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gridstat-ca")])
    now = dt.datetime.now(dt.UTC)
    ski = x509.SubjectKeyIdentifier(bytes(range(20)))
    ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
          .serial_number(1).not_valid_before(now).not_valid_after(now + dt.timedelta(days=10))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(ski, critical=False).sign(key, hashes.SHA256()))
    crt, _ = certs.issue_pem(ca.public_bytes(serialization.Encoding.PEM), key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), "chaos-ems")
    leaf = x509.load_pem_x509_certificate(crt)
    leaf.verify_directly_issued_by(ca)
    assert leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "chaos-ems"
    assert leaf.not_valid_after_utc <= ca.not_valid_after_utc
    aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ski.digest


PATHS = {"status": {"paths": [
    {"variable": "chaos-pmu/freq", "mode": "normal", "modeId": 0, "index": 1, "routers": ["e1", "i2", "e2"]},
    {"variable": "chaos-pmu/freq", "mode": "normal", "modeId": 0, "index": 0, "routers": ["e1", "i1", "e2"]},
    {"variable": "chaos-pmu/freq", "mode": "contingency", "modeId": 1, "index": 0, "routers": ["e1", "i1", "e2"]},
    {"variable": "other/x", "mode": "normal", "modeId": 0, "index": 0, "routers": ["e1", "e2"]}]}}


def test_paths_of_the_normal_mode_and_the_router_to_break() -> None:
    paths = normal_paths(PATHS, "chaos-pmu/freq")
    assert paths == [["e1", "i1", "e2"], ["e1", "i2", "e2"]]
    assert disjoint(paths)
    assert choose_victim(paths) == "i1" and choose_victim(paths, prefer="i2") == "i2"
    assert choose_victim(paths, prefer="e1") == "i1"  # an edge is on every path: never the victim
    assert not disjoint([["e1", "i1", "e2"], ["e1", "i1", "i2", "e2"]])
    assert choose_victim([["e1", "i1", "e2"], ["e1", "i1", "e2"]]) == ""
    assert normal_paths(None, "x") == [] and not disjoint([["e1", "i1", "e2"]])


def test_the_newest_stats_line_and_one_variables_counts() -> None:
    line = {"kind": "subscribe", "ts_ms": 5, "variables": {"chaos-pmu/freq": {
        "received": 110, "distinct": 100, "duplicates": 10, "missing": 0, "bound": True,
        "latency_ms": {"p50": 1.0, "p99": 3.5, "max": 4.0}}}}
    log = "\n".join(["READY name=chaos-ems", json.dumps({**line, "ts_ms": 1}), "{not json",
                     json.dumps({"kind": "publish"}), json.dumps(line), "warning: x"])
    stats = last_stats(log)
    assert stats is not None and stats["ts_ms"] == 5
    d = delivery(stats, "chaos-pmu/freq")
    assert (d.received, d.distinct, d.duplicates, d.missing, d.latency_p99_ms, d.bound) == (110, 100, 10, 0, 3.5, True)
    assert d.describe().startswith("0 lost of 100")
    assert delivery(stats, "nope").received == 0 and delivery(None, "x").missing == 0
    assert last_stats("READY\n") is None


def test_pod_and_resource_state() -> None:
    pod = {"metadata": {"name": "p"}, "status": {"phase": "Running",
                                                 "conditions": [{"type": "Ready", "status": "True"}],
                                                 "containerStatuses": [{"name": "router", "restartCount": 2,
                                                                        "containerID": "containerd://abc123"}]}}
    assert pod_ready(pod) and restart_count(pod, "router") == 2 and container_id(pod, "router") == "abc123"
    assert restart_count(pod, "other") == 0 and container_id(None, "router") == ""
    assert not pod_ready({**pod, "metadata": {"deletionTimestamp": "now"}}) and not pod_ready(None)
    body = {"metadata": {"generation": 2}, "status": {"observedGeneration": 2,
                                                      "conditions": [{"type": "Ready", "status": "True"}]}}
    assert ready_now(body) and not ready_now({**body, "metadata": {"generation": 3}}) and not ready_now(None)


def test_the_network_namespace_and_device_of_a_pod_address() -> None:
    outputs = {"cni-a": "1: lo    inet 127.0.0.1/8 scope host lo\n2: eth0    inet 10.244.0.4/24 brd x",
               "cni-b": "2: eth0@if9    inet 10.244.0.40/24 brd 10.244.0.255 scope global eth0"}
    assert netns_with_ip(outputs, "10.244.0.40") == "cni-b"
    assert netns_with_ip(outputs, "10.244.0.4") == "cni-a"  # not a prefix match of .40
    assert netns_with_ip(outputs, "10.244.0.9") == ""
    assert device_of_ip(outputs["cni-b"], "10.244.0.40") == "eth0" and device_of_ip("", "1.2.3.4") == ""


def test_a_containers_init_process_by_its_cgroup_and_namespace_pid() -> None:
    cgroup = "0::/kubepods/burstable/pod5/29957dbc\n"
    assert is_container_init(cgroup, "Name:\tgridstat\nNSpid:\t2885\t1\n", "29957dbc")
    assert not is_container_init(cgroup, "NSpid:\t2890\t7\n", "29957dbc")  # another process of it
    assert not is_container_init(cgroup, "NSpid:\t2885\t1\n", "ffff")
    assert not is_container_init(cgroup, "NSpid:\t1\n", "")


def test_link_watch_samples_and_the_down_interval() -> None:
    samples = channel_up_samples(["1000 1", "junk", "1100 1\n", "1200 0", "1300 0", "1400 1", "1500 2"])
    assert samples == [(1000, 1), (1100, 1), (1200, 0), (1300, 0), (1400, 1)]
    assert down_interval(samples, 1050) == (1200, 1400)
    assert down_interval(samples, 1350) == (None, None)


def test_the_leader_operator_is_the_highest_priority_peer() -> None:
    peering = {"status": {"gridstat@op-a/2026/rz8": {"priority": 5}, "gridstat@op-b/2026/t7c": {"priority": 9},
                          "gridstat@gone/2026/x": {"priority": 99}}}
    assert leader_operator(peering, ["op-a", "op-b"]) == "op-b"
    assert leader_operator(None, ["op-a"]) == "" and leader_operator(peering, []) == ""


def test_a_route_of_the_variable_in_a_routers_table() -> None:
    assert routes_mention({"routes": [{"variable_id": 7}]}, 7, "chaos-pmu/freq")
    assert routes_mention({"routes": [{"variable": "chaos-pmu/freq"}]}, None, "chaos-pmu/freq")
    assert not routes_mention({"routes": []}, None, "chaos-pmu/freq") and not routes_mention(None, 1, "x/y")


def test_subscription_ids_of_either_listing_shape() -> None:
    from gridstat.chaos.kube import subscription_ids

    assert subscription_ids([{"subscription_id": "A-s1"}, {"x": 1}]) == {"A-s1"}
    assert subscription_ids({"subscriptions": [{"id": "A-s2"}]}) == {"A-s2"}
    assert subscription_ids(None) == set()
