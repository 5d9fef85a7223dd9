"""``gridstat sub add|list|rm``: subscriptions, through QoSBroker on the leaf broker.

``sub add --where EXPR`` (instead of a variable) adds a standing query subscription
(docs/queries.md): every registered variable the expression matches, now and later, admitted
individually with the same QoS; it prints each variable's outcome and exits 0 even when some were
rejected (3 only if every matching variable was). ``sub list --queries`` and ``sub rm --query ID``
list and remove query subscriptions.

``sub add`` prints the admission (subscription id, variable id, the paths of every mode with their
latency). A broker may refuse either with a reply ``admitted=false`` carrying a Rejection and an Offer,
or with an error status whose trailing metadata ``gridstat-reason`` names the reason; both print
``rejected: <Reason>``, the message and the offer, and exit 3. Exit codes: see gridstat.cli.common.
"""

from __future__ import annotations

import argparse
import functools
import ipaddress

import grpc

from gridstat.cli import common
from gridstat.cli.formatting import (
    VALUE_KINDS,
    admission_data,
    admission_view,
    query_data,
    query_view,
    rejection_data,
    rejection_from_reply,
    rejection_lines,
    subscription_request,
    subscriptions_data,
    subscriptions_view,
    to_json,
)
from gridstat.core import expressions
from gridstat.errors import ValidationError
from gridstat.v1 import broker_pb2 as bpb


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = common.EXIT_CODES_HELP
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    add = actions.add_parser("add", help="subscribe a subscriber to a variable with QoS")
    add.add_argument("variable", metavar="VARIABLE", nargs="?", default=None,
                     help="PUBLISHER/VARIABLE (or --where)")
    add.add_argument("--where", default=None, metavar="EXPR",
                     help="a standing query subscription instead: every variable this expression matches, now "
                          "and later, e.g. \"kind = 'freq' and region = 'west'\" (docs/queries.md)")
    add.add_argument("--subscriber", required=True, metavar="NAME")
    add.add_argument("--edge", required=True, metavar="ROUTER", help="the subscriber's edge router")
    add.add_argument("--interval-ms", type=int, required=True, metavar="N", help="delivery interval")
    add.add_argument("--latency-ms", type=int, required=True, metavar="N", help="bound on publish-to-delivery delay")
    add.add_argument("--redundancy", type=int, default=1, metavar="K", help="node-disjoint paths (default 1)")
    add.add_argument("--priority", type=int, default=1, metavar="P", help="0 alert .. 6 low (default 1)")
    add.add_argument("--price", type=float, default=None, metavar="X",
                     help="what one delivered event is worth (default 1): overloaded routers shed low prices first")
    add.add_argument("--best-effort", action="store_true",
                     help="no guarantee wanted: shed before every guaranteed stream under overload")
    add.add_argument("--mode", type=int, nargs="+", action="extend", default=None, metavar="M",
                     help="operating modes (0..15) with this QoS (default 0)")
    add.add_argument("--type", choices=list(VALUE_KINDS), default=None, dest="value_type",
                     help="expected value type, checked against the publication")
    add.add_argument("--endpoint", default=None, metavar="IP:PORT", type=endpoint,
                     help="register the subscriber at --edge first, its events sent over UDP to IP:PORT (a program "
                          "of your own: docs/wire-format.md); an existing subscriber moves there")
    common.add_common_arguments(add)

    ls = actions.add_parser("list", help="list the broker's subscriptions")
    ls.add_argument("--subscriber", default="", metavar="NAME", help="only this subscriber's")
    ls.add_argument("--queries", action="store_true", help="the query subscriptions and their variables' outcomes")
    common.add_common_arguments(ls)

    rm = actions.add_parser("rm", help="remove a subscription and its routes")
    rm.add_argument("subscription_id", metavar="SUBSCRIPTION_ID", help="a subscription's, or with --query a query "
                                                                       "subscription's id")
    rm.add_argument("--query", action="store_true", help="remove a query subscription and its subscriptions")
    common.add_common_arguments(rm)


def endpoint(text: str) -> tuple[str, int]:
    """``IP:PORT`` -> (ip, port): the address a router sends a subscriber's events to."""
    host, sep, port = text.rpartition(":")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: IP must be an IP address (routers send to it as given), "
                                         "as in 127.0.0.1:9000") from None
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r}: PORT must be 1..65535, as in 127.0.0.1:9000")
    return host, int(port)


def _register(args: argparse.Namespace, stub: object, timeout: float) -> dict[str, object]:
    """RegisterClient for ``--endpoint``: what the output says of the registration."""
    host, port = args.endpoint
    reply = stub.RegisterClient(bpb.RegisterClientRequest(  # type: ignore[attr-defined]
        name=args.subscriber, kind=bpb.CLIENT_KIND_SUBSCRIBER, edge_router=args.edge, host=host, port=port,
        first_time=False), timeout=timeout)
    return {"subscriber": args.subscriber, "edge_router": args.edge, "endpoint": f"{host}:{port}",
            "client_id": reply.client_id, "edge_router_id": reply.edge_router_id,
            # The key of the subscriber's event channel (docs/security.md): the endpoint verifies tags with it.
            "channel_key_hex": reply.channel_key.hex()}


def _print_rejection(data: dict[str, object], output: str) -> int:
    print(to_json(data) if output == "json" else "\n".join(rejection_lines(data)))
    return common.EXIT_REJECTED


def add(args: argparse.Namespace) -> int:
    if (args.variable is None) == (args.where is None):
        raise ValidationError("give either VARIABLE or --where EXPR", field="variable")
    if args.where is not None:
        return _add_query(args)
    sub = subscription_request(args.variable, subscriber=args.subscriber, edge=args.edge,
                               interval_ms=args.interval_ms, latency_ms=args.latency_ms,
                               redundancy=args.redundancy, priority=args.priority, modes=args.mode or [0],
                               value_type=args.value_type, price=args.price, best_effort=args.best_effort)
    timeout = common.check_timeout(args.timeout)
    address, channel, stub = common.broker_stub(args)
    registered: dict[str, object] | None = None
    with channel:
        try:
            if args.endpoint is not None:
                registered = _register(args, stub, timeout)
            reply, rpc = stub.Subscribe.with_call(bpb.SubscribeRequest(subscription=sub), timeout=timeout)
        except grpc.RpcError as exc:
            failure = common.RpcFailure.of(exc)
            error = common.failure_to_error(failure, target=f"broker at {address}", rejections=True)
            if error.exit_code != common.EXIT_REJECTED:
                raise error from None
            return _print_rejection(rejection_data(error.reason, failure.message, failure.field), args.output)
    if not reply.admitted:
        reason = common.metadata_value(rpc.trailing_metadata(), "gridstat-reason")
        return _print_rejection(rejection_from_reply(reply, reason), args.output)
    data = admission_data(reply)
    if registered is not None:
        data["registered"] = registered
        if args.output != "json":
            key = "; its events are authenticated: -o json shows the channel key" if registered["channel_key_hex"] \
                else ""
            print(f"registered subscriber {args.subscriber} at {args.edge}: events to {registered['endpoint']} "
                  f"from sender id {registered['edge_router_id']}{key}")
    common.emit(args.output, data, admission_view)
    return common.EXIT_OK


def _add_query(args: argparse.Namespace) -> int:
    if args.value_type is not None:
        raise ValidationError("--type applies to one variable; with --where select by type: \"type = 'float'\"",
                              field="type")
    where = expressions.render(expressions.parse(args.where))  # a fault: ExpressionError with its column, exit 2
    # the QoS options are checked as for one variable's subscription ("*/*" stands for the variables to come)
    sub = subscription_request("*/*", subscriber=args.subscriber, edge=args.edge, interval_ms=args.interval_ms,
                               latency_ms=args.latency_ms, redundancy=args.redundancy, priority=args.priority,
                               modes=args.mode or [0], value_type=None, price=args.price,
                               best_effort=args.best_effort)
    query = bpb.QuerySubscription(subscriber=args.subscriber, where=where, edge_router=args.edge, qos=sub.qos)
    timeout = common.check_timeout(args.timeout)
    address, channel, stub = common.broker_stub(args)
    with channel:
        if args.endpoint is not None:
            common.call(f"broker at {address}", functools.partial(_register, args, stub, timeout))
        reply = common.call(f"broker at {address}", functools.partial(
            stub.SubscribeQuery, bpb.SubscribeQueryRequest(query=query), timeout=timeout))
    data = query_data(reply)
    common.emit(args.output, data, query_view)
    members = data["members"]
    if members and not any(m["admitted"] for m in members):
        return common.EXIT_REJECTED
    return common.EXIT_OK


def list_(args: argparse.Namespace) -> int:
    if args.queries:
        queries = common.broker_call(args, "ListQueries", bpb.ListQueriesRequest(subscriber=args.subscriber))
        data = [query_data(q) for q in sorted(queries.queries, key=lambda q: q.query.query_id)]
        if args.output == "json":
            print(to_json(data))
        else:
            for d in data:
                common.print_table(query_view(d))
            if not data:
                print("no query subscriptions")
        return common.EXIT_OK
    reply = common.broker_call(args, "ListSubscriptions", bpb.ListSubscriptionsRequest(subscriber=args.subscriber))
    common.emit(args.output, subscriptions_data(reply), subscriptions_view)
    return common.EXIT_OK


def rm(args: argparse.Namespace) -> int:
    if args.query:
        gone = common.broker_call(args, "UnsubscribeQuery", bpb.UnsubscribeQueryRequest(query_id=args.subscription_id))
        if args.output == "json":
            print(to_json({"query_id": args.subscription_id, "subscriptions_removed": gone.subscriptions_removed}))
        else:
            print(f"removed query subscription {args.subscription_id} ({gone.subscriptions_removed} subscriptions "
                  "removed)")
        return common.EXIT_OK
    reply = common.broker_call(args, "Unsubscribe", bpb.UnsubscribeRequest(subscription_id=args.subscription_id))
    if args.output == "json":
        print(to_json({"subscription_id": args.subscription_id, "routes_removed": reply.routes_removed}))
    else:
        print(f"removed subscription {args.subscription_id} ({reply.routes_removed} routes removed)")
    return common.EXIT_OK


ACTIONS = {"add": add, "list": list_, "rm": rm}


def run(args: argparse.Namespace) -> int:
    return common.guarded(f"sub {args.action}", functools.partial(ACTIONS[args.action], args),
                   output=getattr(args, "output", None))
