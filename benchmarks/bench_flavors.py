"""The cost of one handler call under each flavour: trio, asyncio (trio-asyncio), and a thread.

Calls a trivial async handler many times through ``invoke`` -- the path every handler of the
operator takes -- inside the same setup ``Operator.main`` makes (the asyncio loop opened once,
by ``run_with_asyncio``), and reports the CPU time per call, best of several rounds::

    python benchmarks/bench_flavors.py [--calls N] [--rounds R]

Variants, each for a handler that returns at once and for one that awaits one zero sleep of
its own library (``trio.sleep(0)`` / ``asyncio.sleep(0)``, a real trip through the scheduler):

* ``trio``: the handler awaited directly in the calling trio task;
* ``asyncio``: the handler run as an asyncio task on the operator's trio-asyncio loop, awaited
  from the trio task (``loop.run_aio_coroutine``);
* ``sync (thread)``, for scale: a sync handler in a worker thread, as sync handlers run.

The "overhead" column is the difference to the trio variant of the same handler. Takes about
10-20 seconds with the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

# Runnable from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trioperator._engine.handlers import ChangingHandler
from trioperator._engine.ids import HandlerId
from trioperator._engine.reasons import Reason
from trioperator._engine.settings import ExecutionSettings
from trioperator._runtime.handling.asyncio_bridge import run_with_asyncio
from trioperator._runtime.handling.invocation import invoke, make_limiter

KWARGS = {"name": "kopf-example-1", "namespace": "default", "retry": 0}


async def returns(**_: Any) -> str:
    return "ok"


async def trio_sleeps(**_: Any) -> str:
    await trio.sleep(0)  # noqa: ASYNC115 -- the same zero sleep as the asyncio variant
    return "ok"


async def asyncio_sleeps(**_: Any) -> str:
    await asyncio.sleep(0)
    return "ok"


def sync_returns(**_: Any) -> str:
    return "ok"


Variant = tuple[str, Callable[..., Any], str | None, int]
"""(label, handler, flavor, calls divisor)."""

VARIANTS: list[Variant] = [
    ("trio, returns", returns, "trio", 1),
    ("asyncio, returns", returns, "asyncio", 1),
    ("trio, one sleep(0)", trio_sleeps, "trio", 1),
    ("asyncio, one sleep(0)", asyncio_sleeps, "asyncio", 1),
    ("sync (thread), returns", sync_returns, None, 10),  # threads are slow: fewer calls
]


async def measure(calls: int, rounds: int) -> dict[str, float]:
    """CPU seconds per call of each variant, best of ``rounds``."""
    limiter = make_limiter(None)
    best: dict[str, float] = {}

    async def body() -> None:
        for _ in range(rounds):
            for label, fn, flavor, divisor in VARIANTS:
                count = max(calls // divisor, 1)
                started = time.process_time()
                for _ in range(count):
                    await invoke(fn, kwargs=KWARGS, limiter=limiter, flavor=flavor)  # type: ignore[arg-type]
                per_call = (time.process_time() - started) / count
                best[label] = min(best.get(label, per_call), per_call)

    handler = ChangingHandler(
        fn=returns, id=HandlerId("returns"), reason=Reason.CREATE, flavor="asyncio"
    )
    body_fn: Callable[[], Awaitable[None]] = body
    await run_with_asyncio(body_fn, settings=ExecutionSettings(), handlers=lambda: [handler])
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls per round and variant")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the best is reported")
    args = parser.parse_args()
    results = trio.run(measure, args.calls, args.rounds)
    baselines = {"returns": results["trio, returns"], "sleep": results["trio, one sleep(0)"]}
    print(f"{'variant':<26} {'CPU µs/call':>12} {'overhead µs':>12}")
    for label, per_call in results.items():
        baseline = baselines["sleep" if "sleep" in label else "returns"]
        overhead = "" if label.startswith("trio") else f"{(per_call - baseline) * 1e6:12.1f}"
        print(f"{label:<26} {per_call * 1e6:12.1f} {overhead:>12}")


if __name__ == "__main__":
    main()
