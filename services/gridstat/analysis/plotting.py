"""PNG plots of the capacity model: per-broker bars, load sweeps like the paper's Figs. 3-7.

matplotlib is an optional dependency (the ``plots`` extra; ``dev`` has it): the model and the
CLI's tables work without it, and asking for plots without it is a clear error rather than
an ImportError. The Agg backend is forced so plots render on a headless router host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gridstat.analysis import model
from gridstat.analysis.workloads import Workload
from gridstat.errors import GridStatError

#: Brokers shown by name on the bar charts; beyond this the x axis shows indices.
MAX_NAMED_BROKERS = 40


class PlotsUnavailable(GridStatError):
    reason = "PlotsUnavailable"


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotsUnavailable("PNG plots need matplotlib: pip install 'gridstat[plots]'", field="plots") from exc
    return plt


def broker_bars(analysis: model.Analysis, path: Path) -> Path:
    """Three panels per broker: routing-table size, control messages/s, uplink notifications/s vs flooding."""
    plt = _pyplot()
    b = analysis.brokers
    xs = list(range(len(b)))
    fig, axes = plt.subplots(3, 1, figsize=(max(8.0, 0.25 * len(b)), 9.5), sharex=True)
    axes[0].bar(xs, [f.remote_entries for f in b], color="#4477aa", label="remote entries (eq. 4)")
    axes[0].bar(xs, [f.local_entries for f in b], bottom=[f.remote_entries for f in b], color="#bbccee",
                label="local entries (eq. 2)")
    axes[0].set_ylabel("routing entries")
    axes[0].legend(loc="best", fontsize=8)
    width = 0.4
    axes[1].bar([x - width / 2 for x in xs], [f.control_rate for f in b], width, color="#228833",
                label="identity-based (eq. 9)")
    axes[1].bar([x + width / 2 for x in xs], [f.simple_control_rate for f in b], width, color="#ccbb44",
                label="simple routing (eq. 14 terms)")
    axes[1].set_ylabel("control msgs/s to parent")
    axes[1].legend(loc="best", fontsize=8)
    axes[2].bar(xs, [f.uplink_up_rate for f in b], color="#aa3377", label="up (published in subtree)")
    axes[2].bar(xs, [f.uplink_down_rate for f in b], bottom=[f.uplink_up_rate for f in b], color="#ee6677",
                label="down (subtree subscribed)")
    axes[2].plot(xs, [f.uplink_flooding_rate for f in b], "k_", markersize=10, label="flooding")
    axes[2].set_ylabel("notifications/s on uplink")
    axes[2].legend(loc="best", fontsize=8)
    if len(b) <= MAX_NAMED_BROKERS:
        axes[2].set_xticks(xs, [f.name for f in b], rotation=90, fontsize=7)
    else:
        axes[2].set_xlabel("broker index (file order)")
    t = analysis.totals
    fig.suptitle(f"Per-broker expectations: N_s = {t.subscriptions:,.0f}, omega = {t.publication_rate:,.1f}/s, "
                 f"|F| = {t.classes:,}", fontsize=10)
    fig.tight_layout()
    return _save(fig, plt, path)


def load_sweep(workload: Workload, path: Path, *, points: int = 61, low: float = 1e-3, high: float = 1e4,
               breaks: Sequence[model.BreakEven] = ()) -> Path:
    """Totals against the subscription load (scale x the file's ``N_s``): the paper's Figs. 3-7 for one workload."""
    plt = _pyplot()
    scales = model.log_space(low, high, points)
    ts = model.sweep(workload, scales)
    ns = [t.subscriptions for t in ts]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    ax = axes[0][0]
    ax.plot(ns, [t.remote_entries for t in ts], color="#4477aa")
    ax.axhline(workload.tree.links * workload.classes, color="grey", ls=":", lw=1, label="links x |F|")
    ax.set_title("routing table size x_r (eq. 5, Fig. 3)", fontsize=9)
    ax.legend(fontsize=8)
    ax = axes[0][1]
    ax.plot(ns, [t.notification_rate for t in ts], color="#aa3377", label="b_n + b_p")
    ax.plot(ns, [t.b_p for t in ts], color="#ee6677", ls="--", label="b_p (eq. 7)")
    ax.plot(ns, [t.b_f for t in ts], color="grey", ls=":", label="flooding b_f (eq. 11)")
    ax.set_title("notifications/s (eqs. 6-7, Fig. 4)", fontsize=9)
    ax.legend(fontsize=8)
    ax = axes[1][0]
    ax.plot(ns, [t.b_c for t in ts], color="#228833", label="identity b_c (eq. 10)")
    ax.plot(ns, [t.b_cs for t in ts], color="#ccbb44", label="simple b_cs (eq. 14)")
    ax.set_yscale("log")
    # b_c falls towards 0 like exp(-N_s); show four decades below the peak, not 1e-130.
    ax.set_ylim(bottom=max([t.b_cs for t in ts] + [1e-12]) * 1e-4)
    ax.set_title("control msgs/s (Figs. 5, 7)", fontsize=9)
    ax.legend(fontsize=8)
    ax = axes[1][1]
    ax.plot(ns, [t.b for t in ts], color="#228833", label="identity b = b_s - b_c (eq. 13)")
    ax.plot(ns, [t.b_simple for t in ts], color="#ccbb44", label="simple b_s - b_cs")
    ax.axhline(0, color="black", lw=0.8)
    for be in breaks:
        if be.subscriptions is not None:
            ax.axvline(be.subscriptions, color="#228833" if be.routing == "identity" else "#ccbb44", ls="--",
                       lw=1)
    ax.set_title("msgs/s saved against flooding (Figs. 6-7); dashed: break-even", fontsize=9)
    ax.legend(fontsize=8)
    for row in axes:
        for a in row:
            a.set_xscale("log")
            a.axvline(workload.subscriptions, color="black", ls=":", lw=0.8)
            a.set_xlabel("mean subscriptions N_s (dotted: this file)", fontsize=8)
    fig.tight_layout()
    return _save(fig, plt, path)


def paper_figures(curves: Mapping[str, Sequence[model.Totals]], path: Path) -> Path:
    """The running example's Figs. 3-6 for the seven topologies (one line per ``T_k``)."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    panels = (("x_r: routing table size (Fig. 3)", "remote_entries"),
              ("b_n + b_p: notifications/s (Fig. 4)", "notification_rate"),
              ("b_c: control msgs/s (Fig. 5)", "b_c"),
              ("b: msgs/s saved vs flooding (Fig. 6)", "b"))
    for ax, (title, attr) in zip([a for row in axes for a in row], panels, strict=True):
        for name, ts in curves.items():
            ax.plot([t.subscriptions for t in ts], [getattr(t, attr) for t in ts], label=name, lw=1.2)
        ax.set_xscale("log")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("mean subscriptions N_s", fontsize=8)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, plt, path)


def _save(fig: Any, plt: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
