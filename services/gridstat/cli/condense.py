"""``gridstat condense create|list|remove|host``: condensation functions (dissertation chapter 7).

``create``, ``list`` and ``remove`` talk to the leaf QoS broker, which places a function in a
status router's slot (``CreateCondensation``). ``host`` runs one function in this process
instead, as the standalone condensation host role: it subscribes to the inputs and publishes
the output through an edge router like any client (``cli.condense_host``).

Both read the same YAML document (``--spec FILE.yaml``, docs/condensation.md)::

    function_id: area-load        # create: optional (the broker assigns one); host: the client name
    creator: ops                  # create: who may remove it (or --creator)
    inputs:
      - {variable: pmu1/load, latency_ms: 50}            # interval_ms: default the publication interval
      - {variable: pmu2/load, latency_ms: 50, type: float}
    output: {publisher: area, variable: load_avg, interval_ms: 100}
    spec:
      calculator: average
      trigger: {kind: time, interval_ms: 100}
      input_filter: {low: 0, high: 5000}
    placement_router: ""          # create: optional (GridStat's placementEdge)
    mode: 0                       # create: the mode the input paths are allocated in

Exit codes: see gridstat.cli.common (3 when the broker refuses to place the function).
"""

from __future__ import annotations

import argparse
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gridstat.cli import common
from gridstat.cli.formatting import VALUE_KINDS, to_json
from gridstat.condensation.filters import ValueFilter
from gridstat.condensation.spec import CondensationSpec, spec_from_mapping
from gridstat.core.model import check_name, split_variable_name
from gridstat.errors import ValidationError
from gridstat.telemetry import roles as telemetry
from gridstat.v1 import broker_pb2 as bpb
from gridstat.v1 import condensation_pb2 as cpb

_DOC_KEYS = {"function_id", "creator", "inputs", "output", "spec", "placement_router", "mode"}
_INPUT_KEYS = {"variable", "type", "interval_ms", "latency_ms"}
_OUTPUT_KEYS = {"publisher", "variable", "type", "interval_ms", "priority", "alert", "min_interval_ms"}


# -- the YAML document ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class InputDoc:
    variable: str
    type: str = "float"
    interval_ms: int = 0
    latency_ms: int = 0


@dataclass(frozen=True)
class OutputDoc:
    publisher: str
    variable: str
    type: str = ""
    interval_ms: int = 0
    priority: int = 1
    alert: bool = False
    min_interval_ms: int = 0


@dataclass(frozen=True)
class FunctionDoc:
    inputs: tuple[InputDoc, ...]
    output: OutputDoc
    spec: CondensationSpec
    function_id: str = ""
    creator: str = ""
    placement_router: str = ""
    mode: int = 0


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError(f"{field} must be a mapping", field=field)
    return value


def _keys(d: Mapping[str, Any], allowed: set[str], field: str) -> None:
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise ValidationError(f"unknown key(s) {unknown} in {field or 'the document'}",
                              field=f"{field}.{unknown[0]}" if field else unknown[0])


def _int(d: Mapping[str, Any], key: str, field: str, default: int = 0) -> int:
    value = d.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"{field}.{key} must be a non-negative integer, got {value!r}", field=f"{field}.{key}")
    return value


def _type(d: Mapping[str, Any], field: str, default: str) -> str:
    value = str(d.get("type", default) or default)
    if value not in ("", *VALUE_KINDS):
        raise ValidationError(f"{field}.type {value!r} is not float, int or bool", field=f"{field}.type")
    return value


def document_from_mapping(value: object) -> FunctionDoc:
    """A checked function document; a bad one raises ValidationError naming the field."""
    d = _mapping(value, "document")
    _keys(d, _DOC_KEYS, "")
    raw_inputs = d.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise ValidationError("inputs must be a non-empty list", field="inputs")
    inputs = []
    for i, raw in enumerate(raw_inputs):
        where = f"inputs[{i}]"
        item = _mapping(raw, where)
        _keys(item, _INPUT_KEYS, where)
        variable = str(item.get("variable", ""))
        try:
            split_variable_name(variable)
        except ValidationError as exc:
            raise ValidationError(str(exc.args[0]), field=f"{where}.variable") from None
        inputs.append(InputDoc(variable, _type(item, where, "float"), _int(item, "interval_ms", where),
                               _int(item, "latency_ms", where)))
    out = _mapping(d.get("output"), "output")
    _keys(out, _OUTPUT_KEYS, "output")
    output = OutputDoc(str(out.get("publisher", "")), str(out.get("variable", "")), _type(out, "output", ""),
                       _int(out, "interval_ms", "output"), _int(out, "priority", "output", 1),
                       bool(out.get("alert", False)), _int(out, "min_interval_ms", "output"))
    if not output.variable:
        raise ValidationError("output.variable is required", field="output.variable")
    check_name(output.variable, what="output.variable")
    if output.publisher:
        check_name(output.publisher, what="output.publisher")
    function_id = str(d.get("function_id", "") or "")
    if function_id:
        check_name(function_id, what="function_id")
    raw_spec = d.get("spec")
    if isinstance(raw_spec, Mapping) and output.interval_ms:
        # A time trigger's interval defaults to the output's, as at the broker.
        trigger = raw_spec.get("trigger") or {}
        if isinstance(trigger, Mapping) and str(trigger.get("kind", "time")).lower() in ("time", "0", "1") \
                and not trigger.get("interval_ms"):
            raw_spec = {**raw_spec, "trigger": {**trigger, "interval_ms": output.interval_ms}}
    return FunctionDoc(tuple(inputs), output, spec_from_mapping(raw_spec), function_id,
                       str(d.get("creator", "") or ""), str(d.get("placement_router", "") or ""),
                       _int(d, "mode", "mode") if "mode" in d else 0)


def load_document(path: str) -> FunctionDoc:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValidationError(f"cannot read {path!r}: {exc.strerror}", field="spec") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError(f"{path}: not YAML: {exc}", field="spec") from None
    try:
        return document_from_mapping(data)
    except ValidationError as exc:
        raise ValidationError(f"{path}: {exc.field}: {exc.args[0]}", field=exc.field) from None


def _filter_pb(f: ValueFilter) -> cpb.ValueFilter:
    msg = cpb.ValueFilter(enabled=f.enabled, pass_outside=f.pass_outside)
    if f.low is not None:
        msg.low = f.low
    if f.high is not None:
        msg.high = f.high
    return msg


def spec_to_pb(spec: CondensationSpec) -> cpb.CondensationSpec:
    return cpb.CondensationSpec(
        calculator=spec.calculator, parameters=dict(spec.parameters),
        trigger=cpb.Trigger(kind=cpb.TriggerKind.ValueType(int(spec.trigger.kind)),
                            interval_ms=spec.trigger.interval_ms, count=spec.trigger.count),
        input_filter=_filter_pb(spec.input_filter), output_filter=_filter_pb(spec.output_filter),
        output_type=spec.output_type)


def create_request(doc: FunctionDoc, *, creator: str, function_id: str = "",
                   placement_router: str = "") -> bpb.CreateCondensationRequest:
    o = doc.output
    output = bpb.Publication(publisher=o.publisher, variable=o.variable, interval_ms=o.interval_ms,
                             priority=o.priority, alert=o.alert, min_interval_ms=o.min_interval_ms)
    if o.type:
        output.type.kind = VALUE_KINDS[o.type]
    return bpb.CreateCondensationRequest(
        creator=creator, function_id=function_id or doc.function_id, output=output, spec=spec_to_pb(doc.spec),
        inputs=[bpb.CondensationInputRequest(variable=i.variable, interval_ms=i.interval_ms, latency_ms=i.latency_ms)
                for i in doc.inputs],
        placement_router=placement_router or doc.placement_router, mode=doc.mode)


# -- output -----------------------------------------------------------------------------------------
def info_data(f: bpb.CondensationInfo) -> dict[str, Any]:
    s = f.status
    return {
        "function_id": f.function_id, "creator": f.creator, "router": f.router, "placement": f.placement,
        "output": f"{f.output.publisher}/{f.output.variable}", "output_variable_id": f.output.variable_id,
        "calculator": f.spec.calculator, "input_subscriptions": list(f.input_subscriptions),
        "status": {"inputs": s.inputs, "input_filtered": s.input_filtered, "triggers": s.triggers,
                   "outputs": s.outputs, "output_filtered": s.output_filtered,
                   "calculator_errors": s.calculator_errors, "last_error": s.last_error},
    }


def functions_view(items: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="condensation functions")
    for column in ("id", "creator", "router", "placement", "output", "calculator", "inputs", "in", "triggers",
                   "out", "errors", "last error"):
        table.add_column(column)
    for d in items:
        s = d["status"]
        table.add_row(d["function_id"], d["creator"], d["router"], d["placement"],
                      f"{d['output']} (id {d['output_variable_id']})", d["calculator"],
                      str(len(d["input_subscriptions"])), str(s["inputs"]), str(s["triggers"]), str(s["outputs"]),
                      str(s["calculator_errors"]), s["last_error"] or "-")
    if not items:
        table.caption = "none"
    return table


# -- commands -----------------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = common.EXIT_CODES_HELP
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser("create", help="have the leaf broker place and run a function in a router")
    create.add_argument("--spec", required=True, metavar="FILE.yaml", help="the function document")
    create.add_argument("--creator", default="", metavar="NAME", help="who may remove it (default: the document's)")
    create.add_argument("--id", default="", dest="function_id", metavar="ID",
                        help="function id (default: the document's, else assigned by the broker)")
    create.add_argument("--router", default="", metavar="ROUTER", help="place it on this router")
    common.add_common_arguments(create)

    ls = actions.add_parser("list", help="the broker's functions with their routers' counters")
    common.add_common_arguments(ls)

    rm = actions.add_parser("remove", help="remove a function (only its creator may)")
    rm.add_argument("function_id", metavar="FUNCTION_ID")
    rm.add_argument("--creator", required=True, metavar="NAME")
    common.add_common_arguments(rm)

    host = actions.add_parser("host", help="run a function in this process (the condensation host role)")
    host.add_argument("--edge", required=True, metavar="HOST:PORT",
                      help="control port of the edge router the host's clients connect through")
    host.add_argument("--spec", required=True, metavar="FILE.yaml", help="the function document")
    host.add_argument("--name", default="", help="client name (default: the document's function_id, else the "
                                                 "output's publisher)")
    host.add_argument("--status-interval-s", type=float, default=10.0,
                      help="log the function's counters this often (0 = never)")
    host.add_argument("--tls-ca", default="", metavar="PEM", help="CA of the edge router's certificate: use TLS")
    host.add_argument("--tls-cert", default="", metavar="PEM", help="client certificate (mutual TLS)")
    host.add_argument("--tls-key", default="", metavar="PEM", help="private key of --tls-cert")
    host.add_argument("--exit-with-parent", action="store_true", help="stop when the parent process dies")
    host.add_argument("--log-level", default="WARNING")
    telemetry.add_arguments(host)


def create(args: argparse.Namespace) -> int:
    doc = load_document(args.spec)
    creator = check_name(args.creator or doc.creator, what="creator")
    request = create_request(doc, creator=creator, function_id=args.function_id, placement_router=args.router)
    info = common.broker_call(args, "CreateCondensation", request, min_timeout_s=10.0, rejections=True)
    common.emit(args.output, [info_data(info)], functions_view)
    return common.EXIT_OK


def list_(args: argparse.Namespace) -> int:
    reply = common.broker_call(args, "ListCondensations", bpb.ListCondensationsRequest())
    common.emit(args.output, [info_data(f) for f in reply.functions], functions_view)
    return common.EXIT_OK


def remove(args: argparse.Namespace) -> int:
    reply = common.broker_call(args, "RemoveCondensation", bpb.RemoveCondensationRequest(function_id=args.function_id,
                                                                                  creator=args.creator))
    if args.output == "json":
        print(to_json({"function_id": args.function_id, "subscriptions_removed": reply.subscriptions_removed}))
    else:
        print(f"removed condensation function {args.function_id} ({reply.subscriptions_removed} subscriptions "
              "removed)")
    return common.EXIT_OK


def host(args: argparse.Namespace) -> int:
    from gridstat.cli import condense_host

    if not math.isfinite(args.status_interval_s) or args.status_interval_s < 0:
        raise ValidationError("--status-interval-s must be >= 0", field="status_interval_s")
    return condense_host.run(args, load_document(args.spec))


ACTIONS = {"create": create, "list": list_, "remove": remove, "host": host}


def run(args: argparse.Namespace) -> int:
    return common.guarded(f"condense {args.action}", functools.partial(ACTIONS[args.action], args),
                   output=getattr(args, "output", None))
