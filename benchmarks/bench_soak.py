"""A soak: one trioperator operator for an hour (or more) under a steady mix; does it leak?

    python benchmarks/bench_soak.py [--minutes 60] [--create-rate 5] [--live 500] [--bg 100]
    python benchmarks/bench_soak.py --report-only benchmarks/soak-series.csv

The harness starts its own kube-apiserver + etcd (scripts/kube-up with its own state directory
and port; never the shared one), the CRD of the benchmarks and one namespace, then the operator
``operators/soak.py`` (create, update and delete handlers on every object; a daemon and a
10-s timer on each of ``--bg`` objects; a probe daemon that counts the operator's trio tasks)
from the benchmarks' trioperator venv, with its Prometheus endpoint on loopback.

The mix, at fixed rates on an absolute schedule (a late request does not shift the next ones):

* ``--create-rate`` new objects per second; once ``--live`` objects live, each create is
  paired with the deletion of the oldest one (every deletion goes through the operator's
  finalizer and delete handler);
* ``--update-rate`` spec changes per second to random live objects (the update handler);
* every ``--bg-churn-s`` seconds one daemon+timer object is deleted and a new one created
  (daemons and timers stopped and started);
* the watch streams end every ``--watch-timeout`` seconds: the operator asks the API server for
  that ``timeoutSeconds`` (``settings.watching.server_timeout``), so it reconnects that often.

Every ``--sample-s`` seconds a row of the series is written (CSV, flushed at once): the
operator's RSS (VmRSS) and peak (VmHWM), open descriptors (entries of /proc/PID/fd), OS threads,
trio tasks (from the probe's file), CPU (utime+stime ticks of the operator, the API server and
etcd), and its counters. Every minute the harness lists the objects: how many are handled, how
many wait for a handler longer than 60 s or for their deletion longer than 60 s (stuck), and
scrapes the operator's metrics (watch reconnects, listings, requests by code, objects held).

The summary: the least-squares slope of RSS (and of descriptors, tasks, threads) after the
warm-up (``--warmup-min``), in MiB/hour with its standard error, the CPU per minute of each
window, and a sparkline of each series (matplotlib draws a plot instead if importable). It goes
to ``RESULTS-soak.md``; the series to ``soak-series.csv`` next to it.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import dataclasses
import datetime
import itertools
import json
import math
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run  # noqa: E402
from kubeconf import collection_path, load_cluster, make_object, object_path  # noqa: E402

FIELDS = (
    "t_s",
    "rss_mib",
    "hwm_mib",
    "fds",
    "threads",
    "tasks",
    "cpu_ticks",
    "apiserver_ticks",
    "etcd_ticks",
    "live",
    "created",
    "updated",
    "deleted",
    "handler_created",
    "handler_updated",
    "handler_deleted",
    "daemons_running",
    "timer_runs",
    "reconnects",
    "listings",
    "objects_held",
    "unhandled_60s",
    "stuck_deleting_60s",
    "request_errors",
)
MERGE = "application/merge-patch+json"


# ------------------------------------------------------------------------------ /proc
def proc_ticks(pid: int) -> int:
    """utime+stime of a process in clock ticks (the kernel's resolution: 1/CLK_TCK s)."""
    with open(f"/proc/{pid}/stat") as file:
        data = file.read()
    fields = data[data.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def proc_status(pid: int) -> dict[str, float]:
    values: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as file:
        for line in file:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                values[key] = int(rest.split()[0]) / 1024
            elif key == "Threads":
                values[key] = int(rest.split()[0])
    return values


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# ------------------------------------------------------------------------------ statistics
@dataclasses.dataclass(frozen=True)
class Slope:
    per_hour: float  # the series' unit per hour
    stderr_per_hour: float
    points: int


def least_squares(xs: list[float], ys: list[float]) -> Slope | None:
    """Slope of y over x (x in seconds) per hour, with its standard error; None if < 3 points."""
    n = len(xs)
    if n < 3:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    residual = sum((y - (my + slope * (x - mx))) ** 2 for x, y in zip(xs, ys, strict=True))
    stderr = math.sqrt(residual / (n - 2) / sxx)
    return Slope(slope * 3600, stderr * 3600, n)


SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 60) -> str:
    """The series in `width` buckets (each its mean), scaled from its min to its max."""
    if not values:
        return ""
    size = max(1, math.ceil(len(values) / width))
    buckets = [values[i : i + size] for i in range(0, len(values), size)]
    means = [sum(b) / len(b) for b in buckets]
    low, high = min(means), max(means)
    if high == low:
        return SPARKS[0] * len(means)
    return "".join(SPARKS[round((m - low) / (high - low) * (len(SPARKS) - 1))] for m in means)


def read_series(path: Path) -> list[dict[str, float]]:
    with open(path, newline="") as file:
        return [
            {k: float(v) if v not in ("", None) else math.nan for k, v in row.items()}
            for row in csv.DictReader(file)
        ]


def summarise(
    rows: list[dict[str, float]], *, warmup_s: float, clk_tck: int, window_s: float = 600.0
) -> dict[str, Any]:
    """The figures of RESULTS-soak.md from the series."""
    if not rows:
        return {"rows": 0}
    after = [r for r in rows if r["t_s"] >= warmup_s]
    summary: dict[str, Any] = {
        "rows": len(rows),
        "duration_min": rows[-1]["t_s"] / 60,
        "warmup_min": warmup_s / 60,
        "clk_tck": clk_tck,
    }
    for key in ("rss_mib", "fds", "tasks", "threads"):
        points = [(r["t_s"], r[key]) for r in after if not math.isnan(r[key])]
        fit = least_squares([p[0] for p in points], [p[1] for p in points])
        values = [r[key] for r in rows if not math.isnan(r[key])]
        values_after = [p[1] for p in points]
        summary[key] = {
            "slope_per_hour": fit.per_hour if fit else None,
            "stderr_per_hour": fit.stderr_per_hour if fit else None,
            "min_after_warmup": min(values_after) if values_after else None,
            "max_after_warmup": max(values_after) if values_after else None,
            "first_after_warmup": values_after[0] if values_after else None,
            "last": values[-1] if values else None,
            "spark": sparkline(values),
        }
    summary["hwm_mib"] = rows[-1]["hwm_mib"]
    # CPU per window: ms of CPU per minute of wall time, from tick counts (1 tick = 1000/CLK_TCK ms)
    windows: list[dict[str, float]] = []
    start = rows[0]
    for row in rows[1:]:
        if row["t_s"] - start["t_s"] >= window_s or row is rows[-1]:
            minutes = (row["t_s"] - start["t_s"]) / 60
            if minutes > 0:
                windows.append(
                    {
                        "from_min": start["t_s"] / 60,
                        "to_min": row["t_s"] / 60,
                        "operator_ms_per_min": (row["cpu_ticks"] - start["cpu_ticks"])
                        * 1000
                        / clk_tck
                        / minutes,
                        "apiserver_ms_per_min": (row["apiserver_ticks"] - start["apiserver_ticks"])
                        * 1000
                        / clk_tck
                        / minutes,
                    }
                )
            start = row
    summary["cpu_windows"] = windows
    cpu_series = [
        (b["cpu_ticks"] - a["cpu_ticks"]) * 1000 / clk_tck / ((b["t_s"] - a["t_s"]) / 60)
        for a, b in itertools.pairwise(rows)
        if b["t_s"] > a["t_s"]
    ]
    summary["cpu_spark"] = sparkline(cpu_series)
    if after:
        minutes = (after[-1]["t_s"] - after[0]["t_s"]) / 60
        summary["operator_cpu_ms_per_min_after_warmup"] = (
            (after[-1]["cpu_ticks"] - after[0]["cpu_ticks"]) * 1000 / clk_tck / minutes
            if minutes > 0
            else None
        )
    last = rows[-1]
    for key in (
        "created",
        "updated",
        "deleted",
        "handler_created",
        "handler_updated",
        "handler_deleted",
        "timer_runs",
        "reconnects",
        "listings",
        "request_errors",
    ):
        summary[key] = last[key]
    summary["max_unhandled_60s"] = max((r["unhandled_60s"] for r in rows), default=0)
    summary["max_stuck_deleting_60s"] = max((r["stuck_deleting_60s"] for r in rows), default=0)
    summary["final_unhandled_60s"] = last["unhandled_60s"]
    summary["final_stuck_deleting_60s"] = last["stuck_deleting_60s"]
    return summary


def format_summary(summary: dict[str, Any], settings: dict[str, Any]) -> str:
    def num(value: Any, digits: int = 1) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        return f"{value:,.{digits}f}"

    lines = [
        "# Soak: one trioperator operator for an hour under a steady mix",
        "",
        "Made by `benchmarks/bench_soak.py` (issue #29 item 5); the series is in "
        "[soak-series.csv](soak-series.csv), one row every "
        f"{settings.get('sample_s', '?')} s.",
        "",
        f"Settings: {json.dumps(settings, sort_keys=True)}",
        "",
        f"Duration {num(summary['duration_min'])} min; warm-up excluded from the slopes: "
        f"the first {num(summary['warmup_min'])} min.",
        "",
        "| series | slope after warm-up (per hour, ± std. error) | first after warm-up | "
        "min-max after warm-up | last | over the whole run |",
        "|---|---|---|---|---|---|",
    ]
    units = {
        "rss_mib": "RSS (MiB)",
        "fds": "open descriptors",
        "tasks": "trio tasks",
        "threads": "OS threads",
    }
    for key, title in units.items():
        item = summary[key]
        lines.append(
            f"| {title} | {num(item['slope_per_hour'], 2)} ± {num(item['stderr_per_hour'], 2)} | "
            f"{num(item['first_after_warmup'])} | {num(item['min_after_warmup'])}-"
            f"{num(item['max_after_warmup'])} | {num(item['last'])} | `{item['spark']}` |"
        )
    tick_ms = 1000 / summary["clk_tck"]
    lines += [
        "",
        f"Peak RSS (VmHWM) at the end: {num(summary['hwm_mib'])} MiB.",
        "",
        f"CPU (utime+stime ticks from /proc/PID/stat, 1 tick = {tick_ms:g} ms), per window:",
        "",
        "| window (min) | operator (ms CPU per minute) | API server (ms per minute) |",
        "|---|---|---|",
    ]
    for w in summary["cpu_windows"]:
        lines.append(
            f"| {num(w['from_min'])}-{num(w['to_min'])} | {num(w['operator_ms_per_min'], 0)} | "
            f"{num(w['apiserver_ms_per_min'], 0)} |"
        )
    lines += [
        "",
        f"Operator CPU over time: `{summary['cpu_spark']}`; after warm-up "
        f"{num(summary.get('operator_cpu_ms_per_min_after_warmup'), 0)} ms per minute.",
        "",
        "| counted | value |",
        "|---|---|",
    ]
    for key, title in (
        ("created", "objects created by the harness"),
        ("updated", "spec updates by the harness"),
        ("deleted", "deletions by the harness"),
        ("handler_created", "create handler runs"),
        ("handler_updated", "update handler runs"),
        ("handler_deleted", "delete handler runs"),
        ("timer_runs", "timer runs"),
        ("reconnects", "watch reconnects (operator's metrics)"),
        ("listings", "listings (operator's metrics)"),
        ("request_errors", "harness requests answered with an error"),
        ("max_unhandled_60s", "most objects waiting > 60 s for the create handler, any check"),
        ("max_stuck_deleting_60s", "most objects waiting > 60 s for their deletion, any check"),
        ("final_unhandled_60s", "the same at the last check: unhandled"),
        ("final_stuck_deleting_60s", "the same at the last check: deleting"),
    ):
        lines.append(f"| {title} | {num(summary.get(key), 0)} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, float]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    minutes = [r["t_s"] / 60 for r in rows]
    figure, axes = plt.subplots(4, 1, figsize=(8, 10), sharex=True)
    for axis, key in zip(axes, ("rss_mib", "fds", "tasks", "threads"), strict=True):
        axis.plot(minutes, [r[key] for r in rows])
        axis.set_ylabel(key)
    axes[-1].set_xlabel("minutes")
    figure.savefig(path)
    return True


# ------------------------------------------------------------------------------ the soak
@dataclasses.dataclass
class Counters:
    created: int = 0
    updated: int = 0
    deleted: int = 0
    request_errors: int = 0
    unhandled_60s: int = 0
    stuck_deleting_60s: int = 0
    operator_metrics: dict[str, float] = dataclasses.field(default_factory=dict)


class Soak:
    def __init__(self, args: argparse.Namespace, api: run.Api, namespace: str, work: Path) -> None:
        self.args = args
        self.api = api
        self.ns = namespace
        self.work = work
        self.counters = Counters()
        self.live: collections.deque[str] = collections.deque()  # churn objects, oldest first
        self.bg: collections.deque[str] = collections.deque()
        self.next_index = 0
        self.random = random.Random(29)
        self.state_file = work / "operator-state.json"

    # ---- requests (a failure is counted, never fatal: the soak goes on)
    async def request(self, method: str, path: str, body: Any = None, **kw: Any) -> bool:
        try:
            await self.api.call(method, path, body, **kw)
            return True
        except run.RUN_ERRORS as exc:
            self.counters.request_errors += 1
            run.log(f"request failed: {exc!r}"[:300])
            return False

    async def create(self, name: str, labels: dict[str, str]) -> bool:
        self.next_index += 1
        body = make_object(self.ns, name, self.next_index)
        body["metadata"]["labels"].update(labels)
        if await self.request("POST", collection_path(self.ns), body):
            self.counters.created += 1
            return True
        return False

    async def delete(self, name: str) -> None:
        if await self.request("DELETE", object_path(self.ns, name), ok=(200, 202)):
            self.counters.deleted += 1

    async def update(self, name: str) -> None:
        patch = {"spec": {"replicas": self.random.randint(1, 1000)}}
        if await self.request("PATCH", object_path(self.ns, name), patch, ctype=MERGE, ok=(200,)):
            self.counters.updated += 1

    # ---- the mix
    async def paced(self, rate: float, step: Any, until: float) -> None:
        """Call `step` `rate` times per second on an absolute schedule until `until`."""
        if rate <= 0:
            return
        period = 1 / rate
        due = trio.current_time()
        while due < until:
            await trio.sleep_until(due)
            await step()
            due += period
            now = trio.current_time()
            if due < now - 5:  # far behind (a stalled API server): skip, do not burst
                due = now

    async def churn_step(self) -> None:
        name = f"c-{self.next_index + 1}"
        if await self.create(name, {}):
            self.live.append(name)
        while len(self.live) > self.args.live - self.args.bg - 1:
            await self.delete(self.live.popleft())

    async def update_step(self) -> None:
        if self.live:
            await self.update(self.live[self.random.randrange(len(self.live))])

    async def bg_step(self) -> None:
        name = f"bg-{self.next_index + 1}"
        if await self.create(name, {"soak-bg": "yes"}):
            self.bg.append(name)
        if len(self.bg) > self.args.bg:
            await self.delete(self.bg.popleft())

    async def fill(self) -> None:
        """The starting population: the probe, the daemon+timer objects, the churn objects."""
        await self.create("probe", {"soak-probe": "yes"})
        limiter = trio.CapacityLimiter(8)

        async def one(name: str, labels: dict[str, str], into: collections.deque[str]) -> None:
            async with limiter:
                if await self.create(name, labels):
                    into.append(name)

        async with trio.open_nursery() as nursery:
            for i in range(self.args.bg):
                nursery.start_soon(one, f"bg-init-{i}", {"soak-bg": "yes"}, self.bg)
            for i in range(self.args.live - self.args.bg - 1):
                nursery.start_soon(one, f"c-init-{i}", {}, self.live)

    # ---- observation
    async def check(self) -> None:
        """List the objects: how many are late for their create handler or their deletion."""
        try:
            data = await self.api.call("GET", collection_path(self.ns), request_timeout=60)
        except run.RUN_ERRORS as exc:
            run.log(f"check failed: {exc!r}"[:300])
            return
        now = datetime.datetime.now(datetime.UTC)

        def age(stamp: str) -> float:
            when = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")
            return (now - when.replace(tzinfo=datetime.UTC)).total_seconds()

        unhandled = stuck = 0
        for item in data.get("items", []):
            meta = item["metadata"]
            if "deletionTimestamp" in meta:
                stuck += age(meta["deletionTimestamp"]) > 60
            elif "on_create" not in (item.get("status") or {}):
                unhandled += age(meta["creationTimestamp"]) > 60
        self.counters.unhandled_60s = unhandled
        self.counters.stuck_deleting_60s = stuck
        self.counters.operator_metrics = await self.scrape()

    async def scrape(self) -> dict[str, float]:
        wanted = {
            "trioperator_watch_reconnects_total": "reconnects",
            "trioperator_watch_listings_total": "listings",
            "trioperator_objects": "objects_held",
        }
        found: dict[str, float] = {}
        try:
            response = await self.api.client.get(
                f"http://127.0.0.1:{self.args.metrics_port}/metrics", timeout=10
            )
        except run.RUN_ERRORS as exc:
            run.log(f"metrics scrape failed: {exc!r}"[:300])
            return self.counters.operator_metrics
        for line in response.text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in wanted:
                found[wanted[name]] = found.get(wanted[name], 0.0) + float(line.rsplit(" ", 1)[1])
        return found

    def sample(self, t0: float, pids: dict[str, int]) -> dict[str, float]:
        pid = pids["operator"]
        status = proc_status(pid)
        try:
            state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            state = {}
        row: dict[str, float] = {
            "t_s": round(time.monotonic() - t0, 1),
            "rss_mib": round(status.get("VmRSS", math.nan), 2),
            "hwm_mib": round(status.get("VmHWM", math.nan), 2),
            "fds": open_fds(pid),
            "threads": status.get("Threads", math.nan),
            "tasks": state.get("tasks", math.nan),
            "cpu_ticks": proc_ticks(pid),
            "live": len(self.live) + len(self.bg) + 1,
            "created": self.counters.created,
            "updated": self.counters.updated,
            "deleted": self.counters.deleted,
            "handler_created": state.get("created", math.nan),
            "handler_updated": state.get("updated", math.nan),
            "handler_deleted": state.get("deleted", math.nan),
            "daemons_running": state.get("daemons_running", math.nan),
            "timer_runs": state.get("timer_runs", math.nan),
            "unhandled_60s": self.counters.unhandled_60s,
            "stuck_deleting_60s": self.counters.stuck_deleting_60s,
            "request_errors": self.counters.request_errors,
        }
        for name in ("apiserver", "etcd"):
            with contextlib.suppress(OSError, KeyError, ValueError):
                row[f"{name}_ticks"] = proc_ticks(pids[name])
        for key in ("reconnects", "listings", "objects_held"):
            row[key] = self.counters.operator_metrics.get(key, math.nan)
        return row


async def soak_main(args: argparse.Namespace, kubeconfig: str, server_pids: dict[str, int]) -> int:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    work = HERE / ".work" / f"soak-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    series_path = Path(args.series)
    api = run.Api(load_cluster(kubeconfig, tmp_dir=tempfile.mkdtemp(prefix="soak-kubeconf-")))
    namespace = f"soak-{os.urandom(3).hex()}"
    created_crd = False
    process: trio.Process | None = None
    settings = {
        "minutes": args.minutes,
        "create_rate": args.create_rate,
        "update_rate": args.update_rate,
        "live": args.live,
        "bg": args.bg,
        "bg_churn_s": args.bg_churn_s,
        "watch_timeout_s": args.watch_timeout,
        "sample_s": args.sample_s,
        "warmup_min": args.warmup_min,
    }
    try:
        created_crd = await api.ensure_crd()
        await api.create_namespace(namespace)
        python = run.trioperator_python(args.trioperator_python)
        run.precompile_trioperator(python)
        argv = [
            *run.trioperator_cmd(python),
            "run",
            "-n",
            namespace,
            "--metrics",
            f"http://127.0.0.1:{args.metrics_port}/metrics",
            str(HERE / "operators" / "soak.py"),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIOPERATOR_", "BENCH_"))}
        env.update(
            KUBECONFIG=kubeconfig,
            PYTHONUNBUFFERED="1",
            BENCH_STATE_FILE=str(Path(work) / "operator-state.json"),
            BENCH_WATCH_TIMEOUT=str(args.watch_timeout),
            BENCH_PROBE_S=str(min(10.0, args.sample_s)),
            BENCH_TRACEMALLOC_DIR=args.tracemalloc_dir or "",
        )
        process = await run.spawn(argv, env=env, log_path=work / "operator.log")
        run.log(f"operator pid {process.pid}; namespace {namespace}; logs in {work}")
        soak = Soak(args, api, namespace, work)
        await soak.fill()
        with trio.move_on_after(120):  # the probe daemon runs: the operator is up and serving
            while not soak.state_file.exists():  # noqa: ASYNC110 -- a file, nothing to wait on
                await trio.sleep(0.5)
        run.log(f"filled: {len(soak.live)} churn + {len(soak.bg)} daemon/timer objects")
        pids = {"operator": process.pid, **server_pids}
        t0 = time.monotonic()
        until = trio.current_time() + args.minutes * 60
        # Written row by row (flushed) so that an interrupted soak keeps its series; a few
        # blocking writes every --sample-s seconds, in the harness only.
        with open(series_path, "w", newline="") as file:  # noqa: ASYNC230
            writer = csv.DictWriter(file, fieldnames=FIELDS)
            writer.writeheader()

            async def sampler() -> None:
                next_check = 0.0
                due = trio.current_time()
                while due <= until + 0.5:
                    await trio.sleep_until(due)
                    if process.returncode is not None:
                        raise run.BenchError(f"the operator exited ({process.returncode})")
                    if time.monotonic() >= next_check:
                        next_check = time.monotonic() + 60
                        await soak.check()
                    row = soak.sample(t0, pids)
                    writer.writerow(row)
                    file.flush()
                    if int(row["t_s"]) % 300 < args.sample_s:
                        run.log(
                            f"t={row['t_s'] / 60:.0f} min rss={row['rss_mib']:.1f} MiB "
                            f"fds={row['fds']:.0f} tasks={row['tasks']} "
                            f"created={row['created']:.0f} errors={row['request_errors']:.0f}"
                        )
                    due += args.sample_s

            async with trio.open_nursery() as nursery:
                nursery.start_soon(sampler)
                nursery.start_soon(soak.paced, args.create_rate, soak.churn_step, until)
                nursery.start_soon(soak.paced, args.update_rate, soak.update_step, until)
                nursery.start_soon(soak.paced, 1 / args.bg_churn_s, soak.bg_step, until)
            await trio.sleep(args.sample_s)  # a last row with the last check's counters
            await soak.check()
            writer.writerow(soak.sample(t0, pids))
        stop = await run.stop_process(process)
        run.log(f"operator stopped: {stop}")
        settings["stop"] = stop
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(300):
            if process is not None and process.returncode is None:
                await run.stop_process(process)
            try:
                await api.delete_namespace(namespace)
                if created_crd:
                    await api.delete_crd()
            except run.RUN_ERRORS as exc:
                run.log(f"warning: cleanup incomplete: {exc!r}")
            await api.aclose()
    write_report(args, settings)
    return 0


def write_report(args: argparse.Namespace, settings: dict[str, Any]) -> None:
    rows = read_series(Path(args.series))
    summary = summarise(rows, warmup_s=args.warmup_min * 60, clk_tck=run.CLK_TCK)
    text = format_summary(summary, settings)
    plotted = plot(rows, Path(args.series).with_suffix(".png"))
    if plotted:
        text += f"\n![series]({Path(args.series).with_suffix('.png').name})\n"
    else:
        text += "\n(matplotlib is not installed: the last column of the first table is an ASCII "
        text += "sparkline of each series over the whole run, min to max.)\n"
    Path(args.output).write_text(text)
    Path(args.series).with_suffix(".json").write_text(
        json.dumps({"settings": settings, "summary": summary}, indent=2)
    )
    print(text)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--create-rate", type=float, default=5.0, help="creates per second")
    parser.add_argument("--update-rate", type=float, default=5.0, help="spec updates per second")
    parser.add_argument("--live", type=int, default=500, help="objects alive at any time")
    parser.add_argument("--bg", type=int, default=100, help="objects with a daemon and a timer")
    parser.add_argument("--bg-churn-s", type=float, default=30.0)
    parser.add_argument("--watch-timeout", type=float, default=180.0, help="seconds")
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument(
        "--tracemalloc-dir",
        default=None,
        help="dump the operator's tracemalloc snapshots here every 2 minutes "
        "(slows it down; compare them with benchmarks/soak_snapshots.py)",
    )
    parser.add_argument("--warmup-min", type=float, default=10.0)
    parser.add_argument("--kube-port", type=int, default=18643)
    parser.add_argument("--kube-dir", default=f"/tmp/trioperator-soak-kube.{os.getuid()}")
    parser.add_argument("--keep-cluster", action="store_true")
    parser.add_argument("--metrics-port", type=int, default=18690)
    parser.add_argument("--trioperator-python", default=None)
    parser.add_argument("--series", default=str(HERE / "soak-series.csv"))
    parser.add_argument("--output", default=str(HERE / "RESULTS-soak.md"))
    parser.add_argument(
        "--report-only", action="store_true", help="only write the report from --series"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report_only:
        write_report(args, {"report_only": True, "sample_s": args.sample_s})
        return 0
    signal.signal(signal.SIGINT, signal.default_int_handler)
    handle = run.start_cluster(
        argparse.Namespace(
            kubeconfig=None, cluster="isolated", kube_dir=args.kube_dir, kube_port=args.kube_port
        )
    )
    try:
        return trio.run(soak_main, args, handle.kubeconfig, handle.pids())
    finally:
        run.stop_cluster(handle, args.keep_cluster)


if __name__ == "__main__":
    sys.exit(main())
