"""trioperator vs. Kopf on the same kube-apiserver, in one run.

    python benchmarks/run.py [--quick] [--sizes 500,2000] [--repeat 3] [...]

See benchmarks/README.md for what is measured and how to read the figures. In short, per size N
and per repetition (frameworks alternate their order between repetitions):

* ceiling: a raw client (httpx2 under trio, aiohttp under asyncio) sends N fresh objects the
  two merge-patches a framework sends per handled creation -- what this API server allows;
* burst: an operator (same source for both frameworks) is started and proven ready with a
  sentinel object; then a separate process creates N objects with many concurrent creators
  and the harness, with its own watch, times until every object shows the handler's result.
  Meanwhile: the operator's CPU (utime+stime), its peak RSS (VmHWM) and the API server's own
  request counters (``apiserver_request_total``) per verb, divided by N;
* restart + idle (async handler only): the operator is restarted over the N handled objects;
  time and CPU until it is quiet, the API calls it makes (no patches expected), then its CPU
  and RSS over an idle window, then a sentinel proves it still works;
* micro: watch-event decoding throughput (benchmarks/bench_decode.py).

Every process started here is stopped (SIGINT, then SIGTERM, then SIGKILL) and every object and
namespace created here is removed, also on errors and Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import platform
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import trio

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import report  # noqa: E402
from kubeconf import (  # noqa: E402
    GROUP,
    PLURAL,
    Cluster,
    collection_path,
    load_cluster,
    make_object,
    object_path,
)

FRAMEWORKS = ("trioperator", "kopf")
VARIANTS = ("async", "sync")
CLIENTS = ("httpx2", "aiohttp")
OPEN_CLIENT = "aiohttp"
"""The client of the open-loop creates: the lighter of the two on CPU (~1/4 of httpx2's per
create). The API server saturates both cores near the top rate, so the load generator's own CPU
takes from what the API server and the operator under test can have."""
KOPF_VERSION = "1.45.2"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "trioperator"
# What scripts/kube-up builds once, and what scripts/kopf-venv makes once:
KUBE_BUILT = (
    Path(os.environ.get("TRIOPERATOR_KUBE_CACHE", CACHE / "kube")) / "bin" / "kube-apiserver"
)
KOPF_VENV = CACHE / f"kopf-{KOPF_VERSION}-venv"
CLK_TCK = os.sysconf("SC_CLK_TCK")
RUN_KINDS = ("ceiling", "burst", "open", "restart", "takeover", "background", "shutdown")
RESOURCES_COUNTED = {(GROUP, PLURAL), ("", "events"), ("events.k8s.io", "events")}


def log(message: str) -> None:
    stamp = datetime.datetime.now().strftime("%H:%M:%S")
    print(f"[{stamp}] {message}", file=sys.stderr, flush=True)


class BenchError(Exception):
    """A run could not complete; the message says why (and where the logs are)."""


class Interrupted(BaseException):
    """SIGTERM/SIGHUP to the harness: unwind like Ctrl-C, with all the cleanups."""


RUN_ERRORS = (BenchError, trio.TooSlowError, httpx.HTTPError, OSError, ValueError)
"""What fails one run (which is then reported as failed) rather than the whole benchmark."""


def run_error(exc: BaseException) -> str | None:
    """A message if `exc` (or every exception in the group) is a run failure; else None."""
    if isinstance(exc, BaseExceptionGroup):
        matched, rest = exc.split(RUN_ERRORS)
        if rest is not None or matched is None:
            return None
        leaves: list[BaseException] = []
        stack: list[BaseException] = [matched]
        while stack:
            item = stack.pop()
            if isinstance(item, BaseExceptionGroup):
                stack.extend(item.exceptions)
            else:
                leaves.append(item)
        return "; ".join(run_error(leaf) or repr(leaf) for leaf in leaves)
    if isinstance(exc, BenchError):
        return str(exc)
    if isinstance(exc, RUN_ERRORS):
        return f"{type(exc).__name__}: {exc}"
    return None


def record_failure(result: dict[str, Any], exc: BaseException) -> None:
    """Inside ``except``: note a failed run in its result (and the log), so that the benchmark
    goes on with the next run; re-raise what is not a run failure (Ctrl-C, a bug here)."""
    error = run_error(exc)
    if error is None:
        raise exc
    result["ok"] = False
    result["error"] = error
    log(f"  FAILED: {error}")


def interrupt_in(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return any(interrupt_in(inner) for inner in exc.exceptions)
    return isinstance(exc, (KeyboardInterrupt, Interrupted))


# ------------------------------------------------------------------------------ /proc
def proc_cpu(pid: int) -> float:
    """utime+stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as file:
        data = file.read()
    fields = data[data.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_threads_ns(pid: int) -> dict[str, int] | None:
    """CPU time of each thread of a process in nanoseconds, as the scheduler counts it (the first
    field of /proc/PID/task/TID/schedstat): far finer than utime+stime's clock ticks (10 ms with
    CLK_TCK=100). None where the kernel has no schedstat."""
    times: dict[str, int] = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as file:
                times[tid] = int(file.read().split()[0])
        except FileNotFoundError:
            continue  # the thread has just exited
        except (OSError, ValueError, IndexError):
            return None
    return times


def threads_ns_delta(before: dict[str, int] | None, after: dict[str, int] | None) -> int | None:
    """CPU nanoseconds between two snapshots of proc_threads_ns: per thread alive at the end,
    its time since the first snapshot (all of it if it started in between). A thread that ended
    in between takes its time in the window along (so: use it over idle windows, where the
    threads stay); a sum of the threads' totals instead would drop by all its earlier time."""
    if before is None or after is None:
        return None
    return sum(ns - before.get(tid, 0) for tid, ns in after.items())


def proc_memory(pid: int) -> dict[str, float]:
    """VmHWM (peak RSS) and VmRSS in MiB."""
    values: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as file:
        for line in file:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                values[key] = int(rest.split()[0]) / 1024
    return values


def cpu_times() -> list[int]:
    with open("/proc/stat") as file:
        return [int(x) for x in file.readline().split()[1:]]


def usage_figures(usage: dict[str, float], n: int) -> dict[str, Any]:
    """The figures reported from a CpuAccount delta over a window with n objects."""
    server = {"apiserver", "etcd"} <= usage.keys()
    cores = os.cpu_count() or 1
    return {
        "usage": usage,
        "steal": usage["steal"] / (usage["elapsed"] * cores) if usage["elapsed"] > 0 else 0.0,
        "cores_other": usage.get("cores_other"),
        "server_cpu_ms_per_object": (
            (usage["apiserver"] + usage["etcd"]) * 1000 / n if server else None
        ),
    }


def machine_cpu() -> tuple[float, float]:
    """The whole machine's busy and stolen CPU time so far, in seconds (all cores)."""
    fields = cpu_times()
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq) / CLK_TCK, steal / CLK_TCK


class CpuAccount:
    """Where the machine's CPU went over a window: the processes taking part (by name), this
    harness, and everything else ("other": colleagues' tests, the desktop... the noise)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids

    def sample(self) -> dict[str, float]:
        busy, steal = machine_cpu()
        times = os.times()
        usage = {
            "busy": busy,
            "steal": steal,
            "harness": times.user + times.system,
            "at": time.monotonic(),
        }
        for name, pid in self.pids.items():
            with contextlib.suppress(OSError, ValueError, IndexError):
                usage[name] = proc_cpu(pid)
        return usage

    @staticmethod
    def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        """CPU seconds per name, plus "other" (busy minus all the known ones) and "cores_other"
        (other / elapsed seconds); names missing in a sample are left out."""
        result = {k: after[k] - before[k] for k in after if k in before and k != "at"}
        elapsed = after["at"] - before["at"]
        known = sum(v for k, v in result.items() if k not in ("busy", "steal"))
        if {"apiserver", "etcd"} <= result.keys():
            result["other"] = max(0.0, result["busy"] - known)
            result["cores_other"] = result["other"] / elapsed if elapsed > 0 else 0.0
        result["elapsed"] = elapsed
        return result


# ------------------------------------------------------------------------------ processes
LIVE_PROCESSES: dict[int, trio.Process] = {}


async def spawn(
    argv: list[str],
    *,
    env: dict[str, str],
    log_path: Path,
    stdin: int | None = None,
    stdout: int | None = None,
) -> trio.Process:
    with _append(log_path) as log_file:
        process = await trio.lowlevel.open_process(
            argv,
            env=env,
            cwd=str(ROOT),
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            stdout=stdout if stdout is not None else log_file,
            stderr=log_file,
            start_new_session=True,  # Ctrl-C reaches the harness only; it stops the children
        )
    LIVE_PROCESSES[process.pid] = process
    return process


def _append(path: Path) -> Any:
    return open(path, "ab")  # the caller closes it


async def stop_process(process: trio.Process, *, grace: float = 20.0) -> dict[str, Any]:
    """SIGINT; after `grace` seconds SIGTERM; 5 s later SIGKILL. Shielded from cancellation."""
    started = time.monotonic()
    how = "exited"
    with trio.CancelScope(shield=True):
        for signum, timeout in (
            (signal.SIGINT, grace),
            (signal.SIGTERM, 5.0),
            (signal.SIGKILL, 10.0),
        ):
            if process.returncode is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)
            how = signal.Signals(signum).name
            with trio.move_on_after(timeout):
                await process.wait()
        LIVE_PROCESSES.pop(process.pid, None)
    return {
        "stop_s": time.monotonic() - started,
        "stopped_by": how,
        "exit_code": process.returncode,
    }


def kill_leftovers() -> None:
    """Last resort (second Ctrl-C during cleanup): kill whatever this harness still runs."""
    for pid, process in list(LIVE_PROCESSES.items()):
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        LIVE_PROCESSES.pop(pid, None)


class LineReader:
    """JSON lines from a child's stdout."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def next(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                raise BenchError("the load generator closed its output early")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return dict(json.loads(line))


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def log_findings(path: Path) -> dict[str, Any]:
    """Counts of WARNING/ERROR/CRITICAL lines and tracebacks in an operator's log, with samples."""
    counts: Counter[str] = Counter()
    samples: list[str] = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return {"counts": {}, "samples": []}
    for line in text.splitlines():
        level = next((lvl for lvl in ("WARNING", "ERROR", "CRITICAL") if f"[{lvl}" in line), None)
        if line.startswith("Traceback"):
            level = "traceback"
        if level:
            counts[level] += 1
            if len(samples) < 8:
                samples.append(line[:400])
    return {"counts": dict(counts), "samples": samples}


# ------------------------------------------------------------------------------ API client
MetricsKey = tuple[str, str, str, str]  # resource, subresource, verb, code
_LABELS = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class Api:
    """The harness's own small client (trio + httpx2)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.client = httpx.AsyncClient(
            base_url=cluster.server,
            verify=cluster.ssl_context(),
            headers=cluster.headers(),
            timeout=httpx.Timeout(30.0),
            limits=httpx.Limits(max_connections=20, max_keepalive_connections=10),
        )
        self.metrics_available = True

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self.client.aclose()

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        ok: Iterable[int] = (200, 201, 202),
        ctype: str | None = None,
        params: dict[str, str] | None = None,
        request_timeout: float | None = None,
    ) -> dict[str, Any]:
        headers = {"Content-Type": ctype} if ctype else {}
        response = await self.client.request(
            method,
            path,
            json=body,
            headers=headers,
            params=params,
            timeout=httpx.Timeout(request_timeout) if request_timeout else httpx.USE_CLIENT_DEFAULT,
        )
        if response.status_code not in tuple(ok):
            raise BenchError(f"{method} {path}: HTTP {response.status_code}: {response.text[:300]}")
        if "json" not in response.headers.get("content-type", ""):
            return {}  # e.g. "404 page not found" for an unknown resource
        return dict(response.json())

    async def metrics(self) -> Counter[MetricsKey]:
        """``apiserver_request_total`` for the benchmark resource and events."""
        if not self.metrics_available:
            return Counter()
        response = await self.client.get("/metrics")
        if response.status_code != 200:
            log(f"warning: /metrics gave HTTP {response.status_code}; no API call counts")
            self.metrics_available = False
            return Counter()
        counts: Counter[MetricsKey] = Counter()
        for line in response.text.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels_text, _, value = line.rpartition("} ")
            labels = dict(_LABELS.findall(labels_text))
            if (labels.get("group", ""), labels.get("resource", "")) not in RESOURCES_COUNTED:
                continue
            key = (
                labels["resource"],
                labels.get("subresource", ""),
                labels["verb"],
                labels["code"],
            )
            counts[key] += int(float(value))
        return counts

    async def version(self) -> str:
        return str((await self.call("GET", "/version")).get("gitVersion", "?"))

    # ---- objects
    async def create_object(self, namespace: str, name: str) -> None:
        await self.call("POST", collection_path(namespace), make_object(namespace, name, 0))

    async def count_objects(self, namespace: str) -> int:
        data = await self.call("GET", collection_path(namespace), params={"limit": "500"})
        return len(data.get("items", []))

    async def delete_all_objects(self, namespace: str, *, within: float = 300.0) -> None:
        """Delete every benchmark object (and event) in the namespace and wait until gone.

        Objects with daemons or timers carry their framework's finalizer, and no operator runs
        any more to remove it: the finalizers are stripped here (concurrently: thousands).
        A deletecollection of 10,000 objects may outlast the API server's own request timeout
        (504, or 500 "context deadline exceeded" from etcd) while it goes on deleting; it is
        repeated while objects without a deletion mark remain."""
        path = collection_path(namespace)
        with trio.move_on_after(within) as scope:
            await self.call("DELETE", f"/api/v1/namespaces/{namespace}/events", ok=(200, 404, 504))
            delete = True
            while True:
                if delete:
                    await self.call("DELETE", path, ok=(200, 404, 500, 504), request_timeout=120)
                data = await self.call("GET", path, ok=(200, 404), params={"limit": "500"})
                items = data.get("items", [])
                if not items:
                    return
                delete = any("deletionTimestamp" not in i["metadata"] for i in items)
                names = [i["metadata"]["name"] for i in items if i["metadata"].get("finalizers")]
                if names:
                    await self.strip_finalizers(namespace, names)
                elif not delete:
                    await trio.sleep(0.5)
        if scope.cancelled_caught:
            raise BenchError(f"objects in {namespace} are still there after {within:.0f}s")

    async def strip_finalizers(self, namespace: str, names: list[str]) -> None:
        pending = iter(names)

        async def worker() -> None:
            for name in pending:  # the workers share the iterator: each name is taken once
                await self.call(
                    "PATCH",
                    object_path(namespace, name),
                    {"metadata": {"finalizers": None}},
                    ctype="application/merge-patch+json",
                    ok=(200, 404),
                )

        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(worker)

    # ---- namespaces and the CRD
    async def create_namespace(self, name: str) -> None:
        await self.call(
            "POST",
            "/api/v1/namespaces",
            {
                "metadata": {
                    "name": name,
                    "labels": {"app.kubernetes.io/part-of": "trioperator-bench"},
                }
            },
        )

    async def delete_namespace(self, name: str) -> None:
        """Delete and finalize: without kube-controller-manager nobody else would."""
        await self.delete_all_objects(name)
        await self.call("DELETE", f"/api/v1/namespaces/{name}", ok=(200, 202, 404))
        with trio.move_on_after(30):
            while True:
                response = await self.client.get(f"/api/v1/namespaces/{name}")
                if response.status_code == 404:
                    return
                body = response.json()
                if body.get("spec", {}).get("finalizers"):
                    body["spec"]["finalizers"] = []
                    await self.call(
                        "PUT", f"/api/v1/namespaces/{name}/finalize", body, ok=(200, 201, 404, 409)
                    )
                await trio.sleep(0.5)
        raise BenchError(f"namespace {name} is still there")

    async def ensure_crd(self) -> bool:
        """Create the benchmark CRD if absent; return True if this call created it."""
        import yaml

        name = f"{PLURAL}.{GROUP}"
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        response = await self.client.get(path)
        created = False
        if response.status_code == 404:
            crd = yaml.safe_load((HERE / "crd.yaml").read_text())
            crd["metadata"].setdefault("labels", {})["app.kubernetes.io/part-of"] = (
                "trioperator-bench"
            )
            await self.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            created = True
        with trio.move_on_after(60) as scope:
            while True:
                body = await self.call("GET", path)
                conditions = (body.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    break
                await trio.sleep(0.2)
            while True:  # established is not always served yet
                if (await self.client.get(collection_path("default"))).status_code == 200:
                    break
                await trio.sleep(0.2)
        if scope.cancelled_caught:
            raise BenchError(f"the CRD {name} is not established and served after 60s")
        return created

    async def delete_crd(self) -> None:
        name = f"{PLURAL}.{GROUP}"
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        await self.call("DELETE", path, ok=(200, 202, 404))
        with trio.move_on_after(60):
            while True:
                if (await self.client.get(path)).status_code == 404:
                    break
                await trio.sleep(0.5)


def metrics_delta(after: Counter[MetricsKey], before: Counter[MetricsKey]) -> dict[str, Any]:
    """Per verb (and subresource) counts between two snapshots, plus the non-2xx ones."""
    by_verb: Counter[str] = Counter()
    by_code: Counter[str] = Counter()
    for key, value in after.items():
        delta = value - before.get(key, 0)
        if delta <= 0:
            continue
        resource, subresource, verb, code = key
        label = verb if resource == PLURAL else f"{verb} {resource}"
        if subresource:
            label = f"{verb} {subresource}"
        by_verb[label] += delta
        if code not in ("0", "200", "201", "202"):
            by_code[f"{label} -> {code}"] += delta
    return {"by_verb": dict(by_verb), "non_2xx": dict(by_code)}


# ------------------------------------------------------------------------------ the harness's watch
class HandledWatch:
    """One list+watch over the namespace's objects: when each was seen and when handled."""

    def __init__(self, api: Api, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.added: dict[str, float] = {}
        self.handled: dict[str, float] = {}
        self.marked: dict[str, float] = {}  # when the handled mark (the diff-base) was seen
        self.handled_by: Counter[str] = Counter()
        self.harness_calls: Counter[str] = Counter()  # LIST/WATCH it made (to subtract)
        self.events = 0

    def _see(self, obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        self.added.setdefault(name, now)
        result = (obj.get("status") or {}).get("create_fn")
        if name not in self.marked and HANDLED_MARK in (obj["metadata"].get("annotations") or {}):
            self.marked[name] = now
        if result and name not in self.handled:
            self.handled[name] = now
            self.handled_by[str(result.get("by"))] += 1

    def count(self, prefix: str) -> int:
        return sum(1 for name in self.handled if name.startswith(prefix))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """List, then watch from the listing's version; when the server ends a watch, resume
        from the last version seen; list again only when that version is gone (410)."""
        path = collection_path(self.namespace)
        started = False
        version: str | None = None
        while True:
            if version is None:
                listing = await self.api.call("GET", path)
                self.harness_calls["LIST"] += 1
                now = time.monotonic()
                for obj in listing.get("items", []):
                    self._see(obj, now)
                version = str(listing["metadata"]["resourceVersion"])
            params = {
                "watch": "true",
                "resourceVersion": version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "3600",
            }
            timeout = httpx.Timeout(30.0, read=None)
            async with self.api.client.stream("GET", path, params=params, timeout=timeout) as resp:
                try:
                    if resp.status_code == 410:
                        version = None
                        continue
                    if resp.status_code != 200:
                        raise BenchError(f"watch: HTTP {resp.status_code}")
                    if not started:
                        started = True
                        task_status.started()
                    async for line in resp.aiter_lines():
                        if not line:
                            continue
                        event = json.loads(line)
                        self.events += 1
                        kind, obj = event.get("type"), event.get("object") or {}
                        if kind == "ERROR":
                            if obj.get("code") != 410:
                                raise BenchError(f"watch: {obj}")
                            version = None
                            break
                        version = obj.get("metadata", {}).get("resourceVersion", version)
                        if kind in ("ADDED", "MODIFIED"):
                            self._see(obj, time.monotonic())
                finally:
                    self.harness_calls["WATCH"] += 1


def handled_figures(
    n: int,
    memory: dict[str, float],
    calls: dict[str, Any],
    watch: HandledWatch,
    usage: dict[str, float],
) -> dict[str, Any]:
    """The figures every "N objects handled" run reports: memory, API calls, CPU account."""
    by_verb = calls["by_verb"]
    return {
        "peak_rss_mib": memory.get("VmHWM"),
        "rss_after_mib": memory.get("VmRSS"),
        "calls": calls,
        "calls_per_object": {k: v / n for k, v in by_verb.items()},
        "calls_total_per_object": sum(by_verb.values()) / n,
        "handled_by": dict(watch.handled_by),
        **usage_figures(usage, n),
    }


def check_handled_by(result: dict[str, Any], watch: HandledWatch, framework: str) -> None:
    """A run fails if any object shows another framework's result (a leftover operator)."""
    wrong = {k: v for k, v in watch.handled_by.items() if k != framework}
    if wrong:
        result["ok"] = False
        result["error"] = f"objects handled by someone else: {wrong}"


HANDLED_MARK = "kopf.zalando.org/last-handled-configuration"


def _spread(values: list[float]) -> dict[str, float] | None:
    """p50/p95/p99/max of `values` (seconds), or None if there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return {
        "p50": percentile(ordered, 0.5),
        "p95": percentile(ordered, 0.95),
        "p99": percentile(ordered, 0.99),
        "max": ordered[-1],
    }


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that overlap at one moment."""
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def trace_breakdown(
    path: Path,
    sent: dict[str, float],
    watch: HandledWatch,
    names: list[str],
    window: tuple[float, float],
) -> dict[str, Any]:
    """Where each object's time went, from the operator's trace (operators/tracing.py) and the
    harness's own watch: spreads (p50/p95/p99/max, seconds) of each step, per object.

    - seen: the create sent -> the harness's watch sees the object (the API server's part);
    - received: the create sent -> the operator's router hands the event to its worker;
    - queued: the event received (Kopf: the harness's seen) -> the handler starts;
    - handler: the handler starts -> the status PATCH is asked for;
    - status_slot / body_slot: a PATCH asked for -> it has a request slot (trioperator);
    - status_rtt / body_rtt: a PATCH on its connection (Kopf: asked for) -> its answer;
    - status_echo: the status PATCH answered -> the harness sees the object handled;
    - marked: the create sent -> the harness sees the handled mark (the body PATCH);
    - echo: the body PATCH answered -> its event is received by the object's worker.
    """
    received: dict[str, float] = {}
    last_event: dict[str, float] = {}
    started: dict[str, float] = {}
    patches: dict[tuple[str, str], tuple[float, float | None, float]] = {}
    lags: list[float] = []
    stalls: list[float] = []  # the router held the stream back (backpressure), seconds
    gc_pauses: dict[int, list[float]] = {1: [], 2: []}
    gc_totals: dict[str, Any] = {}
    if not path.exists():
        return {"error": f"no trace at {path}"}
    with path.open() as file:
        for line in file:
            try:
                item = json.loads(line)
            except ValueError:
                continue  # a line cut off by a killed process
            kind = item[0]
            if kind == "e":
                name, t = item[1], item[4]
                received.setdefault(name, t)
                last_event[name] = t
            elif kind == "h":
                started.setdefault(item[1], item[2])
            elif kind == "p":
                patches.setdefault((item[1], item[2]), (item[3], item[4], item[5]))
            elif kind == "lag" and window[0] <= item[1] <= window[1]:
                lags.append(item[2])
            elif kind == "stall" and window[0] <= item[1] <= window[1]:
                stalls.append(item[2])
            elif kind == "gc" and window[0] <= item[2] <= window[1]:
                gc_pauses[item[1]].append(item[3])
            elif kind == "gcsum":
                gc_totals[f"gen{item[1]}"] = {"count": item[2], "seconds": round(item[3], 4)}
    steps: dict[str, list[float]] = {
        k: []
        for k in (
            "seen",
            "received",
            "queued",
            "handler",
            "status_slot",
            "status_rtt",
            "status_echo",
            "body_slot",
            "body_rtt",
            "marked",
            "echo",
        )
    }
    for name in names:
        if name not in sent:
            continue
        t0 = sent[name]
        if name in watch.added:
            steps["seen"].append(watch.added[name] - t0)
        if name in received:
            steps["received"].append(received[name] - t0)
        begin = received.get(name, watch.added.get(name))
        if name in started and begin is not None:
            steps["queued"].append(started[name] - begin)
        status = patches.get((name, "status"))
        body = patches.get((name, ""))
        if status is not None and name in started:
            steps["handler"].append(status[0] - started[name])
        for label, one in (("status", status), ("body", body)):
            if one is None:
                continue
            asked, granted, answered = one
            if granted is not None:
                steps[f"{label}_slot"].append(granted - asked)
            steps[f"{label}_rtt"].append(answered - (asked if granted is None else granted))
        if status is not None and name in watch.handled:
            steps["status_echo"].append(watch.handled[name] - status[2])
        if name in watch.marked:
            steps["marked"].append(watch.marked[name] - t0)
        if body is not None and name in last_event and last_event[name] > body[2]:
            steps["echo"].append(last_event[name] - body[2])
    in_flight = [(g, a) for g, a in ((v[1], v[2]) for v in patches.values()) if g is not None]
    waiting = [(v[0], v[1]) for v in patches.values() if v[1] is not None]
    return {
        "steps": {k: _spread(v) for k, v in steps.items() if v},
        "patches_in_flight_max": _most_at_once(in_flight) if in_flight else None,
        "patches_waiting_max": _most_at_once(waiting) if waiting else None,
        "patches_at_once_max": _most_at_once([(v[0], v[2]) for v in patches.values()]),
        "loop_lag": _spread(lags),
        "router_stalls": {"count": len(stalls), "seconds": round(sum(stalls), 3)},
        "gc_in_run": {
            f"gen{g}": {"count": len(v), "seconds": round(sum(v), 4), "max": max(v, default=0)}
            for g, v in gc_pauses.items()
        },
        "gc_totals": gc_totals,
    }


def format_breakdown(breakdown: dict[str, Any]) -> str:
    """One log line: each step's p50/p95 in ms."""
    parts = [
        f"{k} {v['p50'] * 1000:.0f}/{v['p95'] * 1000:.0f}"
        for k, v in breakdown.get("steps", {}).items()
    ]
    lag = breakdown.get("loop_lag")
    if lag:
        parts.append(f"loop lag {lag['p50'] * 1000:.1f}/{lag['p99'] * 1000:.1f}")
    gc2 = breakdown.get("gc_in_run", {}).get("gen2")
    if gc2:
        parts.append(f"gen2 GCs {gc2['count']} ({gc2['seconds'] * 1000:.0f} ms)")
    stalls = breakdown.get("router_stalls")
    if stalls and stalls["count"]:
        parts.append(f"router stalls {stalls['count']} ({stalls['seconds'] * 1000:.0f} ms)")
    parts.append(f"PATCHes at once max {breakdown.get('patches_at_once_max')}")
    return "ms p50/p95: " + ", ".join(parts)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values`, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def _inversions(sequence: list[int]) -> int:
    """Pairs out of order (i < j, sequence[i] > sequence[j]), by merge sort: O(n log n)."""
    if len(sequence) < 2:
        return 0
    middle = len(sequence) // 2
    left, right = sequence[:middle], sequence[middle:]
    count = _inversions(left) + _inversions(right)
    left.sort()
    right.sort()
    j = 0
    for item in left:
        while j < len(right) and right[j] < item:
            j += 1
        count += j
    return count


def order_figures(arrived: dict[str, float], handled: dict[str, float]) -> dict[str, Any]:
    """How far the order of handling departs from the order of arrival (creation).

    Both orders are ranks of the same objects (by the time each was created, resp. seen
    handled). Spearman's rho and Kendall's tau: 1 = handled exactly in creation order,
    0 = no relation, -1 = reversed. Displacement: |handled rank - created rank| in positions."""
    names = [k for k in arrived if k in handled]
    n = len(names)
    if n < 2:
        return {}
    created_rank = {k: i for i, k in enumerate(sorted(names, key=lambda k: (arrived[k], k)))}
    by_handled = sorted(names, key=lambda k: (handled[k], created_rank[k]))
    ranks = [created_rank[k] for k in by_handled]  # created ranks, in the order handled
    displacement = sorted(abs(i - r) for i, r in enumerate(ranks))
    d2 = sum((i - r) ** 2 for i, r in enumerate(ranks))
    pairs = n * (n - 1) // 2
    return {
        "spearman": 1 - 6 * d2 / (n * (n * n - 1)),
        "kendall": 1 - 2 * _inversions(ranks) / pairs,
        "displacement_max": displacement[-1],
        "displacement_p95": displacement[min(n - 1, int(n * 0.95))],
        "displacement_p50": displacement[n // 2],
    }


# ------------------------------------------------------------------------------ the benchmark
@dataclasses.dataclass
class Config:
    sizes: list[int]
    repeats: list[int]  # per size
    frameworks: list[str]
    variants: list[str]  # at the first size
    big_variants: list[str]  # at the other sizes
    clients: list[str]
    creators: int
    ceiling_concurrency: int
    ceiling_sizes: list[int]
    ceiling_repeat: int  # at most this many of the burst repetitions have a ceiling run
    restart: bool  # restart + idle after each burst with the first variant
    idle: float
    takeover_idle: float  # the idle window of the restart after the takeover
    takeover_size: int
    takeover_repeat: int
    steady_sizes: list[int]  # pre-handled objects
    steady_repeat: int
    background_size: int
    background_repeat: int
    background_window: float
    shutdown_size: int
    shutdown_repeat: int
    open_rates: list[float]  # objects/s of the open-loop runs ([]: none)
    open_size: int
    open_repeat: list[int]  # repetitions per rate of open_rates
    open_trace: bool  # the operators of the open-loop runs trace where each object's time goes
    open_raw: bool  # the top rate also with operators/raw.py as the "operator" (the floor)
    ceiling: bool
    decode: bool
    decode_events: int
    decode_rounds: int
    kopf_python: str | None
    trioperator_cmd: list[str]
    trioperator_python: str
    kubeconfig: str
    work_dir: Path
    timeout_factor: float
    cluster_pids: dict[str, int] = dataclasses.field(default_factory=dict)
    profile: str = ""  # trioperator under "cprofile" (cpu_profile.py) or "py-spy"; into work_dir


class Bench:
    def __init__(self, config: Config, api: Api, namespace: str) -> None:
        self.config = config
        self.api = api
        self.namespace = namespace
        self.results: dict[str, list[dict[str, Any]]] = {kind: [] for kind in RUN_KINDS}
        self.sentinels = 0
        self.timings: list[dict[str, Any]] = []
        self.profilers: list[trio.Process] = []  # py-spy, each ends with its operator

    # ---- environment of the children
    def child_env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TRIOPERATOR_", "KOPF_", "BENCH_"))
        }
        env.update(KUBECONFIG=self.config.kubeconfig, PYTHONUNBUFFERED="1", **extra)
        return env

    def operator_argv(self, framework: str, variant: str) -> list[str]:
        """`variant`: async/sync (operators/create_*.py) or background (operators/background.py)."""
        name = "background.py" if variant == "background" else f"create_{variant}.py"
        source = str(HERE / "operators" / name)
        if framework == "raw":  # no framework: the open loop's floor (operators/raw.py)
            assert self.config.kopf_python  # aiohttp comes with Kopf's venv
            raw = str(HERE / "operators" / "raw.py")
            return [self.config.kopf_python, raw, "-n", self.namespace]
        if framework == "kopf":
            assert self.config.kopf_python
            kopf = str(Path(self.config.kopf_python).parent / "kopf")
            return [kopf, "run", "--standalone", "-n", self.namespace, source]
        return [*self.config.trioperator_cmd, "run", "-n", self.namespace, source]

    async def start_operator(
        self, framework: str, variant: str, label: str, **env: str
    ) -> tuple[trio.Process, Path]:
        log_path = self.config.work_dir / f"{label}.log"
        argv = self.operator_argv(framework, variant)
        profiled = framework == "trioperator" and self.config.profile
        if profiled == "cprofile":
            profile = self.config.work_dir / f"{label}.prof"
            argv = [sys.executable, str(HERE / "cpu_profile.py"), str(profile), *argv[-4:]]
        process = await spawn(
            argv,
            env=self.child_env(BENCH_FRAMEWORK=framework, **env),
            log_path=log_path,
        )
        if profiled == "py-spy":
            # Attached from outside, sampling only what is on the CPU; it ends with the operator.
            out = self.config.work_dir / f"{label}.pyspy.txt"
            profiler = await spawn(
                [
                    *["py-spy", "record", "--pid", str(process.pid), "--rate", "1000", "--gil"],
                    *["--format", "raw", "--output", str(out), "--nonblocking"],
                ],
                env=dict(os.environ),
                log_path=self.config.work_dir / f"{label}.pyspy.log",
            )
            self.profilers.append(profiler)
        return process, log_path

    def load_argv(
        self, client: str, mode: str, prefix: str, count: int, concurrency: int
    ) -> list[str]:
        python = self.config.kopf_python if client == "aiohttp" else sys.executable
        assert python
        return [
            python,
            str(HERE / "load.py"),
            mode,
            "--client",
            client,
            "--namespace",
            self.namespace,
            "--prefix",
            prefix,
            "--count",
            str(count),
            "--concurrency",
            str(concurrency),
            "--kubeconfig",
            self.config.kubeconfig,
            "--wait",
        ]

    @contextlib.asynccontextmanager
    async def load(
        self, argv: list[str], label: str
    ) -> AsyncIterator[tuple[trio.Process, LineReader]]:
        log_path = self.config.work_dir / f"{label}.load.log"
        process = await spawn(
            argv,
            env=self.child_env(),
            log_path=log_path,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert process.stdout is not None
        try:
            yield process, LineReader(process.stdout)
        finally:
            await stop_process(process, grace=5)

    async def load_ready(self, reader: LineReader, label: str) -> None:
        with trio.move_on_after(60) as scope:
            ready = await reader.next()
        if scope.cancelled_caught:
            raise BenchError(f"the load generator was not connected after 60s ({label})")
        if ready.get("event") != "ready":
            raise BenchError(f"load generator: unexpected {ready}")

    async def load_done(self, reader: LineReader, within: float) -> dict[str, Any]:
        with trio.move_on_after(within) as scope:
            done = await reader.next()
        if scope.cancelled_caught:
            raise BenchError(f"load generator did not finish in {within:.0f}s")
        if done.get("errors"):
            log(f"  load generator errors: {done['errors']} e.g. {done['error_samples'][:2]}")
        return done

    @staticmethod
    async def load_exit(process: trio.Process) -> None:
        """The load generator stays alive after its report (so its CPU can still be read)
        until its stdin closes; then it closes its connections and exits on its own."""
        assert process.stdin is not None
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await process.stdin.aclose()
        with trio.move_on_after(15):
            await process.wait()

    async def run_load(self, argv: list[str], label: str, *, within: float) -> dict[str, Any]:
        """Start the load generator, wait for it to be connected, let it go, collect its report
        and the CPU used meanwhile (see CpuAccount)."""
        async with self.load(argv, label) as (process, reader):
            await self.load_ready(reader, label)
            account = CpuAccount({"load": process.pid, **self.config.cluster_pids})
            usage0 = account.sample()
            assert process.stdin is not None
            await process.stdin.send_all(b"go\n")
            done = await self.load_done(reader, within)
            done["usage"] = CpuAccount.delta(usage0, account.sample())
            await self.load_exit(process)
            return done

    # ---- waiting
    async def load_until_handled(
        self,
        argv: list[str],
        label: str,
        operator: tuple[trio.Process, Path],
        watch: HandledWatch,
        prefix: str,
        n: int,
        within: float,
    ) -> tuple[float, dict[str, float], dict[str, Any]]:
        """Run a load generator until all ``n`` objects are seen handled.

        Returns when the load was released (monotonic), the CPU used meanwhile by the operator,
        the load generator and the cluster, and the load generator's final report."""
        process, _ = operator
        async with self.load(argv, label) as (loader, reader):
            await self.load_ready(reader, label)
            account = CpuAccount(
                {"operator": process.pid, "load": loader.pid, **self.config.cluster_pids}
            )
            usage0 = account.sample()
            assert loader.stdin is not None
            await loader.stdin.send_all(b"go\n")
            reports: list[dict[str, Any]] = []

            async def collect() -> None:
                reports.append(await self.load_done(reader, within))

            async with trio.open_nursery() as side:
                side.start_soon(collect)
                await self.wait_until(
                    lambda: watch.count(prefix) >= n,
                    within=within,
                    what=f"all {n} objects to be handled",
                    operator=operator,
                    progress=lambda: f"{watch.count(prefix)} handled so far",
                )
                usage = CpuAccount.delta(usage0, account.sample())
            await self.load_exit(loader)
        return usage0["at"], usage, reports[0]

    async def wait_until(
        self,
        condition: Callable[[], bool],
        *,
        within: float,
        what: str,
        operator: tuple[trio.Process, Path] | None = None,
        progress: Callable[[], str] | None = None,
    ) -> None:
        deadline = time.monotonic() + within
        while not condition():
            if operator and operator[0].returncode is not None:
                raise BenchError(
                    f"the operator exited with code {operator[0].returncode} while waiting for "
                    f"{what}; log {operator[1]}:\n{log_tail(operator[1])}"
                )
            if time.monotonic() > deadline:
                tail = f"; log {operator[1]}:\n{log_tail(operator[1])}" if operator else ""
                so_far = f" ({progress()})" if progress else ""
                raise BenchError(f"timed out after {within:.0f}s waiting for {what}{so_far}{tail}")
            await trio.sleep(0.05)

    async def settle(
        self, pid: int, *, max_s: float = 30.0
    ) -> tuple[Counter[MetricsKey], float, float]:
        """Wait until the operator is quiet: request counters unchanged and <10 ms CPU per 0.5 s,
        three samples in a row. Returns the metrics, the CPU and the time at the start of the
        quiet streak (so that the quiet itself is not counted)."""
        metrics = await self.api.metrics()
        cpu, at = proc_cpu(pid), time.monotonic()
        streak_start = (metrics, cpu, at)
        streak = 0
        deadline = at + max_s
        while time.monotonic() < deadline:
            await trio.sleep(0.5)
            new_metrics, new_cpu, new_at = await self.api.metrics(), proc_cpu(pid), time.monotonic()
            if new_metrics == metrics and new_cpu - cpu < 0.010:
                streak += 1
                if streak >= 3:
                    return streak_start
            else:
                streak = 0
                streak_start = (new_metrics, new_cpu, new_at)
            metrics, cpu = new_metrics, new_cpu
        log(f"  note: the operator was not quiet within {max_s:.0f}s; measuring anyway")
        return metrics, cpu, time.monotonic()

    async def cluster_quiet(self, *, max_s: float = 30.0) -> None:
        """Wait until the API server and etcd are at rest: under 10% of a core over 0.5 s, three
        samples in a row. Work left over from the run before (deleting thousands of objects,
        etcd's compaction) would otherwise land on whichever framework comes next."""
        pids = list(self.config.cluster_pids.values())
        if not pids:
            return  # a cluster not started by us: nothing to look at
        cpu = sum(proc_cpu(pid) for pid in pids)
        streak = 0
        deadline = time.monotonic() + max_s
        while time.monotonic() < deadline:
            await trio.sleep(0.5)
            new_cpu = sum(proc_cpu(pid) for pid in pids)
            streak = streak + 1 if new_cpu - cpu < 0.05 else 0
            if streak >= 3:
                return
            cpu = new_cpu
        log(f"  note: the API server was not at rest within {max_s:.0f}s; measuring anyway")

    async def sentinel(
        self, operator: tuple[trio.Process, Path], watch: HandledWatch, within: float
    ) -> float:
        """Create one object and return the seconds until it is handled."""
        self.sentinels += 1
        name = f"sentinel-{self.sentinels:03d}"
        started = time.monotonic()
        await self.api.create_object(self.namespace, name)
        await self.wait_until(
            lambda: name in watch.handled,
            within=within,
            what=f"the sentinel object {name} to be handled",
            operator=operator,
        )
        return watch.handled[name] - started

    # ---- workloads
    async def ceiling_run(self, client: str, n: int, rep: int) -> None:
        label = f"ceiling-{client}-n{n}-r{rep}"
        prefix = f"c{rep}{client[0]}"
        result: dict[str, Any] = {"client": client, "n": n, "repeat": rep, "ok": False}
        self.results["ceiling"].append(result)
        log(f"{label}: creating {n} objects, then two merge-patches each ({client})")
        try:
            timeout = 60 + n * self.config.timeout_factor
            created = await self.run_load(
                self.load_argv(client, "create", prefix, n, self.config.creators),
                f"{label}-create",
                within=timeout,
            )
            result["create_per_s"] = n / (created["finished"] - created["started"])
            m0 = await self.api.metrics()
            patched = await self.run_load(
                self.load_argv(client, "patch", prefix, n, self.config.ceiling_concurrency),
                f"{label}-patch",
                within=timeout,
            )
            m1 = await self.api.metrics()
            elapsed = patched["finished"] - patched["started"]
            result.update(
                ok=not patched["errors"] and not created["errors"],
                seconds=elapsed,
                objects_per_s=n / elapsed,
                client_cpu_ms_per_object=patched["cpu"] * 1000 / n,
                errors={**created["errors"], **patched["errors"]},
                calls=metrics_delta(m1, m0),
                **usage_figures(patched["usage"], n),
            )
            log(
                f"  {client}: {result['objects_per_s']:.1f} objects/s "
                f"(creates: {result['create_per_s']:.1f}/s)"
            )
        except BaseException as exc:
            record_failure(result, exc)
        finally:
            with trio.CancelScope(shield=True):
                await self.api.delete_all_objects(self.namespace)

    async def burst_run(
        self, framework: str, variant: str, n: int, rep: int, restart: bool
    ) -> None:
        label = f"{framework}-{variant}-n{n}-r{rep}"
        prefix = f"b{rep}{variant[0]}{framework[0]}-"
        result: dict[str, Any] = {
            "framework": framework,
            "variant": variant,
            "n": n,
            "repeat": rep,
            "ok": False,
        }
        self.results["burst"].append(result)
        log(f"{label}: burst of {n} objects")
        cfg = self.config
        watch = HandledWatch(self.api, self.namespace)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(watch.run)
                operator = await self.start_operator(framework, variant, label)
                process, log_path = operator
                result["log"] = str(log_path)
                spawned = time.monotonic()
                try:
                    await self.sentinel(operator, watch, within=120)
                    result["startup_s"] = time.monotonic() - spawned
                    await self.cluster_quiet()
                    m0, cpu0, _ = await self.settle(process.pid)
                    harness0 = Counter(watch.harness_calls)
                    timeout = 60 + n * cfg.timeout_factor
                    argv = self.load_argv("httpx2", "create", prefix.rstrip("-"), n, cfg.creators)
                    t0, usage, created = await self.load_until_handled(
                        argv, label, operator, watch, prefix, n, within=timeout
                    )
                    result["create_per_s"] = n / (created["finished"] - created["started"])
                    result["create_errors"] = created["errors"]
                    done_at = max(watch.handled[k] for k in watch.handled if k.startswith(prefix))
                    cpu_done = proc_cpu(process.pid)
                    m1, cpu1, _ = await self.settle(process.pid)
                    memory = proc_memory(process.pid)
                    latencies = sorted(
                        watch.handled[k] - watch.added[k]
                        for k in watch.handled
                        if k.startswith(prefix)
                    )
                    calls = metrics_delta(m1, m0)
                    # The creates are the load generator's, and the harness's watch may have
                    # had to reconnect or list again: neither is the operator's doing.
                    by_verb = calls["by_verb"]
                    harness = Counter(watch.harness_calls)
                    harness.subtract(harness0)
                    harness["POST"] = n
                    for verb, count in harness.items():
                        by_verb[verb] = by_verb.get(verb, 0) - count
                        if not by_verb[verb]:
                            del by_verb[verb]
                    calls["harness"] = dict(harness)
                    elapsed = done_at - t0
                    mine = {k: t for k, t in watch.handled.items() if k.startswith(prefix)}
                    result.update(
                        ok=True,
                        seconds=elapsed,
                        objects_per_s=n / elapsed,
                        latency_p50_s=latencies[len(latencies) // 2],
                        latency_p95_s=latencies[
                            min(len(latencies) - 1, int(len(latencies) * 0.95))
                        ],
                        latency_p99_s=percentile(latencies, 0.99),
                        # The creators' order is the names' order (32 at a time), which the
                        # harness's watch sees as ADDED events: that is the arrival order.
                        order=order_figures({k: watch.added[k] for k in mine}, mine),
                        cpu_s=cpu1 - cpu0,
                        cpu_s_until_handled=cpu_done - cpu0,
                        cpu_ms_per_object=(cpu1 - cpu0) * 1000 / n,
                        **handled_figures(n, memory, calls, watch, usage),
                    )
                    check_handled_by(result, watch, framework)
                    log(
                        f"  {framework}/{variant}: {result['objects_per_s']:.1f} objects/s, "
                        f"CPU {result['cpu_ms_per_object']:.2f} ms/object, "
                        f"peak RSS {result['peak_rss_mib']:.0f} MiB, "
                        f"calls/object {result['calls_total_per_object']:.2f} {by_verb}"
                    )
                finally:
                    result.update(await stop_process(process))
                    result["log_findings"] = log_findings(log_path)
                if restart and result["ok"]:
                    await self.restart_run(framework, variant, n, rep, watch)
                nursery.cancel_scope.cancel()
        except BaseException as exc:
            record_failure(result, exc)
        finally:
            with trio.CancelScope(shield=True):
                await self.api.delete_all_objects(self.namespace)

    async def open_run(self, framework: str, rate: float, n: int, rep: int) -> None:
        """Steady load: N objects created on a fixed schedule (one every 1/rate s, each create
        fired at its time whatever the earlier ones do: an open loop) while the operator runs;
        per object, the time from sending its create to the harness seeing it handled."""
        label = f"{framework}-open{rate:g}-n{n}-r{rep}"
        prefix = f"o{rep}{framework[0]}{int(rate)}-"
        result: dict[str, Any] = {
            "framework": framework,
            "variant": "async",
            "rate": rate,
            "n": n,
            "repeat": rep,
            "ok": False,
        }
        self.results["open"].append(result)
        log(f"{label}: {n} objects at {rate:g}/s (open loop)")
        cfg = self.config
        watch = HandledWatch(self.api, self.namespace)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(watch.run)
                trace = cfg.work_dir / f"{label}.trace.jsonl"
                trace.unlink(missing_ok=True)
                # The trace costs the operators CPU (a JSON line per event and request, a loop-lag
                # sampler): only on request, so that the goals are measured without it.
                env = {"BENCH_TRACE": str(trace)} if cfg.open_trace else {}
                operator = await self.start_operator(framework, "async", label, **env)
                process, log_path = operator
                result["log"] = str(log_path)
                spawned = time.monotonic()
                traced: tuple[dict[str, float], list[str], tuple[float, float]] | None = None
                try:
                    await self.sentinel(operator, watch, within=120)
                    result["startup_s"] = time.monotonic() - spawned
                    await self.cluster_quiet()
                    m0, cpu0, _ = await self.settle(process.pid)
                    harness0 = Counter(watch.harness_calls)
                    timeout = 60 + n / rate + n * cfg.timeout_factor
                    # Enough connections that the creates never wait for one at these rates.
                    argv = self.load_argv(OPEN_CLIENT, "create", prefix.rstrip("-"), n, 64)
                    argv += ["--rate", str(rate)]
                    _, usage, created = await self.load_until_handled(
                        argv, label, operator, watch, prefix, n, within=timeout
                    )
                    m1, cpu1, _ = await self.settle(process.pid)
                    memory = proc_memory(process.pid)
                    sent: dict[str, float] = created["sent"]
                    mine = {k: t for k, t in watch.handled.items() if k.startswith(prefix)}
                    latencies = sorted(mine[k] - sent[k] for k in mine if k in sent)
                    lags = sorted(created["lags"])
                    # The API server's part: from sending the create to the watch seeing it.
                    seen = sorted(watch.added[k] - sent[k] for k in mine if k in sent)
                    calls = self.calls_by_operator(m1, m0, watch, harness0)
                    calls["by_verb"]["POST"] = calls["by_verb"].get("POST", 0) - n
                    if not calls["by_verb"]["POST"]:
                        del calls["by_verb"]["POST"]
                    span = created["finished"] - created["started"]
                    result.update(
                        ok=not created["errors"],
                        create_errors=created["errors"],
                        achieved_rate=n / span if span > 0 else None,
                        schedule_lag_p50_s=percentile(lags, 0.5),
                        schedule_lag_p99_s=percentile(lags, 0.99),
                        schedule_lag_max_s=lags[-1],
                        latency_p50_s=percentile(latencies, 0.5),
                        latency_p95_s=percentile(latencies, 0.95),
                        latency_p99_s=percentile(latencies, 0.99),
                        latency_max_s=latencies[-1],
                        seen_p50_s=percentile(seen, 0.5),
                        seen_p95_s=percentile(seen, 0.95),
                        order=order_figures({k: sent[k] for k in mine if k in sent}, mine),
                        cpu_s=cpu1 - cpu0,
                        cpu_ms_per_object=(cpu1 - cpu0) * 1000 / n,
                        cpu_percent=(cpu1 - cpu0) * 100 / usage["elapsed"],
                        **handled_figures(n, memory, calls, watch, usage),
                    )
                    check_handled_by(result, watch, framework)
                    window = (created["started"], max(mine.values()))
                    traced = (sent, list(mine), window)
                    order = result["order"]
                    log(
                        f"  {framework} at {rate:g}/s: latency p50/p95/p99 "
                        f"{result['latency_p50_s']:.3f}/{result['latency_p95_s']:.3f}/"
                        f"{result['latency_p99_s']:.3f} s, CPU "
                        f"{result['cpu_ms_per_object']:.2f} ms/object, order: Spearman "
                        f"{order.get('spearman', 0):.3f}, max displacement "
                        f"{order.get('displacement_max')}, schedule lag p99 "
                        f"{result['schedule_lag_p99_s'] * 1000:.1f} ms"
                    )
                finally:
                    result.update(await stop_process(process))
                    result["log_findings"] = log_findings(log_path)
                if traced is not None and cfg.open_trace:
                    # Written at the operator's exit: read once it has stopped.
                    sent_at, names, window = traced
                    # Per object, for a closer look than the spreads (see trace_breakdown).
                    times = {
                        k: [f.get(k) for f in (sent_at, watch.added, watch.handled, watch.marked)]
                        for k in names
                    }
                    (cfg.work_dir / f"{label}.times.json").write_text(json.dumps(times))
                    result["breakdown"] = trace_breakdown(trace, sent_at, watch, names, window)
                    log(f"  {framework} at {rate:g}/s: {format_breakdown(result['breakdown'])}")
                nursery.cancel_scope.cancel()
        except BaseException as exc:
            record_failure(result, exc)
        finally:
            with trio.CancelScope(shield=True):
                await self.api.delete_all_objects(self.namespace)

    async def restart_run(
        self,
        framework: str,
        variant: str,
        n: int,
        rep: int,
        watch: HandledWatch,
        origin: str = "burst",
        idle: float | None = None,
    ) -> None:
        """The operator starts over N objects handled already: nothing to do. `origin` says
        how they came to be handled: by this framework in a burst or a takeover just before,
        or created pre-handled by the load generator."""
        label = f"{framework}-{variant}-n{n}-r{rep}-restart-{origin}"
        idle = self.config.idle if idle is None else idle
        result: dict[str, Any] = {
            "framework": framework,
            "variant": variant,
            "origin": origin,
            "n": n,
            "repeat": rep,
            "ok": False,
            "idle_window_s": idle,
        }
        self.results["restart"].append(result)
        log(f"{label}: restart over {n} handled objects ({origin}), then {idle:.0f}s idle")
        m0 = await self.api.metrics()
        harness0 = Counter(watch.harness_calls)
        operator = await self.start_operator(framework, variant, label)
        process, log_path = operator
        account = CpuAccount({"operator": process.pid, **self.config.cluster_pids})
        usage0 = account.sample()
        result["log"] = str(log_path)
        spawned = time.monotonic()
        try:
            # Quiet = the initial LIST happened and then <10 ms CPU per 0.5 s, 3 times in a row.
            streak, streak_start = 0, (spawned, 0.0)
            cpu = 0.0
            deadline = spawned + 60 + n * self.config.timeout_factor
            while True:
                if process.returncode is not None:
                    raise BenchError(
                        f"the operator exited with code {process.returncode}; "
                        f"log {log_path}:\n{log_tail(log_path)}"
                    )
                if time.monotonic() > deadline:
                    raise BenchError(f"the restarted operator was never quiet; log {log_path}")
                await trio.sleep(0.5)
                listed = metrics_delta(await self.api.metrics(), m0)["by_verb"].get("LIST", 0)
                new_cpu, now = proc_cpu(process.pid), time.monotonic()
                if listed and new_cpu - cpu < 0.010:
                    streak += 1
                    if streak >= 3:
                        break
                else:
                    streak, streak_start = 0, (now, new_cpu)
                cpu = new_cpu
            quiet_at, quiet_cpu = streak_start
            result["restart_s"] = quiet_at - spawned
            result["restart_cpu_s"] = quiet_cpu
            result["restart_rss_mib"] = proc_memory(process.pid).get("VmHWM")
            idle0, threads0 = proc_cpu(process.pid), proc_threads_ns(process.pid)
            await trio.sleep(idle)
            idle_cpu = proc_cpu(process.pid) - idle0
            # The same window counted in the scheduler's nanoseconds: an idle operator spends a
            # few clock ticks per minute, so the ticks alone say 0 or 10 ms (#33 item 3).
            idle_ns = threads_ns_delta(threads0, proc_threads_ns(process.pid))
            m1 = await self.api.metrics()
            memory = proc_memory(process.pid)
            calls = metrics_delta(m1, m0)
            harness = Counter(watch.harness_calls)
            harness.subtract(harness0)
            for verb, count in harness.items():  # the harness's watch, not the operator
                calls["by_verb"][verb] = calls["by_verb"].get(verb, 0) - count
                if not calls["by_verb"][verb]:
                    del calls["by_verb"][verb]
            calls["harness"] = dict(harness)
            patches = sum(v for k, v in calls["by_verb"].items() if k.startswith("PATCH"))
            result.update(
                ok=True,
                idle_cpu_s=idle_cpu,
                idle_cpu_percent=idle_cpu * 100 / idle if idle else None,
                idle_cpu_ms_per_min_ticks=idle_cpu * 1000 * 60 / idle if idle else None,
                idle_cpu_tick_ms=1000 / CLK_TCK,
                idle_cpu_ms_per_min=(
                    idle_ns / 1e6 * 60 / idle if idle and idle_ns is not None else None
                ),
                steady_rss_mib=memory.get("VmRSS"),
                peak_rss_mib=memory.get("VmHWM"),
                calls=calls,
                patches=patches,
                **usage_figures(CpuAccount.delta(usage0, account.sample()), n),
            )
            # Still alive and working?
            result["sentinel_after_idle_s"] = await self.sentinel(operator, watch, within=60)
            log(
                f"  {framework}: quiet after {result['restart_s']:.2f}s "
                f"({result['restart_cpu_s']:.2f} CPU s), {patches} patches, idle CPU "
                f"{idle_cpu * 1000:.0f} ms / {idle:.0f}s "
                f"({result['idle_cpu_ms_per_min'] or 0:.2f} ms per minute by schedstat), "
                f"RSS {result['steady_rss_mib']:.0f} MiB"
            )
            if patches:
                log(f"  note: {framework} patched {patches} times on a restart with nothing to do")
        except BaseException as exc:
            record_failure(result, exc)
        finally:
            result.update(await stop_process(process))
            result["log_findings"] = log_findings(log_path)

    # ---- objects created with no operator running
    async def create_objects(self, mode: str, prefix: str, n: int, label: str) -> dict[str, Any]:
        """`n` objects named `prefix`-00000... by the load generator (`mode`: create, or
        create-handled for objects that look handled already); its report."""
        started = time.monotonic()
        done = await self.run_load(
            self.load_argv("httpx2", mode, prefix, n, self.config.creators),
            f"{label}-{mode}",
            within=60 + n * self.config.timeout_factor,
        )
        if done["errors"]:
            raise BenchError(f"creating {n} objects failed: {done['errors']}")
        log(f"  {n} objects created ({mode}) in {time.monotonic() - started:.1f}s")
        return done

    def calls_by_operator(
        self,
        m1: Counter[MetricsKey],
        m0: Counter[MetricsKey],
        watch: HandledWatch,
        harness0: Counter[str],
    ) -> dict[str, Any]:
        """The API calls between two snapshots, minus those of the harness's own watch."""
        calls = metrics_delta(m1, m0)
        harness = Counter(watch.harness_calls)
        harness.subtract(harness0)
        for verb, count in harness.items():
            calls["by_verb"][verb] = calls["by_verb"].get(verb, 0) - count
            if not calls["by_verb"][verb]:
                del calls["by_verb"][verb]
        calls["harness"] = dict(harness)
        return calls

    async def takeover_run(self, framework: str, n: int, rep: int, *, kind: str) -> None:
        """N never-handled objects exist; the operator (async create handler) starts and
        handles them all. kind="takeover": then it is stopped and restarted over them (steady
        RSS and idle CPU with N handled objects); kind="shutdown": only its stop is of
        interest (the graceful stop with N handled objects)."""
        label = f"{framework}-{kind}-n{n}-r{rep}"
        prefix = f"{kind[0]}{rep}{framework[0]}"
        result: dict[str, Any] = {
            "framework": framework,
            "variant": "plain",
            "n": n,
            "repeat": rep,
            "ok": False,
        }
        self.results[kind].append(result)
        log(f"{label}: {n} never-handled objects, then the operator starts")
        cfg = self.config
        watch = HandledWatch(self.api, self.namespace)
        try:
            await self.create_objects("create", prefix, n, label)
            async with trio.open_nursery() as nursery:
                await nursery.start(watch.run)
                m0 = await self.api.metrics()
                harness0 = Counter(watch.harness_calls)
                operator = await self.start_operator(framework, "async", label)
                process, log_path = operator
                account = CpuAccount({"operator": process.pid, **cfg.cluster_pids})
                usage0 = account.sample()
                spawned = usage0["at"]
                result["log"] = str(log_path)
                try:
                    await self.wait_until(
                        lambda: watch.count(f"{prefix}-") >= n,
                        within=60 + n * cfg.timeout_factor,
                        what=f"all {n} objects to be handled",
                        operator=operator,
                        progress=lambda: f"{watch.count(f'{prefix}-')} handled so far",
                    )
                    usage = CpuAccount.delta(usage0, account.sample())
                    times = [t for k, t in watch.handled.items() if k.startswith(f"{prefix}-")]
                    m1, cpu1, _ = await self.settle(process.pid)
                    memory = proc_memory(process.pid)
                    calls = self.calls_by_operator(m1, m0, watch, harness0)
                    elapsed = max(times) - spawned
                    result.update(
                        ok=True,
                        seconds=elapsed,
                        first_handled_s=min(times) - spawned,
                        objects_per_s=n / elapsed,
                        cpu_s=cpu1,
                        cpu_ms_per_object=cpu1 * 1000 / n,
                        **handled_figures(n, memory, calls, watch, usage),
                    )
                    check_handled_by(result, watch, framework)
                    log(
                        f"  {framework}: all {n} handled {elapsed:.2f}s after the start "
                        f"({result['objects_per_s']:.1f} objects/s), CPU "
                        f"{result['cpu_ms_per_object']:.2f} ms/object, "
                        f"peak RSS {result['peak_rss_mib']:.0f} MiB"
                    )
                finally:
                    result.update(await stop_process(process))
                    result["log_findings"] = log_findings(log_path)
                    log(f"  graceful stop with {n} handled objects: {result['stop_s']:.2f}s")
                if kind == "takeover" and result["ok"]:
                    await self.restart_run(
                        framework, "async", n, rep, watch, origin="takeover", idle=cfg.takeover_idle
                    )
                nursery.cancel_scope.cancel()
        except BaseException as exc:
            record_failure(result, exc)
        finally:
            with trio.CancelScope(shield=True):
                await self.api.delete_all_objects(self.namespace)

    async def steady_runs(self, n: int) -> None:
        """N pre-handled objects (created once); each framework starts over them, repeatedly."""
        cfg = self.config
        label = f"steady-n{n}"
        log(f"{label}: {n} pre-handled objects, each framework restarted over them")
        watch = HandledWatch(self.api, self.namespace)
        try:
            await self.create_objects("create-handled", "s", n, label)
            async with trio.open_nursery() as nursery:
                await nursery.start(watch.run)
                for rep in range(cfg.steady_repeat):
                    order = cfg.frameworks if rep % 2 == 0 else list(reversed(cfg.frameworks))
                    for framework in order:
                        await self.restart_run(
                            framework, "async", n, rep, watch, origin="pre-handled"
                        )
                nursery.cancel_scope.cancel()
        except BaseException as exc:
            error = run_error(exc)
            if error is None:
                raise
            self.results["restart"].append(
                {"origin": "pre-handled", "n": n, "ok": False, "error": error}
            )
            log(f"  FAILED: {error}")
        finally:
            with trio.CancelScope(shield=True):
                await self.api.delete_all_objects(self.namespace, within=120 + n * 0.1)

    async def background_run(
        self, framework: str, n: int, rep: int, *, window: float, kind: str
    ) -> None:
        """N objects exist; the operator with one daemon and one timer per object starts.
        Until all daemons run, then a window with all of them (and the timers) running, then
        the graceful stop. kind="shutdown" (window 0) is only about the stop."""
        label = f"{framework}-{kind}-daemons-n{n}-r{rep}"
        prefix = f"{kind[0]}d{rep}{framework[0]}"
        state_file = self.config.work_dir / f"{label}.state.json"
        result: dict[str, Any] = {
            "framework": framework,
            "variant": "daemons",
            "n": n,
            "repeat": rep,
            "ok": False,
            "window_s": window,
        }
        self.results[kind].append(result)
        log(f"{label}: {n} objects, then the operator with {n} daemons and {n} timers")
        cfg = self.config

        def state() -> dict[str, Any]:
            try:
                return dict(json.loads(state_file.read_text()))
            except (OSError, ValueError):
                return {}

        try:
            await self.create_objects("create", prefix, n, label)
            m0 = await self.api.metrics()
            operator = await self.start_operator(
                framework,
                "background",
                label,
                BENCH_STATE_FILE=str(state_file),
                BENCH_EXPECTED=str(n),
            )
            process, log_path = operator
            spawned = time.monotonic()
            result["log"] = str(log_path)
            try:
                await self.wait_until(
                    lambda: state().get("daemons_started", 0) >= n,
                    within=60 + n * cfg.timeout_factor,
                    what=f"all {n} daemons to run",
                    operator=operator,
                    progress=lambda: f"{state().get('daemons_started', 0)} running so far",
                )
                result["all_daemons_s"] = state()["at"] - spawned
                result["startup_cpu_s"] = proc_cpu(process.pid)
                result["startup_peak_rss_mib"] = proc_memory(process.pid).get("VmHWM")
                result["startup_calls"] = metrics_delta(await self.api.metrics(), m0)
                log(
                    f"  {framework}: all {n} daemons run {result['all_daemons_s']:.2f}s after "
                    f"the start ({result['startup_cpu_s']:.2f} CPU s)"
                )
                # What follows the start (finalizers, the first round of timers) is over
                # when the operator is quiet between two rounds of timers.
                await self.settle(process.pid, max_s=20)
                if window > 0:
                    account = CpuAccount({"operator": process.pid, **cfg.cluster_pids})
                    usage0 = account.sample()
                    w0, state0 = await self.api.metrics(), state()
                    await trio.sleep(window)
                    w1, state1 = await self.api.metrics(), state()
                    usage = CpuAccount.delta(usage0, account.sample())
                    memory = proc_memory(process.pid)
                    calls = metrics_delta(w1, w0)
                    result.update(
                        window_cpu_s=usage["operator"],
                        window_cpu_percent=usage["operator"] * 100 / usage["elapsed"],
                        window_calls=calls,
                        window_calls_total=sum(calls["by_verb"].values()),
                        timer_runs_per_object=(
                            (state1.get("timer_runs", 0) - state0.get("timer_runs", 0)) / n
                        ),
                        steady_rss_mib=memory.get("VmRSS"),
                        peak_rss_mib=memory.get("VmHWM"),
                        **usage_figures(usage, n),
                    )
                    log(
                        f"  {window:.0f}s with {n} daemons + timers: CPU "
                        f"{result['window_cpu_s'] * 1000:.0f} ms, "
                        f"{result['window_calls_total']} API calls, "
                        f"RSS {result['steady_rss_mib']:.0f} MiB "
                        f"(peak {result['peak_rss_mib']:.0f}), "
                        f"{result['timer_runs_per_object']:.1f} timer runs per object"
                    )
                else:
                    result["peak_rss_mib"] = proc_memory(process.pid).get("VmHWM")
                result["ok"] = process.returncode is None
            finally:
                result.update(await stop_process(process))
                result["log_findings"] = log_findings(log_path)
                log(f"  graceful stop with {n} daemons: {result['stop_s']:.2f}s")
        except BaseException as exc:
            record_failure(result, exc)
        finally:
            with trio.CancelScope(shield=True):
                await self.api.delete_all_objects(self.namespace)

    @contextlib.contextmanager
    def timed(self, part: str) -> Iterator[None]:
        """Record how long a part of the plan took (to check the estimate printed at the start)."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.timings.append({"part": part, "seconds": time.monotonic() - started})

    async def run(self) -> None:
        cfg = self.config
        for n, repeat in zip(cfg.sizes, cfg.repeats, strict=True):
            variants = cfg.variants if n == cfg.sizes[0] else cfg.big_variants
            for rep in range(repeat):
                if cfg.ceiling and n in cfg.ceiling_sizes and rep < cfg.ceiling_repeat:
                    with self.timed(f"ceiling {n}"):
                        for client in cfg.clients:
                            await self.ceiling_run(client, n, rep)
                with self.timed(f"burst {n}"):
                    for framework in self.order(rep):
                        for variant in variants:
                            restart = cfg.restart and variant == variants[0]
                            await self.burst_run(framework, variant, n, rep, restart)
        # Round by round, each rate while it has repetitions left (the top rate sits on the edge
        # of the API server's saturation: its latency is bimodal, so it gets the most).
        for rep in range(max(cfg.open_repeat, default=0) if cfg.open_size else 0):
            for rate, times in zip(cfg.open_rates, cfg.open_repeat, strict=True):
                if rep >= times:
                    continue
                with self.timed(f"open loop {rate:g}/s"):
                    for framework in self.order(rep):
                        await self.open_run(framework, rate, cfg.open_size, rep)
                    if cfg.open_raw and rate == max(cfg.open_rates):
                        await self.open_run("raw", rate, cfg.open_size, rep)
        for rep in range(cfg.shutdown_repeat if cfg.shutdown_size else 0):
            with self.timed(f"shutdown {cfg.shutdown_size}"):
                for framework in self.order(rep):
                    await self.takeover_run(framework, cfg.shutdown_size, rep, kind="shutdown")
                    await self.background_run(
                        framework, cfg.shutdown_size, rep, window=0, kind="shutdown"
                    )
        for rep in range(cfg.takeover_repeat if cfg.takeover_size else 0):
            with self.timed(f"takeover {cfg.takeover_size}"):
                for framework in self.order(rep):
                    await self.takeover_run(framework, cfg.takeover_size, rep, kind="takeover")
        for n in cfg.steady_sizes:
            with self.timed(f"steady {n}"):
                await self.steady_runs(n)
        for rep in range(cfg.background_repeat if cfg.background_size else 0):
            with self.timed(f"background {cfg.background_size}"):
                for framework in self.order(rep):
                    await self.background_run(
                        framework,
                        cfg.background_size,
                        rep,
                        window=cfg.background_window,
                        kind="background",
                    )

    def order(self, rep: int) -> list[str]:
        """The frameworks' order alternates between repetitions."""
        frameworks = self.config.frameworks
        return frameworks if rep % 2 == 0 else list(reversed(frameworks))


# ------------------------------------------------------------------------------ setup
def kopf_python(explicit: str | None) -> str:
    if explicit:
        return explicit
    log(f"preparing Kopf {KOPF_VERSION} (scripts/kopf-venv)")
    done = subprocess.run(
        [str(ROOT / "scripts" / "kopf-venv")],
        capture_output=True,
        text=True,
        env={**os.environ, "TRIOPERATOR_KOPF_VERSION": KOPF_VERSION},
    )
    if done.returncode != 0:
        raise SystemExit(f"scripts/kopf-venv failed:\n{done.stderr}")
    return done.stdout.strip().splitlines()[-1]


def precompile_trioperator(python: str) -> None:
    """Write trioperator's bytecode before any operator starts, as an installed package has it.

    With ``PYTHONDONTWRITEBYTECODE`` in the environment (the children inherit it), a source
    checkout would otherwise be compiled again at every start: ~0.4 s of CPU per start-up that
    Kopf's venv (pip compiles on install) never pays.
    """
    code = (
        "import compileall, pathlib, trioperator; "
        "compileall.compile_dir(pathlib.Path(trioperator.__file__).parent, quiet=1)"
    )
    subprocess.run([python, "-c", code], check=True)


def login_libraries(python: str | None) -> str:
    """Kopf's piggybacking: the client libraries a framework logs in through, if installed."""
    if not python:
        return "-"
    code = (
        "import importlib.util as u; "
        "print(','.join(n for n in ('pykube', 'kubernetes', 'kubernetes_asyncio') "
        "if u.find_spec(n)) or 'none')"
    )
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "?"


def trioperator_python(explicit: str | None) -> str:
    """The python the operator under test runs with: by default a venv of this checkout with
    only its run-time dependencies (scripts/trioperator-venv), as Kopf runs from its own venv;
    ``current``: the python running the harness (the development venv)."""
    if explicit == "current":
        return sys.executable
    if explicit:
        return explicit
    log("preparing trioperator's venv (scripts/trioperator-venv)")
    done = subprocess.run(
        [str(ROOT / "scripts" / "trioperator-venv")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": os.environ.get("PYTHON", sys.executable)},
    )
    if done.returncode != 0:
        raise SystemExit(f"scripts/trioperator-venv failed:\n{done.stderr}")
    return done.stdout.strip().splitlines()[-1]


def trioperator_cmd(python: str) -> list[str]:
    script = Path(python).parent / "trioperator"
    return [str(script)] if script.exists() else [python, "-m", "trioperator"]


@dataclasses.dataclass
class ClusterHandle:
    kubeconfig: str
    isolated_dir: str | None = None  # set when this run started its own cluster
    started_here: bool = False
    state_dir: str | None = None  # scripts/kube-up's state (pid files), if the cluster is ours

    def pids(self) -> dict[str, int]:
        """kube-apiserver's and etcd's pids, to account for their CPU (empty if unknown)."""
        pids: dict[str, int] = {}
        if not self.state_dir:
            return pids
        for name, file in (("apiserver", "kube-apiserver.pid"), ("etcd", "etcd.pid")):
            with contextlib.suppress(OSError, ValueError):
                pid = int((Path(self.state_dir) / file).read_text().strip())
                if self.state_dir in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
                    pids[name] = pid
        return pids if len(pids) == 2 else {}


def start_cluster(args: argparse.Namespace) -> ClusterHandle:
    explicit = args.kubeconfig or os.environ.get("TRIOPERATOR_KUBECONFIG")
    if explicit:
        return ClusterHandle(kubeconfig=explicit)
    env = dict(os.environ)
    handle = ClusterHandle(kubeconfig="")
    if args.cluster == "isolated":
        state = (
            args.kube_dir
            or f"{os.environ.get('TMPDIR', '/tmp')}/trioperator-bench-kube.{os.getuid()}"
        )
        env.update(TRIOPERATOR_KUBE_DIR=state, TRIOPERATOR_KUBE_PORT=str(args.kube_port))
        handle.isolated_dir = handle.state_dir = state
        pidfile = Path(state) / "kube-apiserver.pid"
        handle.started_here = not (
            pidfile.exists() and Path(f"/proc/{pidfile.read_text().strip()}").exists()
        )
        log(f"starting an isolated kube-apiserver in {state} on port {args.kube_port}")
    else:
        log("using the shared local cluster (scripts/kube-up)")
        uid = os.getuid()
        handle.state_dir = os.environ.get("TRIOPERATOR_KUBE_DIR") or (
            f"{os.environ.get('TMPDIR', '/tmp')}/trioperator-kube.{uid}"
        )
    done = subprocess.run(
        [str(ROOT / "scripts" / "kube-up")], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"scripts/kube-up failed:\n{done.stderr}")
    handle.kubeconfig = done.stdout.strip().splitlines()[-1]
    return handle


def stop_cluster(handle: ClusterHandle, keep: bool) -> None:
    if handle.isolated_dir and handle.started_here and not keep:
        log(f"stopping the isolated cluster ({handle.isolated_dir})")
        subprocess.run(
            [str(ROOT / "scripts" / "kube-down"), "--purge"],
            env={**os.environ, "TRIOPERATOR_KUBE_DIR": handle.isolated_dir},
            capture_output=True,
            check=False,
        )


def machine_info(config: Config, api_version: str) -> dict[str, Any]:
    def first(path: str, key: str) -> str:
        try:
            for line in Path(path).read_text().splitlines():
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return "?"

    def version_in(python: str | None, dist: str) -> str:
        if not python:
            return "-"
        code = f"import importlib.metadata as m; print(m.version({dist!r}))"
        try:
            done = subprocess.run([python, "-c", code], capture_output=True, text=True)
        except OSError:
            return "?"
        return done.stdout.strip() or "-"

    def python_version(python: str | None) -> str:
        if not python:
            return "-"
        code = "import platform; print(platform.python_version())"
        try:
            done = subprocess.run([python, "-c", code], capture_output=True, text=True)
        except OSError:
            return "?"
        return done.stdout.strip() or "?"

    etcd = (
        subprocess.run(["etcd", "--version"], capture_output=True, text=True, check=False)
        if shutil_which("etcd")
        else None
    )
    mem_kib = first("/proc/meminfo", "MemTotal").split()[0]
    return {
        "cpu_model": first("/proc/cpuinfo", "model name"),
        "cores": os.cpu_count(),
        "ram_gib": round(int(mem_kib) / 1024 / 1024, 1) if mem_kib.isdigit() else None,
        "kernel": platform.release(),
        "python": python_version(config.trioperator_python),
        "python_kopf_venv": python_version(config.kopf_python),
        "trioperator": version_in(config.trioperator_python, "trioperator"),
        "kopf": version_in(config.kopf_python, "kopf"),
        "httpx2": version_in(sys.executable, "httpx2"),  # the harness's client, not the operator's
        "trio": version_in(config.trioperator_python, "trio"),
        "h11": version_in(config.trioperator_python, "h11"),
        "aiohttp": version_in(config.kopf_python, "aiohttp"),
        # Each login library found is imported at every start (Kopf's default login handlers).
        "login_libraries": login_libraries(config.trioperator_python),
        "login_libraries_kopf_venv": login_libraries(config.kopf_python),
        "kube_apiserver": api_version,
        "etcd": (etcd.stdout.split("\n")[0].split(":")[-1].strip() if etcd else "?"),
    }


def shutil_which(name: str) -> str | None:
    import shutil

    return shutil.which(name)


def run_decode(config: Config) -> dict[str, Any] | None:
    script = HERE / "bench_decode.py"
    if not script.exists():
        log("bench_decode.py is not there; skipping the decoding micro-benchmark")
        return None
    log(
        f"micro: watch-event decoding ({config.decode_events} events, "
        f"best of {config.decode_rounds})"
    )
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            "--events",
            str(config.decode_events),
            "--rounds",
            str(config.decode_rounds),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=str(ROOT),
    )
    if done.returncode != 0:
        log(f"  bench_decode.py failed: {done.stderr[-500:]}")
        return {"error": done.stderr[-2000:]}
    rows = []
    for line in done.stdout.splitlines():
        match = re.match(r"^(.+?)\s{2,}([\d,]+)\s+([\d.]+)\s+([\d.]+)x\s*$", line)
        if match:
            rows.append(
                {
                    "decoder": match.group(1).strip(),
                    "events_per_s": float(match.group(2).replace(",", "")),
                    "mib_per_s": float(match.group(3)),
                    "vs_json": float(match.group(4)),
                }
            )
    return {"rows": rows, "output": done.stdout}


# ------------------------------------------------------------------------------ main
DEFAULTS = {
    # option: (default, with --quick)
    "sizes": ("500,2000", "100"),
    # Kopf's CPU per object moves by 10-30% from run to run (4.18-4.76 ms in three 2,000
    # bursts in a row; 3.64 in another run): the goals' ratios take medians of several runs.
    # Five of the short 500-object bursts (4.74-5.26 ms for Kopf's async handler in three runs
    # of one default run, 0.42x with a median of three), three of the 2,000-object ones.
    "repeat": ("5,3", "1"),
    "idle": (60.0, 15.0),
    "takeover_idle": (30.0, 15.0),
    "takeover_size": (2000, 200),
    "takeover_repeat": (1, 1),
    "steady_sizes": ("10000", "500"),
    "steady_repeat": (1, 1),
    "background_size": (1000, 100),
    "background_repeat": (1, 1),
    "background_window": (60.0, 15.0),
    "shutdown_size": (100, 50),
    "shutdown_repeat": (1, 1),
    "ceiling_repeat": (1, 1),
    "open_rates": ("40,120,160", "40,120,160"),
    "open_size": (2400, 600),
    "open_repeat": ("2,2,3", "1"),
}


GOALS_ONLY = {
    # option: value with --goals-only (unless given): only the workloads of the goals' rows in
    # RESULTS.md, one repetition each, so that one run takes ~12 min on 2 cores and --runs 3
    # gives each goal three independent verdicts. From the parts' measured durations in the
    # committed RESULTS.md (24.6 min run; estimate() expected 41 there, it overestimates ~1.7x):
    # burst 500 async+sync x 1 (4 runs of ~10.5 s) 0.7 min, burst 2,000 x 1 (2 of ~25 s)
    # 0.9 min, open loop 1,200 at 40/120/160 (2+2+3 runs, raw client included, of ~45/26/22 s)
    # 3.6 min, takeover 2,000 2.0 min, steady 10,000 3.3 min, background 1,000 with a 30-s
    # window 1.9 min, the ceiling of 500 (aiohttp only: the raw-client floor) 0.1 min:
    # ~12.5 min with the cluster's start and the cleanups.
    "sizes": "500,2000",
    "repeat": "1",
    "clients": "aiohttp",
    "open_size": 1200,
    "open_repeat": "1",
    "background_window": 30.0,
    "shutdown_size": 0,
    "no_decode": True,
}


def estimate(args: argparse.Namespace) -> list[tuple[str, float]]:
    """The plan, part by part, with the seconds each part is expected to take on 2 cores
    (measured on a quiet 2-core machine: the costs per object below are the observed rates of
    creating, handling and deleting objects there; each part's real duration is recorded in
    results.json under "timings" to check them)."""
    fws = len(args.frameworks)
    create, handle, delete = 1 / 150, 1 / 40, 1 / 400  # seconds per object

    def restart(n: int) -> float:
        return 8 + n / 400 + args.idle

    parts: list[tuple[str, float]] = [("cluster start (built), CRD, namespace", 20)]
    for n, repeat in zip(args.sizes, args.repeats, strict=True):
        variants = args.variants if n == args.sizes[0] else args.big_variants
        if not args.no_ceiling and n in args.ceiling_sizes:
            ceiling = len(args.clients) * (6 + n * (create + 1 / 60 + delete))
            times = min(repeat, args.ceiling_repeat)
            parts.append((f"ceiling {n} x {times}", times * ceiling))
        burst = 12 + n * (handle + delete)
        runs = repeat * fws * len(variants)
        extra = repeat * fws * restart(n) if args.restart_after_burst else 0
        parts.append((f"burst {n} {'+'.join(variants)} x {repeat}", runs * burst + extra))
    if args.open_size:
        for rate, times in zip(args.open_rates, args.open_repeat, strict=True):
            n = args.open_size
            one = 15 + n / rate + n * delete
            raw = args.open_raw and rate == max(args.open_rates)
            if times:
                parts.append(
                    (
                        f"open loop {n} at {rate:g}/s x {times}"
                        + (" (+ raw client)" if raw else ""),
                        times * (fws + raw) * one,
                    )
                )
    if args.shutdown_size and args.shutdown_repeat:
        n = args.shutdown_size
        one = 2 * (5 + n * (create + handle + delete))
        parts.append((f"shutdown {n} x {args.shutdown_repeat}", args.shutdown_repeat * fws * one))
    if args.takeover_size and args.takeover_repeat:
        n = args.takeover_size
        one = 12 + n * (create + handle + delete) + restart(n) - args.idle + args.takeover_idle
        parts.append((f"takeover {n} x {args.takeover_repeat}", args.takeover_repeat * fws * one))
    for n in args.steady_sizes:
        one = args.steady_repeat * fws * restart(n)
        parts.append((f"steady {n} x {args.steady_repeat}", n * (create + delete) + one))
    if args.background_size and args.background_repeat:
        n = args.background_size
        one = 25 + n * (create + 2 / 100) + args.background_window
        parts.append(
            (f"background {n} x {args.background_repeat}", args.background_repeat * fws * one)
        )
    if not args.no_decode:
        parts.append(("decoding micro-benchmark", 8))
    if args.runs > 1:
        once = sum(seconds for _, seconds in parts[1:])
        parts.append((f"runs 2-{args.runs}: the same again", (args.runs - 1) * once))
    return parts


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="trioperator vs. Kopf on the same kube-apiserver (see benchmarks/README.md)."
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sizes, one repetition, 15 s windows, a smaller decoding run (~5 min)",
    )
    parser.add_argument(
        "--goals-only",
        action="store_true",
        help="only the workloads the goals use, one repetition each (~12 min per run on 2 "
        "cores); with --runs 3 for verdicts over three runs",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="run the whole plan this many times (one cluster, a namespace per run); the report "
        "states each goal's verdict over the runs (the worst run decides) and their spread",
    )
    group = parser.add_argument_group("burst")
    group.add_argument("--sizes", default=None, help="burst sizes (500,2000)")
    group.add_argument(
        "--repeat",
        default=None,
        help="repetitions per burst size: one number for all, or one per size (5,3)",
    )
    group.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    group.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help="handler flavours at the first size: async,sync",
    )
    group.add_argument(
        "--big-variants",
        default="async",
        help="handler flavours at the other sizes (async; async,sync for all)",
    )
    group.add_argument(
        "--creators", type=int, default=32, help="concurrent creators in the burst (32)"
    )
    group.add_argument(
        "--restart-after-burst",
        action="store_true",
        help="restart + idle window after each burst with the first handler flavour",
    )
    group = parser.add_argument_group("ceiling")
    group.add_argument(
        "--clients", default=",".join(CLIENTS), help="raw clients for the ceiling: httpx2,aiohttp"
    )
    group.add_argument("--ceiling-concurrency", type=int, default=20)
    group.add_argument(
        "--ceiling-sizes", default=None, help="sizes with a ceiling run (the first burst size)"
    )
    group.add_argument(
        "--ceiling-repeat",
        type=int,
        default=None,
        help="repetitions of the ceiling, at most one per burst repetition (1)",
    )
    group.add_argument("--no-ceiling", action="store_true", help="skip the raw-client ceiling")
    group = parser.add_argument_group("takeover, steady state, daemons, shutdown (0: skip)")
    group.add_argument(
        "--idle",
        type=float,
        default=None,
        help="idle window after every restart, seconds (60)",
    )
    group.add_argument(
        "--takeover-size",
        type=int,
        default=None,
        help="never-handled objects an operator starts over; then restart + idle over them (2000)",
    )
    group.add_argument("--takeover-repeat", type=int, default=None, help="(1)")
    group.add_argument(
        "--takeover-idle",
        type=float,
        default=None,
        help="idle window of the restart after the takeover, seconds (30)",
    )
    group.add_argument(
        "--steady-sizes",
        default=None,
        help="pre-handled objects each framework restarts over, then idles (10000)",
    )
    group.add_argument("--steady-repeat", type=int, default=None, help="(1)")
    group.add_argument(
        "--background-size",
        type=int,
        default=None,
        help="objects with a daemon and a timer each (1000)",
    )
    group.add_argument("--background-repeat", type=int, default=None, help="(1)")
    group.add_argument(
        "--background-window",
        type=float,
        default=None,
        help="seconds measured while all daemons and timers run (60)",
    )
    group.add_argument(
        "--shutdown-size",
        type=int,
        default=None,
        help="handled objects, and objects with daemons, for the graceful-stop runs (100)",
    )
    group.add_argument("--shutdown-repeat", type=int, default=None, help="(1)")
    group = parser.add_argument_group("open loop: objects created at a fixed rate")
    group.add_argument(
        "--open-rates", default=None, help='objects/s, one run each (40,120,160; "": skip)'
    )
    group.add_argument(
        "--open-size", type=int, default=None, help="objects per open-loop run (2400)"
    )
    group.add_argument(
        "--open-repeat",
        default=None,
        help="repetitions per rate: one number for all, or one per rate (2,2,3: the top rate "
        "is bimodal; the report takes the medians)",
    )
    group.add_argument(
        "--open-trace",
        action="store_true",
        help="trace where each object's time goes in the operators (operators/tracing.py): "
        "a breakdown per step in the report, at some CPU cost to both frameworks",
    )
    group.add_argument(
        "--no-open-raw",
        dest="open_raw",
        action="store_false",
        help="skip the run at the top rate with a raw client as the operator (operators/raw.py: "
        "the API server's and the load generator's share of the latency)",
    )
    parser.add_argument(
        "--no-decode", action="store_true", help="skip the decoding micro-benchmark"
    )
    parser.add_argument(
        "--profile",
        choices=["cprofile", "py-spy"],
        default="",
        help="profile trioperator: under benchmarks/cpu_profile.py (a CPU-time cProfile, "
        "<label>.prof in the work dir; ~10x slower) or sampled by py-spy on PATH (on-CPU "
        "samples, <label>.pyspy.txt, collapsed stacks; little overhead besides the sampling)",
    )
    parser.add_argument(
        "--timeout-factor",
        type=float,
        default=0.5,
        help="seconds allowed per object on top of 60 s for each wait (0.5)",
    )
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="an existing cluster (also TRIOPERATOR_KUBECONFIG); "
        "default: a cluster from scripts/kube-up, see --cluster",
    )
    parser.add_argument(
        "--cluster",
        choices=["isolated", "shared"],
        default="isolated",
        help="isolated: a separate kube-apiserver+etcd for this run, purged at "
        "the end (default; clean metrics); shared: the usual scripts/kube-up one",
    )
    parser.add_argument("--kube-port", type=int, default=18443)
    parser.add_argument("--kube-dir", default=None)
    parser.add_argument("--keep-cluster", action="store_true")
    parser.add_argument(
        "--kopf-python",
        default=None,
        help="the python of a venv with kopf (default: scripts/kopf-venv)",
    )
    parser.add_argument(
        "--trioperator-python",
        default=None,
        help="the python the operator under test runs with (default: scripts/trioperator-venv, "
        "this checkout with its run-time dependencies only; 'current': this python)",
    )
    parser.add_argument("--out", default=str(HERE), help="where RESULTS.md/results.json go")
    parser.add_argument(
        "--work-dir",
        default=str(HERE / ".work"),
        help="operators' and load generators' logs (a subdirectory per run)",
    )
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="print the plan and its expected duration, and exit",
    )
    args = parser.parse_args(argv)
    if args.quick and args.goals_only:
        parser.error("--quick and --goals-only are two different profiles: choose one")
    if args.runs < 1:
        parser.error("--runs: at least 1")
    if args.goals_only:
        for option, value in GOALS_ONLY.items():
            if option == "no_decode":
                args.no_decode = True
            elif option == "clients":
                if args.clients == ",".join(CLIENTS):  # not given: the floor's client only
                    args.clients = value
            elif getattr(args, option) is None:
                setattr(args, option, value)
    for option, (default, quick) in DEFAULTS.items():
        if getattr(args, option) is None:
            setattr(args, option, quick if args.quick else default)
    try:
        args.sizes = int_list(args.sizes)
        repeats = int_list(args.repeat)
        # "0" skips, as for every other size of this group (a steady run of 0 objects has no
        # per-object figures to report).
        args.steady_sizes = [n for n in int_list(args.steady_sizes) if n]
        args.open_rates = [float(x) for x in args.open_rates.split(",") if x.strip()]
        open_repeats = int_list(str(args.open_repeat))
        args.ceiling_sizes = int_list(args.ceiling_sizes) if args.ceiling_sizes else args.sizes[:1]
    except ValueError as exc:
        parser.error(f"not a comma-separated list of numbers: {exc}")
    if not args.sizes:  # --sizes "": no bursts
        repeats = []
    elif len(repeats) == 1:
        repeats *= len(args.sizes)
    if len(repeats) != len(args.sizes):
        parser.error("--repeat: one number, or one per size of --sizes")
    args.repeats = repeats
    if not args.open_rates:  # --open-rates "": no open-loop runs, whatever the repetitions
        open_repeats = []
    elif len(open_repeats) == 1:
        open_repeats *= len(args.open_rates)
    if len(open_repeats) != len(args.open_rates):
        parser.error("--open-repeat: one number, or one per rate of --open-rates")
    args.open_repeat = open_repeats
    numbers = [*args.sizes, *repeats, *args.steady_sizes, *args.ceiling_sizes]
    numbers += [args.takeover_size, args.takeover_repeat, args.steady_repeat]
    numbers += [args.background_size, args.background_repeat, args.background_window]
    numbers += [args.shutdown_size, args.shutdown_repeat, args.idle, args.takeover_idle]
    numbers += [args.open_size, *args.open_repeat, args.ceiling_repeat]
    if any(x < 0 for x in numbers):
        parser.error("sizes, repetitions and windows cannot be negative")
    if any(x <= 0 for x in args.open_rates):
        parser.error("--open-rates: rates must be positive")
    for option, allowed in (
        ("frameworks", FRAMEWORKS),
        ("variants", VARIANTS),
        ("big_variants", VARIANTS),
        ("clients", CLIENTS),
    ):
        values = [x for x in getattr(args, option).split(",") if x]
        if not values or set(values) - set(allowed):
            parser.error(f"--{option.replace('_', '-')}: choose from {','.join(allowed)}")
        setattr(args, option, values)
    return args


async def bench_main(config: Config, cluster: Cluster, results: dict[str, Any]) -> None:
    api = Api(cluster)
    namespace = f"bench-{secrets.token_hex(3)}"
    created_crd = False
    bench: Bench | None = None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_signals_to_interrupt)
            results["machine"] = machine_info(config, await api.version())
            created_crd = await api.ensure_crd()
            await api.create_namespace(namespace)
            log(f"namespace {namespace}; logs in {config.work_dir}")
            bench = Bench(config, api, namespace)
            results["runs"] = bench.results
            results["timings"] = bench.timings
            await bench.run()
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(180):
            for profiler in bench.profilers if bench else []:
                await stop_process(profiler, grace=10)
            log(f"cleaning up: namespace {namespace}" + (" and the CRD" if created_crd else ""))
            try:
                await api.delete_namespace(namespace)
                if created_crd:
                    await api.delete_crd()
            except RUN_ERRORS as exc:
                log(f"warning: cleanup incomplete: {exc!r}")
            await api.aclose()


async def _signals_to_interrupt() -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
        async for signum in signals:
            raise Interrupted(signal.Signals(signum).name)


KEPT_MARKER = "<!-- kept: the sections below are not made by run.py; it keeps them -->"


def kept_sections(path: Path) -> str:
    """What follows KEPT_MARKER in an existing RESULTS.md (figures of other scripts, e.g.
    bench_storms.py), to be kept when the tables above it are written again."""
    try:
        text = path.read_text()
    except OSError:
        return ""
    _, marker, rest = text.partition(KEPT_MARKER)
    return f"\n{marker}{rest}" if marker else ""


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Ctrl-C must reach us even if started with SIGINT ignored (e.g. `cmd &` in a script).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.monotonic()
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    work_dir = Path(args.work_dir) / stamp
    work_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join(
            ["python benchmarks/run.py", *(sys.argv[1:] if argv is None else argv)]
        ),
    }
    plan = estimate(args)
    total = sum(seconds for _, seconds in plan)
    log(
        f"plan: {'; '.join(f'{what} ~{seconds / 60:.1f} min' for what, seconds in plan)}"
        f"\n  expected duration: ~{total / 60:.0f} min on 2 cores"
        + ("" if KUBE_BUILT.exists() else ", plus ~6 min to build kube-apiserver first")
        + ("" if args.kopf_python or KOPF_VENV.exists() else ", plus ~1 min for Kopf's venv")
    )
    if args.estimate:
        return 0
    results["estimated_s"] = total
    needs_kopf = (
        "kopf" in args.frameworks
        or ("aiohttp" in args.clients and not args.no_ceiling)
        or bool(args.open_rates and OPEN_CLIENT == "aiohttp")  # aiohttp is in Kopf's venv
    )
    kopf = kopf_python(args.kopf_python) if needs_kopf else None
    handle: ClusterHandle | None = None
    interrupted = False
    trio_python = trioperator_python(args.trioperator_python)
    try:
        precompile_trioperator(trio_python)
        handle = start_cluster(args)
        config = Config(
            sizes=args.sizes,
            repeats=args.repeats,
            frameworks=args.frameworks,
            variants=args.variants,
            big_variants=args.big_variants,
            clients=[c for c in args.clients if kopf or c != "aiohttp"],
            creators=args.creators,
            ceiling_concurrency=args.ceiling_concurrency,
            ceiling_sizes=args.ceiling_sizes,
            ceiling_repeat=args.ceiling_repeat,
            restart=args.restart_after_burst,
            idle=args.idle,
            takeover_idle=args.takeover_idle,
            takeover_size=args.takeover_size,
            takeover_repeat=args.takeover_repeat,
            steady_sizes=args.steady_sizes,
            steady_repeat=args.steady_repeat,
            background_size=args.background_size,
            background_repeat=args.background_repeat,
            background_window=args.background_window,
            shutdown_size=args.shutdown_size,
            shutdown_repeat=args.shutdown_repeat,
            open_rates=args.open_rates,
            open_size=args.open_size,
            open_repeat=args.open_repeat,
            open_trace=args.open_trace,
            open_raw=args.open_raw and bool(kopf),
            ceiling=not args.no_ceiling,
            decode=not args.no_decode,
            decode_events=2000 if args.quick else 5000,
            decode_rounds=3 if args.quick else 10,
            kopf_python=kopf,
            trioperator_cmd=trioperator_cmd(trio_python),
            trioperator_python=trio_python,
            kubeconfig=handle.kubeconfig,
            work_dir=work_dir,
            timeout_factor=args.timeout_factor,
            cluster_pids=handle.pids(),
            profile=args.profile,
        )
        results["config"] = {
            k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(config).items()
        }
        results["cluster"] = "isolated" if handle.isolated_dir else "given/shared"
        with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
            cluster = load_cluster(handle.kubeconfig, tmp_dir=tmp)
            if args.runs == 1:
                trio.run(bench_main, config, cluster, results)
            else:
                # The same plan again in a namespace of its own, on the same cluster; the
                # report pools the runs for the details and judges the goals run by run.
                results["rounds"] = []
                for index in range(args.runs):
                    log(f"run {index + 1} of {args.runs}")
                    one: dict[str, Any] = {}
                    results["rounds"].append(one)
                    round_dir = work_dir / f"run{index + 1}"
                    round_dir.mkdir(exist_ok=True)
                    round_config = dataclasses.replace(config, work_dir=round_dir)
                    trio.run(bench_main, round_config, cluster, one)
    except BaseException as exc:
        if interrupt_in(exc):
            interrupted = True
            log("interrupted; everything started here has been stopped and removed")
        elif (error := run_error(exc)) is not None:
            log(f"error: {error}")
            results["error"] = error
        else:
            raise
    finally:
        kill_leftovers()
        if handle is not None:
            stop_cluster(handle, args.keep_cluster)
    if results.get("rounds"):
        report.pool_rounds(results)
    if not interrupted and "error" not in results and config.decode:
        results["decode"] = run_decode(config)  # CPU-bound: after the cluster has stopped
    results["duration_s"] = time.monotonic() - started
    results["interrupted"] = interrupted
    if "machine" not in results:
        return 130 if interrupted else 1
    markdown = report.render(results)
    # Partial results do not replace the published ones.
    out = work_dir if interrupted or "error" in results else Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    (out / "RESULTS.md").write_text(markdown + kept_sections(out / "RESULTS.md"))
    print(markdown)
    log(
        f"wrote {out / 'RESULTS.md'} and {out / 'results.json'} "
        f"in {results['duration_s'] / 60:.1f} min"
    )
    runs = results.get("runs", {})
    failures = [r for kind in RUN_KINDS for r in runs.get(kind, [])]
    failed = any(not r.get("ok") for r in failures) or "error" in results
    return 130 if interrupted else (1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
