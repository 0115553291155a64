"""100,000 objects: trioperator and Kopf side by side on their own API server (issue #29 item 4).

    python benchmarks/bench_100k.py [--objects 100000] [--budget-min 20] [--rss-limit-mib 6144]

Not part of `run.py` nor of CI: it takes tens of minutes and GiBs of etcd. The harness starts
its own kube-apiserver + etcd (scripts/kube-up with its own state directory and port; purged at
the end), creates the objects once with the fast raw client (load.py, aiohttp, 64 workers:
small BenchObjects of benchmarks/crd.yaml), then runs each framework in turn over the same
objects with ``operators/many.py`` (one creation handler; each framework keeps its progress in
annotations of its own prefix, so each finds all the objects never handled):

1. **take-over**: from the process start until the handler ran for every object, and until the
   operator is quiet after that (< 10 ms CPU per 0.5 s, 3 times in a row); its CPU and its
   peak RSS (VmHWM). Bounded: ``--budget-min`` minutes, and ``--rss-limit-mib`` of RSS (the
   machine is shared); where a framework stops, the report says how far it got;
2. **steady**: RSS after an idle window of ``--idle`` seconds, and the CPU in that window
   (ms per minute from the scheduler's nanoseconds, /proc/PID/task/*/schedstat; the clock
   ticks of utime+stime too);
3. **re-list after a 410**: the harness stops the API server (etcd stays), writes a few keys
   straight into etcd and compacts it up to its newest revision, then starts the API server
   without its watch cache (the local one would otherwise resume the watch from its cache):
   the operator's watch, resumed with its last version, gets "410 Gone" and it lists again.
   Measured: when it reconnects and lists, from the listing until it is quiet again, its CPU
   and peak RSS meanwhile, and the LIST requests on the resource the new API server counted
   (1 expected); then the API server is restarted as it was for the next framework;
4. a count of the objects whose ``status.create_fn.by`` names the framework (a paged list).

The figures go to ``RESULTS-100k.md`` and ``results-100k.json`` (the series of each take-over
too: handled objects, CPU and RSS every 2 s).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2 as httpx
import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run  # noqa: E402
from kubeconf import PLURAL, collection_path, load_cluster  # noqa: E402

PREFIXES = {"trioperator": "bench-trioperator.dev", "kopf": "bench-kopf.dev"}


def read_state(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


class Hundred:
    def __init__(self, args: argparse.Namespace, handle: run.ClusterHandle, work: Path) -> None:
        self.args = args
        self.handle = handle
        self.work = work
        self.api: run.Api | None = None
        self.pending_etcd_steps: Any = None  # run while the API server is down
        self.watch_cache_off = False
        self.namespace = f"bench100k-{os.urandom(3).hex()}"
        self.results: dict[str, Any] = {
            "objects": args.objects,
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "frameworks": {},
        }
        self.kopf_python = run.kopf_python(args.kopf_python)
        self.trio_python = run.trioperator_python(args.trioperator_python)
        run.precompile_trioperator(self.trio_python)

    def connect(self) -> run.Api:
        cluster = load_cluster(self.handle.kubeconfig, tmp_dir=tempfile.mkdtemp(prefix="100k-"))
        return run.Api(cluster)

    # ---- creation, once
    async def create_objects(self) -> None:
        argv = [
            self.kopf_python,
            str(HERE / "load.py"),
            "create",
            *["--namespace", self.namespace, "--prefix", "o", "--count", str(self.args.objects)],
            *["--concurrency", "64", "--client", "aiohttp", "--kubeconfig", self.handle.kubeconfig],
        ]
        run.log(f"creating {self.args.objects:,} objects (load.py, aiohttp, 64 workers)")
        started = time.monotonic()
        done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
        seconds = time.monotonic() - started
        report = json.loads(done.stdout.decode().strip().splitlines()[-1])
        self.results["create"] = {
            "seconds": seconds,
            "per_s": self.args.objects / seconds,
            "errors": report.get("errors"),
            "exit_code": done.returncode,
        }
        run.log(f"  created in {seconds:.0f} s ({self.args.objects / seconds:.0f}/s)")
        if done.returncode != 0:
            raise run.BenchError(f"load.py failed: {done.stderr.decode()[-500:]}")

    # ---- one framework
    def operator_argv(self, framework: str) -> list[str]:
        source = str(HERE / "operators" / "many.py")
        if framework == "kopf":
            kopf = str(Path(self.kopf_python).parent / "kopf")
            return [kopf, "run", "--standalone", "-n", self.namespace, source]
        return [*run.trioperator_cmd(self.trio_python), "run", "-n", self.namespace, source]

    async def quiet(self, pid: int, deadline: float) -> tuple[float, bool]:
        """Wait until < 10 ms CPU per 0.5 s, 3 times in a row; the time the quiet began."""
        streak, since, cpu = 0, time.monotonic(), run.proc_cpu(pid)
        while time.monotonic() < deadline:
            await trio.sleep(0.5)
            now, new = time.monotonic(), run.proc_cpu(pid)
            if new - cpu < 0.010:
                streak += 1
                if streak >= 3:
                    return since, True
            else:
                streak, since = 0, now
            cpu = new
        return since, False

    async def framework_run(self, framework: str) -> None:
        assert self.api is not None
        args = self.args
        result: dict[str, Any] = {"ok": False, "series": []}
        self.results["frameworks"][framework] = result
        state_file = self.work / f"{framework}.state.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIOPERATOR_", "BENCH_"))}
        env.update(
            KUBECONFIG=self.handle.kubeconfig,
            PYTHONUNBUFFERED="1",
            BENCH_FRAMEWORK=framework,
            BENCH_PREFIX=PREFIXES[framework],
            BENCH_STATE_FILE=str(state_file),
            BENCH_EXPECTED=str(args.objects),
        )
        log_path = self.work / f"{framework}.log"
        run.log(
            f"{framework}: take-over of {args.objects:,} objects (budget {args.budget_min} min)"
        )
        process = await run.spawn(self.operator_argv(framework), env=env, log_path=log_path)
        spawned = time.monotonic()
        result["log"] = str(log_path)
        try:
            stop_reason = await self.take_over(framework, process.pid, state_file, spawned, result)
            if stop_reason:
                result["stopped"] = stop_reason
                run.log(f"  {framework} stopped: {stop_reason}")
                return
            await self.steady(framework, process.pid, result)
            await self.relist(framework, process.pid, result)
            result["ok"] = True
        except run.RUN_ERRORS as exc:
            result["error"] = f"{type(exc).__name__}: {exc}"
            run.log(f"  {framework} failed: {result['error']}")
        finally:
            if process.returncode is not None and "exit_code" not in result:
                result["exited_early"] = process.returncode
            result.update(await run.stop_process(process))
            if self.watch_cache_off:  # the next framework gets the API server as it was
                with contextlib.suppress(*run.RUN_ERRORS):
                    await self.restart_apiserver()
                    self.watch_cache_off = False
            result["handled_by_status"] = await self.count_handled(framework)
            run.log(f"  {framework}: {result['handled_by_status']:,} objects show its result")

    async def take_over(
        self,
        framework: str,
        pid: int,
        state_file: Path,
        spawned: float,
        result: dict[str, Any],
    ) -> str | None:
        """Follow the take-over; None when done, else why it was stopped."""
        args = self.args
        deadline = spawned + args.budget_min * 60
        next_log = spawned + 60
        handled = 0
        while True:
            await trio.sleep(2)
            now = time.monotonic()
            try:
                memory = run.proc_memory(pid)
                cpu = run.proc_cpu(pid)
            except OSError:
                return f"the operator exited; log {result['log']}"
            state = read_state(state_file)
            handled = int(state.get("handled", 0))
            rss = memory.get("VmRSS", 0.0)
            result["series"].append(
                {"t_s": round(now - spawned, 1), "handled": handled, "cpu_s": cpu, "rss_mib": rss}
            )
            result.update(
                handled=handled,
                takeover_cpu_s=cpu,
                takeover_peak_rss_mib=memory.get("VmHWM"),
                takeover_seconds=now - spawned,
            )
            if state.get("first_at"):
                result["first_handled_s"] = state["first_at"] - spawned
            if now >= next_log:
                next_log += 60
                run.log(
                    f"  {framework}: {handled:,} handled after {now - spawned:.0f} s, "
                    f"CPU {cpu:.0f} s, RSS {rss:.0f} MiB"
                )
            if rss > args.rss_limit_mib:
                return (
                    f"RSS {rss:.0f} MiB over the limit of {args.rss_limit_mib} MiB after "
                    f"{now - spawned:.0f} s, with {handled:,} of {args.objects:,} objects handled"
                )
            if now > deadline:
                return (
                    f"the budget of {args.budget_min} min ran out with {handled:,} of "
                    f"{args.objects:,} objects handled"
                )
            if handled >= args.objects:
                break
        result["all_handlers_s"] = state["last_at"] - spawned
        quiet_at, ok = await self.quiet(pid, deadline + 300)
        result.update(
            all_handled_quiet_s=quiet_at - spawned,
            takeover_cpu_s=run.proc_cpu(pid),
            takeover_peak_rss_mib=run.proc_memory(pid).get("VmHWM"),
        )
        run.log(
            f"  {framework}: all {args.objects:,} handled in {result['all_handlers_s']:.0f} s, "
            f"quiet at {result['all_handled_quiet_s']:.0f} s, "
            f"CPU {result['takeover_cpu_s']:.0f} s, "
            f"peak RSS {result['takeover_peak_rss_mib']:.0f} MiB"
        )
        return None if ok else "never quiet after the take-over"

    async def steady(self, framework: str, pid: int, result: dict[str, Any]) -> None:
        idle = self.args.idle
        ticks0, threads0 = run.proc_cpu(pid), run.proc_threads_ns(pid)
        await trio.sleep(idle)
        ticks1 = run.proc_cpu(pid)
        ns = run.threads_ns_delta(threads0, run.proc_threads_ns(pid))
        result.update(
            idle_window_s=idle,
            idle_cpu_ms_ticks=(ticks1 - ticks0) * 1000,
            idle_cpu_ms_per_min=ns / 1e6 * 60 / idle if ns is not None else None,
            steady_rss_mib=run.proc_memory(pid).get("VmRSS"),
        )
        run.log(
            f"  {framework}: steady RSS {result['steady_rss_mib']:.0f} MiB, idle CPU "
            f"{result['idle_cpu_ms_per_min'] or 0:.1f} ms per minute"
        )

    async def restart_apiserver(self, extra_args: str = "") -> None:
        """Stop the API server (etcd stays) and start it again with `extra_args`."""
        if self.api is not None:
            await self.api.aclose()
            self.api = None
        apiserver = self.handle.pids().get("apiserver")
        if not apiserver:
            raise run.BenchError("the API server's pid is unknown: no restart")
        os.kill(apiserver, signal.SIGKILL)  # ours, loopback only; no need to wait for watches
        with trio.move_on_after(60):
            while Path(f"/proc/{apiserver}").exists():  # noqa: ASYNC110, ASYNC240 -- no event
                await trio.sleep(0.2)
        if self.pending_etcd_steps is not None:
            await self.pending_etcd_steps()
            self.pending_etcd_steps = None
        up = await trio.to_thread.run_sync(
            lambda: subprocess.run(
                [str(run.ROOT / "scripts" / "kube-up")],
                env={
                    **os.environ,
                    "TRIOPERATOR_KUBE_DIR": self.handle.state_dir or "",
                    "TRIOPERATOR_KUBE_PORT": str(self.args.kube_port),
                    "TRIOPERATOR_KUBE_APISERVER_ARGS": extra_args,
                },
                capture_output=True,
                text=True,
            )
        )
        if up.returncode != 0:
            raise run.BenchError(f"kube-up failed on the restart: {up.stderr[-500:]}")
        self.api = self.connect()

    async def compact_etcd(self) -> None:
        """With the API server down: a few writes straight into etcd (its JSON gateway), then a
        compaction up to the newest revision: every version an operator knows is gone."""
        etcd = f"http://127.0.0.1:{self.args.kube_port + 7347}"
        key = base64.b64encode(b"/bench-100k/bump").decode()
        async with httpx.AsyncClient(base_url=etcd, timeout=30) as client:
            revision = 0
            for i in range(5):
                value = base64.b64encode(str(i).encode()).decode()
                response = await client.post("/v3/kv/put", json={"key": key, "value": value})
                response.raise_for_status()
                revision = int(response.json()["header"]["revision"])
            response = await client.post(
                "/v3/kv/compaction", json={"revision": str(revision), "physical": True}
            )
            response.raise_for_status()
        run.log(f"  etcd compacted up to revision {revision:,}")

    async def relist(self, framework: str, pid: int, result: dict[str, Any]) -> None:
        """Force a 410 and the re-listing it calls for. The local API server resumes watches
        from older versions out of its watch cache (EfficientWatchResumption; etcd's progress
        notifications), so it is restarted without the watch cache after etcd has been
        compacted past every version the operator knows: its watch, resumed with its last
        version, is answered "410 Gone" (from etcd: "required revision has been compacted")."""
        rss0 = run.proc_memory(pid).get("VmRSS")
        cpu0 = run.proc_cpu(pid)
        run.log(f"  {framework}: restarting the API server without the watch cache")
        self.pending_etcd_steps = self.compact_etcd
        await self.restart_apiserver("--watch-cache=false")
        self.watch_cache_off = True
        ready = time.monotonic()
        peak = rss0 or 0.0
        deadline = ready + self.args.budget_min * 60

        async def requests() -> tuple[int, int]:
            """LIST and WATCH requests on the resource since the restart (counters start at 0)."""
            assert self.api is not None
            counts = await self.api.metrics()
            of = [(verb, v) for (res, _sub, verb, _code), v in counts.items() if res == PLURAL]
            return sum(v for verb, v in of if verb == "LIST"), sum(
                v for verb, v in of if verb == "WATCH"
            )

        # First the operator comes back (its retries back off while the server is down): its
        # watch again, and its listing if it got the 410; then it settles.
        lists = watches = 0
        reconnected_at = listed_at = None
        while time.monotonic() < deadline:
            await trio.sleep(1)
            peak = max(peak, run.proc_memory(pid).get("VmRSS", 0.0))
            lists, watches = await requests()
            now = time.monotonic()
            if lists and listed_at is None:
                listed_at = now
            if watches and reconnected_at is None:
                reconnected_at = now
            if reconnected_at is not None and (listed_at is not None or now - reconnected_at > 30):
                break
        streak, since, cpu = 0, time.monotonic(), run.proc_cpu(pid)
        while time.monotonic() < deadline:  # quiet as in quiet(), also following the RSS
            await trio.sleep(0.5)
            now, new = time.monotonic(), run.proc_cpu(pid)
            peak = max(peak, run.proc_memory(pid).get("VmRSS", 0.0))
            if new - cpu < 0.010:
                streak += 1
                if streak >= 3:
                    break
            else:
                streak, since = 0, now
            cpu = new
        lists, watches = await requests()
        result.update(
            relist_reconnect_s=reconnected_at - ready if reconnected_at else None,
            relist_listed_s=listed_at - ready if listed_at else None,
            relist_list_to_quiet_s=since - listed_at if listed_at else None,
            relist_watch_requests=watches,
        )
        result.update(
            relist_quiet_s=since - ready,
            relist_cpu_s=run.proc_cpu(pid) - cpu0,
            relist_rss_before_mib=rss0,
            relist_peak_rss_mib=peak,
            relist_list_requests=lists,
            rss_after_relist_mib=run.proc_memory(pid).get("VmRSS"),
        )
        run.log(
            f"  {framework}: after the API server's restart, quiet in "
            f"{result['relist_quiet_s']:.1f} s, CPU {result['relist_cpu_s']:.1f} s, "
            f"{lists} LIST request(s), peak RSS {peak:.0f} MiB"
        )

    async def count_handled(self, framework: str) -> int:
        """Objects whose status names the framework (a paged list, 5,000 per page)."""
        if self.api is None:
            self.api = self.connect()
        count, token = 0, ""
        with contextlib.suppress(*run.RUN_ERRORS):
            while True:
                params = {"limit": "5000", **({"continue": token} if token else {})}
                page = await self.api.call(
                    "GET", collection_path(self.namespace), params=params, request_timeout=120
                )
                for item in page.get("items", []):
                    if ((item.get("status") or {}).get("create_fn") or {}).get("by") == framework:
                        count += 1
                token = page.get("metadata", {}).get("continue") or ""
                if not token:
                    break
        return count

    async def main(self) -> None:
        self.api = self.connect()
        try:
            await self.api.ensure_crd()
            await self.api.create_namespace(self.namespace)
            await self.create_objects()
            for framework in self.args.frameworks:
                await self.framework_run(framework)
        finally:
            if self.api is not None:
                await self.api.aclose()


def num(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def render(results: dict[str, Any]) -> str:
    fws = list(results["frameworks"])
    names = {"trioperator": "trioperator", "kopf": "Kopf 1.45.2"}
    created = results.get("create", {})
    lines = [
        f"# {results['objects']:,} objects: trioperator and Kopf side by side",
        "",
        "Made by `benchmarks/bench_100k.py` (issue #29 item 4) on its own kube-apiserver 1.20 + "
        f"etcd on loopback; started {results['started']}, {results.get('duration_min', 0):.0f} "
        f"min in all. The objects were created once by the raw client (load.py, aiohttp, 64 "
        f"workers) in {num(created.get('seconds'), 0)} s ({num(created.get('per_s'), 0)}/s); "
        "each framework then ran over the same objects, one after the other, each with its "
        "progress in annotations of its own prefix (so that each finds them never handled). "
        f"Budget per framework: {results['budget_min']} min, RSS limit "
        f"{results['rss_limit_mib']:,} MiB. {results.get('note', '')}",
        "",
        "| figure | " + " | ".join(names.get(fw, fw) for fw in fws) + " |",
        "|---|" + "---:|" * len(fws),
    ]
    rows = [
        ("start to first handled object, s", "first_handled_s", 1),
        ("start to the handler run for every object, s", "all_handlers_s", 0),
        ("start to quiet after all handled (take-over), s", "all_handled_quiet_s", 0),
        ("objects handled when it stopped or finished", "handled", 0),
        ("operator CPU, take-over, s", "takeover_cpu_s", 0),
        ("peak RSS during the take-over, MiB (VmHWM)", "takeover_peak_rss_mib", 0),
        ("steady RSS after the idle window, MiB", "steady_rss_mib", 0),
        ("idle CPU, ms per minute (schedstat ns)", "idle_cpu_ms_per_min", 1),
        ("idle CPU over the window, ms (clock ticks, 10 ms each)", "idle_cpu_ms_ticks", 0),
        ("re-list after a 410: API server ready to operator quiet, s", "relist_quiet_s", 1),
        ("re-list: operator CPU, s", "relist_cpu_s", 1),
        ("re-list: peak RSS, MiB (sampled every 0.5 s)", "relist_peak_rss_mib", 0),
        ("re-list: LIST requests on the resource after the restart", "relist_list_requests", 0),
        (
            "re-list: API server ready to the operator's first watch request, s",
            "relist_reconnect_s",
            1,
        ),
        ("re-list: API server ready to its LIST request, s", "relist_listed_s", 1),
        ("re-list: its LIST request to quiet again, s", "relist_list_to_quiet_s", 1),
        ("re-list: WATCH requests on the resource after the restart", "relist_watch_requests", 0),
        ("RSS after the re-list, MiB", "rss_after_relist_mib", 0),
        ("objects whose status shows its result (paged list)", "handled_by_status", 0),
        ("graceful stop, s", "stop_s", 1),
    ]
    for label, key, digits in rows:
        cells = [num(results["frameworks"][fw].get(key), digits) for fw in fws]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    for fw in fws:
        r = results["frameworks"][fw]
        if r.get("stopped"):
            lines.append(f"- {names.get(fw, fw)} was stopped: {r['stopped']}.")
        if r.get("error"):
            lines.append(f"- {names.get(fw, fw)} failed: {r['error']}.")
    lines.append("")
    lines.append("Take-over progress (objects handled; every 2 s sample, ~every 30 s shown):")
    lines.append("")
    for fw in fws:
        series = results["frameworks"][fw].get("series", [])
        shown = series[::15] + series[-1:]
        points = ", ".join(f"{p['t_s']:.0f}s: {p['handled']:,}" for p in shown)
        lines.append(f"- {names.get(fw, fw)}: {points}")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--frameworks", default="trioperator,kopf")
    parser.add_argument("--budget-min", type=float, default=20.0, help="per framework")
    parser.add_argument("--rss-limit-mib", type=float, default=6144.0)
    parser.add_argument("--idle", type=float, default=60.0)
    parser.add_argument("--kube-port", type=int, default=18843)
    parser.add_argument("--kube-dir", default=f"/tmp/trioperator-100k-kube.{os.getuid()}")
    parser.add_argument("--keep-cluster", action="store_true")
    parser.add_argument("--kopf-python", default=None)
    parser.add_argument("--trioperator-python", default=None)
    parser.add_argument("--note", default="", help="a sentence for the report's header")
    parser.add_argument("--output", default=str(HERE / "RESULTS-100k.md"))
    args = parser.parse_args(argv)
    args.frameworks = [fw for fw in args.frameworks.split(",") if fw]
    if set(args.frameworks) - set(PREFIXES) or args.objects < 1:
        parser.error("--frameworks: trioperator,kopf; --objects: at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.monotonic()
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    work = HERE / ".work" / f"100k-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    handle = run.start_cluster(
        argparse.Namespace(
            kubeconfig=None, cluster="isolated", kube_dir=args.kube_dir, kube_port=args.kube_port
        )
    )
    bench = None
    try:
        bench = Hundred(args, handle, work)
        trio.run(bench.main)
    finally:
        run.kill_leftovers()
        run.stop_cluster(handle, args.keep_cluster)
        if bench is not None:
            results = bench.results
            results.update(
                duration_min=(time.monotonic() - started) / 60,
                budget_min=args.budget_min,
                rss_limit_mib=args.rss_limit_mib,
                note=args.note,
            )
            output = Path(args.output)
            output.parent.mkdir(parents=True, exist_ok=True)
            output.with_name("results-100k.json").write_text(json.dumps(results, indent=2))
            text = render(results)
            output.write_text(text)
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
