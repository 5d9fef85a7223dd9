"""All-or-nothing execution of a subscription plan (gridstat_operator.installing), against a
scripted broker: the broker's calls are faked here, the integration suite uses real ones."""

from __future__ import annotations

from typing import Any

from gridstat.v1 import broker_pb2 as bpb
from gridstat_operator import brokers, installing, plan

SPEC: dict[str, Any] = {"subscriber": "ems", "edgeRouter": "e2", "variables": ["pmu1/freq", "pmu1/volt", "pmu1/bad"],
                        "qos": {"intervalMs": 20, "latencyMs": 50}}
PREFIX = plan.id_prefix("grid", "s")


class ScriptedBroker:
    """Holds subscriptions by id; refuses any variable named */bad with NoFeasiblePath."""

    def __init__(self) -> None:
        self.held: dict[str, bpb.Subscription] = {}
        self.calls: list[str] = []

    async def call(self, address: str, method: str, request: Any, **_: Any) -> Any:
        self.calls.append(method)
        if method == "ListSubscriptions":
            return bpb.ListSubscriptionsReply(subscriptions=[
                bpb.SubscribeReply(admitted=True, subscription=s) for s in self.held.values()])
        if method == "Subscribe":
            s = request.subscription
            if s.variable.endswith("/bad"):
                # as the broker writes it: str(GridStatError) is "<reason>: <text>"
                return bpb.SubscribeReply(admitted=False, rejection=bpb.Rejection(
                    reason="NoFeasiblePath", message="NoFeasiblePath: 1 disjoint path",
                    offer=bpb.Offer(max_redundancy=1)))
            if s.subscription_id in self.held:
                raise brokers.BrokerRefused("exists", reason="AlreadyExists")
            self.held[s.subscription_id] = s
            return bpb.SubscribeReply(admitted=True, subscription=s)
        if method == "Unsubscribe":
            if self.held.pop(request.subscription_id, None) is None:
                raise brokers.BrokerRefused("no such subscription", reason="NotFound")
            return bpb.UnsubscribeReply(routes_removed=3)
        if method == "ChangeSubscription":
            s = self.held[request.subscription_id]
            kept = [q for q in s.qos if q.mode != request.qos.mode]
            del s.qos[:]
            s.qos.extend([*kept, request.qos])
            return bpb.SubscribeReply(admitted=True, subscription=s)
        raise AssertionError(method)


def desired(spec: dict[str, Any]) -> list[plan.DesiredSubscription]:
    return plan.desired_subscriptions(namespace="grid", name="s", labels={}, spec=spec, modes=plan.known_modes([]))


async def run(broker: ScriptedBroker, spec: dict[str, Any]) -> installing.Outcome:
    installer = installing.Installer(broker, "broker:7700")  # type: ignore[arg-type]
    actual = await installer.actual("ems", PREFIX)
    return await installer.apply(plan.plan_subscription(desired(spec), actual), subscriber="ems", prefix=PREFIX)


async def test_a_rejected_variable_rolls_back_the_admitted_ones() -> None:
    broker = ScriptedBroker()
    outcome = await run(broker, SPEC)
    assert not outcome.admitted and outcome.rejection is not None
    assert (outcome.rejection.reason, outcome.rejection.variable) == ("NoFeasiblePath", "pmu1/bad")
    assert outcome.rejection.offer == {"maxRedundancy": 1}
    assert broker.held == {} and outcome.rolled_back == 2 and outcome.actual == []


async def test_a_rejection_message_names_its_reason_once() -> None:
    outcome = await run(ScriptedBroker(), SPEC)
    assert outcome.rejection is not None
    assert outcome.rejection.message == "1 disjoint path"
    summary = outcome.rejection.summary  # the Admitted and Ready conditions' message
    assert summary.startswith("NoFeasiblePath: 1 disjoint path") and summary.count("NoFeasiblePath") == 1


async def test_an_admitted_plan_is_idempotent() -> None:
    broker = ScriptedBroker()
    spec = {**SPEC, "variables": ["pmu1/freq", "pmu1/volt"]}
    first = await run(broker, spec)
    assert first.admitted and first.steps == 2 and len(broker.held) == 2
    broker.calls.clear()
    again = await run(broker, spec)
    assert again.admitted and again.steps == 0 and broker.calls == ["ListSubscriptions", "ListSubscriptions"]


async def test_a_rejected_update_keeps_the_previous_subscription() -> None:
    broker = ScriptedBroker()
    await run(broker, {**SPEC, "variables": ["pmu1/freq"]})
    before = {k: bytes(v.SerializeToString()) for k, v in broker.held.items()}
    outcome = await run(broker, {**SPEC, "variables": ["pmu1/freq", "pmu1/bad"],
                                 "qos": {"intervalMs": 40, "latencyMs": 50}})
    assert not outcome.admitted
    assert {k: bytes(v.SerializeToString()) for k, v in broker.held.items()} == before  # interval 20 again
    assert [a.variable for a in outcome.actual] == ["pmu1/freq"]


async def test_a_retried_subscribe_that_went_through_counts_as_admitted() -> None:
    broker = ScriptedBroker()
    spec = {**SPEC, "variables": ["pmu1/freq"]}
    (d,) = desired(spec)
    broker.held[d.subscription_id] = installing.subscription_pb(d)  # the first attempt's effect
    installer = installing.Installer(broker, "broker:7700")  # type: ignore[arg-type]
    outcome = await installer.apply(plan.SubscriptionPlan((plan.Subscribe(d),)), subscriber="ems", prefix=PREFIX)
    assert outcome.admitted and len(broker.held) == 1


def test_unanswered_calls_are_retriable_and_refusals_carry_the_reason() -> None:
    import grpc
    import grpc.aio

    def error(code: grpc.StatusCode, details: str, reason: str = "") -> grpc.aio.AioRpcError:
        trailing = grpc.aio.Metadata(("gridstat-reason", reason), ("gridstat-field", "qos.mode")) if reason \
            else grpc.aio.Metadata()
        return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details)

    down = brokers.classify(error(grpc.StatusCode.UNAVAILABLE, "connection refused"), target="b:1")
    assert isinstance(down, brokers.BrokerUnavailable) and down.retriable and down.reason == "BrokerUnavailable"
    no = brokers.classify(error(grpc.StatusCode.NOT_FOUND, "UnknownMode: mode 3 is not defined", "UnknownMode"),
                          target="b:1")
    assert isinstance(no, brokers.BrokerRefused) and not no.retriable
    assert (no.reason, no.message, no.field) == ("UnknownMode", "mode 3 is not defined", "qos.mode")
    twice = brokers.classify(error(grpc.StatusCode.NOT_FOUND, "UnknownMode: UnknownMode: mode 3", "UnknownMode"),
                             target="b:1")
    assert twice.message == "mode 3"
    busy = brokers.classify(error(grpc.StatusCode.UNAVAILABLE, "x", "ModeChangeInProgress"), target="b:1")
    assert busy.retriable
    bare = brokers.classify(error(grpc.StatusCode.FAILED_PRECONDITION, "nope"), target="b:1")
    assert bare.reason == "FailedPrecondition"
