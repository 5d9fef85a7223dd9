"""Pure parts of the operator commands: requests from options, replies to plain data, plain data to tables.

Every reply is first turned into plain JSON-able data (what ``--output json`` prints); the rich
tables of ``--output table`` are drawn from that same data, so both outputs say the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gridstat.errors import ValidationError
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import router_pb2 as rpb

MAX_MODE = 15
MAX_PRIORITY = 6
VALUE_KINDS = {"float": bpb.VALUE_KIND_FLOAT, "int": bpb.VALUE_KIND_INT, "bool": bpb.VALUE_KIND_BOOL}
_KIND_NAMES = {v: k for k, v in VALUE_KINDS.items()} | {bpb.VALUE_KIND_STRUCT: "struct"}
_CHANNEL_KINDS = {rpb.CHANNEL_KIND_ROUTER: "router", rpb.CHANNEL_KIND_SUBSCRIBER: "subscriber",
                  rpb.CHANNEL_KIND_PUBLISHER: "publisher"}

Data = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# Requests


def subscription_request(variable: str, *, subscriber: str, edge: str, interval_ms: int, latency_ms: int,
                         redundancy: int = 1, priority: int = 1, modes: Sequence[int] = (0,),
                         value_type: str | None = None, price: float | None = None,
                         best_effort: bool = False) -> bpb.Subscription:
    """The Subscription of ``gridstat sub add``: the same QoS in every mode given; ValidationError if unusable."""
    publisher, sep, name = variable.partition("/")
    if not sep or not publisher or not name:
        raise ValidationError(f"variable {variable!r} is not PUBLISHER/VARIABLE", field="variable")
    if not subscriber.strip():
        raise ValidationError("--subscriber must not be empty", field="subscriber")
    if not edge.strip():
        raise ValidationError("--edge must not be empty", field="edge_router")
    if interval_ms <= 0:
        raise ValidationError(f"--interval-ms must be positive, not {interval_ms}", field="interval_ms")
    if latency_ms <= 0:
        raise ValidationError(f"--latency-ms must be positive, not {latency_ms}", field="latency_ms")
    if redundancy < 1:
        raise ValidationError(f"--redundancy must be at least 1, not {redundancy}", field="redundancy")
    if not 0 <= priority <= MAX_PRIORITY:
        raise ValidationError(f"--priority must be 0 (alert) .. {MAX_PRIORITY}, not {priority}", field="priority")
    modes = list(modes) or [0]
    for m in modes:
        if not 0 <= m <= MAX_MODE:
            raise ValidationError(f"--mode must be 0..{MAX_MODE}, not {m}", field="mode")
    if len(set(modes)) != len(modes):
        raise ValidationError(f"--mode repeats a mode: {modes}", field="mode")
    if price is not None and not 0 <= price <= 1e9:  # NaN fails too
        raise ValidationError(f"--price must be within 0..1e9, not {price}", field="price")
    sub = bpb.Subscription(subscriber=subscriber.strip(), variable=variable, edge_router=edge.strip(), qos=[
        bpb.ModeQoS(mode=m, interval_ms=interval_ms, latency_ms=latency_ms, redundancy=redundancy, priority=priority,
                    best_effort=best_effort) for m in sorted(modes)])
    if price is not None:
        for q in sub.qos:
            q.price = price
    if value_type is not None:
        if value_type not in VALUE_KINDS:
            raise ValidationError(f"--type must be one of {', '.join(VALUE_KINDS)}, not {value_type!r}", field="type")
        sub.type.CopyFrom(bpb.ValueType(kind=VALUE_KINDS[value_type]))
    return sub


# ---------------------------------------------------------------------------------------------
# Replies -> plain data


def offer_data(offer: bpb.Offer) -> Data:
    """The fields of an Offer that are set (an unset field does not apply)."""
    return {f: getattr(offer, f) for f in ("best_latency_ms", "max_redundancy", "min_interval_ms")
            if offer.HasField(f)}


def rejection_data(reason: str, message: str, field: str = "", offer: Data | None = None) -> Data:
    return {"admitted": False, "rejection": {"reason": reason or "Rejected", "message": message, "field": field,
                                             "offer": offer or {}}}


def rejection_from_reply(reply: bpb.SubscribeReply, trailing_reason: str = "") -> Data:
    """A reply with ``admitted=false``: its Rejection, the reason falling back to the trailing metadata."""
    r = reply.rejection
    d = rejection_data(r.reason or trailing_reason, r.message, r.field,
                       offer_data(r.offer) if reply.HasField("rejection") and r.HasField("offer") else {})
    if reply.HasField("admission"):
        d["admission"] = admission_note_data(reply.admission)
    return d


def admission_note_data(a: bpb.AdmissionNote) -> Data:
    """The admission controller's part (docs/admission.md): its decision per hop, or the broker's fallback."""
    d = a.decision
    return {"decided_by": a.decided_by, "fallback": a.fallback, "controller": a.controller, "note": a.note,
            "reason": d.reason, "guaranteed_fraction": d.guaranteed_fraction,
            "required_eps": [d.requirement.min_rate_eps, d.requirement.max_rate_eps], "reserved_eps": d.reserved_eps,
            "failing_hops": [{"router": h.router, "link": h.link, "mode": h.mode, "resource": h.resource,
                              "required": h.required, "available": h.available} for h in d.hops if not h.ok]}


def qos_data(q: bpb.ModeQoS) -> Data:
    return {"mode": q.mode, "interval_ms": q.interval_ms, "latency_ms": q.latency_ms,
            "redundancy": q.redundancy, "priority": q.priority}


def admission_data(reply: bpb.SubscribeReply) -> Data:
    """An admitted subscription (Subscribe's reply, or one entry of ListSubscriptions)."""
    s = reply.subscription
    return {
        "admitted": reply.admitted,
        "subscription_id": s.subscription_id,
        "subscriber": s.subscriber,
        "variable": s.variable,
        "variable_id": reply.variable_id,
        "type": _KIND_NAMES.get(s.type.kind, ""),
        "edge_router": s.edge_router,
        "cloud": s.cloud,
        "pub_interval_ms": reply.pub_interval_ms,
        "qos": [qos_data(q) for q in s.qos],
        "allocations": [{"mode": a.mode, "granted_interval_ms": a.interval_ms or None, "paths": [
            {"redundant_index": p.redundant_index, "routers": list(p.routers), "latency_ms": p.latency_ms}
            for p in a.paths]} for a in reply.allocations],
        **({"admission": admission_note_data(reply.admission)} if reply.HasField("admission") else {}),
    }


def subscriptions_data(reply: bpb.ListSubscriptionsReply) -> list[Data]:
    return [admission_data(s) for s in sorted(reply.subscriptions, key=lambda s: s.subscription.subscription_id)]


def topology_data(view: bpb.TopologyView) -> Data:
    return {
        "broker": view.broker,
        "parent": view.parent,
        "topology_version": view.topology_version,
        "routers": [{"name": r.name, "router_id": r.router_id, "role": r.role, "capacity_eps": r.capacity_eps,
                     "up": r.up, "control_address": r.control_address, "event_address": r.event_address,
                     "attributes": dict(sorted(r.attributes.items()))}
                    for r in sorted(view.routers, key=lambda r: r.name)],
        "channels": [{"a": c.a, "b": c.b, "bandwidth_bps": c.bandwidth_bps, "latency_ms": c.latency_ms,
                      "capacity_eps": c.capacity_eps, "both_directions": c.both_directions}
                     for c in sorted(view.channels, key=lambda c: (c.a, c.b))],
        "inter_cloud_channels": [{"cloud_a": c.cloud_a, "router_a": c.router_a, "cloud_b": c.cloud_b,
                                  "router_b": c.router_b, "bandwidth_bps": c.bandwidth_bps,
                                  "latency_ms": c.latency_ms}
                                 for c in sorted(view.inter_cloud_channels, key=lambda c: (c.router_a, c.router_b))],
        "children": [{"name": c.name, "address": c.address, "leaf": c.leaf}
                     for c in sorted(view.children, key=lambda c: c.name)],
    }


def find_router(view: bpb.TopologyView, name: str) -> bpb.RouterInfo | None:
    return next((r for r in view.routers if r.name == name), None)


def routes_data(router: str, address: str, routes: rpb.ListRoutesReply, channels: rpb.ListChannelsReply) -> Data:
    """The route table and the channels as the router itself holds them."""
    return {
        "router": router,
        "control_address": address,
        "current_mode": routes.current_mode,
        "table_version": routes.table_version,
        "routes": [{"route_id": r.route_id, "variable_id": r.variable_id, "mode": r.mode, "channel": r.channel,
                    "sub_interval_ms": r.sub_interval_ms, "pub_interval_ms": r.pub_interval_ms,
                    "priority": r.priority, "alert": r.alert, "version": r.version}
                   for r in sorted(routes.routes, key=lambda r: (r.mode, r.variable_id, r.route_id))],
        "channels": [{"name": c.name, "kind": _CHANNEL_KINDS.get(c.kind, "unspecified"), "peer_id": c.peer_id,
                      "address": f"{c.host}:{c.port}" if c.host else "", "up": c.up, "rtt_ms": c.rtt_ms}
                     for c in sorted(channels.channels, key=lambda c: c.name)],
    }


# ---------------------------------------------------------------------------------------------
# Plain data -> output


def query_data(reply: bpb.QueryReply) -> Data:
    """A query subscription (SubscribeQuery's reply, or one of ListQueries) and each variable's outcome."""
    q = reply.query
    return {
        "query_id": q.query_id, "subscriber": q.subscriber, "where": q.where, "edge_router": q.edge_router,
        "qos": [qos_data(m) for m in q.qos],
        "members": [{"variable": m.variable, "admitted": m.admitted, "subscription_id": m.subscription_id,
                     **({"subscription": admission_data(m.subscription)} if m.admitted else
                        {"rejection": {"reason": m.rejection.reason, "message": m.rejection.message,
                                       "field": m.rejection.field}})}
                    for m in sorted(reply.members, key=lambda m: m.variable)],
    }


def query_view(d: Data) -> RenderableType:
    admitted = sum(1 for m in d["members"] if m["admitted"])
    head = Text.assemble(("query subscription ", "bold"), f"{d['query_id']} for {d['subscriber']} at "
                         f"{d['edge_router']}: where {d['where']}; {admitted} of {len(d['members'])} variables "
                         "admitted")
    members = _table("variables", ("variable", "outcome", "subscription", "paths / reason"), (
        (m["variable"], "admitted" if m["admitted"] else "rejected", m["subscription_id"],
         " | ".join(" -> ".join(p["routers"]) for a in m["subscription"]["allocations"] for p in a["paths"])
         if m["admitted"] else f"{m['rejection']['reason']}: {m['rejection']['message']}")
        for m in d["members"]), empty="no variable matches yet (later ones are added as they register)")
    return Group(head, Text(f"QoS: {_qos_text(d['qos'])}"), members)


def to_json(data: object) -> str:
    return json.dumps(data, indent=2, sort_keys=False)


def _table(title: str, columns: Iterable[str], rows: Iterable[Iterable[object]], *, empty: str = "none") -> Table:
    table = Table(title=title, title_justify="left", show_lines=False)
    for c in columns:
        table.add_column(c, overflow="fold")
    n = 0
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
        n += 1
    if n == 0:
        table.caption = empty
    return table


def _cell(v: object) -> str:
    if isinstance(v, bool):
        return "up" if v else "down"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def _ms(v: float) -> str:
    return f"{v:.2f}"


def _bandwidth(bps: int) -> str:
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g} {unit}"
    return f"{bps} bit/s"


def _qos_text(qos: list[Data], allocations: list[Data] | None = None) -> str:
    """Each mode's QoS; an interval the broker granted otherwise than asked is said (dissertation 4.2)."""
    granted = {a["mode"]: a.get("granted_interval_ms") for a in allocations or []}

    def interval(q: Data) -> str:
        g = granted.get(q["mode"])
        return f"{q['interval_ms']} ms" if not g or g == q["interval_ms"] else \
            f"{q['interval_ms']} ms asked, {g} ms granted"
    return "; ".join(f"mode {q['mode']}: {interval(q)}, <= {q['latency_ms']} ms, x{q['redundancy']}, "
                     f"prio {q['priority']}" for q in qos)


def admission_view(d: Data) -> RenderableType:
    head = Text.assemble(("admitted ", "bold green"), f"subscription {d['subscription_id']}: {d['variable']} ",
                         f"(variable id {d['variable_id']}, publication every {d['pub_interval_ms']} ms) ",
                         f"for {d['subscriber']} at {d['edge_router']}")
    paths = _table("paths", ("mode", "path", "routers", "latency ms"), (
        (a["mode"], p["redundant_index"], " -> ".join(p["routers"]), _ms(p["latency_ms"]))
        for a in d["allocations"] for p in a["paths"]))
    parts: list[RenderableType] = [head, Text(f"QoS: {_qos_text(d['qos'], d['allocations'])}")]
    if "admission" in d:
        parts.append(Text(f"admission: {_admission_text(d['admission'])}"))
    return Group(*parts, paths)


def _admission_text(a: Data) -> str:
    if a["fallback"]:
        return str(a["note"])
    return f"decided by the controller at {a['controller']}: {a['reason']}: {a['note']}"


def offer_text(offer: Data) -> str:
    parts = []
    if "best_latency_ms" in offer:
        parts.append(f"best latency {offer['best_latency_ms']:.2f} ms")
    if "max_redundancy" in offer:
        parts.append(f"max redundancy {offer['max_redundancy']}")
    if "min_interval_ms" in offer:
        parts.append(f"min interval {offer['min_interval_ms']} ms")
    return ", ".join(parts) if parts else "none"


def rejection_lines(d: Data) -> list[str]:
    """Plain lines of a rejection; the first is ``rejected: <Reason>`` for scripts that grep."""
    r = d["rejection"]
    lines = [f"rejected: {r['reason']}", f"message: {r['message']}"]
    if r["field"]:
        lines.append(f"field: {r['field']}")
    lines.append(f"offer: {offer_text(r['offer'])}")
    a = d.get("admission")
    if a:
        lines.append(f"admission: {_admission_text(a)}")
        lines.extend(f"  hop {h['router']} ({h['link']}, mode {h['mode']}): {h['resource']} needs {h['required']:.6g}, "
                     f"{max(0.0, h['available']):.6g} left" for h in a["failing_hops"])
    return lines


def subscriptions_view(subs: list[Data]) -> RenderableType:
    return _table("subscriptions", ("id", "subscriber", "variable", "var id", "edge", "QoS", "paths"), (
        (s["subscription_id"], s["subscriber"], s["variable"], s["variable_id"], s["edge_router"],
         _qos_text(s["qos"], s["allocations"]), sum(len(a["paths"]) for a in s["allocations"]))
        for s in subs), empty="no subscriptions")


def topology_view(d: Data) -> RenderableType:
    title = f"broker {d['broker'] or '?'}" + (f" (parent {d['parent']})" if d["parent"] else "") + \
        f", topology version {d['topology_version']}"
    described = any(r.get("attributes") for r in d["routers"])
    routers = _table("routers", ("name", "id", "role", "capacity ev/s", "state", "control",
                                 *(("attributes",) if described else ())), (
        (r["name"], r["router_id"], r["role"], r["capacity_eps"], r["up"], r["control_address"],
         *((", ".join(f"{k}={v}" for k, v in r.get("attributes", {}).items()),) if described else ()))
        for r in d["routers"]))
    channels = _table("channels", ("from", "to", "bandwidth", "latency ms", "capacity ev/s", "both ways"), (
        (c["a"], c["b"], _bandwidth(c["bandwidth_bps"]), _ms(c["latency_ms"]), c["capacity_eps"] or "bandwidth",
         "yes" if c["both_directions"] else "no") for c in d["channels"]))
    parts: list[RenderableType] = [Text(title, style="bold"), routers, channels]
    if d["inter_cloud_channels"]:
        parts.append(_table("inter-cloud channels", ("cloud", "router", "cloud", "router", "bandwidth", "latency ms"), (
            (c["cloud_a"], c["router_a"], c["cloud_b"], c["router_b"], _bandwidth(c["bandwidth_bps"]),
             _ms(c["latency_ms"])) for c in d["inter_cloud_channels"])))
    if d["children"]:
        parts.append(_table("child brokers", ("name", "address", "kind"), (
            (c["name"], c["address"], "leaf" if c["leaf"] else "parent") for c in d["children"])))
    return Group(*parts)


def routes_view(d: Data) -> RenderableType:
    head = Text(f"router {d['router']} at {d['control_address']}: mode {d['current_mode']}, "
                f"table version {d['table_version']}", style="bold")
    routes = _table("routes", ("route id", "var id", "mode", "channel", "interval ms", "pub ms", "priority"), (
        (r["route_id"], r["variable_id"], r["mode"], r["channel"], r["sub_interval_ms"], r["pub_interval_ms"],
         f"{r['priority']} (alert)" if r["alert"] else r["priority"]) for r in d["routes"]), empty="no routes")
    channels = _table("channels", ("name", "kind", "peer id", "address", "state", "rtt ms"), (
        (c["name"], c["kind"], c["peer_id"], c["address"], c["up"], _ms(c["rtt_ms"])) for c in d["channels"]),
        empty="no channels")
    return Group(head, routes, channels)
