"""The operator under test, background flavour: one daemon and one timer per object.

The daemon only waits until the framework stops it; the timer fires every 10 s and does nothing.
So the figures are the framework's own cost of keeping N daemons and N timers alive.

The same source runs under both frameworks; ``BENCH_FRAMEWORK`` (set by benchmarks/run.py)
picks the import. Kopf runs the daemons on asyncio, trioperator on trio: the only thing the
daemon awaits is the framework's own ``stopped.wait()``, which exists in both.

To tell the harness how many daemons run without adding any API request, the operator keeps
counters and writes them to the file ``BENCH_STATE_FILE`` (a small JSON document, replaced
atomically): when the number of started daemons reaches a multiple of 100 or
``BENCH_EXPECTED``, and after every ``BENCH_EXPECTED`` timer runs (about once per round of
timers). Writing a file is a few microseconds of blocking I/O, the same in both frameworks.
"""

import json
import os
import time

FRAMEWORK = os.environ.get("BENCH_FRAMEWORK", "trioperator")
STATE_FILE = os.environ.get("BENCH_STATE_FILE", "")
EXPECTED = max(1, int(os.environ.get("BENCH_EXPECTED", "1")))

if FRAMEWORK == "kopf":
    import kopf
else:
    import trioperator as kopf

counts = {"daemons_started": 0, "daemons_running": 0, "timer_runs": 0}


def report():
    if not STATE_FILE:
        return
    state = dict(counts, at=time.monotonic())  # CLOCK_MONOTONIC: comparable with the harness's
    temporary = f"{STATE_FILE}.tmp"
    with open(temporary, "w") as file:
        json.dump(state, file)
    os.replace(temporary, STATE_FILE)


@kopf.daemon("bench.trioperator.dev", "v1", "benchobjects")
async def idle_daemon(stopped, **_):
    counts["daemons_started"] += 1
    counts["daemons_running"] += 1
    started = counts["daemons_started"]
    if started % 100 == 0 or started == EXPECTED:
        report()
    try:
        while not stopped:
            await stopped.wait(60)
    finally:
        counts["daemons_running"] -= 1


@kopf.timer("bench.trioperator.dev", "v1", "benchobjects", interval=10)
async def idle_timer(**_):
    counts["timer_runs"] += 1
    if counts["timer_runs"] % EXPECTED == 0:
        report()
    return None
