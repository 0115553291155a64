"""Micro-benchmark: CPU seconds per API request of the HTTP clients trioperator could use (#6).

Against a real kube-apiserver (``scripts/kube-up``, or ``--kubeconfig``), each variant sends N
JSON merge-patches from ~20 concurrent tasks to existing BenchObjects, then reads a watch stream
of N events (bytes -> lines) while a child process makes those events. The figure is the process
CPU time (``os.times()`` user+system, not wall time) per request / per watch event: on a shared,
noisy machine it is far steadier than throughput. Variants:

- ``httpx2``: httpx2's AsyncClient under trio as ``trioperator/_client/http.py`` configured it
  before #6 (a 32-connection pool, a trio semaphore in front);
- ``h11``: the client of ``trioperator/_client/transport/`` (trio streams, h11 writing
  the requests, httptools parsing the responses, a LIFO keep-alive pool), the same semaphore
  in front;
- ``httpx2-h2``: httpx2 over HTTP/2 (needs the ``h2`` package; skipped without it);
- ``session``: trioperator's own ``HTTPSession``, whatever it uses today.

    .venv/bin/python benchmarks/bench_http.py -n 2000 --repeat 3
    .venv/bin/python benchmarks/bench_http.py -n 1000 --variants h11 --profile   # cProfile top

Creates the CRD (benchmarks/crd.yaml) if missing and a namespace of its own; removes both
(the CRD only if it created it) at the end.

Figures of the response parser change (issue #15; 2 cores shared with other work, load 4-8,
so only CPU time; ``-n 2000 --repeat 2 --variants h11,session``, 6 runs of each alternating,
the median of the runs' medians, and their range):

| client | PATCH before | PATCH after | watch event before | watch event after |
|---|---:|---:|---:|---:|
| h11 | 0.354 (0.275-0.377) | 0.270 (0.225-0.323) | 0.090 (0.067-0.095) | 0.075 (0.067-0.080) |
| session | 0.395 (0.352-0.418) | 0.306 (0.273-0.390) | 0.090 (0.077-0.111) | 0.070 (0.062-0.083) |

(CPU ms per PATCH and per watch event; "h11" is TransportPool alone, "session" HTTPSession.)

Before: h11 wrote and parsed; after: httptools (llhttp) parses the responses (~4-10 us per
PATCH answer against ~40-60 us in h11; 0.1 us against ~5.5 us per watch event read in a batch
of ten), h11 writes with its header validation done once per set of headers (~18 us against
~30 us per request), TLS reads wait before reading and read ahead only on streams, a request
goes out without a schedule point of its own and takes a free slot without one. A 500-object
burst of ``benchmarks/run.py`` on the same machine: 2.76 and 3.04 ms CPU per object before,
2.04, 2.12 and 2.08 after (Kopf 4.3-4.9 in the same runs: 0.57-0.68x before, 0.44-0.48x after).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import importlib.util
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2 as httpx
import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from kubeconf import Cluster, collection_path, load_cluster, make_object, object_path  # noqa: E402
from trioperator._client.credentials import ConnectionInfo  # noqa: E402
from trioperator._client.http import HTTPSession  # noqa: E402
from trioperator._client.transport.origins import Origin  # noqa: E402
from trioperator._client.transport.pool import TransportPool  # noqa: E402
from trioperator._wire.watch import LineSplitter  # noqa: E402

CRD_NAME = "benchobjects.bench.trioperator.dev"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
KUBECTL = Path.home() / ".cache/trioperator/kube/bin/kubectl"
POOL = 32
MERGE = {"Content-Type": "application/merge-patch+json"}

# A client under test: patch(path, body) -> status, and watch(path, params, count) -> lines read.
Patch = Callable[[str, bytes], Awaitable[int]]
Watch = Callable[[str, dict[str, str], int], Awaitable[int]]


def _base_headers(cluster: Cluster) -> dict[str, str]:
    return {"User-Agent": "bench-http", "Accept": "application/json", **cluster.headers()}


@contextlib.asynccontextmanager
async def httpx2_client(
    cluster: Cluster, *, http2: bool = False
) -> AsyncIterator[tuple[Patch, Watch]]:
    limits = httpx.Limits(max_connections=POOL, max_keepalive_connections=POOL, keepalive_expiry=30)
    common: dict[str, Any] = {
        "base_url": cluster.server,
        "verify": cluster.ssl_context(),
        "headers": _base_headers(cluster),
        "timeout": httpx.Timeout(None),
        "http2": http2,
    }
    slots = trio.Semaphore(POOL)
    async with (
        httpx.AsyncClient(limits=limits, **common) as client,
        httpx.AsyncClient(limits=httpx.Limits(max_connections=None), **common) as streams,
    ):

        async def patch(path: str, body: bytes) -> int:
            async with slots:
                response = await client.request("PATCH", path, content=body, headers=MERGE)
                _ = response.content
                return response.status_code

        async def watch(path: str, params: dict[str, str], count: int) -> int:
            splitter = LineSplitter()
            seen = 0
            async with streams.stream("GET", path, params=params) as response:
                async for chunk in response.aiter_bytes():
                    splitter.feed(chunk)
                    while splitter.pop() is not None:
                        seen += 1
                    if seen >= count:
                        break
            return seen

        yield patch, watch


@contextlib.asynccontextmanager
async def h11_client(cluster: Cluster) -> AsyncIterator[tuple[Patch, Watch]]:
    url = urlsplit(cluster.server)
    assert url.hostname is not None
    origin = Origin(url.scheme, url.hostname, url.port, ssl_context=cluster.ssl_context())
    requests = TransportPool(origin, max_idle=POOL, read_ahead=False)  # as HTTPSession's
    streams = TransportPool(origin, max_idle=10)
    headers = {**_base_headers(cluster), "Accept-Encoding": "gzip"}
    patch_headers = {**headers, **MERGE}
    slots = trio.Semaphore(POOL)

    async def patch(path: str, body: bytes) -> int:
        async with slots:
            status, _, _ = await requests.request(
                "PATCH", path, "PATCH " + path, headers=patch_headers, content=body
            )
            return status

    async def watch(path: str, params: dict[str, str], count: int) -> int:
        target = path + "?" + str(httpx.QueryParams(params))
        splitter = LineSplitter()
        seen = 0
        async with streams.stream("GET", target, "WATCH", headers=headers) as response:
            while seen < count and (chunk := await response.receive_some()) is not None:
                splitter.feed(chunk)
                while splitter.pop() is not None:
                    seen += 1
        return seen

    try:
        yield patch, watch
    finally:
        requests.aclose()
        streams.aclose()


@contextlib.asynccontextmanager
async def session_client(cluster: Cluster) -> AsyncIterator[tuple[Patch, Watch]]:
    info = ConnectionInfo(
        server=cluster.server,
        ca_path=cluster.ca_file,
        insecure=cluster.insecure or None,
        token=cluster.token,
        certificate_path=cluster.cert_file,
        private_key_path=cluster.key_file,
    )
    session = HTTPSession(info)

    async def patch(path: str, body: bytes) -> int:
        response = await session.request("PATCH", path, content=body, headers=MERGE)
        return response.status

    async def watch(path: str, params: dict[str, str], count: int) -> int:
        seen = 0
        async with session.stream("GET", path, params=params) as response:
            async for _ in response.lines():
                seen += 1
                if seen >= count:
                    break
        return seen

    try:
        yield patch, watch
    finally:
        await session.aclose()


VARIANTS: dict[
    str, Callable[[Cluster], contextlib.AbstractAsyncContextManager[tuple[Patch, Watch]]]
] = {
    "httpx2": httpx2_client,
    "h11": h11_client,
    "httpx2-h2": lambda cluster: httpx2_client(cluster, http2=True),
    "session": session_client,
}


RATES: list[float] = []  # requests per second of wall time, of the last patch_burst calls


def cpu() -> float:
    t = os.times()
    return t.user + t.system


async def patch_burst(
    patch: Patch, namespace: str, names: list[str], n: int, concurrency: int
) -> float:
    """Send n merge-patches from `concurrency` tasks; the CPU seconds spent."""
    counter = iter(range(n))
    tag = uuid.uuid4().hex[:8]
    failures: list[int] = []

    async def worker() -> None:
        for i in counter:
            body = json.dumps({"metadata": {"annotations": {"bench/seq": f"{tag}-{i}"}}}).encode()
            status = await patch(object_path(namespace, names[i % len(names)]), body)
            if status != 200:
                failures.append(status)

    start, wall = cpu(), time.monotonic()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    spent = cpu() - start
    # Wall time is noisy here (the API server shares the cores), but a client that adds
    # latency (e.g. waits on its own buffering) would show as a clear drop.
    RATES.append(n / (time.monotonic() - wall))
    if failures:
        raise RuntimeError(f"{len(failures)} patches failed, e.g. HTTP {failures[0]}")
    return spent


async def watch_read(watch: Watch, args: argparse.Namespace, namespace: str, rv: str) -> float:
    """Read n watch events made by a child process doing the patches; CPU seconds per event."""
    params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "120"}
    writer = [sys.executable, __file__, "--writer", namespace, "-n", str(args.n)]
    if args.kubeconfig:
        writer += ["--kubeconfig", args.kubeconfig]
    start = cpu()
    async with trio.open_nursery() as nursery:
        # The child writes; this process only reads, so its CPU is the stream's cost alone.
        nursery.start_soon(trio.run_process, writer)
        seen = await watch(collection_path(namespace), params, args.n)
    spent = cpu() - start
    if seen < args.n:
        # The API server drops watchers that lag behind (its buffer per watcher is small), which
        # a busy shared machine can cause; the cost per event read is still what we measure.
        print(f"  (the watch ended after {seen} of {args.n} events)", file=sys.stderr)
    if seen < args.n // 10:
        raise RuntimeError(f"the watch ended after {seen} of {args.n} events")
    return spent / seen


async def current_rv(client: httpx.AsyncClient, namespace: str) -> str:
    response = await client.get(collection_path(namespace), params={"limit": "1"})
    response.raise_for_status()
    return str(response.json()["metadata"]["resourceVersion"])


@contextlib.asynccontextmanager
async def fixture(
    cluster: Cluster, objects: int
) -> AsyncIterator[tuple[str, list[str], httpx.AsyncClient]]:
    """The CRD (created if missing) and a namespace of our own with `objects` BenchObjects."""
    async with httpx.AsyncClient(
        base_url=cluster.server, verify=cluster.ssl_context(), headers=_base_headers(cluster)
    ) as admin:
        created_crd = False
        if (await admin.get(f"{CRD_PATH}/{CRD_NAME}")).status_code == 404:
            await trio.run_process(
                [str(KUBECTL), "apply", "-f", str(HERE / "crd.yaml")], check=True, env=_kube_env()
            )
            await trio.run_process(
                [
                    str(KUBECTL),
                    "wait",
                    "--for=condition=Established",
                    f"crd/{CRD_NAME}",
                    "--timeout=60s",
                ],
                check=True,
                env=_kube_env(),
            )
            created_crd = True
        namespace = f"bench-http-{uuid.uuid4().hex[:6]}"
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        (await admin.post("/api/v1/namespaces", json=ns)).raise_for_status()
        try:
            names = [f"obj-{i}" for i in range(objects)]
            for i, name in enumerate(names):
                response = await admin.post(
                    collection_path(namespace), json=make_object(namespace, name, i)
                )
                response.raise_for_status()
            yield namespace, names, admin
        finally:
            with trio.CancelScope(shield=True):
                await remove_namespace(admin, namespace)
                if created_crd:
                    await admin.delete(f"{CRD_PATH}/{CRD_NAME}")


async def remove_namespace(admin: httpx.AsyncClient, namespace: str) -> None:
    """Delete the namespace with its objects, now.

    scripts/kube-up runs no controller-manager, so nobody would empty a deleted namespace and
    it would stay "Terminating" forever: the objects go first, then the namespace's finalizer.
    """
    await admin.delete(collection_path(namespace))
    await admin.delete(f"/api/v1/namespaces/{namespace}")
    response = await admin.get(f"/api/v1/namespaces/{namespace}")
    if response.status_code == 200:
        body = response.json()
        body["spec"]["finalizers"] = []
        await admin.put(f"/api/v1/namespaces/{namespace}/finalize", json=body)


_KUBECONFIG: str = ""


def _kube_env() -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": _KUBECONFIG}


def kubeconfig(args: argparse.Namespace) -> str:
    if args.kubeconfig:
        return str(args.kubeconfig)
    out = subprocess.run(
        [str(HERE.parent / "scripts/kube-up")], check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


# Certificates written out of an inline kubeconfig; removed when the process exits.
_SCRATCH = tempfile.TemporaryDirectory(prefix="bench-http-")


async def writer_main(args: argparse.Namespace) -> None:
    """The child of the watch phase: n merge-patches with trioperator's client."""
    cluster = load_cluster(kubeconfig(args), tmp_dir=_SCRATCH.name)
    namespace = args.writer
    async with h11_client(cluster) as (patch, _):
        names = [f"obj-{i}" for i in range(args.objects)]
        await patch_burst(patch, namespace, names, args.n, args.concurrency)


async def main(args: argparse.Namespace) -> None:
    global _KUBECONFIG
    _KUBECONFIG = kubeconfig(args)
    args.kubeconfig = _KUBECONFIG
    cluster = load_cluster(_KUBECONFIG, tmp_dir=_SCRATCH.name)
    variants = [v for v in args.variants.split(",") if v]
    if "httpx2-h2" in variants and importlib.util.find_spec("h2") is None:
        print("httpx2-h2: skipped, the h2 package is not installed", file=sys.stderr)
        variants.remove("httpx2-h2")
    results: dict[str, dict[str, list[float]]] = {
        v: {"patch": [], "watch": [], "rate": []} for v in variants
    }
    async with fixture(cluster, args.objects) as (namespace, names, admin):
        # A warm-up round of every variant (imports, first TLS handshakes), not counted.
        for variant in variants:
            async with VARIANTS[variant](cluster) as (patch, _):
                await patch_burst(patch, namespace, names, min(200, args.n), args.concurrency)
        profiler = cProfile.Profile() if args.profile else None
        for round_ in range(args.repeat):
            for variant in variants:  # interleaved, so slow phases of the machine hit all alike
                async with VARIANTS[variant](cluster) as (patch, watch):
                    if profiler:
                        profiler.enable()
                    spent = await patch_burst(patch, namespace, names, args.n, args.concurrency)
                    if profiler:
                        profiler.disable()
                    results[variant]["patch"].append(spent / args.n * 1000)
                    results[variant]["rate"].append(RATES[-1])
                    if not args.no_watch:
                        rv = await current_rv(admin, namespace)
                        spent = await watch_read(watch, args, namespace, rv)
                        results[variant]["watch"].append(spent * 1000)
                print(
                    f"round {round_ + 1} {variant:10} patch {results[variant]['patch'][-1]:.3f} ms"
                    f" ({RATES[-1]:.0f}/s)"
                    + (
                        f", watch {results[variant]['watch'][-1]:.4f} ms/event"
                        if not args.no_watch
                        else ""
                    ),
                    file=sys.stderr,
                )
    print(
        f"\nCPU ms per request: {args.n} merge-patches, {args.concurrency} tasks, "
        f"{args.repeat} rounds"
    )
    print("| client | CPU ms per PATCH | CPU ms per watch event | PATCHes/s (wall, noisy) |")
    print("|---|---:|---:|---:|")
    for variant in variants:
        cells = []
        for phase, digits in (("patch", 3), ("watch", 3), ("rate", 0)):
            values = results[variant][phase]
            cells.append(
                f"{statistics.median(values):.{digits}f} "
                f"({min(values):.{digits}f}-{max(values):.{digits}f})"
                if values
                else "-"
            )
        print(f"| {variant} | {' | '.join(cells)} |")
    print("cells: median (min-max) over the rounds")
    if profiler:
        stats = pstats.Stats(profiler).strip_dirs().sort_stats("tottime")
        stats.print_stats(args.profile_lines)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kubeconfig", help="default: start/reuse scripts/kube-up")
    parser.add_argument("-n", type=int, default=2000, help="requests (and watch events) per round")
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--objects", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--variants", default="httpx2,h11,httpx2-h2,session")
    parser.add_argument("--no-watch", action="store_true", help="only the patches")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile the patch phases; print the top"
    )
    parser.add_argument("--profile-lines", type=int, default=30)
    parser.add_argument("--writer", help=argparse.SUPPRESS)  # internal: the watch phase's child
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse()
    start = time.monotonic()
    trio.run(writer_main if arguments.writer else main, arguments)
    if not arguments.writer:
        print(f"\n({time.monotonic() - start:.0f} s)", file=sys.stderr)
