"""The soak's sampling and verdict (bench.soak): RSS and the router's traced Python heap must stay
flat, drops must not grow; the default rate comes from the router benchmark's headline."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridstat.bench import soak
from gridstat.cli.main import main

MiB = 2**20


def _windows(rss_mib: list[float], heap_mib: list[float] | None = None, drops: list[int] | None = None,
             lost: list[int] | None = None) -> list[soak.Window]:
    n = len(rss_mib)
    heap = heap_mib or [0.0] * n
    return [soak.Window(i + 1, 10.0 * (i + 1), 1000, 10_000, 10_000 - (lost or [0] * n)[i], int(rss_mib[i] * 1024),
                        {"queue_full": (drops or [0] * n)[i]} if (drops or [0] * n)[i] else {},
                        heap_bytes=int(heap[i] * MiB), heap_peak_bytes=int(heap[i] * MiB) + MiB)
            for i in range(n)]


def _result(windows: list[soak.Window], *, traced: bool = True) -> soak.SoakResult:
    return soak.SoakResult(0.5, 1000, windows, rss_slack_kib=8 * 1024, traced=traced, heap_slack_kib=2 * 1024)


def test_flat_memory_and_steady_drops_pass() -> None:
    # the first window warms up (RSS and heap jump), then both stay within their tolerances
    r = _result(_windows([40, 60, 61, 62, 60], [5, 9, 9.5, 10.2, 9.8], drops=[3, 0, 1, 0, 3]))
    assert r.rss_growth_kib == 0 and r.heap_growth_kib == int(0.8 * 1024)
    assert r.heap_flat and not r.drops_growing and r.ok


def test_a_growing_heap_fails_even_with_flat_rss() -> None:
    r = _result(_windows([60, 60, 60, 60], [9, 10, 11.5, 12.5]))
    assert r.rss_growth_kib == 0 and r.heap_growth_kib == int(2.5 * 1024)
    assert not r.heap_flat and not r.ok
    assert "traced Python heap growth +2.50 MiB (limit 2 MiB)" in soak.report(r) and "FAIL" in soak.report(r)


def test_steady_heavy_loss_fails() -> None:
    # an overloaded router loses the same 95 % in every window: drops do not "grow", but it must not pass
    r = _result(_windows([60, 60, 60], lost=[9_500] * 3))
    assert not r.drops_growing and r.lost_pct == 95.0 and not r.ok
    assert "95.000 %, limit 0.1 %" in soak.report(r)


def test_without_tracemalloc_only_rss_and_drops_are_judged() -> None:
    untraced = _result(_windows([60, 60, 61], [0, 0, 0]), traced=False)
    assert untraced.heap_growth_kib == 0 and untraced.heap_flat and untraced.ok
    assert "Python heap not traced" in soak.report(untraced)
    assert not _result(_windows([60, 60, 70])).ok  # RSS +10 MiB over 8
    assert not _result(_windows([60, 60, 60], drops=[0, 0, 5])).ok
    assert not _result(_windows([60, 60, 60], lost=[0, 2, 0])).ok
    assert not _result([]).ok


def test_report_samples_at_most_20_windows_with_heap_columns() -> None:
    r = _result(_windows([60.0] * 50, [10.0] * 50))
    rows = [line for line in soak.report(r).splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 20 and "| 10.00 / 11.00 |" in rows[0]


def test_default_rate_is_half_the_router_headline(tmp_path: Path) -> None:
    md = tmp_path / "benchmarks.md"
    md.write_text("## Router benchmark\n\n| metric | value | target | verdict |\n|---|---:|---|---|\n"
                  "| events/s forwarded by one router at saturation (<= 0.1 % loss) | 1,132,194 | >= 200,000 "
                  "| **PASS** |\n")
    assert soak.default_rate(md)[0] == 566_097
    md.write_text("| events/s forwarded by one router at sustained saturation (default profile) | 1,000,000 "
                  "| >= 200,000 | **PASS** |\n")  # the row as `gridstat bench router` writes it now
    assert soak.default_rate(md)[0] == 500_000
    md.write_text("no router section\n")
    assert soak.default_rate(md)[0] == soak.DEFAULT_RATE
    assert soak.default_rate(tmp_path / "missing.md")[0] == soak.DEFAULT_RATE
    # the checked-in file has the headline (the lead re-measures it; the soak follows)
    rate, source = soak.default_rate()
    assert rate != soak.DEFAULT_RATE or "built-in" in source


def test_the_cli_picks_the_rate_and_passes_the_tolerances(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[dict[str, object]] = []

    def fake(**kw: object) -> soak.SoakResult:
        calls.append(kw)
        return _result(_windows([60, 60]), traced=bool(kw["tracemalloc"]))

    monkeypatch.setattr(soak, "run_soak", fake)
    assert main(["chaos", "soak", "--minutes", "1"]) == 0
    assert main(["chaos", "soak", "--minutes", "1", "--tracemalloc", "--heap-slack-mb", "3",
                 "--loss-slack-pct", "0.5"]) == 0
    assert calls[0]["rate"] == soak.default_rate()[0] and calls[0]["tracemalloc"] is False
    assert calls[1]["rate"] == soak.TRACED_RATE and calls[1]["tracemalloc"] is True
    assert calls[1]["heap_slack_mb"] == 3.0 and calls[1]["loss_slack_pct"] == 0.5
    assert "(the default of a traced router)" in capsys.readouterr().out


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_short_soak_samples_rss_and_the_routers_traced_heap(capsys: pytest.CaptureFixture[str]) -> None:
    # A smoke run of the real thing through the CLI: 6 s in 2-s windows at a low rate.
    code = main(["chaos", "soak", "--minutes", "0.1", "--window-s", "2", "--tracemalloc", "--rate", "5000"])
    out = capsys.readouterr().out
    assert "soak: 5,000 events/s offered (--rate)" in out
    assert "traced heap / peak (MiB)" in out and "Python heap not traced" not in out
    assert code == 0, out
    rows = [line for line in out.splitlines() if line.startswith("window ")]
    assert len(rows) >= 2 and all(" heap " in line for line in rows), out


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_the_router_reports_no_heap_unless_started_with_tracemalloc() -> None:
    r = soak.run_soak(minutes=1 / 30, rate=10_000, window_s=1.0, log=lambda _m: None)
    assert r.windows and not r.traced and all(w.heap_bytes == 0 == w.heap_peak_bytes for w in r.windows)
    traced = soak.run_soak(minutes=1 / 30, rate=10_000, window_s=1.0, tracemalloc=True, log=lambda _m: None)
    assert traced.traced and all(0 < w.heap_bytes <= w.heap_peak_bytes for w in traced.windows)


def test_python_allocator_blocks_are_judged_without_tracemalloc() -> None:
    ws = _windows([60, 60, 60, 60])
    for w, blocks in zip(ws, (90_000, 100_000, 104_000, 101_000), strict=True):
        w.blocks = blocks
    flat = _result(ws, traced=False)
    assert flat.blocks_growth == 1_000 and flat.ok
    assert "Python allocator blocks +1,000 (limit 20,000)" in soak.report(flat)
    ws[-1].blocks = 150_000  # a leak of small objects, RSS not yet moved
    leaking = _result(ws, traced=False)
    assert leaking.blocks_growth == 50_000 and not leaking.ok
