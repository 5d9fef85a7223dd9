"""What ``gridstat up`` shows: subscriptions, routers and brokers, as rich tables or plain lines.

``Snapshot`` is plain data taken from the live objects, so rendering is pure and the plain format
is stable for scripts and tests: one ``key=value`` line per subscription (``sub ...``), per
router (``router ...``), per QoS broker (``broker ...``) and per SCADA gateway (``gateway ...``), and
``note ...`` lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Group
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class SubRow:
    name: str
    variable: str
    edge: str
    status: str                 # admitted, rejected, failed, pending
    paths: tuple[str, ...]      # the broker's paths, "r1>r2>r3"
    interval_ms: int
    effective_interval_ms: int
    expected_rate: float
    rate: float | None
    delivered: int
    p50_ms: float | None
    p99_ms: float | None
    bound_ms: int
    gaps: int
    duplicates: int
    drops: int
    violations: int
    held_by: str = "-"          # the broker(s) that report it (ListSubscriptions)
    reason: str = ""            # a refusal's machine-readable reason
    offer: str = "-"            # and what the broker could grant instead
    lost: int = 0               # gaps lost on the way, and gaps the publisher never published
    unpublished: int = 0        # (docs/wire-format.md 3.4)


@dataclass(frozen=True)
class RouterRow:
    name: str
    role: str
    cloud: str
    pid: int | None
    state: str            # up, restarting, exited, stopped, or a gRPC error code
    events_in: int
    forwarded: int
    filtered: int
    drops: dict[str, int]
    channels_up: int
    channels: int
    exit: str = "-"       # how it ended (0, SIGKILL) once it did
    restarts: int = 0     # by gridstat up's supervisor


@dataclass(frozen=True)
class BrokerRow:
    name: str
    role: str             # leaf or parent
    pid: int | None
    state: str
    subscriptions: int
    routers_up: int
    routers_down: int
    held: tuple[str, ...]  # the runner's subscriptions among the admitted ones it reports (ListSubscriptions)
    segments: int = 0      # the others: inter-cloud segments it holds for the parent
    exit: str = "-"
    restarts: int = 0


@dataclass(frozen=True)
class GatewayRow:
    """A SCADA gateway of the topology file (docs/topology.md, "Gateways"), from its last stats line."""

    name: str
    kind: str             # iec104, dnp3, goose
    edge: str
    target: str           # the outstation's HOST:PORT, or the interface
    pid: int | None
    state: str            # the process: up, restarting, exited, stopped
    link: str = "-"       # the gateway's own state (started, polling, disconnected ...)
    published: int = 0    # values handed to its publishers
    variables: int = 0    # variables it registered
    drops: int = 0
    exit: str = "-"
    restarts: int = 0


@dataclass(frozen=True)
class Snapshot:
    elapsed_s: float
    variant: str
    source: str
    subscriptions: tuple[SubRow, ...]
    routers: tuple[RouterRow, ...]
    brokers: tuple[BrokerRow, ...] = ()
    notes: tuple[str, ...] = ()
    gateways: tuple[GatewayRow, ...] = ()


def _fmt(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def _drops(d: dict[str, int]) -> str:
    total = sum(d.values())
    if not total:
        return "0"
    return f"{total} (" + ", ".join(f"{k} {v}" for k, v in sorted(d.items()) if v) + ")"


def _state_text(state: str, exit: str, restarts: int) -> Text:
    """``up``, ``up, restarted 2x``, ``restarting (SIGKILL)``, ``stopped (0)``: green while it serves."""
    text = state if exit == "-" else f"{state} ({exit})"
    if restarts:
        text += f", restarted {restarts}x"
    return Text(text, style="green" if state == "up" else "yellow" if state in ("restarting", "stopped") else "red")


def plain_lines(s: Snapshot, *, title: str = "STATUS") -> list[str]:
    admitted = sum(1 for r in s.subscriptions if r.status == "admitted")
    lines = [f"{title} t={s.elapsed_s:.1f}s topology={s.source} variant={s.variant} brokers={len(s.brokers)} "
             f"routers={len(s.routers)} subscriptions={len(s.subscriptions)} admitted={admitted}"
             + (f" gateways={len(s.gateways)}" if s.gateways else "")]
    for r in s.subscriptions:
        line = (f"  sub name={r.name} var={r.variable} edge={r.edge} status={r.status} paths={len(r.paths)} "
                f"interval_ms={r.interval_ms} effective_ms={r.effective_interval_ms} "
                f"expected_per_s={r.expected_rate:.2f} rate_per_s={_fmt(r.rate, '.2f')} delivered={r.delivered} "
                f"p50_ms={_fmt(r.p50_ms, '.0f')} p99_ms={_fmt(r.p99_ms, '.0f')} bound_ms={r.bound_ms} "
                f"gaps={r.gaps} lost={r.lost} unpublished={r.unpublished} duplicates={r.duplicates} "
                f"drops={r.drops} violations={r.violations} "
                f"held_by={r.held_by} route={'|'.join(r.paths) or '-'}")
        if r.status != "admitted":
            line += f" reason={r.reason or '-'} offer={r.offer}"
        lines.append(line)
    for rt in s.routers:
        drops = ",".join(f"{k}:{v}" for k, v in sorted(rt.drops.items()) if v) or "0"
        lines.append(
            f"  router name={rt.name} role={rt.role} cloud={rt.cloud} pid={rt.pid} state={rt.state} "
            f"exit={rt.exit} restarts={rt.restarts} "
            f"in={rt.events_in} forwarded={rt.forwarded} filtered={rt.filtered} drops={drops} "
            f"channels_up={rt.channels_up}/{rt.channels}")
    for b in s.brokers:
        lines.append(
            f"  broker name={b.name} role={b.role} pid={b.pid} state={b.state} exit={b.exit} restarts={b.restarts} "
            f"subscriptions={b.subscriptions} "
            f"routers_up={b.routers_up} routers_down={b.routers_down} held={','.join(b.held) or '-'} "
            f"segments={b.segments}")
    for g in s.gateways:
        lines.append(
            f"  gateway name={g.name} kind={g.kind} edge={g.edge} target={g.target} pid={g.pid} state={g.state} "
            f"exit={g.exit} restarts={g.restarts} link={g.link} published={g.published} variables={g.variables} "
            f"drops={g.drops}")
    lines.extend(f"  note {n}" for n in s.notes)
    return lines


def rich_view(s: Snapshot) -> Group:
    subs = Table(title=f"gridstat up: {s.source}, variant {s.variant}, {s.elapsed_s:.0f} s  (Ctrl-C to stop)",
                 title_justify="left", expand=False)
    for col, justify in (("subscription", "left"), ("variable", "left"), ("edge", "left"),
                         ("interval ms", "right"), ("rate /s", "right"), ("expected", "right"),
                         ("p50 ms", "right"), ("p99 ms", "right"), ("bound", "right"), ("lost/unpub", "right"),
                         ("dup", "right"), ("drops", "right"), ("viol", "right"), ("broker's paths", "left")):
        subs.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in s.subscriptions:
        interval = str(r.interval_ms) if r.interval_ms == r.effective_interval_ms else \
            f"{r.interval_ms}->{r.effective_interval_ms}"
        if r.status != "admitted":
            subs.add_row(r.name, r.variable, r.edge, interval, "-", f"{r.expected_rate:.1f}", "-", "-",
                         str(r.bound_ms), "-", "-", "-", "-",
                         Text(f"{r.status.upper()} {r.reason or '-'}; offer {r.offer}", style="red"))
            continue
        rate_style = "green" if r.rate is not None and r.rate >= 0.8 * r.expected_rate else "yellow"
        late = r.p99_ms is not None and r.p99_ms > r.bound_ms
        subs.add_row(r.name, r.variable, r.edge, interval,
                     Text(_fmt(r.rate), style=rate_style), f"{r.expected_rate:.1f}",
                     _fmt(r.p50_ms, ".0f"), Text(_fmt(r.p99_ms, ".0f"), style="red" if late else ""),
                     str(r.bound_ms), Text(f"{r.lost}/{r.unpublished}", style="yellow" if r.gaps else ""),
                     str(r.duplicates), Text(str(r.drops), style="red" if r.drops else ""),
                     Text(str(r.violations), style="red" if r.violations else ""),
                     "\n".join(p.replace(">", " > ") for p in r.paths) or "-")
    routers = Table(title="status routers", title_justify="left")
    for col, justify in (("router", "left"), ("role", "left"), ("cloud", "left"), ("pid", "right"),
                         ("state", "left"), ("events in", "right"), ("forwarded", "right"),
                         ("filtered", "right"), ("drops", "left"), ("channels up", "right")):
        routers.add_column(col, justify=justify)  # type: ignore[arg-type]
    for rt in s.routers:
        routers.add_row(rt.name, rt.role, rt.cloud, str(rt.pid or "-"),
                        _state_text(rt.state, rt.exit, rt.restarts),
                        str(rt.events_in), str(rt.forwarded), str(rt.filtered),
                        Text(_drops(rt.drops), style="red" if sum(rt.drops.values()) else ""),
                        f"{rt.channels_up}/{rt.channels}")
    brokers = Table(title="QoS brokers", title_justify="left")
    for col, justify in (("broker", "left"), ("role", "left"), ("pid", "right"), ("state", "left"),
                         ("subscriptions", "right"), ("segments", "right"), ("routers up", "right"),
                         ("routers down", "right")):
        brokers.add_column(col, justify=justify)  # type: ignore[arg-type]
    for b in s.brokers:
        brokers.add_row(b.name, b.role, str(b.pid or "-"), _state_text(b.state, b.exit, b.restarts),
                        str(b.subscriptions), str(b.segments), str(b.routers_up),
                        Text(str(b.routers_down), style="red" if b.routers_down else ""))
    parts: list[Table | Text] = [subs, routers, brokers]
    if s.gateways:
        gateways = Table(title="SCADA gateways", title_justify="left")
        for col, justify in (("gateway", "left"), ("kind", "left"), ("edge", "left"), ("device", "left"),
                             ("pid", "right"), ("state", "left"), ("link", "left"), ("published", "right"),
                             ("variables", "right"), ("drops", "right")):
            gateways.add_column(col, justify=justify)  # type: ignore[arg-type]
        for g in s.gateways:
            gateways.add_row(g.name, g.kind, g.edge, g.target, str(g.pid or "-"),
                             _state_text(g.state, g.exit, g.restarts), g.link, str(g.published), str(g.variables),
                             Text(str(g.drops), style="red" if g.drops else ""))
        parts.append(gateways)
    parts.extend(Text(n, style="yellow") for n in s.notes)
    return Group(*parts)
