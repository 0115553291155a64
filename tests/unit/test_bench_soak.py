"""The soak's summary (benchmarks/bench_soak.py): slopes after the warm-up, CPU per window."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))  # benchmarks/ is not a package: its siblings are found from here
_spec = importlib.util.spec_from_file_location("bench_soak", BENCH / "bench_soak.py")
assert _spec is not None
assert _spec.loader is not None
soak = importlib.util.module_from_spec(_spec)
sys.modules["bench_soak"] = soak  # dataclasses look their module up by name
_spec.loader.exec_module(soak)


def test_the_slope_of_a_straight_line_is_exact_per_hour() -> None:
    xs = [0.0, 600.0, 1200.0, 1800.0]  # seconds
    fit = soak.least_squares(xs, [50.0 + 2.0 * x / 3600 for x in xs])  # 2 MiB per hour
    assert fit is not None
    assert fit.per_hour == pytest.approx(2.0)
    assert fit.stderr_per_hour == pytest.approx(0.0, abs=1e-9)
    assert soak.least_squares([0.0, 1.0], [1.0, 2.0]) is None  # too few points for an error


def row(t: float, rss: float, cpu_ticks: int) -> dict[str, float]:
    base = dict.fromkeys(soak.FIELDS, 0.0)
    base.update(t_s=t, rss_mib=rss, hwm_mib=rss, cpu_ticks=cpu_ticks, apiserver_ticks=2 * cpu_ticks)
    base.update(fds=20.0, tasks=math.nan, threads=1.0)
    return base


def test_the_summary_leaves_the_warm_up_out_of_the_slope() -> None:
    # 10 min of growth from 40 to 55 MiB, then flat at 55 MiB for 20 min; 6 ticks per minute.
    rows = [row(60.0 * m, 40 + 1.5 * min(m, 10), 6 * m) for m in range(31)]
    summary: dict[str, Any] = soak.summarise(rows, warmup_s=600, clk_tck=100)
    assert summary["rss_mib"]["slope_per_hour"] == pytest.approx(0.0, abs=1e-9)
    assert summary["rss_mib"]["first_after_warmup"] == 55.0
    whole = soak.summarise(rows, warmup_s=0, clk_tck=100)
    assert whole["rss_mib"]["slope_per_hour"] > 10
    # Tasks were never seen (NaN): no slope, no crash.
    assert summary["tasks"]["slope_per_hour"] is None
    # 6 ticks of 10 ms per minute = 60 ms per minute, in every 10-min window.
    assert [round(w["operator_ms_per_min"]) for w in summary["cpu_windows"]] == [60, 60, 60]
    assert [round(w["apiserver_ms_per_min"]) for w in summary["cpu_windows"]] == [120, 120, 120]
    text = soak.format_summary(summary, {"sample_s": 60})
    assert "| RSS (MiB) | 0.00 ± 0.00 | 55.0 | 55.0-55.0 | 55.0 |" in text


def test_sparkline_spans_min_to_max() -> None:
    assert soak.sparkline([1.0, 2.0, 3.0]) == "▁▅█"
    assert soak.sparkline([5.0, 5.0]) == "▁▁"
    assert soak.sparkline([]) == ""
    assert len(soak.sparkline([float(i) for i in range(600)], width=60)) == 60
