"""What ``gridstat up`` shows: a snapshot of subscriptions and routers, as rich tables or plain lines.

``Snapshot`` is plain data taken from the live objects, so rendering is pure and
the plain format is stable for scripts and tests: one ``key=value`` line per
subscription (``sub ...``) and per router (``router ...``).
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
    paths: int
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
    violations: int


@dataclass(frozen=True)
class RouterRow:
    name: str
    role: str
    cloud: str
    pid: int | None
    state: str            # "up", "exited N", or a gRPC error code
    events_in: int
    forwarded: int
    filtered: int
    drops: dict[str, int]
    channels_up: int
    channels: int


@dataclass(frozen=True)
class Snapshot:
    elapsed_s: float
    variant: str
    source: str
    subscriptions: tuple[SubRow, ...]
    routers: tuple[RouterRow, ...]


def _fmt(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def _drops(d: dict[str, int]) -> str:
    total = sum(d.values())
    if not total:
        return "0"
    return f"{total} (" + ", ".join(f"{k} {v}" for k, v in sorted(d.items()) if v) + ")"


def plain_lines(s: Snapshot, *, title: str = "STATUS") -> list[str]:
    lines = [f"{title} t={s.elapsed_s:.1f}s topology={s.source} variant={s.variant} "
             f"routers={len(s.routers)} subscriptions={len(s.subscriptions)}"]
    for r in s.subscriptions:
        lines.append(
            f"  sub name={r.name} var={r.variable} edge={r.edge} paths={r.paths} interval_ms={r.interval_ms} "
            f"effective_ms={r.effective_interval_ms} expected_per_s={r.expected_rate:.2f} "
            f"rate_per_s={_fmt(r.rate, '.2f')} delivered={r.delivered} p50_ms={_fmt(r.p50_ms, '.0f')} "
            f"p99_ms={_fmt(r.p99_ms, '.0f')} bound_ms={r.bound_ms} gaps={r.gaps} duplicates={r.duplicates} "
            f"violations={r.violations}")
    for rt in s.routers:
        drops = ",".join(f"{k}:{v}" for k, v in sorted(rt.drops.items()) if v) or "0"
        lines.append(
            f"  router name={rt.name} role={rt.role} cloud={rt.cloud} pid={rt.pid} state={rt.state} "
            f"in={rt.events_in} forwarded={rt.forwarded} filtered={rt.filtered} drops={drops} "
            f"channels_up={rt.channels_up}/{rt.channels}")
    return lines


def rich_view(s: Snapshot) -> Group:
    subs = Table(title=f"gridstat up: {s.source}, variant {s.variant}, {s.elapsed_s:.0f} s  (Ctrl-C to stop)",
                 title_justify="left", expand=False)
    for col, justify in (("subscription", "left"), ("variable", "left"), ("edge", "left"), ("paths", "right"),
                         ("interval ms", "right"), ("rate /s", "right"), ("expected", "right"),
                         ("p50 ms", "right"), ("p99 ms", "right"), ("bound", "right"), ("gaps", "right"),
                         ("dup", "right"), ("viol", "right")):
        subs.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in s.subscriptions:
        interval = str(r.interval_ms) if r.interval_ms == r.effective_interval_ms else \
            f"{r.interval_ms}->{r.effective_interval_ms}"
        rate_style = "green" if r.rate is not None and r.rate >= 0.8 * r.expected_rate else "yellow"
        late = r.p99_ms is not None and r.p99_ms > r.bound_ms
        subs.add_row(r.name, r.variable, r.edge, str(r.paths), interval,
                     Text(_fmt(r.rate), style=rate_style), f"{r.expected_rate:.1f}",
                     _fmt(r.p50_ms, ".0f"), Text(_fmt(r.p99_ms, ".0f"), style="red" if late else ""),
                     str(r.bound_ms), Text(str(r.gaps), style="yellow" if r.gaps else ""),
                     str(r.duplicates), Text(str(r.violations), style="red" if r.violations else ""))
    routers = Table(title="status routers", title_justify="left")
    for col, justify in (("router", "left"), ("role", "left"), ("cloud", "left"), ("pid", "right"),
                         ("state", "left"), ("events in", "right"), ("forwarded", "right"),
                         ("filtered", "right"), ("drops", "left"), ("channels up", "right")):
        routers.add_column(col, justify=justify)  # type: ignore[arg-type]
    for rt in s.routers:
        routers.add_row(rt.name, rt.role, rt.cloud, str(rt.pid or "-"),
                        Text(rt.state, style="green" if rt.state == "up" else "red"),
                        str(rt.events_in), str(rt.forwarded), str(rt.filtered),
                        Text(_drops(rt.drops), style="red" if sum(rt.drops.values()) else ""),
                        f"{rt.channels_up}/{rt.channels}")
    return Group(subs, routers)
