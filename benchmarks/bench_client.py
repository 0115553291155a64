"""Benchmark: trioperator's API client for operator code against the ``kubernetes`` package.

Each variant runs in a process of its own against a real kube-apiserver (``scripts/kube-up``,
or ``--kubeconfig``) and does the same calls one after another on ConfigMaps of a namespace of
its own: N GETs and N JSON merge-patches (every patch changes the object), then, for the
clients that have it, M server-side applies (every apply changes the object). Measured in the
process itself: CPU time (``os.times()`` user+system) and peak RSS (``VmHWM``), at these
points: after the interpreter started (nothing of the clients imported); after importing the
client library and making a client (the "import" cost); after the first GET (connection, TLS,
whatever the library imports or discovers at its first request); after the N GETs, the N
patches, and the M applies.

Variants:

- ``bare``: the interpreter and this script only (the floor under every row);
- ``trioperator-sync``: ``trioperator.connect_sync_api()`` (httpx's sync client), as in a sync
  handler or a script;
- ``trioperator-async``: ``trioperator.connect_api()`` under ``trio.run`` (httpx's async client
  on trio), as in an async handler;
- ``kubernetes``: the ``kubernetes`` package (``CoreV1Api``, its urllib3 pool), as Kopf
  operators commonly use it. It has no server-side apply method; its patch with the apply
  content type (``_content_type``) is measured as ``kubernetes`` apply for reference.

    .venv/bin/python benchmarks/bench_client.py                  # 300 get + 300 patch + 100 apply
    .venv/bin/python benchmarks/bench_client.py -n 1000 --applies 300 --variants kubernetes

Results: benchmarks/RESULTS-client.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from typing import Any

VARIANTS = ("bare", "trioperator-sync", "trioperator-async", "kubernetes")


def _peak_rss_mb() -> float:
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across execve, so a child would report its
    # parent's peak at the fork; VmHWM belongs to the process image.
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux


def _point() -> dict[str, float]:
    times = os.times()
    return {"cpu": times.user + times.system, "wall": time.monotonic(), "rss_mb": _peak_rss_mb()}


def _configmap(name: str, namespace: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"value": value},
    }


# --------------------------------------------------------------------------- the variants
def run_trioperator_sync(args: argparse.Namespace, points: dict[str, Any]) -> None:
    import trioperator as kopf

    with kopf.connect_sync_api(args.kubeconfig) as api:
        cms = api.resource("configmaps")
        points["imported"] = _point()
        cms.get("bench-get", namespace=args.namespace)
        points["first"] = _point()
        for _ in range(args.n):
            cms.get("bench-get", namespace=args.namespace)
        points["got"] = _point()
        for index in range(args.n):
            cms.patch("bench-patch", {"data": {"value": str(index)}}, namespace=args.namespace)
        points["patched"] = _point()
        for index in range(args.applies):
            intent = _configmap("bench-apply-trioperator-sync", args.namespace, str(index))
            cms.apply(intent, field_manager="bench")
        points["applied"] = _point()


def run_trioperator_async(args: argparse.Namespace, points: dict[str, Any]) -> None:
    import trio
    import trioperator as kopf

    async def main() -> None:
        async with kopf.connect_api(args.kubeconfig) as api:
            cms = api.resource("configmaps")
            points["imported"] = _point()
            await cms.get("bench-get", namespace=args.namespace)
            points["first"] = _point()
            for _ in range(args.n):
                await cms.get("bench-get", namespace=args.namespace)
            points["got"] = _point()
            for index in range(args.n):
                await cms.patch(
                    "bench-patch", {"data": {"value": str(index)}}, namespace=args.namespace
                )
            points["patched"] = _point()
            for index in range(args.applies):
                intent = _configmap("bench-apply-trioperator-async", args.namespace, str(index))
                await cms.apply(intent, field_manager="bench")
            points["applied"] = _point()

    trio.run(main)


def run_kubernetes(args: argparse.Namespace, points: dict[str, Any]) -> None:
    from kubernetes import client, config

    config.load_kube_config(args.kubeconfig)  # type: ignore[no-untyped-call]
    api = client.CoreV1Api()
    points["imported"] = _point()
    api.read_namespaced_config_map("bench-get", args.namespace)
    points["first"] = _point()
    for _ in range(args.n):
        api.read_namespaced_config_map("bench-get", args.namespace)
    points["got"] = _point()
    for index in range(args.n):
        api.patch_namespaced_config_map(
            "bench-patch",
            args.namespace,
            {"data": {"value": str(index)}},
            _content_type="application/merge-patch+json",
        )
    points["patched"] = _point()
    for index in range(args.applies):
        intent = _configmap("bench-apply-kubernetes", args.namespace, str(index))
        api.patch_namespaced_config_map(
            intent["metadata"]["name"],
            args.namespace,
            intent,
            field_manager="bench",
            _content_type="application/apply-patch+yaml",
        )
    points["applied"] = _point()


def child(args: argparse.Namespace) -> None:
    points: dict[str, Any] = {"started": _point()}
    if args.child == "trioperator-sync":
        run_trioperator_sync(args, points)
    elif args.child == "trioperator-async":
        run_trioperator_async(args, points)
    elif args.child == "kubernetes":
        run_kubernetes(args, points)
    points["ended"] = _point()
    print(json.dumps(points))


# --------------------------------------------------------------------------- the parent
def _run_child(args: argparse.Namespace, variant: str, namespace: str) -> dict[str, Any]:
    command = [
        *(sys.executable, os.path.abspath(__file__), "--child", variant),
        *("--kubeconfig", args.kubeconfig, "--namespace", namespace),
        *("-n", str(args.n), "--applies", str(args.applies)),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{variant} failed:\n{result.stderr[-3000:]}")
    points: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return points


def _row(variant: str, p: dict[str, Any], n: int, applies: int) -> str:
    start = f"| {variant} | {p['started']['cpu'] * 1000:.0f} | {p['started']['rss_mb']:.1f} "
    if variant == "bare":
        return start + "| | | | | | | | |"
    imported = p["imported"]["cpu"] - p["started"]["cpu"]
    first = p["first"]["cpu"] - p["imported"]["cpu"]
    gets = p["got"]["cpu"] - p["first"]["cpu"]
    patches = p["patched"]["cpu"] - p["got"]["cpu"]
    apply = p["applied"]["cpu"] - p["patched"]["cpu"]
    total = p["patched"]["cpu"]  # startup + import + first + gets + patches (what both have)
    return start + (
        f"| {imported * 1000:.0f} | {p['imported']['rss_mb']:.1f} "
        f"| {first * 1000:.0f} "
        f"| {gets / n * 1000:.2f} | {patches / n * 1000:.2f} "
        f"| {total * 1000:.0f} | {p['patched']['rss_mb']:.1f} "
        f"| {apply / max(applies, 1) * 1000:.2f} |"
    )


def parent(args: argparse.Namespace) -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import trioperator as kopf

    namespace = f"bench-client-{uuid.uuid4().hex[:6]}"
    with kopf.connect_sync_api(args.kubeconfig) as api:
        api.resource("namespaces").create({"metadata": {"name": namespace}})
        try:
            cms = api.resource("configmaps")
            for name in ("bench-get", "bench-patch"):
                cms.create(_configmap(name, namespace, "initial"))
            results = {}
            for variant in args.variants.split(","):
                results[variant] = _run_child(args, variant, namespace)
                print(f"{variant}: done", file=sys.stderr)
        finally:
            api.resource("namespaces").delete(namespace, missing_ok=True)

    print(
        f"{args.n} GET + {args.n} merge-patch, then {args.applies} apply; CPU ms (user+system) "
        "and peak RSS MiB, in each variant's own process\n"
    )
    print(
        "| variant | startup CPU | startup RSS | import+client CPU | peak RSS after import "
        "| first GET CPU | CPU/GET | CPU/patch | CPU total, start to the last patch "
        "| peak RSS then | CPU/apply |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for variant, points in results.items():
        print(_row(variant, points, args.n, args.applies))
    if args.json:
        print(json.dumps(results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("-n", type=int, default=300, help="GETs and merge-patches (each)")
    parser.add_argument("--applies", type=int, default=100)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", action="store_true", help="also print the raw points")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.kubeconfig is None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        up = subprocess.run(
            [os.path.join(root, "scripts", "kube-up")],
            capture_output=True,
            text=True,
            check=True,
            timeout=3600,
        )
        args.kubeconfig = up.stdout.strip().splitlines()[-1]
    parent(args)


if __name__ == "__main__":
    main()
