"""A real leaf broker with --policy: refused publications and subscriptions say Unauthorized and
leave nothing behind; allowed ones are admitted as usual."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from gridstat.chaos import diamond
from gridstat.v1 import broker_pb2 as bpb

pytestmark = pytest.mark.integration

POLICY = """
default: deny
publish:
  - clients: [pmu1]
    variables: ["pmu1/*"]
subscribe:
  - clients: [ems]
    variables: ["pmu1/freq"]
"""


def test_policy_is_enforced_at_registration_and_subscription(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    # The policy is what this test is about, not who the clients are: plaintext with the explicit opt-out
    # (with mTLS the names are certificate identities: test_identity_binding.py).
    with diamond.cloud(broker_extra=("--policy", str(policy), "--insecure-client-names")) as c:
        c.register_publisher()  # pmu1/freq: allowed
        stub = c.stub
        with pytest.raises(grpc.RpcError) as exc:
            stub.RegisterPublication(bpb.RegisterPublicationRequest(publication=bpb.Publication(
                publisher="rogue", variable="freq", type=diamond.FLOAT, interval_ms=10, edge_router="e1")), timeout=5)
        assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED
        meta = dict(exc.value.trailing_metadata() or ())
        assert meta.get("gridstat-reason") == "Unauthorized" and meta.get("gridstat-field") == "publication.variable"
        for name in ("ems", "intruder"):
            stub.RegisterClient(bpb.RegisterClientRequest(name=name, kind=bpb.CLIENT_KIND_SUBSCRIBER, edge_router="e2",
                                                          host="127.0.0.1", port=9, first_time=True), timeout=5)
        refused = c.subscribe("intruder")
        assert not refused.admitted and refused.rejection.reason == "Unauthorized"
        assert refused.rejection.field == "subscription.variable"
        assert c.subscribe("ems").admitted
        subs = stub.ListSubscriptions(bpb.ListSubscriptionsRequest(), timeout=5).subscriptions
        assert [s.subscription.subscriber for s in subs] == ["ems"]  # nothing of the refused one
        assert c.half_installed() == ""
        # The policy is re-read without a restart.
        policy.write_text(POLICY + "  - clients: [intruder]\n    variables: [\"pmu1/*\"]\n")
        assert diamond.wait_for(lambda: c.subscribe("intruder").admitted, timeout_s=5)
