"""The benchmark harness's options (benchmarks/run.py): what a run will do before it starts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

# benchmarks/ is not a package: its harness is loaded from its file (it finds its siblings).
_spec = importlib.util.spec_from_file_location(
    "bench_run", Path(__file__).parents[2] / "benchmarks" / "run.py"
)
assert _spec is not None
assert _spec.loader is not None
run = importlib.util.module_from_spec(_spec)
sys.modules["bench_run"] = run  # dataclasses look their module up by name
_spec.loader.exec_module(run)


def plan(*argv: str) -> list[str]:
    return [what for what, _ in run.estimate(run.parse_args(list(argv)))]


def test_the_top_open_loop_rate_is_repeated_three_times_by_default() -> None:
    args = run.parse_args([])
    assert args.open_rates == [40.0, 120.0, 160.0]
    assert args.open_repeat == [2, 2, 3]
    assert [p for p in plan() if p.startswith("open loop")] == [
        "open loop 2400 at 40/s x 2",
        "open loop 2400 at 120/s x 2",
        "open loop 2400 at 160/s x 3 (+ raw client)",  # the floor of #33
    ]


@pytest.mark.parametrize(
    ("argv", "repeats"),
    [
        (["--open-repeat", "2"], [2, 2, 2]),
        (["--open-rates", "50,100", "--open-repeat", "1,4"], [1, 4]),
        (["--open-rates", ""], []),  # no rates: the default repetitions do not matter
        (["--quick"], [1, 1, 1]),
    ],
)
def test_open_loop_repetitions_per_rate(argv: list[str], repeats: list[int]) -> None:
    assert run.parse_args(argv).open_repeat == repeats


@pytest.mark.parametrize("argv", [["--open-repeat", "1,2"], ["--open-repeat", "-1"]])
def test_wrong_open_loop_repetitions_are_refused(argv: list[str], capsys: Any) -> None:
    with pytest.raises(SystemExit) as exc:
        run.parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--open-repeat" in err or "cannot be negative" in err


def test_bursts_are_repeated_five_and_three_times_by_default() -> None:
    # Kopf's CPU per object moves by 10-30% between runs, trioperator's sync one by 10%: the
    # goals take medians of five (the short bursts) and three (the long ones).
    args = run.parse_args([])
    assert (args.sizes, args.repeats) == ([500, 2000], [5, 3])
    assert "burst 500 async+sync x 5" in plan()
    assert "burst 2000 async x 3" in plan()
