"""The operator's own CPU per handled object, in-process, without HTTP or TLS.

The real runtime (``Operator``: discovery, orchestration, watchers, workers, the patch applier,
logging) runs against ``trioperator.testing.FakeAPI``, but no socket is involved: the API
client's session is replaced by one that hands each request straight to the fake's request
handler and reads the watch stream from it as bytes. What remains is what the operator does
between the bytes of a watch line and the bytes of a patch body -- the part this benchmark is
meant to expose.

The fake's own work (storing, encoding watch lines, merge-patching) runs in the same process;
it is metered separately (CPU time spent inside its handler and in the creations) and
subtracted, so "operator CPU" is what the framework spends.

Usage::

    .venv/bin/python benchmarks/bench_hotpath.py                 # 500 objects, 3 repeats
    .venv/bin/python benchmarks/bench_hotpath.py -n 300 --repeat 5
    .venv/bin/python benchmarks/bench_hotpath.py --profile        # + cProfile of one burst
    .venv/bin/python benchmarks/bench_hotpath.py --sync           # a sync handler (threads)
    .venv/bin/python benchmarks/bench_hotpath.py --engine         # the engine's part alone

Every repetition runs a fresh operator in a fresh fake (one ``trio.run`` each), with a warm-up
burst first so that imports, discovery and caches are not counted. A burst ends when every
object's handler result is in the fake and the echoes of the operator's own patches have been
processed too (all tasks idle).

On a shared machine, CPU time of a burst varies by +-30% from run to run: compare builds by
alternating runs, and look at the steadier figures too -- the function calls per object of
``--profile`` and the best-of-N microseconds of ``--engine``.

To compare two builds, point ``PYTHONPATH`` at a copy of the ``trioperator`` package (the
script's directory comes first on ``sys.path``, then ``PYTHONPATH``, then the venv).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import logging
import os
import pstats
import statistics
import sys
import time
import timeit
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlencode

import trio
import trio.testing
from trioperator import configure as configure_logging
from trioperator import on
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._client.http import HTTPResponse, SessionPool
from trioperator._engine.bodies import Body
from trioperator._engine.diffs import diff as make_diff
from trioperator._engine.patches import Patch
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.program.operator import Operator
from trioperator._runtime.support.httpserver import Request
from trioperator._wire.watch import LineSplitter
from trioperator.testing import FakeAPI
from trioperator.testing._fakestore import Change

GROUP, VERSION, PLURAL, KIND = "bench.trioperator.dev", "v1", "benchobjects", "BenchObject"
NAMESPACE = "bench"
TIMEOUT = 120.0
SEED = 20261122

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": PLURAL, "singular": "benchobject", "kind": KIND},
        "versions": [
            {
                "name": VERSION,
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


MANAGED_FIELDS = False
"""Add ``metadata.managedFields`` as a real API server keeps them (the fake keeps none)."""

LATENCY = 0.0
"""Seconds each request (not a watch) waits before the fake answers it: a slow API server, so
that a burst outruns the operator and a backlog builds up (on the mock clock, this costs no
real time)."""


def _managed_fields(index: int) -> list[dict[str, Any]]:
    # What kube-apiserver 1.20 records for an object created by one client, then merge-patched
    # by the operator (annotations) and its status subresource: three entries of field sets.
    def entry(manager: str, operation: str, fields: dict[str, Any]) -> dict[str, Any]:
        return {
            "manager": manager,
            "operation": operation,
            "apiVersion": f"{GROUP}/{VERSION}",
            "time": "2026-11-22T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        }

    spec = {f"f:{key}": {} for key in ("index", "replicas", "image", "field", "items", "enabled")}
    return [
        entry(
            "load.py",
            "Update",
            {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}, "f:spec": spec},
        ),
        entry("trioperator", "Update", {"f:metadata": {"f:annotations": {".": {}, "f:a": {}}}}),
        entry(
            "trioperator", "Update", {"f:status": {".": {}, "f:create_fn": {".": {}, "f:n": {}}}}
        ),
    ]


def make_object(name: str, index: int) -> dict[str, Any]:
    """The same shape as benchmarks/kubeconf.py's objects: a few labels, a dozen spec fields."""
    obj = _make_object(name, index)
    if MANAGED_FIELDS:
        obj["metadata"]["managedFields"] = _managed_fields(index)
    return obj


def _make_object(name: str, index: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"app": "bench", "batch": name.rsplit("-", 1)[0]},
        },
        "spec": {
            "index": index,
            "replicas": 1 + index % 5,
            "image": f"registry.example.com/bench/app:v{index % 7}",
            "field": f"value-{index}",
            "items": [f"item-{index}-{i}" for i in range(4)],
            "resources": {"cpu": "100m", "memory": "64Mi"},
            "enabled": True,
            "ratio": 0.5,
            "tags": {"tier": "backend", "team": "platform"},
        },
    }


class Meter:
    """CPU seconds spent in the fake's synchronous code (subtracted from the operator's)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    @contextlib.contextmanager
    def __call__(self) -> Any:
        start = time.process_time()
        try:
            yield
        finally:
            self.seconds += time.process_time() - start


class _Lines:
    """Lines of a (possibly streamed) fake response body, as the real session gives them."""

    def __init__(self, body: Any) -> None:
        self._chunks = body.__aiter__() if not isinstance(body, bytes) else None
        self._splitter = LineSplitter()
        if isinstance(body, bytes):
            self._splitter.feed(body)
            self._splitter.finish()
        self._done = self._chunks is None

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> bytes:
        while (line := self._splitter.pop()) is None:
            if self._done or self._chunks is None:
                raise StopAsyncIteration
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                self._done = True
                self._splitter.finish()
                continue
            self._splitter.feed(chunk)
        return line


class _Stream:
    def __init__(self, status: int, headers: Mapping[str, str], body: Any) -> None:
        self.status = status
        self.headers = headers
        self._body = body

    async def read(self) -> bytes:
        return self._body if isinstance(self._body, bytes) else b""

    def lines(self) -> AsyncIterator[bytes]:
        return _Lines(self._body)


class InMemorySession:
    """The API client's session, answered by the fake's request handler without any socket."""

    def __init__(self, fake: FakeAPI, meter: Meter) -> None:
        self.fake = fake
        self.meter = meter
        self.base_url = "http://in-memory"

    def url(self, path: str, params: Mapping[str, str] | None = None) -> str:
        return self.base_url + path + ("?" + urlencode(dict(params)) if params else "")

    def _request(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        content: bytes | None,
        headers: Mapping[str, str] | None,
    ) -> Request:
        query = {key: [value] for key, value in (params or {}).items()}
        lowered = {key.lower(): value for key, value in (headers or {}).items()}
        body = content or b""
        return Request(method=method, path=path, query=query, headers=lowered, body=body)

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 -- the real session's signature
        connect_timeout: float | None = None,
        max_size: int | None = None,
    ) -> HTTPResponse:
        if LATENCY:
            await trio.sleep(LATENCY)
        else:
            await trio.lowlevel.checkpoint()
        with self.meter():
            response = await self.fake._handle(
                self._request(method, path, params, content, headers)
            )
        assert isinstance(response.body, bytes)
        headers_ = {"content-type": response.content_type, **response.headers}
        return HTTPResponse(response.status, headers_, response.body)

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        connect_timeout: float | None = None,
        max_line: int | None = None,
    ) -> AsyncIterator[_Stream]:
        await trio.lowlevel.checkpoint()
        with self.meter():
            response = await self.fake._handle(self._request(method, path, params, None, headers))
        yield _Stream(response.status, {"content-type": response.content_type}, response.body)


class Burst:
    """Counts the objects whose handler result has landed in their status (seen in the fake)."""

    def __init__(self) -> None:
        self.handled: set[str] = set()
        self.target = 0
        self.done = trio.Event()

    def on_change(self, change: Change) -> None:
        if change.resource.plural != PLURAL:
            return
        if "create_fn" in (change.obj.get("status") or {}):
            self.handled.add(change.obj["metadata"]["name"])
            if len(self.handled) >= self.target:
                self.done.set()


def make_registry(sync: bool) -> OperatorRegistry:
    registry = OperatorRegistry()
    if sync:

        @on.create(GROUP, VERSION, PLURAL, id="create_fn", registry=registry)
        def create_fn(name: str, spec: Any, **_: Any) -> dict[str, Any]:
            return {"message": "created", "by": "trioperator", "size": len(spec)}

    else:

        @on.create(GROUP, VERSION, PLURAL, id="create_fn", registry=registry)
        async def create_fn(name: str, spec: Any, **_: Any) -> dict[str, Any]:
            return {"message": "created", "by": "trioperator", "size": len(spec)}

    return registry


async def one_run(
    *, count: int, warmup: int, batch: int, sync: bool, profiler: cProfile.Profile | None
) -> tuple[float, float, float]:
    """One operator, a warm-up burst, then the measured burst.

    Returns (operator CPU s, fake CPU s, wall s) of the measured burst.
    """
    meter = Meter()
    fake = FakeAPI()
    fake.create_object("customresourcedefinitions", CRD)
    fake.create_namespace(NAMESPACE)
    burst = Burst()
    fake.store.listeners.append(burst.on_change)
    session = InMemorySession(fake, meter)

    # The client's own session selection runs (the vault, its checkpoint); only the pool hands
    # out the in-memory session instead of one with sockets.
    def _get(self: SessionPool, info: ConnectionInfo, *, trust_env: bool = False) -> Any:
        return session

    SessionPool.get = _get  # type: ignore[method-assign]

    vault = Vault({"bench": ConnectionInfo(server=session.base_url, token="bench")})
    operator = Operator(registry=make_registry(sync), settings=OperatorSettings(), vault=vault)
    operator.handle_signals = False

    async def create(prefix: str, n: int) -> None:
        burst.done = trio.Event()
        burst.target = len(burst.handled) + n
        for index in range(n):
            with meter():
                fake.create_object(PLURAL, make_object(f"{prefix}-{index}", index))
            if (index + 1) % batch == 0:
                # Let the operator interleave, as it does with concurrent creators.
                await trio.lowlevel.checkpoint()
        with trio.fail_after(TIMEOUT):
            await burst.done.wait()
            # The echoes of the operator's own patches (two MODIFIED events per object) are
            # part of the cost of handling an object: count them too, until all is quiet.
            await trio.testing.wait_all_tasks_blocked()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(operator.main)
        with trio.fail_after(30):
            await operator.ready_flag.wait()
        await create("warmup", warmup)
        await trio.sleep(0.2)  # let the warm-up's workers idle out of the way

        meter.seconds = 0.0
        wall0, cpu0 = time.perf_counter(), time.process_time()
        if profiler is not None:
            profiler.enable()
        await create("bench", count)
        if profiler is not None:
            profiler.disable()
        cpu = time.process_time() - cpu0
        wall = time.perf_counter() - wall0
        fake_cpu = meter.seconds
        operator.stop()
    return cpu - fake_cpu, fake_cpu, wall


def engine_cycle_us(rounds: int, loops: int) -> float:
    """Microseconds of the engine's bookkeeping for one object's two cycles (no I/O, no trio).

    The decisions a worker asks of the engine when an object is created (essence, diff-base,
    progress records, the patch) and when the echo of its own patch arrives (the same essence,
    found unchanged). A tight loop, so it is far less blurred by a busy machine than a burst;
    the best of ``rounds`` is taken.
    """
    settings = OperatorSettings()
    progress = settings.persistence.progress_storage
    diffbase = settings.persistence.diffbase_storage
    handler_id = "create_fn"
    created = make_object("engine-0", 0)
    created["metadata"].update(uid="u-0", resourceVersion="1", generation=1)
    created["metadata"]["creationTimestamp"] = "2026-11-22T00:00:00Z"

    def cycle(raw: dict[str, Any]) -> Patch:
        body = Body(raw)
        patch = Patch()
        old = diffbase.fetch(body=body)
        new = diffbase.build(body=body, extra_fields=[])
        old = progress.clear(essence=old) if old is not None else None
        new = progress.clear(essence=new)
        if make_diff(old, new) or old is None:
            record = progress.fetch(key=handler_id, body=body)
            progress.store(
                key=handler_id,
                record=record or {"started": "2026-11-22T00:00:00+00:00", "success": True},
                body=body,
                patch=patch,
            )
            progress.purge(key=handler_id, body=body, patch=patch)
            diffbase.store(body=body, patch=patch, essence=new)
        return patch

    echoed = json.loads(json.dumps(created))
    echoed["metadata"]["annotations"] = cycle(created)["metadata"]["annotations"]
    echoed["metadata"]["resourceVersion"] = "2"
    assert not cycle(echoed)  # the echo is a no-op, as in a real run

    def both() -> None:
        cycle(created)
        cycle(echoed)

    best = min(timeit.repeat(both, number=loops, repeat=rounds))
    return best * 1e6 / loops


def _group(filename: str) -> str:
    for marker in (
        "trioperator/testing",
        "trioperator/_client",
        "trioperator/_wire",
        "trioperator/_engine",
        "trioperator/_runtime",
        "trioperator/cli",
        "benchmarks/",
        "/trio/",
        "/logging/",
        "/msgspec/",
    ):
        if marker in filename:
            return marker.strip("/")
    if filename.startswith(("~", "<")):
        return "builtins"
    return "other (stdlib)"


def print_profile(profiler: cProfile.Profile, count: int, top: int) -> None:
    stats = pstats.Stats(profiler)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    groups: dict[str, float] = {}
    for (filename, _line, _name), (_cc, _nc, tottime, _ct, _callers) in raw.items():
        groups[_group(filename)] = groups.get(_group(filename), 0.0) + tottime
    total = sum(groups.values())
    calls = sum(entry[1] for entry in raw.values())
    # Function calls are a figure the machine's load cannot blur (CPU time on a shared machine
    # can): comparing them before/after a change tells whether work was really removed.
    print(f"\nFunction calls per object: {calls / count:,.0f}")
    print(f"\nProfile of the burst (self time by area, ms per object; total {total:.2f} s):")
    for name, seconds in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"  {name:28s} {seconds * 1000 / count:7.3f}")
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats(key).print_stats(top)
        print(f"\n--- top {top} by {key} ---")
        print(out.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("-n", "--objects", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--batch", type=int, default=10, help="creations between checkpoints")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sync", action="store_true", help="a sync handler (in threads)")
    parser.add_argument("--profile", action="store_true", help="profile one extra burst")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--save", help="also dump the profile's stats to this file (pstats)")
    parser.add_argument(
        "--log-level", default="INFO", help="the operator's log level (INFO, as `run` by default)"
    )
    parser.add_argument(
        "--engine", action="store_true", help="only time the engine's bookkeeping per object"
    )
    parser.add_argument(
        "--managed-fields",
        action="store_true",
        help="objects carry metadata.managedFields, as on a real API server",
    )
    parser.add_argument("--show-logs", action="store_true", help="log to stderr (debugging)")
    args = parser.parse_args(argv)

    # As `trioperator run` does (INFO by default), but into a sink: formatting is counted,
    # the terminal is not.
    configure_logging(verbose=args.log_level == "DEBUG")
    if not args.show_logs:
        sink = open(os.devnull, "w")  # noqa: SIM115 -- lives as long as the process
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(sink)

    global MANAGED_FIELDS  # a process-wide switch of this script
    MANAGED_FIELDS = args.managed_fields
    if args.engine:
        micro = engine_cycle_us(rounds=max(args.repeat, 5), loops=2000)
        print(f"engine bookkeeping per object (two cycles): {micro:.1f} us")
        return 0

    results = []
    for _ in range(args.repeat):
        op_cpu, fake_cpu, wall = trio.run(
            partial_run(args.objects, args.warmup, args.batch, args.sync, None)
        )
        results.append((op_cpu, fake_cpu, wall))
        print(
            f"operator CPU {op_cpu * 1000 / args.objects:6.3f} ms/object"
            f"  (fake API {fake_cpu * 1000 / args.objects:.3f} ms/object,"
            f" wall {wall:.2f} s for {args.objects})",
            flush=True,
        )
    per_object = [r[0] * 1000 / args.objects for r in results]
    print(
        f"\noperator CPU ms per object: median {statistics.median(per_object):.3f}"
        f" (min {min(per_object):.3f}, max {max(per_object):.3f}) over {len(per_object)} runs"
    )
    if args.profile:
        profiler = cProfile.Profile()
        trio.run(partial_run(args.objects, args.warmup, args.batch, args.sync, profiler))
        print_profile(profiler, args.objects, args.top)
        if args.save:
            profiler.dump_stats(args.save)
    return 0


def partial_run(
    count: int, warmup: int, batch: int, sync: bool, profiler: cProfile.Profile | None
) -> Any:
    # Trio picks the order of ready tasks at random (to shake out ordering bugs). Here a fixed
    # order makes the runs alike: how many events a worker finds batched, and so how many
    # cycles it runs, would otherwise vary from run to run, and so would the work measured.
    trio._core._run._r.seed(SEED)

    async def run() -> tuple[float, float, float]:
        return await one_run(count=count, warmup=warmup, batch=batch, sync=sync, profiler=profiler)

    return run


if __name__ == "__main__":
    sys.exit(main())
