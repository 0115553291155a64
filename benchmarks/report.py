"""Markdown tables from the results of benchmarks/run.py (also usable on a saved results.json):

python benchmarks/report.py benchmarks/results.json
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable, Iterable
from typing import Any

NAMES = {"trioperator": "trioperator", "kopf": "Kopf"}


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


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
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
        f"- trioperator {m.get('trioperator')} (trio {m.get('trio')}, httpx2 {m.get('httpx2')}); "
        f"Kopf {m.get('kopf')} (aiohttp {m.get('aiohttp')})",
        f"- kube-apiserver {m.get('kube_apiserver')}, etcd {m.get('etcd')}, on loopback "
        f"({results.get('cluster')} cluster)",
        f"- Run: {results.get('started')}, {results.get('duration_s', 0) / 60:.1f} min; sizes "
        f"{cfg.get('sizes')}, repeat {cfg.get('repeat')}, {cfg.get('creators')} concurrent "
        f"creators, ceiling with {cfg.get('ceiling_concurrency')} concurrent workers, "
        f"idle window {cfg.get('idle')} s",
    ]


def _ceilings(results: dict[str, Any], n: int) -> dict[str, list[float]]:
    runs = [
        r for r in results.get("runs", {}).get("ceiling", []) if r.get("n") == n and r.get("ok")
    ]
    clients = sorted({r["client"] for r in runs})
    return {
        c: _values([r for r in runs if r["client"] == c], lambda r: r["objects_per_s"])
        for c in clients
    }


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
    ceilings = _ceilings(results, n)
    best_client = max(ceilings, key=lambda c: _median(ceilings[c]) or 0, default=None)
    ceiling = _median(ceilings[best_client]) if best_client else None

    rows: list[list[str]] = []

    def row(
        label: str, get: Callable[[dict[str, Any]], Any], digits: int = 1, with_ratio: bool = True
    ) -> None:
        vals = [_values(runs[fw], get) for fw in frameworks]
        cells = [cell(v, digits) for v in vals]
        extra = [ratio(vals[0], vals[1]) if with_ratio and len(vals) == 2 else ""]
        rows.append([label, *cells, *extra] if len(frameworks) == 2 else [label, *cells])

    row("objects/s, first create to all handled (higher is better)", lambda r: r["objects_per_s"])
    if ceiling:
        medians = [_median(_values(runs[fw], lambda r: r["objects_per_s"])) for fw in frameworks]
        rows.append(
            [f"% of the ceiling ({best_client}, {ceiling:.0f} objects/s)"]
            + [f"{m * 100 / ceiling:.0f}%" if m else "-" for m in medians]
            + ([""] if len(frameworks) == 2 else [])
        )
    row(f"seconds to handle all {n}", lambda r: r["seconds"], 2)
    row("per-object latency p50, s (seen created to handled)", lambda r: r["latency_p50_s"], 2)
    row("per-object latency p95, s", lambda r: r["latency_p95_s"], 2)
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


def _restart(results: dict[str, Any], n: int, frameworks: list[str]) -> list[str]:
    all_runs = [r for r in results["runs"].get("restart", []) if r.get("n") == n]
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
    for n in cfg.get("sizes", []):
        lines += _ceiling_table(results, n)
        for variant in cfg.get("variants", []):
            lines += _burst(results, n, variant, frameworks)
        lines += _restart(results, n, frameworks)
    lines += _decode(results)
    errors = [
        r for kind in ("burst", "restart", "ceiling") for r in runs.get(kind, []) if r.get("error")
    ]
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
        for kind in ("burst", "restart")
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
