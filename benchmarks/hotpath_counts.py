"""Noise-free figures of the operator's work per handled object, for A/B comparisons.

``bench_hotpath.py`` times a burst in CPU seconds, which a shared machine blurs by +-30%. This
script runs the same burst (the same in-process fake API, the same operator) and counts instead:

* the operator's Python-level call events per object (a ``sys.setprofile`` hook; what the fake
  API does inside ``bench_hotpath.Meter`` is left out, as its CPU time is left out there;
  a coroutine's every resumption counts as a call event, as the interpreter reports it);
* trio's task steps per object (every run of a task until its next schedule point: the
  scheduler's share of the cost, and the wake-ups).

With ``--mock-clock`` (the default) the run is on trio's ``MockClock`` with an auto-jump, so no
deadline depends on how busy the machine is, and the figures repeat exactly from run to run;
``--real-clock`` runs as ``bench_hotpath.py`` does.

``--latency S`` makes the fake answer every request (not the watch) S seconds late, as a busy
API server does: the burst then outruns the operator and a backlog builds up. It tells whether
an object costs more when it waits in a backlog (it does not: the counts per object go down, as
more events are batched).

Usage::

    .venv/bin/python benchmarks/hotpath_counts.py                    # 500 objects, async
    .venv/bin/python benchmarks/hotpath_counts.py --sync --top 40     # + the 40 most called
    .venv/bin/python benchmarks/hotpath_counts.py --latency 0.02      # a slow API server
    PYTHONPATH=/tmp/other-build .venv/bin/python benchmarks/hotpath_counts.py   # another build
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

import bench_hotpath as bench
import trio
import trio.testing


class _Steps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.on = False
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.on:
            self.steps += 1


class _Calls:
    """Counts call events outside the fake's metered work, while switched on."""

    def __init__(self) -> None:
        self.on = False
        self.in_fake = 0
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if self.in_fake or not self.on:
            return
        if event == "call":
            code = frame.f_code
            self.counts[(code.co_filename, code.co_name)] += 1
        elif event == "c_call":
            self.counts[("~", getattr(arg, "__qualname__", str(arg)))] += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("-n", "--objects", type=int, default=500)
    parser.add_argument("--sync", action="store_true", help="a sync handler (in threads)")
    parser.add_argument("--real-clock", action="store_true", help="not on trio's MockClock")
    parser.add_argument("--top", type=int, default=0, help="list the N most called functions")
    parser.add_argument(
        "--latency", type=float, default=0.0, help="seconds before the fake answers a request"
    )
    parser.add_argument("--batch", type=int, default=10, help="creations between checkpoints")
    args = parser.parse_args(argv)
    bench.LATENCY = args.latency

    bench.configure_logging(verbose=False)
    sink = open(os.devnull, "w")  # noqa: SIM115 -- lives as long as the process
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sink)

    calls, steps = _Calls(), _Steps()

    @contextlib.contextmanager
    def metered(self: bench.Meter) -> Iterator[None]:
        calls.in_fake += 1
        try:
            yield
        finally:
            calls.in_fake -= 1

    bench.Meter.__call__ = metered  # type: ignore[method-assign]

    class Switch:  # what one_run() enables and disables around the measured burst
        def enable(self) -> None:
            steps.on = calls.on = True
            sys.setprofile(calls.hook)

        def disable(self) -> None:
            sys.setprofile(None)
            steps.on = calls.on = False

    async def run() -> Any:
        trio.lowlevel.add_instrument(steps)
        return await bench.one_run(
            count=args.objects, warmup=50, batch=args.batch, sync=args.sync, profiler=Switch()
        )

    bench.trio._core._run._r.seed(bench.SEED)
    clock = None if args.real_clock else trio.testing.MockClock(autojump_threshold=0.05)
    trio.run(run, clock=clock)

    n = args.objects
    total = sum(calls.counts.values())
    print(f"operator call events per object: {total / n:.1f}")
    print(f"trio task steps per object:      {steps.steps / n:.2f}")
    areas: collections.Counter[str] = collections.Counter()
    for (filename, _), count in calls.counts.items():
        areas["builtins" if filename == "~" else bench._group(filename)] += count
    for area, count in areas.most_common():
        print(f"  {area:28s} {count / n:8.1f}")
    for (filename, name), count in calls.counts.most_common(args.top):
        short = filename.split("site-packages/")[-1].split("/trioperator/")[-1]
        print(f"{count / n:9.2f}  {short}:{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
