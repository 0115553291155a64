"""The operator's own CPU at rest, in-process: N objects, each with a sleeping daemon and a timer.

The same operator as ``operators/background.py`` (the daemon awaits ``stopped.wait(60)``, the
timer does nothing) runs in the real runtime (``Operator``) against
``trioperator.testing.FakeAPI``, without sockets (the session of ``bench_hotpath.py``). Once
every timer has run twice, the CPU time of the whole process over a window is divided by the
timer runs in it: the CPU per timer run, everything included (the alarm clock, the loops, the
handler's invocation, the log lines). Nothing else happens at rest: the timers return nothing,
so there are no patches, and the fake's watch streams are silent.

Logging is as ``trioperator run`` has it (``configure()``: INFO, the full format, one stream
handler on ``sys.stderr``), with the process's stderr redirected to a file (``--log-file``), as
``benchmarks/run.py`` does with the operators it starts: each line really reaches the file.

The objects are created spread over one interval, so the timers' runs are spread over time as
in a real run, not all due at the same moment (which would flatter batching).

Usage::

    .venv/bin/python benchmarks/bench_timers.py                      # 1000 objects, 1 s timers
    .venv/bin/python benchmarks/bench_timers.py -q                   # WARNING: no INFO lines
    .venv/bin/python benchmarks/bench_timers.py --profile --top 40   # + cProfile of the window

The scenario of ``run.py --background-size 1000`` has 10 s timers, 100 runs/s; the 1 s timers
here give 1000 runs/s, so that a short window holds many runs. On a shared machine, repeat and
alternate builds (``--repeat``); the function calls per timer run of ``--profile`` are steadier.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import trio
import trio.testing
from bench_hotpath import (
    CRD,
    NAMESPACE,
    PLURAL,
    InMemorySession,
    Meter,
    make_object,
    print_profile,
)
from trioperator import configure as configure_logging
from trioperator._client.api import APIClient
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.program.operator import Operator
from trioperator.on import daemon, timer
from trioperator.testing import FakeAPI

GROUP, VERSION = "bench.trioperator.dev", "v1"
BEST: list[float] = []  # per run: the CPU per timer run of its least disturbed interval


class Counts:
    def __init__(self) -> None:
        self.daemons = 0
        self.timer_runs = 0


def make_registry(counts: Counts, interval: float) -> OperatorRegistry:
    registry = OperatorRegistry()

    @daemon(GROUP, VERSION, PLURAL, id="idle_daemon", registry=registry)
    async def idle_daemon(stopped: Any, **_: Any) -> None:
        counts.daemons += 1
        while not stopped:
            await stopped.wait(60)

    @timer(GROUP, VERSION, PLURAL, id="idle_timer", interval=interval, registry=registry)
    async def idle_timer(**_: Any) -> None:
        counts.timer_runs += 1

    return registry


async def one_run(
    *,
    count: int,
    interval: float,
    window: float,
    existing: bool,
    profiler: cProfile.Profile | None,
) -> tuple[float, int]:
    """One operator with ``count`` objects; returns (CPU s, timer runs) over the window."""
    counts = Counts()
    fake = FakeAPI()
    fake.create_object("customresourcedefinitions", CRD)
    fake.create_namespace(NAMESPACE)
    if existing:
        for index in range(count):
            fake.create_object(PLURAL, make_object(f"rest-{index}", index))
    session = InMemorySession(fake, Meter())

    async def _session(self: APIClient) -> Any:
        key, info = await self.vault.select()
        return key, info, session

    APIClient._session = _session  # type: ignore[method-assign]
    vault = Vault({"bench": ConnectionInfo(server=session.base_url, token="bench")})
    operator = Operator(
        registry=make_registry(counts, interval), settings=OperatorSettings(), vault=vault
    )
    operator.handle_signals = False

    async with trio.open_nursery() as nursery:
        nursery.start_soon(operator.main)
        with trio.fail_after(30):
            await operator.ready_flag.wait()
        if not existing:
            # Spread over one interval: the timers' runs are spread evenly over time.
            for index in range(count):
                fake.create_object(PLURAL, make_object(f"rest-{index}", index))
                await trio.sleep(interval / count)
        with trio.fail_after(60 + 3 * interval):
            while counts.daemons < count or counts.timer_runs < 2 * count:  # noqa: ASYNC110
                await trio.sleep(0.1)
        await trio.sleep(interval)

        if profiler is not None:
            profiler.enable()
        runs0, cpu0, usage0 = counts.timer_runs, time.process_time(), os.times()
        slices = []
        for _ in range(max(1, round(window / interval))):
            # Per interval too: the best of them is the figure least disturbed by other
            # processes (they make a CPU-bound slice slower, never faster).
            slice_runs, slice_cpu = counts.timer_runs, time.process_time()
            await trio.sleep(interval)
            if counts.timer_runs > slice_runs:
                slices.append((time.process_time() - slice_cpu) / (counts.timer_runs - slice_runs))
        cpu, runs, usage = time.process_time() - cpu0, counts.timer_runs - runs0, os.times()
        BEST.append(min(slices))
        if profiler is not None:
            profiler.disable()
        operator.stop()
    if os.environ.get("BENCH_TIMERS_SPLIT"):
        user, system = usage.user - usage0.user, usage.system - usage0.system
        print(f"  user {user * 1e6 / runs:.1f} us, system {system * 1e6 / runs:.1f} us per run")
    return cpu, runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("-n", "--objects", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=1.0, help="the timers' interval (s)")
    parser.add_argument("--window", type=float, default=10.0, help="measured seconds")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--existing",
        action="store_true",
        help="the objects exist when the operator starts (as in run.py): the timers start as"
        " fast as the operator gets to them, not spread evenly over one interval",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="log at WARNING (as -q)")
    parser.add_argument("--log-file", help="where stderr goes (default: a temporary file)")
    parser.add_argument(
        "--virtual",
        action="store_true",
        help="on trio's mock clock (autojump): no idle waits, steadier figures for A/B runs",
    )
    parser.add_argument("--profile", action="store_true", help="profile one extra window")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--save", help="also dump the profile's stats to this file (pstats)")
    args = parser.parse_args(argv)

    # The operator's log lines go where its stderr goes; the report goes to stdout.
    if args.log_file:
        sink = os.open(args.log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
    else:
        descriptor, path = tempfile.mkstemp(prefix="bench-timers-", suffix=".log")
        sink = descriptor
        os.unlink(path)
    sys.stderr.flush()
    os.dup2(sink, 2)
    configure_logging(quiet=args.quiet)

    per_run = []
    for _ in range(args.repeat):
        cpu, runs = trio.run(lambda: one_run(**_options(args), profiler=None), **_clock(args))
        per_run.append(cpu * 1e6 / runs)
        print(
            f"{cpu * 1e6 / runs:7.1f} us CPU per timer run ({runs} runs in {args.window:g} s;"
            f" {100 * cpu / args.window:.2f}% of a core at {runs / args.window:.0f} runs/s;"
            f" best interval {BEST[-1] * 1e6:.1f} us per run)",
            flush=True,
        )
    if args.repeat > 1:
        print(
            f"us per timer run: median {statistics.median(per_run):.1f}"
            f" (min {min(per_run):.1f}, max {max(per_run):.1f}) over {len(per_run)} runs"
        )
    if args.profile:
        profiler = cProfile.Profile()
        _, runs = trio.run(lambda: one_run(**_options(args), profiler=profiler), **_clock(args))
        print_profile(profiler, runs, args.top)
        if args.save:
            profiler.dump_stats(args.save)
    return 0


def _clock(args: argparse.Namespace) -> dict[str, Any]:
    return {"clock": trio.testing.MockClock(autojump_threshold=0)} if args.virtual else {}


def _options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "count": args.objects,
        "interval": args.interval,
        "window": args.window,
        "existing": args.existing,
    }


if __name__ == "__main__":
    sys.exit(main())
