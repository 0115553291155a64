"""The benchmark's load generator: a minimal raw Kubernetes client in its own process.

Two jobs, each over objects named ``PREFIX-00000`` .. ``PREFIX-<count-1>``::

    python benchmarks/load.py create --namespace NS --prefix burst --count 500
    python benchmarks/load.py create-handled --namespace NS --prefix pre --count 10000
    python benchmarks/load.py patch  --namespace NS --prefix burst --count 500

``create`` POSTs the objects (the burst an operator has to handle; with ``--rate R`` an open
loop instead: object i is created at start + i/R s, each create in a task of its own, and the
report lists when each was sent and how late each was fired); ``create-handled`` POSTs
them as if a framework had handled them already (with the last-handled-configuration annotation
both frameworks write, see ``handled_annotation``), so that a framework started over them has
nothing to do; ``patch`` sends each
existing object the two merge-patches an operator sends for one handled creation (a body patch
with an annotation, then a status patch): with no framework around it, that is the ceiling the
API server allows on this machine.

Two interchangeable clients: ``--client httpx2`` (under trio; the main venv) and
``--client aiohttp`` (under asyncio; Kopf's venv has aiohttp). ``--concurrency`` workers share
one connection pool.

Protocol with the harness (run.py): after connecting (one warm-up request per worker, so the
pool is full before the clock starts) the process prints ``{"event": "ready"}`` on stdout and
waits for a line on stdin; then it runs and prints one JSON line with ``"event": "done"``, the
monotonic start/finish times (CLOCK_MONOTONIC is system-wide, so the harness can compare
them with its own), its own CPU time, and the errors it met; then it waits for its stdin to
close before exiting, so that the harness can still read its CPU usage. Without ``--wait`` it
starts at once and exits when done.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kubeconf import Cluster, collection_path, load_cluster, make_object, object_path

MERGE = "application/merge-patch+json"
RETRIES = 8
RETRIABLE = {429, 500, 502, 503, 504}


def body_patch(index: int) -> dict[str, Any]:
    # The size of what Kopf/trioperator write on a first successful run: the diff-base.
    essence = {"spec": make_object("ns", "x", index)["spec"]}
    return {
        "metadata": {
            "annotations": {
                "kopf.zalando.org/last-handled-configuration": json.dumps(essence) + "\n",
            }
        }
    }


def handled_annotation(body: dict[str, Any]) -> str:
    """The ``kopf.zalando.org/last-handled-configuration`` a framework writes after handling
    `body`: the essence (spec and labels; no annotations but Kopf's own) as compact JSON plus a
    newline. The API server returns the maps of a schemaless spec and the labels with sorted
    keys, and the essence keeps them in that order, so sorting here gives the same bytes."""

    def sorted_maps(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: sorted_maps(value[key]) for key in sorted(value)}
        return [sorted_maps(item) for item in value] if isinstance(value, list) else value

    # The top level is not sorted: the essence is the body without its other keys (spec comes
    # first), then the labels put back into a new metadata.
    essence = {
        "spec": sorted_maps(body["spec"]),
        "metadata": {"labels": sorted_maps(body["metadata"]["labels"])},
    }
    return json.dumps(essence, separators=(",", ":")) + "\n"


def status_patch(index: int) -> dict[str, Any]:
    return {"status": {"create_fn": {"message": "created", "by": "raw-client", "size": 5}}}


class Job:
    """What to send, independent of the HTTP library."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.namespace: str = args.namespace
        self.next_index = 0
        self.ok = 0
        self.errors: Counter[str] = Counter()
        self.retries = 0
        self.samples: list[str] = []
        self.sent: dict[str, float] = {}  # open loop: when each create was fired (monotonic)
        self.lags: list[float] = []  # open loop: seconds each create was fired late

    def take(self) -> int | None:
        if self.next_index >= self.args.count:
            return None
        index = self.next_index
        self.next_index += 1
        return index

    def name(self, index: int) -> str:
        return f"{self.args.prefix}-{index:05d}"

    def requests(self, index: int) -> list[tuple[str, str, dict[str, Any], str | None]]:
        """(method, path, body, content type) to send for one object, in order."""
        name = self.name(index)
        if self.args.mode == "create":
            body = make_object(self.namespace, name, index)
            return [("POST", collection_path(self.namespace), body, None)]
        if self.args.mode == "create-handled":
            body = make_object(self.namespace, name, index)
            body["metadata"]["annotations"] = {
                "kopf.zalando.org/last-handled-configuration": handled_annotation(body)
            }
            return [("POST", collection_path(self.namespace), body, None)]
        return [
            ("PATCH", object_path(self.namespace, name), body_patch(index), MERGE),
            ("PATCH", object_path(self.namespace, name, "status"), status_patch(index), MERGE),
        ]

    def failed(self, what: str, detail: str) -> None:
        self.errors[what] += 1
        if len(self.samples) < 5:
            self.samples.append(detail[:300])

    def report(self, started: float, finished: float, cpu: float, ready_at: float) -> None:
        emit(
            {
                "event": "done",
                "mode": self.args.mode,
                "client": self.args.client,
                "count": self.args.count,
                "ok": self.ok,
                "errors": dict(self.errors),
                "error_samples": self.samples,
                "retries": self.retries,
                "ready_at": ready_at,
                "started": started,
                "finished": finished,
                "cpu": cpu,
                **({"sent": self.sent, "lags": self.lags} if self.args.rate else {}),
            }
        )


def emit(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def backoff(attempt: int) -> float:
    return min(2.0, 0.05 * 2**attempt) * (0.5 + random.random())


# ------------------------------------------------------------------------------ httpx2 + trio
async def run_httpx2(job: Job, cluster: Cluster) -> None:
    import httpx2 as httpx
    import trio

    concurrency = job.args.concurrency
    async with httpx.AsyncClient(
        base_url=cluster.server,
        verify=cluster.ssl_context(),
        headers=cluster.headers(),
        limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        timeout=httpx.Timeout(60.0),
    ) as client:

        async def send(method: str, path: str, body: Any, ctype: str | None) -> None:
            headers = {"Content-Type": ctype} if ctype else {}
            for attempt in range(RETRIES):
                try:
                    response = await client.request(method, path, json=body, headers=headers)
                except httpx.TransportError as exc:
                    if attempt + 1 == RETRIES:
                        job.failed(type(exc).__name__, repr(exc))
                        return
                else:
                    if response.status_code < 300:
                        job.ok += 1
                        return
                    if response.status_code not in RETRIABLE or attempt + 1 == RETRIES:
                        job.failed(str(response.status_code), response.text)
                        return
                job.retries += 1
                await trio.sleep(backoff(attempt))

        async def worker() -> None:
            while (index := job.take()) is not None:
                for method, path, body, ctype in job.requests(index):
                    await send(method, path, body, ctype)

        async def fire(index: int) -> None:
            job.sent[job.name(index)] = time.monotonic()
            for method, path, body, ctype in job.requests(index):
                await send(method, path, body, ctype)

        async def open_loop(nursery: trio.Nursery, started: float) -> None:
            # Each create is fired at its own time, in a task of its own: a slow answer to one
            # never delays the next (an open loop). The lag behind the schedule is recorded.
            # The schedule is on trio's clock (what sleep_until understands), the times sent
            # on CLOCK_MONOTONIC (what the harness compares them with).
            rate = job.args.rate
            for index in range(job.args.count):
                at = started + index / rate
                await trio.sleep_until(at)
                job.lags.append(trio.current_time() - at)
                nursery.start_soon(fire, index)

        async def warm() -> None:
            # A non-resource URL: it opens a connection without touching the counted resource.
            await client.get("/version")

        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(warm)
        ready_at = time.monotonic()
        if job.args.wait:
            emit({"event": "ready"})
            await trio.to_thread.run_sync(sys.stdin.readline)
        cpu0 = time.process_time()
        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            if job.args.rate:
                await open_loop(nursery, trio.current_time())
            else:
                for _ in range(concurrency):
                    nursery.start_soon(worker)
        finished = time.monotonic()
        job.report(started, finished, time.process_time() - cpu0, ready_at)


# ------------------------------------------------------------------------------ aiohttp + asyncio
async def run_aiohttp(job: Job, cluster: Cluster) -> None:
    import asyncio

    import aiohttp

    concurrency = job.args.concurrency
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=cluster.ssl_context())
    async with aiohttp.ClientSession(
        base_url=cluster.server,
        connector=connector,
        headers=cluster.headers(),
        timeout=aiohttp.ClientTimeout(total=60),
    ) as session:

        async def send(method: str, path: str, body: Any, ctype: str | None) -> None:
            headers = {"Content-Type": ctype or "application/json"}
            data = json.dumps(body)
            for attempt in range(RETRIES):
                try:
                    async with session.request(method, path, data=data, headers=headers) as resp:
                        text = await resp.text()
                        status = resp.status
                except (TimeoutError, aiohttp.ClientError) as exc:
                    if attempt + 1 == RETRIES:
                        job.failed(type(exc).__name__, repr(exc))
                        return
                else:
                    if status < 300:
                        job.ok += 1
                        return
                    if status not in RETRIABLE or attempt + 1 == RETRIES:
                        job.failed(str(status), text)
                        return
                job.retries += 1
                await asyncio.sleep(backoff(attempt))

        async def worker() -> None:
            while (index := job.take()) is not None:
                for method, path, body, ctype in job.requests(index):
                    await send(method, path, body, ctype)

        async def fire(index: int) -> None:
            job.sent[job.name(index)] = time.monotonic()
            for method, path, body, ctype in job.requests(index):
                await send(method, path, body, ctype)

        async def open_loop() -> None:
            # As in run_httpx2: each create at its own time, in a task of its own.
            loop = asyncio.get_running_loop()
            rate = job.args.rate
            started = loop.time()
            fired: list[asyncio.Task[None]] = []
            for index in range(job.args.count):
                at = started + index / rate
                if (ahead := at - loop.time()) > 0:
                    await asyncio.sleep(ahead)
                job.lags.append(loop.time() - at)
                fired.append(asyncio.create_task(fire(index)))
            await asyncio.gather(*fired)

        async def warm() -> None:
            async with session.get("/version") as response:
                await response.read()

        await asyncio.gather(*(warm() for _ in range(concurrency)))
        ready_at = time.monotonic()
        if job.args.wait:
            emit({"event": "ready"})
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        cpu0 = time.process_time()
        started = time.monotonic()
        if job.args.rate:
            await open_loop()
        else:
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        finished = time.monotonic()
        job.report(started, finished, time.process_time() - cpu0, ready_at)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["create", "create-handled", "patch"])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--client", choices=["httpx2", "aiohttp"], default="httpx2")
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="create: an open loop, one object every 1/RATE s, each in its own task",
    )
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--wait", action="store_true", help="wait for a line on stdin to start")
    args = parser.parse_args()

    if args.rate and args.mode != "create":
        parser.error("--rate is for create only")
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
        cluster = load_cluster(args.kubeconfig, tmp_dir=tmp)
        job = Job(args)
        if args.client == "httpx2":
            import trio

            trio.run(run_httpx2, job, cluster)
        else:
            import asyncio

            asyncio.run(run_aiohttp(job, cluster))
    if args.wait:
        sys.stdin.readline()  # stay (and stay measurable) until the harness closes our stdin
    sys.exit(0 if not job.errors else 1)


if __name__ == "__main__":
    main()
