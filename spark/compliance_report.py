"""The QoS compliance report as a grid operator reads it: each breach against its own bound, and why.

Pure Python (matplotlib, no Spark): ``qos_compliance.py`` computes one row per subscription and
mode with Spark and hands the collected rows here; ``scripts/render-report.py`` renders the same
page from synthetic or saved rows. What the page shows (docs/telemetry.md, "Spark jobs"):

* a summary line and, first, the breaches: per non-compliant subscription and mode, the reasons
  (``late``, ``gaps``, ``under-delivered``) with their numbers;
* per kind of subscription (``operational``: a role other than ``archive`` exported its delivery
  samples; ``archive``: ``gridstat archive``'s own subscriptions, role ``archive``), latency as the
  ratio p99.9 / the subscription's own bound on a log scale with the bound at 1.0 (the worst event
  as a marker), beside the share of the expected events delivered;
* the worst latency of each delivery sample over its bound in wall-clock time (UTC);
* the table, breaches first, with the few columns an operator reads (every column is in the
  ``compliance/`` parquet).

``annotate`` adds the ratios and the reasons to a row; ``render_html`` and ``render_png`` make the
page (``report.html`` with its plots embedded, ``report.png`` the same page as one image).
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

#: Why a subscription-mode is not compliant: the reason and the verdict column that says it.
REASONS = (("late", "latency_ok"), ("gaps", "gaps_ok"), ("under-delivered", "interval_ok"))
KINDS = ("operational", "archive")
#: At most this many subscription-modes per kind in a bar chart (breaches first, then the highest ratios).
MAX_BARS = 30
#: At most this many lines with a legend entry per timeline panel (breaches first); the rest are grey.
MAX_LINES = 8

#: The multiplication sign of ratios (``1.93x``).
X = "\N{MULTIPLICATION SIGN}"
OK_COLOUR, BAD_COLOUR, NODATA_COLOUR, BOUND_COLOUR = "#2e7d32", "#c62828", "#9e9e9e", "#212121"


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def _ratio(num: Any, den: Any) -> float | None:
    n, d = _f(num), _f(den)
    return None if n is None or not d else n / d


def kind_of(role: str | None) -> str:
    """The kind of a subscription from the role that exported its delivery samples."""
    return "archive" if role == "archive" else "operational"


def reasons(row: Mapping[str, Any]) -> list[str]:
    """Why the row is not compliant (empty when it is)."""
    if row.get("compliant"):
        return []
    if not row.get("delivered"):
        return ["nothing delivered"]
    return [name for name, ok in REASONS if row.get(ok) is False]


def _ms(v: Any) -> str:
    x = _f(v)
    if x is None:
        return "-"
    return f"{x:.0f}" if x >= 10 or x == int(x) else f"{x:.1f}"


def why(row: Mapping[str, Any]) -> str:
    """The reasons with their numbers, one clause each, and the mode."""
    parts = []
    for r in reasons(row):
        if r == "late":
            p999, bound = row.get("latency_p999_ms"), row.get("latency_bound_ms")
            ratio = _ratio(p999, bound)
            if ratio is None:
                parts.append("late: no latency samples")
                continue
            over = _f(row.get("over_bound_fraction")) or 0.0
            n = int(row.get("latency_samples") or 0)
            parts.append(f"late: p99.9 {_ms(p999)} ms = {ratio:.2f}{X} the {_ms(bound)} ms bound "
                         f"(worst {_ms(row.get('latency_max_ms'))} ms; {round(over * n)} of {n} events over)")
        elif r == "gaps":
            parts.append(f"gaps: {int(row.get('gaps') or 0)} expected events skipped")
        elif r == "under-delivered":
            share = _f(row.get("delivery_ratio"))
            parts.append(f"under-delivered: every {_ms(row.get('delivered_interval_ms'))} ms against "
                         f"{_ms(row.get('requested_interval_ms'))} ms requested"
                         + (f" ({share:.1%} of the expected events)" if share is not None else ""))
        else:
            parts.append(r)
    return f"mode {row.get('mode')}: " + "; ".join(parts) if parts else ""


def annotate(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row with ``kind`` (if missing), ``latency_ratio`` (p99.9 / bound), ``worst_latency_ratio``
    (max / bound), ``interval_ratio`` (delivered / requested interval), ``reasons`` and ``why``."""
    out = dict(row)
    out.setdefault("kind", "operational")
    out["latency_ratio"] = _ratio(row.get("latency_p999_ms"), row.get("latency_bound_ms"))
    out["worst_latency_ratio"] = _ratio(row.get("latency_max_ms"), row.get("latency_bound_ms"))
    out["interval_ratio"] = _ratio(row.get("delivered_interval_ms"), row.get("requested_interval_ms"))
    out["reasons"] = reasons(row)
    out["why"] = why(row)
    return out


def ordered(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Breaches first (highest latency ratio first), then the compliant by subscription and mode."""
    rs = [annotate(r) if "why" not in r else dict(r) for r in rows]
    return sorted(rs, key=lambda r: (bool(r.get("compliant")), -(r.get("latency_ratio") or 0.0)
                                     if not r.get("compliant") else 0.0, str(r["subscription"]), int(r["mode"])))


def label(row: Mapping[str, Any], width: int = 44) -> str:
    """``subscriber → publisher/variable · mode N``, shortened in the middle to ``width``."""
    text = f"{row['subscriber']} → {row['variable']}"
    if len(text) > width:
        keep = (width - 1) // 2
        text = text[:keep] + "…" + text[-(width - 1 - keep):]
    return f"{text} · m{row['mode']}"


def _utc(ms: Any) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(int(ms) / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


# -- plots -----------------------------------------------------------------------------------------------
def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "axes.titleweight": "bold",
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _png(fig: Any, dpi: int = 100) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", facecolor="white")
    return buf.getvalue()


def _bars(rows: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    chosen = ordered(rows)[:MAX_BARS]
    return chosen, len(rows) - len(chosen)


def _log_ticks(ax: Any, lo: float, hi: float, axis: str = "x") -> None:
    """1-2-5 ticks labelled ``0.5x``, ``1x``, ``2x`` (the multiplication sign) on a log axis, no minor labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ticks = [m * 10.0 ** e for e in range(-3, 4) for m in (1, 2, 5) if lo <= m * 10.0 ** e <= hi]
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(FixedLocator(ticks))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}{X}"))
    target.set_minor_formatter(NullFormatter())


def bound_chart(rows: Sequence[Mapping[str, Any]]) -> bytes | None:
    """Per kind: p99.9 / bound as a bar from the bound (1x, log scale: right of it is late, red; left of it
    within, green), the worst event as a marker, beside the share of the expected events delivered."""
    plt = _plt()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    by_kind = {k: [annotate(r) for r in rows if (r.get("kind") or "operational") == k] for k in KINDS}
    kinds = [k for k in KINDS if by_kind[k]]
    if not kinds:
        return None
    shown = {k: _bars(by_kind[k]) for k in kinds}
    rows_drawn = [max(2, len(shown[k][0]) + (1 if shown[k][1] else 0)) for k in kinds]
    heights = [n * 0.3 + 0.3 for n in rows_drawn]
    gap, top, bottom = 0.9, 0.35, 0.95  # inches: between panels, above, below (axis label and legend)
    total = sum(heights) + gap * (len(kinds) - 1) + top + bottom
    fig, axes = plt.subplots(len(kinds), 2, figsize=(11, total), squeeze=False,
                             gridspec_kw={"width_ratios": [2.4, 1], "height_ratios": heights, "wspace": 0.04,
                                          "hspace": gap / (sum(heights) / len(kinds))})
    fig.subplots_adjust(top=1 - top / total, bottom=bottom / total)
    ratios = [v for k in kinds for r in shown[k][0] for v in (r["latency_ratio"], r["worst_latency_ratio"]) if v]
    lo = min([0.1, *[v * 0.7 for v in ratios]])
    hi = max([5.0, *[v * 4.0 for v in ratios]])
    for i, k in enumerate(kinds):
        chosen, more = shown[k]
        ax, dax = axes[i][0], axes[i][1]
        y = [n + (1 if more else 0) for n in range(len(chosen))][::-1]
        for yy, r in zip(y, chosen, strict=True):
            ratio, worst = r["latency_ratio"], r["worst_latency_ratio"]
            late = ratio is not None and ratio > 1
            if ratio is not None:
                ax.barh(yy, ratio - 1.0, left=1.0, height=0.6, color=BAD_COLOUR if late else OK_COLOUR,
                        alpha=0.9 if late else 0.6)
                ax.text(max(1.0, ratio, worst or 0.0) * 1.1, yy,
                        f"{_ms(r['latency_p999_ms'])} / {_ms(r['latency_bound_ms'])} ms  {ratio:.2f}{X}",
                        va="center", fontsize=8, color=BAD_COLOUR if late else "#616161",
                        fontweight="bold" if late else "normal")
            else:
                ax.text(1.1, yy, "no latency samples", va="center", fontsize=8, color=NODATA_COLOUR)
            if worst is not None:
                ax.plot(worst, yy, marker="D", markersize=4, color=BOUND_COLOUR, linestyle="", zorder=3)
            share = _f(r.get("delivery_ratio"))
            short = "under-delivered" in r["reasons"] or "gaps" in r["reasons"]
            if share is not None:
                dax.barh(yy, min(share, 1.2) * 100, height=0.6, color=BAD_COLOUR if short else OK_COLOUR,
                         alpha=0.9 if short else 0.6)
            gaps = int(r.get("gaps") or 0)
            note = f"{share:.1%}" if share is not None else "-"
            if gaps:
                note += f", {gaps} gaps"
            dax.text(3, yy, note, va="center", fontsize=8, color="white" if share and share > 0.3 else "#424242",
                     fontweight="bold" if short else "normal")
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        _log_ticks(ax, lo, hi)
        ax.axvline(1.0, color=BOUND_COLOUR, linestyle="--", linewidth=1.2)
        ticks, names = list(y), [label(r) for r in chosen]
        if more:
            ticks.append(0)
            names.append(f"… {more} more, compliant: in the table")
        ax.set_yticks(ticks, names, fontsize=8)
        for tick, r in zip(ax.get_yticklabels(), chosen, strict=False):
            if not r.get("compliant"):
                tick.set_color(BAD_COLOUR)
                tick.set_fontweight("bold")
        if more:
            ax.get_yticklabels()[-1].set_color("#757575")
            ax.get_yticklabels()[-1].set_fontstyle("italic")
        ax.set_ylim(-0.7, max(len(ticks), 2) - 0.3)
        bad = sum(1 for r in by_kind[k] if not r.get("compliant"))
        title = f"{k.capitalize()} subscriptions: {bad} of {len(by_kind[k])} not compliant"
        ax.set_title(title, loc="left", color=BAD_COLOUR if bad else BOUND_COLOUR)
        ax.grid(axis="x", which="major", color="#e0e0e0", linewidth=0.8)
        dax.set_xlim(0, 110)
        dax.set_xticks([0, 50, 100], ["0", "50", "100 %"])
        dax.axvline(100, color=BOUND_COLOUR, linestyle="--", linewidth=1.2)
        dax.set_yticks([])
        dax.set_ylim(ax.get_ylim())
        dax.spines["left"].set_visible(False)
        dax.set_title("Delivered of expected", loc="left", color=BOUND_COLOUR)
        if i == len(kinds) - 1:
            ax.set_xlabel(f"latency p99.9 ÷ the subscription's own bound (log scale): right of 1{X} is late")
            dax.set_xlabel("delivered ÷ expected events")
    fig.legend(handles=[Patch(color=OK_COLOUR, alpha=0.6, label="p99.9 within the bound / delivered as requested"),
                        Patch(color=BAD_COLOUR, label="breach"),
                        Line2D([], [], marker="D", color=BOUND_COLOUR, linestyle="", markersize=4,
                               label="worst event ÷ bound"),
                        Line2D([], [], color=BOUND_COLOUR, linestyle="--", label=f"the bound (1{X}), 100 %")],
               loc="lower center", ncol=4, frameon=False, bbox_to_anchor=(0.5, 0.0))
    data = _png(fig)
    plt.close(fig)
    return data


def timeline_chart(rows: Sequence[Mapping[str, Any]], timeline: Sequence[Mapping[str, Any]]) -> bytes | None:
    """Each delivery sample's worst latency over its bound in wall-clock time (UTC), per kind; samples with
    gaps marked. Breaches first in the legend; beyond ``MAX_LINES`` lines per panel the rest are grey."""
    if not timeline:
        return None
    plt = _plt()
    import matplotlib.dates as mdates

    verdict = {(r["subscription"], int(r["mode"])): annotate(r) for r in rows}
    series: dict[tuple[str, str, int], list[tuple[dt.datetime, float, int]]] = {}
    for t in timeline:
        bound = _f(t.get("latency_bound_ms"))
        worst = _f(t.get("max_latency_ms"))
        if not bound or worst is None:
            continue
        key = (str(t.get("kind") or "operational"), str(t["subscription"]), int(t["mode"]))
        when = dt.datetime.fromtimestamp(int(t["ts_ms"]) / 1000, dt.UTC)
        series.setdefault(key, []).append((when, worst / bound, int(t.get("gaps") or 0)))
    kinds = [k for k in KINDS if any(key[0] == k for key in series)]
    if not kinds:
        return None
    fig, axes = plt.subplots(len(kinds), 1, figsize=(11, 3.1 * len(kinds) + 0.4), squeeze=False, sharex=True)
    all_ratios = [v for pts in series.values() for _, v, _ in pts if v > 0]
    lo, hi = min([0.1, *[v * 0.7 for v in all_ratios]]), max([3.0, *[v * 1.5 for v in all_ratios]])
    palette = plt.get_cmap("tab10").colors
    for i, k in enumerate(kinds):
        ax = axes[i][0]
        keys = [key for key in series if key[0] == k]

        def rank(key: tuple[str, str, int]) -> tuple[bool, float, str, int]:
            r = verdict.get((key[1], key[2]), {})
            return (bool(r.get("compliant", True)), -max(v for _, v, _ in series[key]), key[1], key[2])

        keys.sort(key=rank)
        for n, key in enumerate(keys):
            pts = sorted(series[key])
            xs, ys = [p[0] for p in pts], [max(p[1], lo) for p in pts]
            r = verdict.get((key[1], key[2]), {})
            if n < MAX_LINES:
                bad = not r.get("compliant", True)
                tag = "  ✗ " + ", ".join(r.get("reasons") or []) if bad else ""
                name = label({"subscriber": r.get("subscriber", key[1]), "variable": r.get("variable", ""),
                              "mode": key[2]}, 40) if r else f"{key[1]} · m{key[2]}"
                ax.plot(xs, ys, linewidth=1.5 if bad else 0.8, alpha=1.0 if bad else 0.7,
                        color=palette[n % len(palette)], label=name + tag, zorder=3 if bad else 2)
            else:
                ax.plot(xs, ys, linewidth=0.8, color="#d5d5d5", zorder=1,
                        label=f"{len(keys) - MAX_LINES} more" if n == MAX_LINES else None)
            gx = [p[0] for p in pts if p[2]]
            gy = [max(p[1], lo) for p in pts if p[2]]
            if gx:
                ax.plot(gx, gy, linestyle="", marker="X", markersize=9, markeredgewidth=0.8, color=BAD_COLOUR,
                        markeredgecolor="white", zorder=4,
                        label="sample with gaps" if not any(h.get_label() == "sample with gaps"
                                                            for h in ax.get_lines()) else None)
        ax.axhline(1.0, color=BOUND_COLOUR, linestyle="--", linewidth=1.2)
        ax.text(1.0, 1.0, " bound", transform=ax.get_yaxis_transform(), va="bottom", ha="right", fontsize=8)
        ax.axhspan(1.0, hi, color=BAD_COLOUR, alpha=0.05)
        ax.set_yscale("log")
        ax.set_ylim(lo, hi)
        _log_ticks(ax, lo, hi, axis="y")
        ax.set_ylabel("worst latency ÷ bound")
        ax.set_title(f"{k.capitalize()} subscriptions: worst latency of each sample over time", loc="left")
        ax.grid(axis="y", which="major", color="#e0e0e0", linewidth=0.8)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    first = min(p[0] for pts in series.values() for p in pts)
    last = max(p[0] for pts in series.values() for p in pts)
    span = (last - first).total_seconds()
    ax = axes[-1][0]
    ax.xaxis.set_major_formatter(mdates.DateFormatter(  # type: ignore[no-untyped-call]
        "%H:%M:%S" if span < 6 * 3600 else "%m-%d %H:%M", tz=dt.UTC))
    ax.set_xlabel(f"time (UTC), {first:%Y-%m-%d}" + (f" to {last:%Y-%m-%d}" if last.date() != first.date() else ""))
    fig.autofmt_xdate(rotation=0, ha="center")
    data = _png(fig)
    plt.close(fig)
    return data


# -- the table -------------------------------------------------------------------------------------------
TABLE_HEAD = ("Subscription", "Mode", "Verdict", "Why", "p99.9 ÷ bound", "p99.9 / bound (ms)",
              "Interval (ms)", "Delivered", "Gaps", "Samples")


def table_cells(rows: Iterable[Mapping[str, Any]]) -> list[list[str]]:
    """The table's cells (``TABLE_HEAD``), breaches first."""
    out = []
    for r in ordered(rows):
        ratio = r.get("latency_ratio")
        share = _f(r.get("delivery_ratio"))
        out.append([
            f"{r['subscriber']} → {r['variable']}", str(r["mode"]),
            "compliant" if r.get("compliant") else "NOT compliant",
            ", ".join(r["reasons"]) if r["reasons"] else "-",
            f"{ratio:.2f}{X}" if ratio is not None else "-",
            f"{_ms(r.get('latency_p999_ms'))} / {_ms(r.get('latency_bound_ms'))}",
            f"{_ms(r.get('delivered_interval_ms'))} / {_ms(r.get('requested_interval_ms'))}",
            f"{int(r.get('delivered') or 0)} ({share:.1%})" if share is not None else str(int(r.get("delivered") or 0)),
            str(int(r.get("gaps") or 0)), str(int(r.get("samples") or 0)),
        ])
    return out


def table_chart(rows: Sequence[Mapping[str, Any]], title: str) -> bytes | None:
    """The table as an image (for ``report.png``)."""
    cells = table_cells(rows)
    if not cells:
        return None
    plt = _plt()
    for row in cells:  # the image has no wrapping: shorten in the middle
        if len(row[0]) > 46:
            row[0] = row[0][:22] + "…" + row[0][-23:]
    height = 0.22 * (len(cells) + 2)
    fig = plt.figure(figsize=(11, height + 0.35))
    ax = fig.add_axes((0.0, 0.0, 1.0, height / (height + 0.35)))
    ax.axis("off")
    widths = [0.31, 0.04, 0.09, 0.14, 0.065, 0.09, 0.08, 0.12, 0.04, 0.055]
    head = [h.replace(" (", "\n(").replace(" ÷ ", " ÷\n") for h in TABLE_HEAD]
    t = ax.table(cellText=cells, colLabels=head, colWidths=widths, bbox=(0, 0, 1, 1), cellLoc="left")
    t.auto_set_font_size(False)
    t.set_fontsize(8)
    for (i, _), cell in t.get_celld().items():
        cell.set_edgecolor("#d0d0d0")
        if i == 0:
            cell.set_facecolor("#eeeeee")
            cell.get_text().set_fontweight("bold")
        elif cells[i - 1][2] != "compliant":
            cell.set_facecolor("#fde7e7")
    fig.text(0.0, 1.0, title, ha="left", va="top", fontsize=10, fontweight="bold")
    data = _png(fig)
    plt.close(fig)
    return data


def _html_table(rows: Sequence[Mapping[str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in TABLE_HEAD)
    body = []
    for cells in table_cells(rows):
        cls = ' class="bad"' if cells[2] != "compliant" else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return f'<table class="main"><colgroup>{_COLS}</colgroup><tr>{head}</tr>{"".join(body)}</table>'


_COLS = "".join(f'<col style="width:{w}%">' for w in (28, 5, 9, 14, 8, 11, 9, 9, 4, 5))


def _plain_table(rows: Sequence[Mapping[str, Any]], cols: Sequence[str], times: Sequence[str] = ()) -> str:
    if not rows:
        return "<p class='none'>none</p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(
        f"<td>{html.escape(_utc(r.get(c)) if c in times else str(r.get(c)))}</td>" for c in cols) + "</tr>"
        for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


# -- the page --------------------------------------------------------------------------------------------
def summary(rows: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    for k in KINDS:
        ks = [r for r in rows if (r.get("kind") or "operational") == k]
        if ks:
            bad = sum(1 for r in ks if not r.get("compliant"))
            parts.append(f"{k}: {len(ks) - bad} of {len(ks)} compliant")
    return "; ".join(parts) if parts else "no delivery samples"


def window(rows: Sequence[Mapping[str, Any]]) -> str:
    starts = [r["from_ms"] for r in rows if r.get("from_ms") is not None]
    ends = [r["to_ms"] for r in rows if r.get("to_ms") is not None]
    if not starts:
        return ""
    return f"{_utc(min(starts))} to {_utc(max(ends))} UTC"


def breaches(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(kind, subscription, why) of every breach, worst first."""
    return [(r["kind"], f"{r['subscriber']} → {r['variable']}", r["why"]) for r in ordered(rows)
            if not r.get("compliant")]


def plots(rows: Sequence[Mapping[str, Any]], timeline: Sequence[Mapping[str, Any]]) -> dict[str, bytes]:
    out = {}
    for name, data in (("latency.png", bound_chart(rows)), ("timeline.png", timeline_chart(rows, timeline))):
        if data:
            out[name] = data
    return out


_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1100px;color:#212121}
h1{margin-bottom:.2em} .sub{color:#616161;margin-top:0} h2{margin-top:1.4em;border-bottom:1px solid #ddd}
ul.breach li{margin:.25em 0} ul.breach b{color:#c62828} .ok{color:#2e7d32;font-weight:bold}
table{border-collapse:collapse;font-size:12px;width:100%} table.main{table-layout:fixed}
td,th{border:1px solid #d0d0d0;padding:3px 5px;text-align:left;overflow-wrap:anywhere;vertical-align:top}
th{background:#eee} tr.bad td{background:#fde7e7} img{max-width:100%} .none{color:#757575}
.kind{display:inline-block;font-size:11px;padding:0 .4em;border-radius:3px;background:#eceff1;color:#455a64}"""


def render_html(rows: Sequence[Mapping[str, Any]], drops: Sequence[Mapping[str, Any]] = (),
                decisions: Sequence[Mapping[str, Any]] = (), gaps: Sequence[Mapping[str, Any]] = (),
                timeline: Sequence[Mapping[str, Any]] = (), figures: Mapping[str, bytes] | None = None) -> str:
    """``report.html``: plots embedded as data URIs (``figures`` from :func:`plots`, made if not given)."""
    rows = [annotate(r) for r in rows]
    figures = plots(rows, timeline) if figures is None else figures
    found = breaches(rows)
    if found:
        items = "".join(f"<li><span class='kind'>{html.escape(k)}</span> <b>{html.escape(s)}</b> "
                        f"{html.escape(w)}</li>" for k, s, w in found)
        head = f"<h2>Breaches ({len(found)})</h2><ul class='breach'>{items}</ul>"
    else:
        head = "<p class='ok'>Every subscription complied in every mode.</p>"

    def img(name: str, alt: str) -> str:
        data = figures.get(name)
        return (f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}"/>'
                if data else "")

    tables = "".join(
        f"<h3>{k.capitalize()} subscriptions</h3>{_html_table([r for r in rows if r['kind'] == k])}"
        for k in KINDS if any(r["kind"] == k for r in rows))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>GridStat QoS compliance</title>
<style>{_CSS}</style></head><body>
<h1>GridStat QoS compliance</h1>
<p class="sub">{html.escape(window(rows))} &middot; {html.escape(summary(rows))}. Compliant in a mode: p99.9 latency
within the subscription's bound, no gaps, delivered interval within tolerance of the requested one.</p>
{head}
<h2>Latency against each subscription's own bound</h2>{img("latency.png", "latency over bound per subscription")}
<h2>Over time</h2>{img("timeline.png", "worst latency over bound per sample, UTC")}
<h2>Per subscription and mode</h2>{tables}
<h2>Drops by reason</h2>{_plain_table(drops, ["role", "source", "channel", "reason", "dropped"])}
<h2>Admission decisions</h2>{_plain_table(decisions, ["decision", "reason", "count"])}
<h2>Telemetry export gaps</h2>{_plain_table(gaps, ["role", "source", "from_ms", "to_ms", "lost"], ("from_ms", "to_ms"))}
</body></html>"""


def _text_block(lines: Sequence[tuple[str, dict[str, Any]]], width_in: float = 11) -> bytes:
    plt = _plt()
    import textwrap

    wrapped: list[tuple[str, dict[str, Any]]] = []
    for text, style in lines:
        size = float(style.get("fontsize", 9))
        for part in textwrap.wrap(text, width=int(width_in * 72 / (size * 0.55))) or [""]:
            wrapped.append((part, style))
    height = sum(float(s.get("fontsize", 9)) * 1.5 / 72 for _, s in wrapped) + 0.2
    fig = plt.figure(figsize=(width_in, height))
    y = 1.0
    for text, style in wrapped:
        step = float(style.get("fontsize", 9)) * 1.5 / 72 / height
        y -= step
        fig.text(0.01, y, text, va="bottom", ha="left", **style)
    data = _png(fig)
    plt.close(fig)
    return data


def render_png(path: Path, rows: Sequence[Mapping[str, Any]], timeline: Sequence[Mapping[str, Any]] = (),
               figures: Mapping[str, bytes] | None = None) -> Path:
    """``report.png``: the page's summary, breaches, plots and tables as one image."""
    import numpy as np

    plt = _plt()
    rows = [annotate(r) for r in rows]
    figures = plots(rows, timeline) if figures is None else figures
    found = breaches(rows)
    lines: list[tuple[str, dict[str, Any]]] = [
        ("GridStat QoS compliance", {"fontsize": 16, "fontweight": "bold"}),
        (f"{window(rows)} · {summary(rows)}", {"fontsize": 10, "color": "#616161"}),
    ]
    if found:
        lines.append((f"Breaches ({len(found)})", {"fontsize": 12, "fontweight": "bold", "color": BAD_COLOUR}))
        lines += [(f"[{k}] {s}: {w}", {"fontsize": 9}) for k, s, w in found]
    else:
        lines.append(("Every subscription complied in every mode.", {"fontsize": 11, "color": OK_COLOUR}))
    parts = [_text_block(lines)]
    parts += [figures[n] for n in ("latency.png", "timeline.png") if n in figures]
    for k in KINDS:
        ks = [r for r in rows if r["kind"] == k]
        t = table_chart(ks, f"{k.capitalize()} subscriptions") if ks else None
        if t:
            parts.append(t)
    images = [plt.imread(io.BytesIO(p))[..., :3] for p in parts]
    width = max(im.shape[1] for im in images)
    padded = [np.pad(im, ((0, 12), (0, width - im.shape[1]), (0, 0)), constant_values=1.0) for im in images]
    plt.imsave(path, np.vstack(padded))
    return path


def write(out: Path, rows: Sequence[Mapping[str, Any]], drops: Sequence[Mapping[str, Any]] = (),
          decisions: Sequence[Mapping[str, Any]] = (), gaps: Sequence[Mapping[str, Any]] = (),
          timeline: Sequence[Mapping[str, Any]] = ()) -> Path:
    """``report.html``, ``report.png`` and the plots' PNG files under ``out``; returns report.html's path."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [annotate(r) for r in rows]
    figures = plots(rows, timeline)
    for name, data in figures.items():
        (out / name).write_bytes(data)
    render_png(out / "report.png", rows, timeline, figures)
    path = out / "report.html"
    path.write_text(render_html(rows, drops, decisions, gaps, timeline, figures))
    return path
