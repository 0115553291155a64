"""Sharding: objects per second with 1, 2 and 3 replicas, and the take-over after a SIGKILL.

    python benchmarks/bench_shards.py [--count 300] [--replicas 1,2,3] [--delay 0.2]
                                      [--worker-limit 10] [--takeover] [--kubeconfig PATH]
                                      [--modes filter,labels] [--count-calls]
                                      [--idle-window 5] [--rate 0]

Each replica runs ``trioperator run --shards auto`` as its own process, with the same per-replica
worker limit (``settings.queueing.worker_limit``) and a creation handler that awaits ``--delay``
seconds (I/O-bound, as most real handlers are). Once every replica serves its share of the ring,
``benchmarks/load.py`` creates ``--count`` objects with concurrent creators; the figure is the
count divided by the time from the first creation until every object shows the handler's
result. With ``--takeover``, the largest ring handles a second burst and one replica is
SIGKILLed once it has handled 5 of its share: the time from the kill until every object is handled.
The replicas use short Leases (6 s, fenced after 4 s, 2 s margin), so the take-over is bounded
by about 8 s plus a drain, a publication and a listing.

``--modes``: the sharding modes to compare (``settings.sharding.mode``): ``filter`` (every
replica watches every object) and ``labels`` (each watches its buckets only). For each replica,
over the burst alone (from the first creation until every object is handled): the watch events
it received (its ``trioperator_watch_events_total``, listings included), the bytes it read
(``rchar`` of ``/proc/PID/io``: the API server's answers and watch streams, TLS included), and
its CPU seconds and context switches; the total CPU of all replicas per object. Before the
burst, ``--idle-window`` seconds (5) of the formed ring at rest give each replica's cost per
second with nothing to handle (the Leases), which a burst pays per second, not per object.

``--rate``: create the objects at this many per second (an open loop) instead of all at once.
A burst saturates the 2 cores, and then the CPU seconds depend on how the processes share them;
at a rate the machine keeps up with, each replica wakes up for each of its objects with any
number of replicas, so the CPU per object less the cost at rest shows what the work costs.

``--count-calls``: each replica also counts its Python call events (a profile hook on the
thread of its trio loop). CPU seconds on 2 shared cores can grow with the number of processes
that share them; the call events cannot, so they show whether the work itself divides.

Without ``--kubeconfig``, the shared local API server (``scripts/kube-up``) is used. Each run
has its own namespace (objects and Leases), removed afterwards. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import functools
import json
import os
import re
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from kubeconf import Cluster, collection_path, load_cluster  # noqa: E402

KUBECTL = os.environ.get("KUBECTL") or str(Path.home() / ".cache/trioperator/kube/bin/kubectl")

OPERATOR = """
import os

import trio
import trioperator as kopf

REPLICA = os.environ["SHARD_REPLICA"]

# --count-calls: the main thread's Python call events (what the trio loop runs), counted by a
# profile hook and written to a file that the harness reads, as a figure of the work done that
# does not depend on how busy the 2 cores are (the hook itself slows the replica down).
CALLS_FILE = os.environ.get("SHARD_CALLS_FILE")
if CALLS_FILE:
    import sys
    import threading
    import time

    calls = [0]

    def count_call(frame, event, arg):
        if event == "call" or event == "c_call":
            calls[0] += 1

    def write_calls():
        while True:
            time.sleep(0.05)
            with open(CALLS_FILE + ".tmp", "w") as file:
                file.write(str(calls[0]))
            os.replace(CALLS_FILE + ".tmp", CALLS_FILE)

    threading.Thread(target=write_calls, daemon=True).start()
    sys.setprofile(count_call)  # the main thread's, where the operator's trio loop runs


@kopf.on.startup()
def configure(settings, **_):
    settings.queueing.worker_limit = {worker_limit}
    # A worker holds its slot until it idles out: a short idle time keeps the limit about
    # concurrent handlers, not about recently handled objects.
    settings.queueing.idle_timeout = 0.1
    settings.sharding.lease_duration = 6
    settings.sharding.renew_deadline = 4
    settings.sharding.renew_interval = 1
    settings.sharding.takeover_margin = 2
    settings.posting.enabled = False


@kopf.on.create("bench.trioperator.dev", "v1", "benchobjects")
async def create_fn(**_):
    await trio.sleep({delay})
    return {{"by": REPLICA}}
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Snapshot(NamedTuple):
    cpu: float  # seconds, user + system
    system: float  # seconds in the kernel (system calls, wake-ups, the network)
    events: float  # watch events received, listings included
    bytes: int  # read by the process (rchar)
    calls: int  # Python call events (--count-calls), else 0
    voluntary: int  # context switches while waiting
    preempted: int  # context switches while runnable


def deltas(after: list[Snapshot], before: list[Snapshot], field: str) -> list[Any]:
    """Each replica's change of one counter between two snapshots."""
    return [getattr(a, field) - getattr(b, field) for a, b in zip(after, before, strict=True)]


def beyond_rest(result: dict[str, Any], burst: str, idle: str) -> float:
    """All replicas' ``burst`` total less what they spend at rest over as many seconds
    (``idle``: each replica's rate per second in the idle window)."""
    return float(sum(result[burst]) - sum(result[idle]) * result["seconds"])


class Replica:
    def __init__(
        self,
        name: str,
        args: list[str],
        env: dict[str, str],
        metrics: str,
        calls_file: Path | None = None,
    ) -> None:
        self.name = name
        self.metrics = metrics
        self.calls_file = calls_file
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def seen(self, pattern: str) -> bool:
        return any(re.search(pattern, line) for line in list(self.lines))

    def first_after(self, pattern: str, moment: float) -> float | None:
        """The wall-clock time (epoch) of the first log line matching after ``moment``."""
        for line in list(self.lines):
            stamp = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]", line)
            if stamp is None or not re.search(pattern, line):
                continue
            when = datetime.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if when >= moment:
                return when
        return None

    def cpu(self) -> tuple[float, float]:
        """CPU seconds so far: user + system, and system alone."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        user, system = int(fields[11]) / ticks, int(fields[12]) / ticks
        return user + system, system

    def usage(self) -> tuple[float, float]:
        """CPU seconds (user+system) and peak RSS in MiB, read while it runs."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        match = re.search(r"VmHWM:\s+(\d+) kB", status)
        return self.cpu()[0], (int(match.group(1)) / 1024 if match else 0.0)

    def switches(self) -> tuple[int, int]:
        """Context switches so far: voluntary (it waited) and involuntary (it was preempted)."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        voluntary = re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.MULTILINE)
        preempted = re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", status, re.MULTILINE)
        return (
            int(voluntary.group(1)) if voluntary else 0,
            int(preempted.group(1)) if preempted else 0,
        )

    def calls(self) -> int:
        """Python call events of the main thread so far (``--count-calls``; else 0)."""
        if self.calls_file is None:
            return 0
        return int(self.calls_file.read_text() or 0)

    def snapshot(self) -> Snapshot:
        """Its counters now, for the differences over a phase (``deltas``)."""
        if self.calls_file is not None:
            time.sleep(0.15)  # the replica writes its count every 0.05 s: take a fresh one
        cpu, system = self.cpu()
        return Snapshot(cpu, system, *self.received(), self.calls(), *self.switches())

    def received(self) -> tuple[float, int]:
        """Watch events received so far (listed objects included) and bytes read."""
        with urllib.request.urlopen(self.metrics, timeout=10) as response:
            text = response.read().decode()
        events = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("trioperator_watch_events_total{") and "benchobjects" in line
        )
        io = Path(f"/proc/{self.process.pid}/io").read_text()
        match = re.search(r"^rchar:\s+(\d+)", io, re.MULTILINE)
        return events, int(match.group(1)) if match else 0

    def requests(self) -> collections.Counter[str]:
        """API requests made so far, by verb (and HTTP code when not a success)."""
        with urllib.request.urlopen(self.metrics, timeout=10) as response:
            text = response.read().decode()
        counts: collections.Counter[str] = collections.Counter()
        for line in text.splitlines():
            if line.startswith("trioperator_api_requests_total{"):
                labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
                code = labels.get("code", "")
                verb = labels.get("verb", "?") + ("" if code.startswith("2") else f" {code}")
                counts[verb] += int(float(line.rsplit(" ", 1)[1]))
        return counts

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [KUBECTL, f"--kubeconfig={kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return result.stdout


@functools.cache
def _cluster(kubeconfig: str) -> tuple[Cluster, ssl.SSLContext]:
    cluster = load_cluster(kubeconfig, tmp_dir=tempfile.mkdtemp(prefix="bench-shards-"))
    return cluster, cluster.ssl_context()


def handled(kubeconfig: str, namespace: str, prefix: str) -> int:
    # One GET, not a kubectl process: polled every 0.2 s, kubectl's start-up alone took about
    # a quarter of a core, on the same 2 cores as the replicas whose CPU is measured.
    cluster, context = _cluster(kubeconfig)
    request = urllib.request.Request(
        cluster.server + collection_path(namespace), headers=cluster.headers()
    )
    with urllib.request.urlopen(request, timeout=30, context=context) as response:
        items = json.loads(response.read())
    return sum(
        1
        for item in items["items"]
        if item["metadata"]["name"].startswith(prefix)
        and (item.get("status") or {}).get("create_fn")
    )


def wait_handled(kubeconfig: str, namespace: str, prefix: str, count: int) -> float:
    deadline = time.monotonic() + 600
    while handled(kubeconfig, namespace, prefix) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{prefix}: not all {count} objects were handled in 600 s")
        time.sleep(0.2)
    return time.monotonic()


def settle(replicas: list[Replica], quiet: float = 3.0, limit: float = 120.0) -> None:
    """Wait until no replica has received a watch event for ``quiet`` seconds."""
    deadline = time.monotonic() + limit
    last = [replica.received()[0] for replica in replicas]
    calm_since = time.monotonic()
    while time.monotonic() - calm_since < quiet and time.monotonic() < deadline:
        time.sleep(0.5)
        now = [replica.received()[0] for replica in replicas]
        if now != last:
            last, calm_since = now, time.monotonic()


def create(
    kubeconfig: str, namespace: str, prefix: str, count: int, job: str = "create", rate: float = 0
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *(sys.executable, str(HERE / "load.py"), job, "--namespace", namespace),
            *("--prefix", prefix, "--count", str(count), "--kubeconfig", kubeconfig),
            *(("--rate", str(rate)) if rate else ()),
        ],
        stdout=subprocess.DEVNULL,
        text=True,
    )


def run_ring(args: argparse.Namespace, size: int, takeover: bool, mode: str) -> dict[str, Any]:
    namespace = f"bench-shards-{secrets.token_hex(3)}"
    kubectl(args.kubeconfig, "create", "namespace", namespace)
    work = HERE / ".work" / "shards" / namespace
    work.mkdir(parents=True, exist_ok=True)
    source = work / "operator.py"
    source.write_text(OPERATOR.format(worker_limit=args.worker_limit, delay=args.delay))
    replicas: list[Replica] = []
    result: dict[str, Any] = {"replicas": size, "mode": mode}
    try:
        for index in range(size):
            name = f"r{index + 1}"
            env = {
                **os.environ,
                "KUBECONFIG": args.kubeconfig,
                "PYTHONUNBUFFERED": "1",
                "POD_NAMESPACE": namespace,
                "SHARD_REPLICA": name,
            }
            metrics = f"http://127.0.0.1:{_free_port()}/metrics"
            command = [sys.executable, "-m", "trioperator", "run", "--standalone", "-n", namespace]
            command += ["--shards", "auto", "--shard-mode", mode, "--metrics", metrics]
            command += ["--id", name, str(source)]
            calls_file = work / f"{name}.calls" if args.count_calls else None
            if calls_file is not None:
                env["SHARD_CALLS_FILE"] = str(calls_file)
                calls_file.write_text("0")
            replicas.append(Replica(name, command, env, metrics, calls_file))
        deadline = time.monotonic() + 120
        while not all(r.seen(rf"among {size} member\(s\)") for r in replicas):
            if time.monotonic() > deadline:
                raise RuntimeError("the ring did not form within 120 s")
            time.sleep(0.2)

        # The ring at rest first: what each replica costs per second with no object to handle
        # (its Lease renewals, the others' renewals it receives). It is paid per second, not
        # per object, so a short burst with more replicas pays more of it per object.
        settle(replicas)
        idle_from = [replica.snapshot() for replica in replicas]
        idle_started = time.monotonic()
        time.sleep(args.idle_window)
        idle_to = [replica.snapshot() for replica in replicas]
        idle_seconds = time.monotonic() - idle_started
        result["idle_cpu_per_s"] = [cpu / idle_seconds for cpu in deltas(idle_to, idle_from, "cpu")]
        result["idle_calls_per_s"] = [
            calls / idle_seconds for calls in deltas(idle_to, idle_from, "calls")
        ]

        before = [replica.snapshot() for replica in replicas]
        asked = [replica.requests() for replica in replicas]
        started = time.monotonic()
        loader = create(args.kubeconfig, namespace, "burst", args.count, rate=args.rate)
        finished = wait_handled(args.kubeconfig, namespace, "burst", args.count)
        loader.wait()
        after = [replica.snapshot() for replica in replicas]
        result["burst_cpu"] = deltas(after, before, "cpu")
        result["burst_system"] = deltas(after, before, "system")
        result["calls"] = deltas(after, before, "calls")
        result["switches"] = list(
            zip(deltas(after, before, "voluntary"), deltas(after, before, "preempted"), strict=True)
        )
        result["requests"] = [
            dict(replica.requests() - old) for replica, old in zip(replicas, asked, strict=True)
        ]
        result["events"] = deltas(after, before, "events")
        result["bytes"] = deltas(after, before, "bytes")
        result["seconds"] = finished - started
        result["per_second"] = args.count / (finished - started)
        usages = [replica.usage() for replica in replicas]
        result["cpu"] = sum(cpu for cpu, _ in usages)
        result["shares"] = [
            sum("create_fn' succeeded" in line and "/burst-" in line for line in replica.lines)
            for replica in replicas
        ]
        result["peak_rss_mib"] = max(rss for _, rss in usages)

        # Changes of existing (handled, labelled) objects: two patches each, no handler runs.
        settle(replicas)
        before = [replica.snapshot() for replica in replicas]
        create(args.kubeconfig, namespace, "burst", args.count, job="patch").wait()
        settle(replicas)
        after = [replica.snapshot() for replica in replicas]
        result["change_cpu"] = deltas(after, before, "cpu")
        result["change_calls"] = deltas(after, before, "calls")
        result["change_events"] = deltas(after, before, "events")
        result["change_bytes"] = deltas(after, before, "bytes")

        if takeover and size > 1:
            loader = create(args.kubeconfig, namespace, "second", args.count)
            victim = replicas[-1]
            # Early in its share of the burst: most of it is left to take over.
            while (
                sum("create_fn' succeeded" in line and "/second-" in line for line in victim.lines)
                < 5
            ):
                time.sleep(0.05)
            victim.process.send_signal(signal.SIGKILL)
            killed, killed_wall = time.monotonic(), time.time()
            finished = wait_handled(args.kubeconfig, namespace, "second", args.count)
            loader.wait()
            result["takeover_seconds"] = finished - killed
            served = [
                moment
                for replica in replicas[:-1]
                if (moment := replica.first_after(rf"among {size - 1} member\(s\)", killed_wall))
                is not None
            ]
            if len(served) == size - 1:  # every survivor serves the smaller ring
                result["rebalanced_seconds"] = max(served) - killed_wall
    finally:
        for replica in replicas:
            replica.stop()
            (work / f"{replica.name}.log").write_text("".join(replica.lines))
        try:
            remove_namespace(args.kubeconfig, namespace)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            print(f"could not remove namespace {namespace}: {exc}", file=sys.stderr)
    return result


def remove_namespace(kubeconfig: str, namespace: str) -> None:
    """Delete the run's objects, then its namespace, for good.

    scripts/kube-up runs no controller-manager, so a deleted namespace would stay "Terminating"
    for ever (each run left one behind on the shared API server). The objects carry no
    finalizer (the operator has only a create handler): they go first, then the namespace's own
    finalizer is cleared, as the namespace controller would after emptying it.
    """
    # One request for the whole collection: `kubectl delete --all` deletes one object at a
    # time, and 2,000 of them took longer than kubectl's 120 s here.
    kubectl(kubeconfig, "delete", "--raw", collection_path(namespace))
    kubectl(kubeconfig, "delete", "namespace", namespace, "--wait=false")
    body = json.loads(kubectl(kubeconfig, "get", "namespace", namespace, "-o", "json"))
    body["spec"]["finalizers"] = []
    path = f"/api/v1/namespaces/{namespace}/finalize"
    kubectl(kubeconfig, "replace", "--raw", path, "-f", "-", stdin=json.dumps(body))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--replicas", default="1,2,3")
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--worker-limit", type=int, default=10)
    parser.add_argument("--takeover", action="store_true")
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--modes", default="filter,labels")
    parser.add_argument(
        "--idle-window",
        type=float,
        default=5.0,
        help="seconds of the formed ring at rest, before the burst (its cost per second)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="create the objects at this many per second (an open loop); 0: all at once",
    )
    parser.add_argument(
        "--count-calls",
        action="store_true",
        help="count each replica's Python call events (a profile hook: slower, but not blurred"
        " by a busy machine)",
    )
    args = parser.parse_args()
    if args.kubeconfig is None:
        up = subprocess.run([str(ROOT / "scripts" / "kube-up")], capture_output=True, text=True)
        args.kubeconfig = up.stdout.strip().splitlines()[-1]
    kubectl(args.kubeconfig, "apply", "-f", str(HERE / "crd.yaml"))
    kubectl(
        args.kubeconfig,
        "wait",
        "--for=condition=Established",
        "crd/benchobjects.bench.trioperator.dev",
    )

    sizes = [int(size) for size in args.replicas.split(",")]
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    results = [
        run_ring(args, size, args.takeover and size == max(sizes), mode)
        for mode in modes
        for size in sizes
    ]
    pace = f"created at {args.rate:g} per second" if args.rate else "created at once"
    print(
        f"\n{args.count} objects ({pace}), handler awaits {args.delay} s, "
        f"worker limit {args.worker_limit} per replica\n"
    )
    print(
        "| mode | replicas | seconds | objects/s | scaling | objects per replica "
        "| watch events per replica | MiB read per replica | CPU s per replica (burst) "
        "| total CPU ms per object | less the cost at rest | CPU s (all, whole run) "
        "| peak RSS MiB (max) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for result in results:
        base = next(r for r in results if r["mode"] == result["mode"])["per_second"]
        per_object = sum(result["burst_cpu"]) / args.count * 1000
        net = beyond_rest(result, "burst_cpu", "idle_cpu_per_s") / args.count * 1000
        print(
            f"| {result['mode']} | {result['replicas']} | {result['seconds']:.1f} "
            f"| {result['per_second']:.1f} | {result['per_second'] / base:.2f}x "
            f"| {'/'.join(map(str, result['shares']))} "
            f"| {'/'.join(f'{events:.0f}' for events in result['events'])} "
            f"| {'/'.join(f'{size / 2**20:.2f}' for size in result['bytes'])} "
            f"| {'/'.join(f'{cpu:.2f}' for cpu in result['burst_cpu'])} "
            f"| {per_object:.2f} | {net:.2f} | {result['cpu']:.1f} "
            f"| {result['peak_rss_mib']:.0f} |"
        )
    print("\nAPI requests per replica over the burst (by verb; HTTP code if not 2xx):\n")
    for result in results:
        asked = "; ".join(
            ", ".join(f"{verb} {count}" for verb, count in sorted(counts.items())) or "none"
            for counts in result["requests"]
        )
        print(f"- {result['mode']}, {result['replicas']}: {asked}")
    print(
        f"\nThen two patches of each of the {args.count} objects (no handler runs; counted until"
        " no replica receives anything for 3 s):\n"
    )
    print(
        "| mode | replicas | watch events per replica | MiB read per replica "
        "| CPU s per replica | total CPU ms per change |"
    )
    print("|---|---|---|---|---|---|")
    for result in results:
        per_change = sum(result["change_cpu"]) / (2 * args.count) * 1000
        print(
            f"| {result['mode']} | {result['replicas']} "
            f"| {'/'.join(f'{events:.0f}' for events in result['change_events'])} "
            f"| {'/'.join(f'{size / 2**20:.2f}' for size in result['change_bytes'])} "
            f"| {'/'.join(f'{cpu:.2f}' for cpu in result['change_cpu'])} "
            f"| {per_change:.2f} |"
        )
    print("\nAt rest (the formed ring, no objects changing), CPU ms per second per replica:\n")
    for result in results:
        idle = " / ".join(f"{cpu * 1000:.1f}" for cpu in result["idle_cpu_per_s"])
        print(f"- {result['mode']}, {result['replicas']}: {idle}")
    print("\nCPU of all replicas per object over the burst, user / system (the kernel), ms:\n")
    for result in results:
        system = sum(result["burst_system"]) / args.count * 1000
        user = sum(result["burst_cpu"]) / args.count * 1000 - system
        print(f"- {result['mode']}, {result['replicas']}: {user:.2f} / {system:.2f}")
    print("\nContext switches per replica over the burst, voluntary / involuntary (preempted):\n")
    for result in results:
        switched = "; ".join(f"{v} / {i}" for v, i in result["switches"])
        print(f"- {result['mode']}, {result['replicas']}: {switched}")
    if args.count_calls:
        print("\nPython call events of the replicas' main threads (a profile hook):\n")
        print(
            "| mode | replicas | per replica (burst) | all, per object | at rest, per replica"
            " per second | all, per object, less the cost at rest | all, per change |"
        )
        print("|---|---|---|---|---|---|---|")
        for result in results:
            print(
                f"| {result['mode']} | {result['replicas']} "
                f"| {'/'.join(str(calls) for calls in result['calls'])} "
                f"| {sum(result['calls']) / args.count:.0f} "
                f"| {'/'.join(f'{calls:.0f}' for calls in result['idle_calls_per_s'])} "
                f"| {beyond_rest(result, 'calls', 'idle_calls_per_s') / args.count:.0f} "
                f"| {sum(result['change_calls']) / (2 * args.count):.0f} |"
            )
    for result in results:
        if "takeover_seconds" in result:
            print(
                f"\n{result['mode']}: SIGKILL of one of {result['replicas']} replicas mid-burst"
                f" (Leases of 6 s, "
                f"2 s margin): the survivors served the new ring "
                f"{result.get('rebalanced_seconds', float('nan')):.1f} s after the kill; every "
                f"object of the burst was handled {result['takeover_seconds']:.1f} s after it."
            )


if __name__ == "__main__":
    main()
