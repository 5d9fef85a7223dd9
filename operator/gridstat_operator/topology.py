"""Register a release's routers and channels at its brokers (the chart's topology sidecars).

    python -m gridstat_operator.topology --file topology.yaml [--cloud A | --parent-only]
                                         [--check] [--timeout-s 300] [--watch-s 15]

The chart renders ``topology.yaml`` from its values: per cloud the leaf broker's address, the
routers (name, id, role, capacity, the StatefulSet pod's DNS name and ports) and the channels;
with a parent broker, the clouds as its children and the inter-cloud channels. Routers are
registered with their event address by IP (the broker's routers send datagrams to each other by
address), so the job waits until every router's DNS name resolves; their control address is the
pod's DNS name, which the routers' certificates name (a broker checks it under mTLS, and gRPC looks
it up again when the pod moves). Everything is idempotent: what a broker already
holds is left alone, a router whose address changed is registered again. ``--check`` changes
nothing and fails unless every broker answers and holds every router (the chart's ``helm test``).

In the chart it runs as a sidecar of each broker pod with ``--watch-s``: it applies the topology,
then again every few seconds, so a router pod rescheduled with a new IP address is registered
again without anyone re-running anything (the broker API has no self-registration of routers).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from collections.abc import Mapping
from typing import Any

import grpc
import yaml

from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import broker_pb2_grpc as bpb_grpc
from gridstat_operator import config as configs


def resolve(host: str) -> str | None:
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_DGRAM)[0][4][0]  # type: ignore[return-value]
    except OSError:
        return None


def _channel(address: str) -> grpc.Channel:
    try:
        tls = configs.OperatorConfig.from_env({"GRIDSTAT_BROKERS": f"x={address}", **_env()}).tls
    except configs.ConfigError:
        tls = None
    return grpc.secure_channel(address, tls.channel_credentials()) if tls else grpc.insecure_channel(address)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("GRIDSTAT_TLS_")}


def apply_cloud(stub: Any, cloud: Mapping[str, Any], *, check: bool, log: list[str]) -> bool:
    """Register one cloud's routers and links; in check mode only compare. True when complete."""
    view = stub.GetTopology(bpb.GetTopologyRequest(), timeout=10)
    held = {r.name: r for r in view.routers}
    complete = True
    for r in cloud.get("routers") or ():
        ip = resolve(r["host"])
        if ip is None:
            log.append(f"{cloud['name']}: router {r['name']} ({r['host']}) does not resolve yet")
            complete = False
            continue
        control, event = f"{r['host']}:{r['controlPort']}", f"{ip}:{r['eventPort']}"
        have = held.get(r["name"])
        if have is not None and (have.control_address, have.event_address) == (control, event):
            continue
        if check:
            log.append(f"{cloud['name']}: router {r['name']} is not registered at {event}")
            complete = False
            continue
        # A router already held at another address is moved by AddRouter: its paths stay (the broker
        # rebuilds it at the new address), where a removal would be refused while it carries any.
        stub.AddRouter(bpb.AddRouterRequest(router=bpb.RouterInfo(
            name=r["name"], role=r["role"], capacity_eps=int(r.get("capacityEps") or 50000),
            control_address=control, event_address=event, router_id=int(r["id"]))), timeout=10)
        log.append(f"{cloud['name']}: {'moved' if have is not None else 'registered'} router {r['name']} to {event}")
    channels = {(c.a, c.b) for c in stub.GetTopology(bpb.GetTopologyRequest(), timeout=10).channels}
    for link in cloud.get("links") or ():
        if (link["a"], link["b"]) in channels and (link["b"], link["a"]) in channels:
            continue
        if check:
            log.append(f"{cloud['name']}: channel {link['a']}-{link['b']} is missing")
            complete = False
            continue
        stub.AddChannel(bpb.AddTopologyChannelRequest(channel=bpb.TopologyChannel(
            a=link["a"], b=link["b"], bandwidth_bps=int(link.get("bandwidthBps") or 100_000_000),
            latency_ms=float(link.get("latencyMs") or 1.0), capacity_eps=int(link.get("capacityEps") or 0),
            both_directions=True)), timeout=10)
        log.append(f"{cloud['name']}: added channel {link['a']}<->{link['b']}")
    return complete


def apply_parent(stub: Any, parent: Mapping[str, Any], clouds: list[Mapping[str, Any]], *, check: bool,
                 log: list[str]) -> bool:
    view = stub.GetTopology(bpb.GetTopologyRequest(), timeout=10)
    children = {c.name for c in view.children}
    complete = True
    for cloud in clouds:
        if cloud["name"] in children:
            continue
        if check:
            log.append(f"parent: cloud {cloud['name']} is not a child")
            complete = False
            continue
        stub.AddChildBroker(bpb.AddChildBrokerRequest(child=bpb.ChildBroker(
            name=cloud["name"], address=cloud["broker"], leaf=True)), timeout=10)
        log.append(f"parent: added child {cloud['name']}")
    return complete


def load(path: str) -> dict[str, Any]:
    with open(path) as f:
        return yaml.safe_load(f) or {}


#: How soon a watching sidecar tries again after an incomplete pass.
INCOMPLETE_RETRY_S = 1.0


def run(path: str, *, check: bool, timeout_s: float, cloud: str = "", parent_only: bool = False,
        watch_s: float = 0.0) -> int:
    """Apply (or check) until complete or ``timeout_s``; with ``watch_s`` keep applying forever,
    reading the file again each time (a mounted ConfigMap changes under a running sidecar)."""
    deadline = time.monotonic() + timeout_s
    last: list[str] = []
    while True:
        topology = load(path)
        clouds = list(topology.get("clouds") or ())
        mine = [] if parent_only else [c for c in clouds if not cloud or c["name"] == cloud]
        if cloud and not mine:
            print(f"cloud {cloud!r} is not in the topology file", file=sys.stderr, flush=True)
            return 2
        log: list[str] = []
        complete = True
        try:
            for c in mine:
                with _channel(c["broker"]) as channel:
                    complete &= apply_cloud(bpb_grpc.QoSBrokerStub(channel), c, check=check, log=log)
            parent = topology.get("parent")
            if parent and (parent_only or not cloud):
                with _channel(parent["broker"]) as channel:
                    complete &= apply_parent(bpb_grpc.QoSBrokerStub(channel), parent, clouds, check=check, log=log)
        except grpc.RpcError as exc:
            log.append(f"broker: {exc}")
            complete = False
        if log != last:  # a watching sidecar stays quiet while nothing changes
            for line in log:
                print(line, flush=True)
        last = log
        if watch_s > 0:
            if complete and not check and log:
                print("topology applied", flush=True)
            # Incomplete (a router not resolving yet, a broker restarting): try again within a second.
            time.sleep(watch_s if complete else min(watch_s, INCOMPLETE_RETRY_S))
            continue
        if complete:
            print("topology complete" if check else "topology applied", flush=True)
            return 0
        if time.monotonic() >= deadline:
            print(f"topology incomplete after {timeout_s:g} s", file=sys.stderr, flush=True)
            return 1
        time.sleep(2.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gridstat_operator.topology", description=__doc__.splitlines()[0])
    parser.add_argument("--file", required=True, help="topology.yaml rendered by the chart")
    parser.add_argument("--check", action="store_true", help="change nothing; fail unless everything is registered")
    parser.add_argument("--timeout-s", type=float, default=300.0)
    parser.add_argument("--cloud", default="", help="only this cloud's routers and channels")
    parser.add_argument("--parent-only", action="store_true", help="only the parent broker's children")
    parser.add_argument("--watch-s", type=float, default=0.0, help="keep applying at this interval (a sidecar)")
    args = parser.parse_args(argv)
    return run(args.file, check=args.check, timeout_s=args.timeout_s, cloud=args.cloud,
               parent_only=args.parent_only, watch_s=args.watch_s)


if __name__ == "__main__":
    raise SystemExit(main())
