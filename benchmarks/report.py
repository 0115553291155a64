"""Markdown tables from the results of benchmarks/run.py (also usable on a saved results.json):

python benchmarks/report.py benchmarks/results.json
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from collections.abc import Callable, Iterable
from typing import Any

NAMES = {"trioperator": "trioperator", "kopf": "Kopf", "raw": "raw client (operators/raw.py)"}

FWS = ("trioperator", "kopf")

ORDER_ROWS = [
    ("handling order vs. creation order: Spearman's rho (1 = same order)", "spearman", 3),
    ("handling order vs. creation order: Kendall's tau", "kendall", 3),
    ("handling order: displacement p95, positions", "displacement_p95", 0),
    ("handling order: displacement max, positions", "displacement_max", 0),
]
"""How far the order in which objects are seen handled departs from the order of creation."""


def _values(runs: Iterable[dict[str, Any]], get: Callable[[dict[str, Any]], Any]) -> list[float]:
    values = []
    for run in runs:
        try:
            value = get(run)
        except (KeyError, TypeError):
            continue
        if value is not None:
            values.append(float(value))
    return values


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _num(value: float, digits: int) -> str:
    if digits == 0 or abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def cell(values: list[float], digits: int = 1) -> str:
    """median (min-max), or just the value for one run."""
    if not values:
        return "-"
    mid = statistics.median(values)
    if len(values) == 1 or min(values) == max(values):
        return _num(mid, digits)
    return f"{_num(mid, digits)} ({_num(min(values), digits)}-{_num(max(values), digits)})"


def ratio(a: list[float], b: list[float]) -> str:
    ma, mb = _median(a), _median(b)
    if ma is None or mb is None:
        return "-"
    if mb == 0:
        return "-" if ma == 0 else "n/a"
    return f"{ma / mb:.2f}"


def _table(header: list[str], rows: list[list[str]], *, left: int = 1) -> list[str]:
    """A markdown table; the first `left` columns are text, the others right-aligned figures."""
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] * left + ["---:"] * (len(header) - left)) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _machine(results: dict[str, Any]) -> list[str]:
    m = results.get("machine", {})
    cfg = results.get("config", {})
    return [
        f"- Machine: {m.get('cpu_model')}, {m.get('cores')} cores, {m.get('ram_gib')} GiB RAM, "
        f"Linux {m.get('kernel')}",
        f"- Python {m.get('python')} (trioperator), {m.get('python_kopf_venv')} (Kopf's venv)",
        f"- trioperator {m.get('trioperator')} (trio {m.get('trio')}, h11 {m.get('h11')}); "
        f"Kopf {m.get('kopf')} (aiohttp {m.get('aiohttp')})",
        f"- Client libraries logged in through by default (imported at every start): "
        f"{m.get('login_libraries', '?')} (trioperator), "
        f"{m.get('login_libraries_kopf_venv', '?')} (Kopf's venv)",
        f"- kube-apiserver {m.get('kube_apiserver')}, etcd {m.get('etcd')}, on loopback "
        f"({results.get('cluster')} cluster)",
        f"- Run: {results.get('started')}, {results.get('duration_s', 0) / 60:.1f} min; "
        + _plan(cfg),
    ]


def _plan(cfg: dict[str, Any]) -> str:
    """What the run did, from its config (older results have `repeat` instead of `repeats`)."""
    repeats = cfg.get("repeats") or [cfg.get("repeat")] * len(cfg.get("sizes", []))
    bursts = ", ".join(f"{n} x {r}" for n, r in zip(cfg.get("sizes", []), repeats, strict=False))
    parts = [
        f"bursts {bursts or 'none'} ({cfg.get('creators')} concurrent creators)",
        f"ceiling with {cfg.get('ceiling_concurrency')} concurrent workers",
        f"idle window {cfg.get('idle')} s",
    ]
    if cfg.get("takeover_size"):
        parts.append(f"takeover {cfg['takeover_size']} x {cfg.get('takeover_repeat')}")
    if cfg.get("steady_sizes"):
        sizes = ", ".join(str(n) for n in cfg["steady_sizes"])
        parts.append(f"steady {sizes} x {cfg.get('steady_repeat')}")
    if cfg.get("background_size"):
        parts.append(
            f"background {cfg['background_size']} x {cfg.get('background_repeat')} "
            f"({cfg.get('background_window')} s window)"
        )
    if cfg.get("shutdown_size"):
        parts.append(f"shutdown {cfg['shutdown_size']} x {cfg.get('shutdown_repeat')}")
    if cfg.get("open_size") and cfg.get("open_rates"):
        rates = ", ".join(f"{r:g}" for r in cfg["open_rates"])
        repeats = cfg.get("open_repeat")
        times = ", ".join(map(str, repeats)) if isinstance(repeats, list) else repeats
        parts.append(f"open loop {cfg['open_size']} at {rates}/s x {times}")
    return "; ".join(parts)


def _ceilings(results: dict[str, Any], n: int) -> dict[str, list[float]]:
    runs = [
        r for r in results.get("runs", {}).get("ceiling", []) if r.get("n") == n and r.get("ok")
    ]
    clients = sorted({r["client"] for r in runs})
    return {
        c: _values([r for r in runs if r["client"] == c], lambda r: r["objects_per_s"])
        for c in clients
    }


def _ceilings_near(results: dict[str, Any], n: int) -> tuple[dict[str, list[float]], str]:
    """The ceilings measured with n objects, else those of the nearest size measured (the
    default run measures the ceiling at its first size only); and a note saying which."""
    ceilings = _ceilings(results, n)
    if ceilings:
        return ceilings, ""
    sizes = sorted({r["n"] for r in results.get("runs", {}).get("ceiling", []) if r.get("ok")})
    if not sizes:
        return {}, ""
    nearest = min(sizes, key=lambda m: abs(m - n))
    return _ceilings(results, nearest), f", measured with {nearest:,} objects"


def _verbs(runs: list[dict[str, Any]]) -> list[str]:
    verbs = {v for r in runs for v in r.get("calls_per_object", {})}
    order = ["PATCH", "PATCH status", "GET", "LIST", "WATCH", "POST events"]
    return [v for v in order if v in verbs] + sorted(verbs - set(order))


def _burst(results: dict[str, Any], n: int, variant: str, frameworks: list[str]) -> list[str]:
    all_runs = [
        r
        for r in results["runs"].get("burst", [])
        if r.get("n") == n and r.get("variant") == variant
    ]
    if not all_runs:
        return []
    runs = {fw: [r for r in all_runs if r["framework"] == fw and r.get("ok")] for fw in frameworks}
    failed = {
        fw: [r for r in all_runs if r["framework"] == fw and not r.get("ok")] for fw in frameworks
    }
    ceilings, at = _ceilings_near(results, n)
    best_client = max(ceilings, key=lambda c: _median(ceilings[c]) or 0, default=None)
    ceiling = _median(ceilings[best_client]) if best_client else None

    rows: list[list[str]] = []

    def row(
        label: str, get: Callable[[dict[str, Any]], Any], digits: int = 1, with_ratio: bool = True
    ) -> None:
        vals = [_values(runs[fw], get) for fw in frameworks]
        if not any(vals):
            return  # a figure these runs do not have (e.g. results of an older harness)
        cells = [cell(v, digits) for v in vals]
        extra = [ratio(vals[0], vals[1]) if with_ratio and len(vals) == 2 else ""]
        rows.append([label, *cells, *extra] if len(frameworks) == 2 else [label, *cells])

    row("objects/s, first create to all handled (higher is better)", lambda r: r["objects_per_s"])
    if ceiling:
        medians = [_median(_values(runs[fw], lambda r: r["objects_per_s"])) for fw in frameworks]
        rows.append(
            [f"% of the ceiling ({best_client}, {ceiling:.0f} objects/s{at})"]
            + [f"{m * 100 / ceiling:.0f}%" if m else "-" for m in medians]
            + ([""] if len(frameworks) == 2 else [])
        )
    row(f"seconds to handle all {n}", lambda r: r["seconds"], 2)
    row("per-object latency p50, s (seen created to handled)", lambda r: r["latency_p50_s"], 2)
    row("per-object latency p95, s", lambda r: r["latency_p95_s"], 2)
    row("per-object latency p99, s", lambda r: r["latency_p99_s"], 2)
    for label, key, digits in ORDER_ROWS:
        row(label, lambda r, k=key: r["order"][k], digits, with_ratio=False)
    row("creators' objects/s while the operator runs", lambda r: r["create_per_s"])
    row("operator CPU s during the burst (lower is better)", lambda r: r["cpu_s"], 2)
    row("operator CPU ms per object", lambda r: r["cpu_ms_per_object"], 2)
    row("operator peak RSS, MiB (VmHWM)", lambda r: r["peak_rss_mib"], 0)
    for verb in _verbs([r for fw in frameworks for r in runs[fw]]):
        row(f"API calls per object: {verb}", lambda r, v=verb: r["calls_per_object"].get(v, 0.0), 2)
    row("API calls per object: total (lower is better)", lambda r: r["calls_total_per_object"], 2)
    row("non-2xx API responses during the burst", lambda r: sum(r["calls"]["non_2xx"].values()), 0)
    row("startup to first object handled, s", lambda r: r["startup_s"], 2)
    row("graceful stop after SIGINT, s", lambda r: r["stop_s"], 2)
    row(
        "warning/error lines in the operator log (per run)",
        lambda r: sum(r["log_findings"]["counts"].values()),
        0,
        with_ratio=False,
    )
    row("API server + etcd CPU ms per object", lambda r: r["server_cpu_ms_per_object"], 2)
    row(
        "noise: other processes' CPU during the burst, cores",
        lambda r: r["cores_other"],
        2,
        with_ratio=False,
    )
    row("noise: CPU steal during the burst, %", lambda r: r["steal"] * 100, 0, with_ratio=False)
    if any(failed.values()):
        rows.append(
            ["failed runs"]
            + [str(len(failed[fw])) for fw in frameworks]
            + ([""] if len(frameworks) == 2 else [])
        )
    header = ["figure", *(NAMES[fw] for fw in frameworks)]
    if len(frameworks) == 2:
        header.append(f"{NAMES[frameworks[0]]}/{NAMES[frameworks[1]]}")
    title = f"### Burst: {n} objects, {variant} handler"
    return [title, "", *_table(header, rows), ""]


def _open_loop(results: dict[str, Any], frameworks: list[str]) -> list[str]:
    """Steady load: per rate, the latency from sending a create to seeing the object handled."""
    runs = results["runs"].get("open", [])
    lines: list[str] = []
    for rate in sorted({r["rate"] for r in runs}):
        group = [r for r in runs if r["rate"] == rate]
        n = max(r["n"] for r in group)
        spec: list[Row] = [
            ("latency p50, s (create sent to seen handled)", lambda r: r["latency_p50_s"], 3, True),
            ("latency p95, s", lambda r: r["latency_p95_s"], 3, True),
            ("latency p99, s", lambda r: r["latency_p99_s"], 3, True),
            ("latency max, s", lambda r: r["latency_max_s"], 3, True),
            ("of which: create sent to seen created, p50, s", lambda r: r["seen_p50_s"], 3, False),
            ("of which: create sent to seen created, p95, s", lambda r: r["seen_p95_s"], 3, False),
        ]
        spec += [(label, lambda r, k=key: r["order"][k], d, False) for label, key, d in ORDER_ROWS]
        spec += [
            ("operator CPU, % of one core", lambda r: r["cpu_percent"], 1, True),
            ("operator CPU ms per object", lambda r: r["cpu_ms_per_object"], 2, True),
            ("operator peak RSS, MiB (VmHWM)", lambda r: r["peak_rss_mib"], 0, True),
            ("API calls per object: total", lambda r: r["calls_total_per_object"], 2, True),
            ("creates/s achieved (the schedule's rate)", lambda r: r["achieved_rate"], 1, False),
            (
                "schedule lag p99, ms (a create fired late)",
                lambda r: r["schedule_lag_p99_s"] * 1000,
                1,
                False,
            ),
            ("schedule lag max, ms", lambda r: r["schedule_lag_max_s"] * 1000, 1, False),
            ("noise: other processes' CPU, cores", lambda r: r["cores_other"], 2, False),
        ]
        spec += _breakdown_rows()
        lines += [f"### Steady load: {n:,} objects created at {rate:g}/s (open loop)", ""]
        lines += _compare(group, frameworks, spec)
        lines.append("")
        if any(r.get("framework") == "raw" for r in group):
            lines += [
                f"The same load at {rate:g}/s with a raw client as the operator (no framework: "
                "one watch, two merge-patches per object): what the API server, etcd and the "
                "load generator take on this machine.",
                "",
                *_compare(
                    group, ["raw"], spec[:6] + spec[6 + len(ORDER_ROWS) : 9 + len(ORDER_ROWS)]
                ),
                "",
            ]
    return lines


BREAKDOWN_STEPS = (
    ("seen", "create sent to the harness's watch seeing it (the API server's part)"),
    ("received", "create sent to the event in the operator's worker mailbox"),
    ("queued", "event received to the handler's start"),
    ("handler", "handler's start to its status PATCH asked for (Kopf: its body PATCH first)"),
    ("status_slot", "status PATCH waits for a request slot"),
    ("status_rtt", "status PATCH on the wire (answered)"),
    ("status_echo", "status PATCH answered to the harness seeing it"),
    ("body_slot", "body PATCH waits for a request slot"),
    ("body_rtt", "body PATCH on the wire (answered)"),
    ("echo", "body PATCH answered to its event in the worker's mailbox"),
)


def _breakdown_rows() -> list[Row]:
    """Where the time goes (from the operator's trace, operators/tracing.py): p50 and p95 of
    each step, in ms; steps a framework's trace cannot tell are left empty."""
    rows: list[Row] = []
    for step, words in BREAKDOWN_STEPS:
        for q in ("p50", "p95"):
            rows.append(
                (
                    f"step {step} {q}, ms: {words}",
                    lambda r, s=step, q=q: r["breakdown"]["steps"][s][q] * 1000,
                    0,
                    False,
                )
            )
    rows += [
        (
            "PATCHes at once, max (asked for, not answered)",
            lambda r: r["breakdown"]["patches_at_once_max"],
            0,
            False,
        ),
        ("event loop lag p99, ms", lambda r: r["breakdown"]["loop_lag"]["p99"] * 1000, 1, False),
        (
            "gen-2 garbage collections during the load, ms",
            lambda r: r["breakdown"]["gc_in_run"]["gen2"]["seconds"] * 1000,
            0,
            False,
        ),
    ]
    return rows


def _restart(results: dict[str, Any], n: int, frameworks: list[str]) -> list[str]:
    all_runs = [
        r
        for r in results["runs"].get("restart", [])
        if r.get("n") == n and r.get("origin", "burst") == "burst"
    ]
    if not all_runs:
        return []
    runs = {fw: [r for r in all_runs if r["framework"] == fw and r.get("ok")] for fw in frameworks}
    rows: list[list[str]] = []

    def row(
        label: str, get: Callable[[dict[str, Any]], Any], digits: int = 1, with_ratio: bool = True
    ) -> None:
        vals = [_values(runs[fw], get) for fw in frameworks]
        extra = [ratio(vals[0], vals[1]) if with_ratio else ""] if len(frameworks) == 2 else []
        rows.append([label, *(cell(v, digits) for v in vals), *extra])

    idle = all_runs[0].get("idle_window_s")
    row("start to quiet over N handled objects, s", lambda r: r["restart_s"], 2)
    row("CPU s until quiet (incl. interpreter start and imports)", lambda r: r["restart_cpu_s"], 2)
    row("PATCH calls on restart + idle (expected: 0)", lambda r: r["patches"], 0, False)
    verbs = sorted({v for fw in frameworks for r in runs[fw] for v in r["calls"]["by_verb"]})
    for verb in verbs:
        row(
            f"API calls on restart + idle: {verb}",
            lambda r, v=verb: r["calls"]["by_verb"].get(v, 0),
            0,
            False,
        )
    row(f"idle CPU over {idle:.0f} s, ms", lambda r: r["idle_cpu_s"] * 1000, 0)
    row("idle CPU, % of one core", lambda r: r["idle_cpu_percent"], 2)
    row("steady RSS after idle, MiB (VmRSS)", lambda r: r["steady_rss_mib"], 0)
    row("peak RSS, MiB (VmHWM)", lambda r: r["peak_rss_mib"], 0)
    row("a new object handled after idle, s", lambda r: r["sentinel_after_idle_s"], 2)
    row("noise: other processes' CPU, cores", lambda r: r["cores_other"], 2, False)
    row("noise: CPU steal during restart + idle, %", lambda r: r["steal"] * 100, 0, False)
    failed = {
        fw: sum(1 for r in all_runs if r["framework"] == fw and not r.get("ok"))
        for fw in frameworks
    }
    if any(failed.values()):
        rows.append(
            [
                "failed runs",
                *(str(failed[fw]) for fw in frameworks),
                *([""] if len(frameworks) == 2 else []),
            ]
        )
    header = ["figure", *(NAMES[fw] for fw in frameworks)]
    if len(frameworks) == 2:
        header.append(f"{NAMES[frameworks[0]]}/{NAMES[frameworks[1]]}")
    return [f"### Restart over {n} handled objects, then idle", "", *_table(header, rows), ""]


def _ceiling_table(results: dict[str, Any], n: int) -> list[str]:
    runs = [r for r in results["runs"].get("ceiling", []) if r.get("n") == n]
    if not runs:
        return []
    rows = []
    for client in sorted({r["client"] for r in runs}):
        ok = [r for r in runs if r["client"] == client and r.get("ok")]
        label = {"httpx2": "httpx2 under trio", "aiohttp": "aiohttp under asyncio"}.get(
            client, client
        )
        rows.append(
            [
                label,
                cell(_values(ok, lambda r: r["objects_per_s"])),
                cell(_values(ok, lambda r: r["client_cpu_ms_per_object"]), 2),
                cell(_values(ok, lambda r: r["create_per_s"])),
                cell(_values(ok, lambda r: r["server_cpu_ms_per_object"]), 2),
                cell(_values(ok, lambda r: r["cores_other"]), 2),
                cell(_values(ok, lambda r: r["steal"] * 100), 0),
                str(sum(1 for r in runs if r["client"] == client and not r.get("ok"))),
            ]
        )
    header = [
        "raw client",
        "objects/s (2 merge-patches each)",
        "client CPU ms/object",
        "creates/s (POST only)",
        "API server + etcd CPU ms/object",
        "noise: other processes, cores",
        "noise: steal %",
        "failed runs",
    ]
    return [
        f"### Ceiling: the API server with a raw client, {n} objects",
        "",
        *_table(header, rows),
        "",
    ]


def _decode(results: dict[str, Any]) -> list[str]:
    decode = results.get("decode")
    if not decode or not decode.get("rows"):
        return []
    rows = []
    for r in decode["rows"]:
        who = {
            "decode_watch_line (msgspec, reused)": " (trioperator's path)",
            "json.loads (stdlib)": " (Kopf's path)",
        }.get(r["decoder"], "")
        rows.append(
            [
                r["decoder"] + who,
                f"{r['events_per_s']:,.0f}",
                f"{r['mib_per_s']:.1f}",
                f"{r['vs_json']:.2f}",
            ]
        )
    return [
        "### Micro: watch-event decoding (benchmarks/bench_decode.py)",
        "",
        *_table(["decoder", "events/s", "MiB/s", "vs json.loads"], rows),
        "",
    ]


Row = tuple[str, Callable[[dict[str, Any]], Any], int, bool]
"""A table row: label, how to get the figure from a run, decimals, with the ratio column."""


def _compare(all_runs: list[dict[str, Any]], frameworks: list[str], spec: list[Row]) -> list[str]:
    """A table of figures per framework (median (min-max) of the successful runs) + ratio."""
    runs = {
        fw: [r for r in all_runs if r.get("framework") == fw and r.get("ok")] for fw in frameworks
    }
    two = len(frameworks) == 2
    rows = []
    for label, get, digits, with_ratio in spec:
        vals = [_values(runs[fw], get) for fw in frameworks]
        if not any(vals):
            continue
        extra = [ratio(vals[0], vals[1]) if with_ratio else ""] if two else []
        rows.append([label, *(cell(v, digits) for v in vals), *extra])
    failed = [
        sum(1 for r in all_runs if r.get("framework") == fw and not r.get("ok"))
        for fw in frameworks
    ]
    if any(failed):
        rows.append(["failed runs", *(str(f) for f in failed), *([""] if two else [])])
    header = ["figure", *(NAMES[fw] for fw in frameworks)]
    if two:
        header.append(f"{NAMES[frameworks[0]]}/{NAMES[frameworks[1]]}")
    return _table(header, rows)


def _steady(results: dict[str, Any], frameworks: list[str]) -> list[str]:
    """Restarts over handled objects after a takeover or over pre-handled ones."""
    runs = [
        r
        for r in results["runs"].get("restart", [])
        if r.get("origin") in ("takeover", "pre-handled")
    ]
    lines: list[str] = []
    for n, origin in sorted({(r["n"], r["origin"]) for r in runs}):
        group = [r for r in runs if r["n"] == n and r["origin"] == origin]
        idle = next((r.get("idle_window_s") for r in group if r.get("idle_window_s")), 0)
        how = (
            f"the {n:,} objects it has just taken over"
            if origin == "takeover"
            else f"{n:,} objects created pre-handled by the load generator"
        )
        lines += [f"### Steady state: restart over {how}, then idle", ""]
        lines += _compare(group, frameworks, _restart_rows(group, frameworks, idle))
        lines.append("")
    return lines


def _restart_rows(runs: list[dict[str, Any]], frameworks: list[str], idle: float) -> list[Row]:
    verbs = sorted({v for r in runs if r.get("ok") for v in r["calls"]["by_verb"]})
    rows: list[Row] = [
        ("start to quiet, s", lambda r: r["restart_s"], 2, True),
        (
            "CPU s until quiet (incl. interpreter start and imports)",
            lambda r: r["restart_cpu_s"],
            2,
            True,
        ),
        ("PATCH calls on restart + idle (expected: 0)", lambda r: r["patches"], 0, False),
    ]
    rows += [
        (
            f"API calls on restart + idle: {verb}",
            lambda r, v=verb: r["calls"]["by_verb"].get(v, 0),
            0,
            False,
        )
        for verb in verbs
    ]
    rows += [
        (f"idle CPU over {idle:.0f} s, ms", lambda r: r["idle_cpu_s"] * 1000, 0, True),
        ("idle CPU, % of one core", lambda r: r["idle_cpu_percent"], 2, True),
        (
            "idle CPU, ms per minute (scheduler's ns: /proc/PID/task/*/schedstat)",
            lambda r: r["idle_cpu_ms_per_min"],
            2,
            True,
        ),
        ("steady RSS after idle, MiB (VmRSS)", lambda r: r["steady_rss_mib"], 0, True),
        ("peak RSS, MiB (VmHWM)", lambda r: r["peak_rss_mib"], 0, True),
        ("a new object handled after idle, s", lambda r: r["sentinel_after_idle_s"], 2, True),
        ("noise: other processes' CPU, cores", lambda r: r["cores_other"], 2, False),
    ]
    return rows


def _takeover(results: dict[str, Any], frameworks: list[str]) -> list[str]:
    runs = results["runs"].get("takeover", [])
    lines: list[str] = []
    for n in sorted({r["n"] for r in runs}):
        group = [r for r in runs if r["n"] == n]
        spec: list[Row] = [
            ("operator start to all handled, s", lambda r: r["seconds"], 2, True),
            ("objects/s (higher is better)", lambda r: r["objects_per_s"], 1, True),
            ("operator start to first handled, s", lambda r: r["first_handled_s"], 2, True),
            ("operator CPU s (start to quiet, incl. imports)", lambda r: r["cpu_s"], 2, True),
            ("operator CPU ms per object", lambda r: r["cpu_ms_per_object"], 2, True),
            ("peak RSS, MiB (VmHWM)", lambda r: r["peak_rss_mib"], 0, True),
            ("RSS when done, MiB (VmRSS)", lambda r: r["rss_after_mib"], 0, True),
        ]
        for verb in _verbs([r for r in group if r.get("ok")]):
            spec.append(
                (
                    f"API calls per object: {verb}",
                    lambda r, v=verb: r["calls_per_object"].get(v, 0.0),
                    2,
                    True,
                )
            )
        spec += [
            ("API calls per object: total", lambda r: r["calls_total_per_object"], 2, True),
            (f"graceful stop with {n:,} handled objects, s", lambda r: r["stop_s"], 2, True),
            (
                "warning/error lines in the log",
                lambda r: sum(r["log_findings"]["counts"].values()),
                0,
                False,
            ),
            ("noise: other processes' CPU, cores", lambda r: r["cores_other"], 2, False),
        ]
        lines += [f"### Takeover: the operator starts over {n:,} never-handled objects", ""]
        lines += _compare(group, frameworks, spec)
        lines.append("")
    return lines


def _background(results: dict[str, Any], frameworks: list[str]) -> list[str]:
    runs = results["runs"].get("background", [])
    lines: list[str] = []
    for n in sorted({r["n"] for r in runs}):
        group = [r for r in runs if r["n"] == n]
        window = next((r.get("window_s") for r in group if r.get("window_s")), 0)
        verbs = sorted(
            {v for r in group if r.get("ok") for v in r.get("window_calls", {}).get("by_verb", {})}
        )
        spec: list[Row] = [
            (
                f"operator start to all {n:,} daemons running, s",
                lambda r: r["all_daemons_s"],
                2,
                True,
            ),
            ("CPU s until then (incl. imports)", lambda r: r["startup_cpu_s"], 2, True),
            ("peak RSS until then, MiB (VmHWM)", lambda r: r["startup_peak_rss_mib"], 0, True),
            (
                "API calls at the start (all verbs)",
                lambda r: sum(r["startup_calls"]["by_verb"].values()),
                0,
                True,
            ),
            (
                f"CPU over the {window:.0f} s window, ms",
                lambda r: r["window_cpu_s"] * 1000,
                0,
                True,
            ),
            ("CPU over the window, % of one core", lambda r: r["window_cpu_percent"], 2, True),
            ("timer runs per object in the window", lambda r: r["timer_runs_per_object"], 1, False),
            ("API calls in the window (all verbs)", lambda r: r["window_calls_total"], 0, True),
        ]
        spec += [
            (
                f"API calls in the window: {verb}",
                lambda r, v=verb: r["window_calls"]["by_verb"].get(v, 0),
                0,
                False,
            )
            for verb in verbs
        ]
        spec += [
            (
                "steady RSS at the end of the window, MiB (VmRSS)",
                lambda r: r["steady_rss_mib"],
                0,
                True,
            ),
            ("peak RSS, MiB (VmHWM)", lambda r: r["peak_rss_mib"], 0, True),
            (f"graceful stop with {n:,} daemons, s", lambda r: r["stop_s"], 2, True),
            (
                "warning/error lines in the log",
                lambda r: sum(r["log_findings"]["counts"].values()),
                0,
                False,
            ),
            (
                "noise: other processes' CPU in the window, cores",
                lambda r: r["cores_other"],
                2,
                False,
            ),
        ]
        lines += [f"### Background: {n:,} objects with a daemon and a timer (10 s) each", ""]
        lines += _compare(group, frameworks, spec)
        lines.append("")
    return lines


def _shutdown(results: dict[str, Any], frameworks: list[str]) -> list[str]:
    runs = results["runs"]
    spec: list[Row] = []
    for kind, variant, what in (
        ("shutdown", "plain", "handled objects, create handler"),
        ("shutdown", "daemons", "objects with a daemon and a timer each"),
        ("takeover", "plain", "handled objects, create handler (after the takeover)"),
        ("background", "daemons", "objects with a daemon and a timer each"),
    ):
        for n in sorted({r["n"] for r in runs.get(kind, []) if r.get("variant") == variant}):
            spec.append(
                (
                    f"{n:,} {what}",
                    lambda r, k=kind, v=variant, m=n: (
                        r["stop_s"] if (r["kind"], r["variant"], r["n"]) == (k, v, m) else None
                    ),
                    2,
                    True,
                )
            )
    if not spec:
        return []
    every = [
        {**r, "kind": kind}
        for kind in ("shutdown", "takeover", "background")
        for r in runs.get(kind, [])
    ]
    return [
        "### Graceful stop: from SIGINT to the exit, s",
        "",
        *_compare(every, frameworks, spec),
        "",
    ]


def _median_of(
    runs: list[dict[str, Any]], fw: str, get: Callable[[dict[str, Any]], Any]
) -> float | None:
    return _median(_values([r for r in runs if r.get("framework") == fw and r.get("ok")], get))


@dataclasses.dataclass(frozen=True)
class Goal:
    """One goal's outcome in one run: what the report's goal tables show."""

    issue: str
    goal: str
    measured: str  # the figures, as shown; "not measured" if a side is missing
    met: bool | None  # None: not measured, or context only (see `context`)
    ours: float | None = None  # trioperator's median (the raw client's for the floor row)
    theirs: float | None = None  # what it is compared with: Kopf's median (or trioperator's)
    ratio: float | None = None  # ours / theirs, for goals stated as a ratio
    context: bool = False  # a figure to show next to the goals, with no verdict

    @property
    def short(self) -> str:
        """The figure a run's column shows: the ratio, else trioperator's own figure."""
        if self.ratio is not None:
            return f"{self.ratio:.2f}x"
        if self.ours is not None:
            return _num(self.ours, 2)
        return "-"


def _verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("**met**" if ok else "not met")


def _floor(runs: dict[str, Any]) -> float | None:
    """The raw-client floor of CPU per object: aiohttp's client CPU in the ceiling runs (two
    merge-patches per object, no framework), the median over the sizes measured."""
    return _median(
        _values(
            [r for r in runs.get("ceiling", []) if r.get("ok") and r.get("client") == "aiohttp"],
            lambda r: r["client_cpu_ms_per_object"],
        )
    )


def _idle_ms(r: dict[str, Any]) -> Any:
    """Idle CPU in ms per minute: the scheduler's nanoseconds if measured (#33), else ticks."""
    if r.get("idle_cpu_ms_per_min") is not None:
        return r["idle_cpu_ms_per_min"]
    return r["idle_cpu_s"] * 1000 * 60 / r["idle_window_s"] if r.get("idle_window_s") else None


def goal_rows(results: dict[str, Any]) -> list[Goal]:
    """Each goal of issue #15 (and the earlier ones of #6 and #5 it keeps, and those of #33)
    with the measured value: met / not met. The raw-client ceiling is not a goal (the API server
    and the creators share the cores with the operator, so no operator can reach it here); it
    stays in the details as context, and gives #33's floor of CPU per object."""
    runs = results.get("runs", {})
    rows: list[Goal] = []

    def versus(
        issue: str,
        goal: str,
        group: list[dict[str, Any]],
        get: Callable[[dict[str, Any]], Any],
        limit: float,
        unit: str,
        digits: int = 1,
    ) -> None:
        """The goal "trioperator <= limit x Kopf" for the figure `get`."""
        ours, theirs = _median_of(group, "trioperator", get), _median_of(group, "kopf", get)
        if ours is None or theirs is None:
            rows.append(Goal(issue, goal, "not measured", None))
            return
        measured = f"{_num(ours, digits)} vs {_num(theirs, digits)} {unit}"
        share = None
        if theirs:
            share = ours / theirs
            measured += f" ({share:.2f}x)"
            met = share <= limit
        else:  # e.g. no idle CPU tick at all for Kopf: only 0 is as good
            met = ours == 0
        rows.append(Goal(issue, goal, measured, met, ours, theirs, share))

    def cpu_and_calls(what: str, group: list[dict[str, Any]]) -> None:
        """CPU per object <= 0.4x Kopf's, with no more API calls per object than Kopf makes
        (a hundredth of a call per object allowed: the watch reconnections of a busy run)."""
        goal = f"{what}: CPU per handled object <= 0.4x Kopf's, same API calls per object"
        cpu = [_median_of(group, fw, lambda r: r["cpu_ms_per_object"]) for fw in FWS]
        calls = [_median_of(group, fw, lambda r: r["calls_total_per_object"]) for fw in FWS]
        ours, theirs = cpu
        our_calls, their_calls = calls
        if ours is None or theirs is None or our_calls is None or their_calls is None:
            rows.append(Goal("#15", goal, "not measured", None))
            return
        share = ours / theirs if theirs else float("inf")
        measured = (
            f"{ours:.2f} vs {theirs:.2f} ms ({share:.2f}x); "
            f"calls {our_calls:.2f} vs {their_calls:.2f}"
        )
        met = share <= 0.4 and our_calls <= their_calls + 0.01
        rows.append(Goal("#15", goal, measured, met, ours, theirs, share))

    floor = _floor(runs)

    def cpu_floor(what: str, group: list[dict[str, Any]]) -> None:
        """#33: CPU per object <= 0.3x Kopf's and within 1.5x of the raw-client floor measured
        in the same run."""
        goal = f"{what}: CPU per handled object <= 0.3x Kopf's and <= 1.5x the raw-client floor"
        ours = _median_of(group, "trioperator", lambda r: r["cpu_ms_per_object"])
        theirs = _median_of(group, "kopf", lambda r: r["cpu_ms_per_object"])
        if ours is None or theirs is None or not theirs or floor is None or not floor:
            rows.append(Goal("#33", goal, "not measured", None))
            return
        share = ours / theirs
        measured = (
            f"{ours:.2f} vs {theirs:.2f} ms ({share:.2f}x); "
            f"floor {floor:.2f} ms ({ours / floor:.2f}x)"
        )
        met = share <= 0.3 and ours <= 1.5 * floor
        rows.append(Goal("#33", goal, measured, met, ours, theirs, share))

    bursts = runs.get("burst", [])
    groups = sorted({(r["n"], r["variant"]) for r in bursts if "variant" in r})
    for n, variant in groups:
        group = [r for r in bursts if r["n"] == n and r.get("variant") == variant]
        cpu_and_calls(f"burst {n:,} ({variant})", group)
    takeovers = runs.get("takeover", [])
    for n in sorted({r["n"] for r in takeovers}):
        group = [r for r in takeovers if r["n"] == n]
        cpu_and_calls(f"taking over {n:,} objects", group)

    open_runs = runs.get("open", [])
    rates = sorted({r["rate"] for r in open_runs})
    if not rates:
        for goal in ("at 160/s: latency p95 <= 0.3x Kopf's", "at any rate: latency p95 <= Kopf's"):
            rows.append(Goal("#15", f"open loop {goal}", "not measured", None))
    top = rates[-1] if rates else None
    for rate in rates:
        group = [r for r in open_runs if r["rate"] == rate]
        p95 = [_median_of(group, fw, lambda r: r["latency_p95_s"]) for fw in FWS]
        goals = [("<= Kopf's", 1.0)]
        if rate == top:
            goals.insert(0, ("<= 0.3x Kopf's", 0.3))
        for words, limit in goals:
            goal = f"open loop at {rate:g}/s: latency p95 {words}"
            if p95[0] is None or p95[1] is None or not p95[1]:
                rows.append(Goal("#15", goal, "not measured", None))
                continue
            share = p95[0] / p95[1]
            measured = f"{p95[0]:.3f} vs {p95[1]:.3f} s ({share:.2f}x)"
            rows.append(Goal("#15", goal, measured, share <= limit, p95[0], p95[1], share))
        raw = _median_of(group, "raw", lambda r: r["latency_p95_s"])
        if rate == top and raw is not None:
            # #33 item 2: the same open loop with a raw client as the operator; its p95 is the
            # API server's (with etcd's) and the load generator's share, measured in this run.
            ours = p95[0]
            share = raw / ours if ours else None
            measured = f"raw client's p95 {raw:.3f} s" + (
                f" = {share * 100:.0f}% of trioperator's {ours:.3f} s" if share else ""
            )
            rows.append(
                Goal(
                    "#33",
                    f"open loop at {rate:g}/s: the API server's share of the p95 (raw client "
                    "as the operator)",
                    measured,
                    None,
                    raw,
                    ours,
                    share,
                    context=True,
                )
            )

    starts = [*bursts, *open_runs]
    versus(
        "#15",
        "start-up to first handled object <= Kopf's",
        starts,
        lambda r: r["startup_s"],
        1.0,
        "s",
        2,
    )

    background = runs.get("background", [])
    for n in sorted({r["n"] for r in background}):
        group = [r for r in background if r["n"] == n]
        ours = _median_of(group, "trioperator", lambda r: r["window_cpu_percent"])
        theirs = _median_of(group, "kopf", lambda r: r["window_cpu_percent"])
        what = f"{n:,} daemons + timers at rest: < 1% of one core"
        if ours is None:
            rows.append(Goal("#15", what, "not measured", None))
        else:
            kopf = f" (Kopf: {theirs:.2f}%)" if theirs is not None else ""
            rows.append(
                Goal("#15", what, f"{ours:.2f}% of one core{kopf}", ours < 1.0, ours, theirs)
            )

    restarts = [r for r in runs.get("restart", []) if "n" in r]
    for n in sorted({r["n"] for r in restarts}):
        group = [r for r in restarts if r["n"] == n]
        versus(
            "#15" if n == 2000 else "#6",
            f"steady RSS with {n:,} handled objects <= 0.6x Kopf's",
            group,
            lambda r: r["steady_rss_mib"],
            0.6,
            "MiB",
            0,
        )
    # Earlier goals that #15 keeps as they were.
    for n in sorted({r["n"] for r in takeovers}):
        group = [r for r in takeovers if r["n"] == n]
        versus(
            "#6",
            f"taking over {n:,} never-handled objects: peak RSS <= 0.4x Kopf's",
            group,
            lambda r: r["peak_rss_mib"],
            0.4,
            "MiB",
            0,
        )
    for n in sorted({r["n"] for r in restarts}):
        group = [r for r in restarts if r["n"] == n]
        fine = all(r.get("idle_cpu_ms_per_min") is not None for r in group if r.get("ok"))
        versus(
            "#6",
            f"idle CPU with {n:,} handled objects <= Kopf's",
            group,
            _idle_ms,
            1.0,
            "ms per minute" + (" (schedstat, ns)" if fine else " (clock ticks)"),
            2 if fine else 0,
        )
    for n in sorted({r["n"] for r in background}):
        group = [r for r in background if r["n"] == n]
        versus(
            "#5",
            f"RSS with {n:,} daemons + timers well below Kopf's (<= 0.6x)",
            group,
            lambda r: r["steady_rss_mib"],
            0.6,
            "MiB",
            0,
        )
    # #33: CPU per object closer to Kopf's and to the raw client (the ceiling's floor).
    for n, variant in groups:
        group = [r for r in bursts if r["n"] == n and r.get("variant") == variant]
        cpu_floor(f"burst {n:,} ({variant})", group)
    return rows


GOALS_NOTE = (
    "a goal is met when the ratio of the medians is within the limit. CPU per object is the "
    "operator's CPU (utime+stime) per handled object; the API calls per object may exceed "
    "Kopf's by 0.01 at most (a watch reconnection of a busy run). Start-up: from the process "
    "start to the first object seen handled, over every burst and open-loop run. At rest: the "
    "window (--background-window) with all daemons running and the timers firing. "
    '"Well below" (#5) is taken as at most 0.6x. Idle CPU: ms of CPU per minute of the idle '
    "window, from the scheduler's per-thread run time in nanoseconds (/proc/PID/task/*/schedstat; "
    "the clock ticks of utime+stime count 10 ms each, too coarse for an idle operator), or from "
    "the ticks in results without it. The raw-client floor (#33) is the aiohttp client's CPU per "
    "object in the ceiling run (two merge-patches, no framework). The raw-client ceiling "
    "(details) is context, not a goal: the API server and the load generator share the 2 cores "
    "with the operator, so no operator reaches it here."
)


def _goals(results: dict[str, Any]) -> list[str]:
    rows = [
        [g.issue, g.goal, g.measured, "context" if g.context else _verdict(g.met)]
        for g in goal_rows(results)
    ]
    if not rows:
        return []
    header = [
        "issue",
        "goal (trioperator vs. Kopf 1.45.2)",
        "measured: trioperator vs. Kopf, medians",
        "verdict",
    ]
    return [
        "## Goals",
        "",
        *_table(header, rows, left=4),
        "",
        "Medians over the repetitions below; " + GOALS_NOTE,
        "",
    ]


# ------------------------------------------------------------------------------ several runs
def pool_rounds(results: dict[str, Any]) -> None:
    """After `run.py --runs N`: each run's results are in ``results["rounds"]``. Pool them:
    every run record gets its run's index (``round``, from 0) and goes into ``results["runs"]``,
    so that the details tables show all repetitions of all runs, and the goals can still be
    judged run by run (:func:`split_rounds`); the per-run copies are dropped (one copy of
    each record in results.json). The machine is the first run's."""
    rounds = results.get("rounds") or []
    pooled: dict[str, list[dict[str, Any]]] = {}
    timings: list[dict[str, Any]] = []
    for index, one in enumerate(rounds):
        for kind, records in (one.get("runs") or {}).items():
            pooled.setdefault(kind, []).extend({**r, "round": index} for r in records)
        timings += [{**t, "part": f"run {index + 1}: {t['part']}"} for t in one.get("timings", [])]
        if one.get("machine") and "machine" not in results:
            results["machine"] = one["machine"]
    results["runs"] = pooled
    results["timings"] = timings
    results["rounds"] = [{"round": index} for index in range(len(rounds))]


def split_rounds(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The pooled results again as one results document per run (the goals of each)."""
    count = len(results.get("rounds") or [])
    return [
        {
            **results,
            "runs": {
                kind: [r for r in records if r.get("round") == index]
                for kind, records in results.get("runs", {}).items()
            },
        }
        for index in range(count)
    ]


def _spread(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    low, high = min(values), max(values)
    return _num(low, digits) if low == high else f"{_num(low, digits)}-{_num(high, digits)}"


@dataclasses.dataclass(frozen=True)
class Judged:
    """One goal over several runs: each run's outcome, the worst of them, the verdict."""

    issue: str
    goal: str
    per_run: list[Goal | None]  # None: the run has no such row (it did not get that far)
    worst: Goal | None
    met: bool | None
    context: bool

    def spread(self) -> str:
        """Min-max of each run's median: trioperator's, the compared side's, and their ratio."""
        runs = [g for g in self.per_run if g is not None and g.ours is not None]
        if not runs:
            return "-"
        ours = _spread([g.ours for g in runs if g.ours is not None])
        parts = [ours if not self.context else f"raw {ours}"]
        theirs = [g.theirs for g in runs if g.theirs is not None]
        if theirs:
            parts.append(f"{'trioperator' if self.context else 'Kopf'} {_spread(theirs)}")
        ratios = [g.ratio for g in runs if g.ratio is not None]
        if ratios:
            parts.append(f"ratio {_spread(ratios)}")
        return "; ".join(parts)


def judge(per_round: list[list[Goal]]) -> list[Judged]:
    """Each goal over the runs: met only if met in every run (the worst run decides; a run
    without a figure for it fails it too). The worst run: the first that failed, else the one
    closest to its limit (the highest ratio, or figure for goals without a ratio)."""
    keys: list[tuple[str, str]] = []
    for goals in per_round:
        for g in goals:
            if (g.issue, g.goal) not in keys:
                keys.append((g.issue, g.goal))
    judged = []
    for issue, goal in keys:
        per_run = [
            next((g for g in goals if (g.issue, g.goal) == (issue, goal)), None)
            for goals in per_round
        ]
        present = [g for g in per_run if g is not None]
        context = any(g.context for g in present)
        failed = [g for g in present if g.met is False]
        if context:
            met = None
        elif failed:
            met = False
        elif any(g is None or g.met is None for g in per_run):
            met = False if any(g is not None and g.met for g in per_run) else None
        else:
            met = True
        measured = [g for g in present if g.met is not None or context]

        def badness(g: Goal) -> float:
            return g.ratio if g.ratio is not None else (g.ours if g.ours is not None else 0.0)

        worst = failed[0] if failed else max(measured, key=badness, default=None)
        judged.append(Judged(issue, goal, per_run, worst, met, context))
    return judged


def _goals_over_rounds(results: dict[str, Any]) -> list[str]:
    rounds = split_rounds(results)
    per_round = [goal_rows(one) for one in rounds]
    judged = judge(per_round)
    if not judged:
        return []
    count = len(rounds)
    rows = []
    for j in judged:
        cells = []
        for g in j.per_run:
            if g is None or (g.met is None and not g.context):
                cells.append("-")
            else:
                cells.append(g.short + ("" if g.context or g.met else " (not met)"))
        if j.context:
            verdict = "context"
        elif j.met is None:
            verdict = "-"
        else:
            ok = sum(1 for g in j.per_run if g is not None and g.met)
            verdict = f"**met** in {ok} of {count}" if j.met else f"not met ({ok} of {count} met)"
        worst = j.worst.measured if j.worst is not None else "not measured"
        rows.append([j.issue, j.goal, *cells, j.spread(), worst, verdict])
    header = [
        "issue",
        "goal (trioperator vs. Kopf 1.45.2)",
        *(f"run {i + 1}" for i in range(count)),
        "spread: min-max of the runs' medians",
        "the worst run: trioperator vs. Kopf",
        f"verdict over {count} runs",
    ]
    return [
        f"## Goals over {count} runs (the worst run decides)",
        "",
        *_table(header, rows, left=2),
        "",
        f"Each run is judged on its own medians, as a single run would be; a goal is met only "
        f"if it is met in all {count} runs. The run columns show each run's ratio "
        "(trioperator/Kopf; for the API server's share: raw client/trioperator) or figure; "
        "the spread shows how far the runs' medians moved. The details below pool the "
        f"repetitions of all {count} runs. Within a run, " + GOALS_NOTE,
        "",
    ]


def _timings(results: dict[str, Any]) -> list[str]:
    timings = results.get("timings") or []
    if not timings:
        return []
    parts: dict[str, float] = {}
    for t in timings:
        parts[t["part"]] = parts.get(t["part"], 0.0) + t["seconds"]
    rows = [[part, f"{seconds / 60:.1f}"] for part, seconds in parts.items()]
    rows.append(
        ["whole run (incl. cluster start and cleanup)", f"{results.get('duration_s', 0) / 60:.1f}"]
    )
    if results.get("estimated_s"):
        rows.append(["expected at the start", f"{results['estimated_s'] / 60:.1f}"])
    return ["### Duration of each part, min", "", *_table(["part", "minutes"], rows), ""]


def render(results: dict[str, Any]) -> str:
    cfg = results.get("config", {})
    frameworks = [fw for fw in ("trioperator", "kopf") if fw in cfg.get("frameworks", [])]
    lines = [
        "# Benchmark results: trioperator vs. Kopf",
        "",
        f"Produced by `{results.get('command', 'python benchmarks/run.py')}`; "
        "how to read it: [README.md](README.md). Cells: median (min-max) over the "
        "repetitions; the last column is the ratio of the medians.",
        "",
        *_machine(results),
        "",
    ]
    if results.get("interrupted"):
        lines += ["**Interrupted: partial results.**", ""]
    if results.get("error"):
        lines += [f"**The run failed:** {results['error']}", ""]
    runs = results.get("runs", {})
    multiple = len(results.get("rounds") or []) > 1
    lines += _goals_over_rounds(results) if multiple else _goals(results)
    lines += ["## Details", ""]
    sizes = cfg.get("sizes", [])
    for n in sizes:
        lines += _ceiling_table(results, n)
        variants = cfg.get("variants", [])
        if sizes and n != sizes[0] and "big_variants" in cfg:
            variants = cfg["big_variants"]
        for variant in variants:
            lines += _burst(results, n, variant, frameworks)
        lines += _restart(results, n, frameworks)
    lines += _open_loop(results, frameworks)
    lines += _takeover(results, frameworks)
    lines += _steady(results, frameworks)
    lines += _background(results, frameworks)
    lines += _shutdown(results, frameworks)
    lines += _decode(results)
    lines += _timings(results)
    errors = [r for kind in runs for r in runs.get(kind, []) if r.get("error")]
    if errors:
        lines += ["### Failures", ""]
        for r in errors:
            what = r.get("framework") or r.get("client")
            first = r["error"].splitlines()[0][:300]
            lines.append(
                f"- {what} {r.get('variant', '')} n={r.get('n')} repeat {r.get('repeat')}: {first}"
            )
        lines.append("")
    findings = [
        (r, r["log_findings"])
        for kind in runs
        for r in runs.get(kind, [])
        if r.get("log_findings", {}).get("samples")
    ]
    if findings:
        lines += ["### Warnings and errors in the operators' logs (samples)", ""]
        seen: set[str] = set()
        for r, found in findings:
            for sample in found["samples"]:
                key = f"{r['framework']}: " + sample.split("] ", 2)[-1][:160]
                if key not in seen and len(seen) < 12:
                    seen.add(key)
                    lines.append(f"- {r['framework']} ({r['variant']}): `{sample[:300]}`")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results.json") as file:
        print(render(json.load(file)))
