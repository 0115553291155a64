"""Event storms: the operator's memory while objects are updated far faster than it handles them.

Two workloads, each against ``trioperator.testing.FakeAPI`` served over HTTP by a separate
process (the load generator), so that the operator's process holds only the operator -- the
fake keeps the whole backlog of a stream that is not read, as a real API server would:

* ``one``: 1 object updated 10,000 times; a change handler that takes 0.2 s per run;
* ``many``: 100 objects x 100 updates each, ``worker_limit=4``, an ``on.event`` handler too
  (every event is delivered to it). (``worker_limit=1`` is in the integration tests, on a
  mock clock: in real time, one worker at a time takes minutes for this.)

Each update carries a 4 KiB payload in its spec. The operator's RSS (``VmRSS``) is sampled every
50 ms: before the storm (the operator is ready, the objects are handled once), its peak during
the storm, and after (everything handled, 3 s later). The runtime's own counters of queued
bodies (``OperatorContext.queueing``) are printed too, where the build has them.

Usage::

    .venv/bin/python benchmarks/bench_storms.py            # both workloads
    .venv/bin/python benchmarks/bench_storms.py --only one

To compare with another build, point ``PYTHONPATH`` at its source tree (e.g. an export of an
older commit: ``git archive COMMIT | tar -x -C /tmp/old``) and run the same script.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import trio
import trio.lowlevel

PAYLOAD = "x" * 4096
CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "stormobjects.bench.trioperator.dev"},
    "spec": {
        "group": "bench.trioperator.dev",
        "scope": "Namespaced",
        "names": {"plural": "stormobjects", "singular": "stormobject", "kind": "StormObject"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}
WORKLOADS: dict[str, dict[str, Any]] = {
    "one": {"objects": 1, "updates": 10_000, "worker_limit": None, "on_event": False},
    "many": {"objects": 100, "updates": 100, "worker_limit": 4, "on_event": True},
}


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# ------------------------------------------------------------------ the load generator


async def serve(workload: dict[str, Any]) -> None:
    from trioperator.testing import FakeAPI

    async with FakeAPI.serve(history_limit=100_000) as api:
        api.create_object("customresourcedefinitions", CRD)
        names = [f"storm-{i}" for i in range(workload["objects"])]
        for name in names:
            body = {
                "apiVersion": "bench.trioperator.dev/v1",
                "kind": "StormObject",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"n": 0, "payload": PAYLOAD},
            }
            api.create_object("stormobjects", body)
        print(api.url, flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)  # "go"
        count = 0
        for n in range(1, workload["updates"] + 1):
            for name in names:
                api.patch_object("stormobjects", name, {"spec": {"n": n}}, "default")
                count += 1
                if count % 100 == 0:
                    await trio.lowlevel.checkpoint()  # let the fake serve the operator's requests
        print("done", flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)  # until the operator is finished


# ------------------------------------------------------------------ the operator


async def operate(url: str, workload: dict[str, Any], go: Any) -> dict[str, Any]:
    import trioperator as kopf
    from trioperator._client.credentials import ConnectionInfo, Vault
    from trioperator._runtime.program.operator import Operator

    registry = kopf.OperatorRegistry()
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    settings.queueing.worker_limit = workload["worker_limit"]
    settings.queueing.idle_timeout = 0.05
    last = workload["updates"]
    final: dict[str, int] = {}
    events = 0
    runs = 0

    @kopf.on.create("stormobjects", registry=registry)
    @kopf.on.update("stormobjects", registry=registry)
    async def change_fn(name: str, new: Any, **_: Any) -> None:
        nonlocal runs
        runs += 1
        if workload["objects"] == 1:
            await trio.sleep(0.2)
        final[name] = new["spec"]["n"]

    if workload["on_event"]:

        @kopf.on.event("stormobjects", registry=registry)
        async def event_fn(**_: Any) -> None:
            nonlocal events
            events += 1

    vault = Vault({"fake": ConnectionInfo(server=url, token="fake")})
    operator = Operator(registry=registry, settings=settings, vault=vault)
    samples: list[int] = []
    result: dict[str, Any] = {}

    async def sample() -> None:
        while True:
            samples.append(rss_kib())
            await trio.sleep(0.05)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(operator.main)
        await operator.ready_flag.wait()
        while len(final) < workload["objects"]:
            await trio.sleep(0.05)
            if os.environ.get("STORMS_DEBUG"):
                print("initial", len(final), file=sys.stderr)
        await trio.sleep(1)
        result["rss_before_kib"] = rss_kib()
        nursery.start_soon(sample)
        started = time.monotonic()
        go()
        while any(final.get(name) != last for name in final):
            await trio.sleep(0.05)
            if os.environ.get("STORMS_DEBUG"):
                print(sorted(final.values())[:5], events, file=sys.stderr)
        result["seconds"] = round(time.monotonic() - started, 1)
        await trio.sleep(3)
        result["rss_after_kib"] = rss_kib()
        result["rss_peak_kib"] = max(samples)
        result["handler_runs"] = runs
        result["event_handler_runs"] = events
        stats = getattr(operator.context, "queueing", None)
        if stats is not None:
            result["queued_peak"] = stats.peak
            result["coalesced"] = stats.coalesced
            result["stalls"] = stats.stalls
        operator.stop()
        nursery.cancel_scope.deadline = trio.current_time() + 10
    return result


def run_workload(name: str) -> dict[str, Any]:
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ,
    )
    assert server.stdin is not None
    assert server.stdout is not None
    try:
        url = server.stdout.readline().strip()

        def go() -> None:
            assert server.stdin is not None
            server.stdin.write("go\n")
            server.stdin.flush()

        result = trio.run(operate, url, WORKLOADS[name], go)
    finally:
        server.stdin.write("bye\n")
        server.stdin.flush()
        server.wait(timeout=30)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--only", choices=sorted(WORKLOADS))
    parser.add_argument("--serve", choices=sorted(WORKLOADS), help=argparse.SUPPRESS)
    parser.add_argument("--operate", choices=sorted(WORKLOADS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        trio.run(serve, WORKLOADS[args.serve])
        return
    if args.operate:  # one workload in this (fresh) process: print its figures as JSON
        print(json.dumps(run_workload(args.operate)))
        return
    names = [args.only] if args.only else list(WORKLOADS)
    print(
        "| workload | RSS before, MiB | peak during, MiB | after, MiB | seconds | change handler"
        " runs | on.event runs | queued bodies, peak |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in names:
        # Each workload in a fresh process: the RSS of one must not carry over to the next.
        output = subprocess.run(
            [sys.executable, __file__, "--operate", name],
            check=True,
            capture_output=True,
            text=True,
            env=os.environ,
        ).stdout
        figures = json.loads(output.strip().splitlines()[-1])
        spec = WORKLOADS[name]
        title = f"{spec['objects']} x {spec['updates']:,}"
        print(
            f"| {title} | {figures['rss_before_kib'] / 1024:.0f} "
            f"| {figures['rss_peak_kib'] / 1024:.0f} | {figures['rss_after_kib'] / 1024:.0f} "
            f"| {figures['seconds']} | {figures['handler_runs']} "
            f"| {figures['event_handler_runs']} | {figures.get('queued_peak', 'n/a')} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
