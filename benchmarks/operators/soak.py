"""The operator of the soak (benchmarks/bench_soak.py): every kind of handler, at a steady mix.

* create / update / delete handlers on every object (the delete handler makes the framework put
  its finalizer on each object, so every deletion goes through the operator);
* one async daemon and one timer (every 10 s) per object labelled ``soak-bg=yes``;
* a probe daemon on the single object labelled ``soak-probe=yes``: every ``BENCH_PROBE_S``
  seconds it counts the trio tasks alive in this process (a walk of the task tree from the root
  task: trio does not count them for us) and writes them, with the handler counters, to the
  JSON file ``BENCH_STATE_FILE`` (replaced atomically), so that the harness sees the tasks
  from outside without an API request;
* the watch's server-side timeout is set short (``BENCH_WATCH_TIMEOUT``, seconds), so that the
  API server ends every watch stream that often and the operator reconnects.

trioperator only (the soak measures one operator's behaviour over time, not a comparison).
"""

import gc
import json
import os
import time
import tracemalloc

import trio
import trioperator as kopf

STATE_FILE = os.environ.get("BENCH_STATE_FILE", "")
# With a directory, the probe also dumps a tracemalloc snapshot there every SNAPSHOT_S seconds
# (benchmarks/soak_snapshots.py compares them): is a growth of RSS retained Python objects?
SNAPSHOT_DIR = os.environ.get("BENCH_TRACEMALLOC_DIR", "")
SNAPSHOT_S = 120.0
PROBE_S = float(os.environ.get("BENCH_PROBE_S", "10"))
WATCH_TIMEOUT = float(os.environ.get("BENCH_WATCH_TIMEOUT", "180"))
RESOURCE = ("bench.trioperator.dev", "v1", "benchobjects")

counts = {
    "created": 0,
    "updated": 0,
    "deleted": 0,
    "daemons_started": 0,
    "daemons_running": 0,
    "timer_runs": 0,
}


def count_tasks() -> int:
    """Every trio task alive in this run, from the root task down through the nurseries."""
    stack = [trio.lowlevel.current_root_task()]
    seen = 0
    while stack:
        task = stack.pop()
        if task is None:
            continue
        seen += 1
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return seen


def report() -> None:
    if not STATE_FILE:
        return
    state = dict(counts, tasks=count_tasks(), at=time.monotonic())
    temporary = f"{STATE_FILE}.tmp"
    with open(temporary, "w") as file:
        json.dump(state, file)
    os.replace(temporary, STATE_FILE)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_):
    settings.watching.server_timeout = WATCH_TIMEOUT


@kopf.on.create(*RESOURCE)
async def on_create(spec, **_):
    counts["created"] += 1
    return {"generation": spec.get("index", 0)}


@kopf.on.update(*RESOURCE, field="spec")
async def on_update(new, **_):
    counts["updated"] += 1
    return {"seen": (new or {}).get("replicas")}


@kopf.on.delete(*RESOURCE)
async def on_delete(**_):
    counts["deleted"] += 1


@kopf.daemon(*RESOURCE, labels={"soak-bg": "yes"})
async def idle_daemon(stopped, **_):
    counts["daemons_started"] += 1
    counts["daemons_running"] += 1
    try:
        while not stopped:
            await stopped.wait(60)
    finally:
        counts["daemons_running"] -= 1


@kopf.timer(*RESOURCE, labels={"soak-bg": "yes"}, interval=10)
async def idle_timer(**_):
    counts["timer_runs"] += 1


@kopf.daemon(*RESOURCE, labels={"soak-probe": "yes"})
async def probe(stopped, **_):
    if SNAPSHOT_DIR:
        tracemalloc.start(25)
    snapshots = 0
    last_snapshot = time.monotonic()
    while not stopped:
        report()
        if SNAPSHOT_DIR and time.monotonic() - last_snapshot >= SNAPSHOT_S:
            last_snapshot = time.monotonic()
            gc.collect()
            tracemalloc.take_snapshot().dump(f"{SNAPSHOT_DIR}/snapshot-{snapshots:03d}.bin")
            snapshots += 1
        await stopped.wait(PROBE_S)
