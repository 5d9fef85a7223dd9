"""Authorization trusts the mTLS client certificate, not the client name in the request (docs/security.md):
real processes, a leaf broker with --tls-client-ca and --policy, two edge routers whose proxies
verify the clients' certificates (CN = client name, scripts/gen-certs.sh) and relay the identity.
A client allowed by the policy is admitted; one the policy refuses is refused; one whose
certificate says ``rogue`` but who declares ``pmu1`` is refused as Unauthorized naming the field,
through the edge proxy and directly at the broker."""

from __future__ import annotations

import subprocess
from pathlib import Path

import grpc
import pytest

from gridstat.chaos.procs import Broker
from gridstat.client import Publisher, Subscriber
from gridstat.core.model import FLOAT
from gridstat.errors import GridStatError
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import broker_pb2_grpc as bpb_grpc

from .brokerprocs import client_tls, mtls_edges, tls_args
from .fixtures import launched

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

POLICY = """
default: deny
publish:
  - clients: [pmu1]
    variables: ["pmu1/*"]
  - clients: [rogue]
    variables: ["rogue/*"]
subscribe:
  - clients: [ems]
    variables: ["pmu1/*"]
  - clients: [rogue]
    variables: ["rogue/*"]
"""


async def test_the_policy_is_evaluated_against_the_client_certificate(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    subprocess.run([str(ROOT / "scripts/gen-certs.sh"), str(certs), "router", "broker", "admin", "pmu1", "ems",
                    "rogue"], check=True, capture_output=True)
    ca = str(certs / "ca.pem")
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    admin = client_tls(certs, "admin")
    with launched() as start:
        leaf = start(Broker("A", state=str(tmp_path / "A.sqlite"), tls=admin, extra=(
            *tls_args(certs, "broker"), "--router-tls-ca", ca, "--policy", str(policy))))
        routers = mtls_edges(start, certs, leaf, admin)
        assert leaf.stub is not None
        e1, e2 = (f"127.0.0.1:{routers[n].control_port}" for n in ("e1", "e2"))

        # Allowed: pmu1 with the pmu1 certificate publishes pmu1/freq; ems with its own subscribes.
        async with await Publisher.connect("pmu1", e1, tls=client_tls(certs, "pmu1")) as pub, \
                await Subscriber.connect("ems", e2, tls=client_tls(certs, "ems")) as sub:
            await pub.register("freq", FLOAT, 10)
            s = await sub.subscribe_remote("pmu1/freq", FLOAT, interval_ms=10, latency_ms=1000)
            assert s.variable.full_name == "pmu1/freq"
            (sid,) = [r.subscription.subscription_id for r in leaf.stub.ListSubscriptions(
                bpb.ListSubscriptionsRequest(subscriber="ems"), timeout=5).subscriptions]
            # Another certificate may neither change nor remove ems's subscription, through its edge proxy...
            async with await Subscriber.connect("rogue", e2, tls=client_tls(certs, "rogue")) as rogue:
                assert rogue.session is not None
                for attempt in (lambda: rogue.session.unsubscribe(sid),  # type: ignore[union-attr]
                                lambda: rogue.session.change_subscription(sid, (0, 20, 100))):  # type: ignore[union-attr]
                    with pytest.raises(GridStatError) as theft:
                        await attempt()
                    assert theft.value.reason == "Unauthorized" and theft.value.field == "subscription_id"
            # ...nor directly at the broker; the subscription is untouched.
            with grpc.secure_channel(leaf.address, client_tls(certs, "rogue").channel_credentials()) as ch:
                with pytest.raises(grpc.RpcError) as direct_theft:
                    bpb_grpc.QoSBrokerStub(ch).Unsubscribe(  # type: ignore[no-untyped-call]
                        bpb.UnsubscribeRequest(subscription_id=sid), timeout=5)
                assert direct_theft.value.code() == grpc.StatusCode.PERMISSION_DENIED
            (still,) = leaf.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(subscriber="ems"),
                                                  timeout=5).subscriptions
            assert still.subscription.subscription_id == sid and still.subscription.qos[0].interval_ms == 10
            # Listings: a client sees only its own subscriptions, directly and through its edge proxy; the
            # administrator sees everyone's (docs/security.md, "Control by role").
            with grpc.secure_channel(leaf.address, client_tls(certs, "rogue").channel_credentials()) as ch:
                assert not bpb_grpc.QoSBrokerStub(ch).ListSubscriptions(  # type: ignore[no-untyped-call]
                    bpb.ListSubscriptionsRequest(), timeout=5).subscriptions
            with grpc.secure_channel(leaf.address, client_tls(certs, "ems").channel_credentials()) as ch:
                mine = bpb_grpc.QoSBrokerStub(ch).ListSubscriptions(  # type: ignore[no-untyped-call]
                    bpb.ListSubscriptionsRequest(), timeout=5).subscriptions
                assert [r.subscription.subscription_id for r in mine] == [sid]
            async with await Subscriber.connect("rogue", e2, tls=client_tls(certs, "rogue")) as rogue:
                assert rogue.session is not None
                assert not await rogue.session.list_subscriptions()
            assert len(leaf.stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions) == 1

        # Refused by the policy, evaluated against the certificate: rogue may not read pmu1/*.
        async with await Subscriber.connect("rogue", e2, tls=client_tls(certs, "rogue")) as rogue:
            with pytest.raises(GridStatError) as refused:
                await rogue.subscribe_remote("pmu1/freq", FLOAT, interval_ms=10, latency_ms=1000)
            assert refused.value.reason == "Unauthorized" and refused.value.field == "subscription.variable"

        # Lying about its name: rogue's certificate, the name pmu1. Refused before anything is registered.
        with pytest.raises(GridStatError) as lie:
            await Publisher.connect("pmu1", e1, tls=client_tls(certs, "rogue"))
        assert lie.value.reason == "Unauthorized" and lie.value.field == "name", lie.value
        with pytest.raises(GridStatError) as lie_sub:
            await Subscriber.connect("ems", e2, tls=client_tls(certs, "rogue"))
        assert lie_sub.value.reason == "Unauthorized" and lie_sub.value.field == "name"

        # Directly at the broker (no proxy): the peer's own certificate is the identity, and a
        # client cannot smuggle an identity in the proxies' metadata.
        with grpc.secure_channel(leaf.address, client_tls(certs, "rogue").channel_credentials()) as ch:
            stub = bpb_grpc.QoSBrokerStub(ch)  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.RpcError) as direct:
                stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
                    publisher="pmu1", variable="volt", type=bpb.ValueType(kind=bpb.VALUE_KIND_FLOAT), interval_ms=10,
                    edge_router="e1")), timeout=5, metadata=(("gridstat-client-identity", "pmu1"),))
            assert direct.value.code() == grpc.StatusCode.PERMISSION_DENIED
            meta = dict(direct.value.trailing_metadata() or ())
            assert meta.get("gridstat-reason") == "Unauthorized"
            assert meta.get("gridstat-field") == "publication.publisher"
            reply = stub.Subscribe(bpb.SubscribeRequest(subscription=bpb.Subscription(
                subscriber="ems", variable="pmu1/freq", type=bpb.ValueType(kind=bpb.VALUE_KIND_FLOAT),
                edge_router="e2", qos=[bpb.ModeQoS(mode=0, interval_ms=10, latency_ms=100)])), timeout=5)
            assert not reply.admitted and reply.rejection.reason == "Unauthorized"
            assert reply.rejection.field == "subscription.subscriber"
        pubs = leaf.stub.ListPublications(bpb.ListPublicationsRequest(), timeout=5).publications
        assert [p.publisher + "/" + p.variable for p in pubs] == ["pmu1/freq"]  # nothing of the refused ones
