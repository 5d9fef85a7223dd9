"""The compliance report's page (spark/compliance_report.py) from synthetic rows: a breach is said, with
its ratio to its own bound and its reason, operational and archive subscriptions apart."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "spark"))
import compliance_report as cr

T0 = 1_795_000_000_000  # 2026-11-18 UTC


def row(subscriber: str, *, bound: float = 30.0, p999: float = 10.0, worst: float | None = None, gaps: int = 0,
        interval: int = 20, delivered_interval: float | None = None, kind: str = "operational", mode: int = 0,
        delivered: int = 500) -> dict[str, Any]:
    """A row as qos_compliance.compliance makes it (the verdict columns as its rules say)."""
    di = float(interval) if delivered_interval is None else delivered_interval
    latency_ok, interval_ok, gaps_ok = p999 <= bound, di <= interval * 1.02, gaps == 0
    return {"subscription": f"{subscriber}/pmu1/freq", "subscriber": subscriber, "variable": "pmu1/freq",
            "mode": mode, "kind": kind, "samples": 10, "from_ms": T0, "to_ms": T0 + 9000,
            "requested_interval_ms": interval, "delivered_interval_ms": di, "delivered": delivered,
            "expected": 500.0, "delivery_ratio": delivered / 500, "latency_bound_ms": bound,
            "latency_p50_ms": 5.0, "latency_p99_ms": min(p999, 9.0), "latency_p999_ms": p999,
            "latency_max_ms": p999 if worst is None else worst, "over_bound_fraction": 0.004 if p999 > bound else 0.0,
            "latency_samples": delivered, "latency_samples_omitted": 0, "gaps": gaps, "duplicates": 0,
            "violations": 0, "extrapolated": 0, "latency_ok": latency_ok, "interval_ok": interval_ok,
            "gaps_ok": gaps_ok, "compliant": latency_ok and interval_ok and gaps_ok}


def timeline(*rows: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"subscription": r["subscription"], "mode": r["mode"], "kind": r["kind"], "ts_ms": T0 + 1000 * k,
             "max_latency_ms": r["latency_max_ms"] if k == 5 else 5, "latency_bound_ms": r["latency_bound_ms"],
             "gaps": 1 if r["gaps"] and k == 3 else 0} for r in rows for k in range(10)]


def red_pixels(png: bytes) -> int:
    import matplotlib.pyplot as plt
    import numpy as np

    im = plt.imread(io.BytesIO(png))[..., :3]
    red = np.array([0xC6, 0x28, 0x28]) / 255
    return int((np.abs(im - red).max(axis=2) < 0.08).sum())


def test_a_58_ms_breach_of_a_30_ms_bound_is_reported_late_at_1_93() -> None:
    late = cr.annotate(row("relay", bound=30.0, p999=58.0))
    assert late["latency_ratio"] == pytest.approx(1.93, abs=0.005)
    assert late["worst_latency_ratio"] == pytest.approx(58 / 30)
    assert late["reasons"] == ["late"]
    assert late["why"] == ("mode 0: late: p99.9 58 ms = 1.93\u00d7 the 30 ms bound (worst 58 ms; 2 of 500 events over)")
    ok = cr.annotate(row("ems", bound=1000.0, p999=900.0, kind="archive"))
    assert ok["latency_ratio"] == pytest.approx(0.9) and ok["reasons"] == [] and ok["why"] == ""
    # in the table, the breach comes first, whatever its absolute latency against the others'
    cells = cr.table_cells([ok, row("ems", bound=1000.0, p999=900.0), row("relay", bound=30.0, p999=58.0)])
    assert cells[0][:5] == ["relay \u2192 pmu1/freq", "0", "NOT compliant", "late", "1.93\u00d7"]
    assert [c[2] for c in cells[1:]] == ["compliant", "compliant"]


def test_the_page_names_the_breach_and_keeps_the_kinds_apart(tmp_path: Path) -> None:
    late = row("relay", bound=30.0, p999=58.0)
    archive = row("archive", bound=1000.0, p999=820.0, interval=100, kind="archive")
    rows = [late, archive, row("ems", mode=1)]
    path = cr.write(tmp_path, rows, timeline=timeline(*rows))
    page = path.read_text()
    assert "Breaches (1)" in page and "relay \u2192 pmu1/freq" in page
    assert "late: p99.9 58 ms = 1.93\u00d7 the 30 ms bound" in page
    assert "operational: 1 of 2 compliant; archive: 1 of 1 compliant" in page
    ops, arch = page.index("<h3>Operational subscriptions</h3>"), page.index("<h3>Archive subscriptions</h3>")
    assert ops < page.index("<td>relay \u2192 pmu1/freq</td>") < arch < page.index("<td>archive \u2192 pmu1/freq</td>")
    assert page.count("data:image/png;base64,") == 2
    assert "2026-11-18" in page  # the window in wall-clock time
    for name in ("latency.png", "timeline.png", "report.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the breach is drawn in the breach colour: without it only the legend's swatch is
    legend_only = red_pixels(cr.bound_chart([archive, row("ems")]) or b"")
    assert red_pixels((tmp_path / "latency.png").read_bytes()) > legend_only + 500


def test_every_reason_with_its_numbers() -> None:
    gappy = cr.annotate(row("wams", gaps=2, delivered=498))
    assert gappy["reasons"] == ["gaps"] and "gaps: 2 expected events skipped" in gappy["why"]
    slow = cr.annotate(row("scada", interval=100, delivered_interval=104.0, delivered=481, mode=2))
    assert slow["reasons"] == ["under-delivered"]
    assert slow["why"] == ("mode 2: under-delivered: every 104 ms against 100 ms requested "
                           "(96.2% of the expected events)")
    both = cr.annotate(row("both", p999=45.0, gaps=1))
    assert both["reasons"] == ["late", "gaps"]
    none = cr.annotate(row("silent", delivered=0) | {"compliant": False})
    assert none["reasons"] == ["nothing delivered"]


def test_kind_of_the_exporting_role() -> None:
    assert cr.kind_of("archive") == "archive"
    assert cr.kind_of("subscriber") == "operational" and cr.kind_of(None) == "operational"


def test_the_render_script_renders_a_page(tmp_path: Path) -> None:
    import runpy

    script = runpy.run_path(str(Path(__file__).resolve().parents[3] / "scripts" / "render-report.py"))
    assert script["main"](["--out", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "protection-relay-coordinator \u2192 substation-bus-17/voltage-angle" in page
    assert "1.93\u00d7 the 30 ms bound" in page
    assert (tmp_path / "report.png").stat().st_size > 50_000
