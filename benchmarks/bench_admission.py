"""Admission latency: a validating review through the real API server, trioperator vs Kopf (#10).

Each request is a server-side dry-run create of a BenchObject (``POST ...?dryRun=All``): the
API server runs its admission chain, including our validating webhook, but stores nothing. The
latency is measured at the client (this process), one request at a time.

The same operator (benchmarks/operators/admission_validate.py: one validating handler that
allows everything and adds a warning) runs under each framework in turn, serving with the same
certificate (made here with trustme) and managing its own ValidatingWebhookConfiguration. The
handler is filtered by a label, so the configuration has an ``objectSelector``: the harness
alternates objects with the label (the webhook is called; a review counts only if the handler's
warning came back) and without it (the webhook is not called: the API server's own cost of the
same request, in the same second). The excess of the first over the second is what the webhook
costs. The operator's CPU per review comes from ``/proc/<pid>/stat`` (user+system) before and
after the measured requests.

    .venv/bin/python benchmarks/bench_admission.py                     # < 1 minute
    .venv/bin/python benchmarks/bench_admission.py -n 1000 --rounds 2  # steadier figures

The cluster is the shared local one (``scripts/kube-up``) unless ``--kubeconfig`` or
``TRIOPERATOR_KUBECONFIG`` says otherwise; Kopf comes from ``scripts/kopf-venv``. The run
creates the CRD (benchmarks/crd.yaml) if missing and a namespace of its own, and removes the
namespace and the webhook configurations at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import trio
import trustme

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trioperator._client.api import APIClient  # noqa: E402
from trioperator._client.config import load_kubeconfig  # noqa: E402
from trioperator._client.credentials import Vault  # noqa: E402
from trioperator._client.settings import NetworkingSettings  # noqa: E402

OPERATOR = ROOT / "benchmarks" / "operators" / "admission_validate.py"
CRD = ROOT / "benchmarks" / "crd.yaml"
GROUP_PATH = "/apis/bench.trioperator.dev/v1"
TICKS = os.sysconf("SC_CLK_TCK")


def kubeconfig_path(given: str | None) -> str:
    if given or os.environ.get("TRIOPERATOR_KUBECONFIG"):
        return str(given or os.environ["TRIOPERATOR_KUBECONFIG"])
    result = subprocess.run(
        [str(ROOT / "scripts" / "kube-up")], check=True, capture_output=True, text=True
    )
    return result.stdout.strip().splitlines()[-1]


def kopf_binary() -> str:
    result = subprocess.run(
        [str(ROOT / "scripts" / "kopf-venv")], check=True, capture_output=True, text=True
    )
    return str(Path(result.stdout.strip().splitlines()[-1]).parent / "kopf")


def kubectl_binary() -> str:
    cached = Path.home() / ".cache/trioperator/kube/bin/kubectl"
    return str(cached) if cached.exists() else "kubectl"


def cpu_seconds(pid: int) -> float:
    """User+system CPU of a process so far (fields 14 and 15 of /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclasses.dataclass
class Figures:
    setup: str
    latencies: list[float] = dataclasses.field(default_factory=list)
    cpu: float | None = None  # the operator's CPU seconds over the measured requests
    unconfirmed: int = 0  # requests without the handler's warning

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


class Bench:
    def __init__(self, args: argparse.Namespace, kubeconfig: str, workdir: Path) -> None:
        self.args = args
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.namespace = f"bench-adm-{uuid.uuid4().hex[:6]}"
        self.kubectl = kubectl_binary()
        self.env = {**os.environ, "KUBECONFIG": kubeconfig}
        info = load_kubeconfig(kubeconfig)
        self.api = APIClient(Vault({"bench": info}), NetworkingSettings())
        self.counter = 0

    def kubectl_run(self, *args: str, check: bool = True, input: str | None = None) -> str:
        result = subprocess.run(
            [self.kubectl, *args], env=self.env, capture_output=True, text=True, input=input
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result.stdout

    async def review(self, *, reviewed: bool = True) -> tuple[float, str]:
        """One dry-run create; its latency and the warnings the API server sent back."""
        self.counter += 1
        metadata: dict[str, object] = {"name": f"adm-{self.counter}", "namespace": self.namespace}
        if reviewed:
            metadata["labels"] = {"bench-admission": "reviewed"}
        body = {
            "apiVersion": "bench.trioperator.dev/v1",
            "kind": "BenchObject",
            "metadata": metadata,
            "spec": {"index": self.counter},
        }
        path = f"{GROUP_PATH}/namespaces/{self.namespace}/benchobjects"
        started = time.perf_counter()
        response = await self.api.request_raw("POST", path, params={"dryRun": "All"}, payload=body)
        elapsed = time.perf_counter() - started
        return elapsed, response.headers.get("warning", "")

    async def measure(self, figures: Figures, baseline: Figures, *, pid: int, proof: str) -> None:
        for _ in range(self.args.warmup):
            await self.review(reviewed=True)
            await self.review(reviewed=False)
        cpu_before = cpu_seconds(pid)
        for _ in range(self.args.requests):
            elapsed, warning = await self.review(reviewed=True)
            figures.latencies.append(elapsed)
            if proof not in warning:
                figures.unconfirmed += 1
            elapsed, warning = await self.review(reviewed=False)
            baseline.latencies.append(elapsed)
            if proof in warning:
                baseline.unconfirmed += 1  # the selector did not keep the webhook out
        # Unreviewed requests cost the operator nothing: it watches nothing else.
        figures.cpu = (figures.cpu or 0.0) + cpu_seconds(pid) - cpu_before

    async def with_operator(self, framework: str, figures: Figures, baseline: Figures) -> None:
        port = free_port()
        name = f"{self.namespace}-{framework}.bench.trioperator.dev"
        certs = self.workdir / "certs"
        env = {
            **self.env,
            "BENCH_FRAMEWORK": framework,
            "BENCH_WEBHOOK_PORT": str(port),
            "BENCH_WEBHOOK_CERT": str(certs / "tls.crt"),
            "BENCH_WEBHOOK_KEY": str(certs / "tls.key"),
            "BENCH_WEBHOOK_CA": str(certs / "ca.crt"),
            "BENCH_WEBHOOK_NAME": name,
            "PYTHONUNBUFFERED": "1",
        }
        if framework == "kopf":
            command = [self.args.kopf, "run", "--standalone", "-n", self.namespace, str(OPERATOR)]
        else:
            command = [sys.executable, "-m", "trioperator", "run", "--standalone"]
            if self.args.profile:
                profile = self.workdir / f"trioperator-{len(figures.latencies)}.prof"
                command[1:3] = [str(ROOT / "benchmarks" / "cpu_profile.py"), str(profile)]
            command += ["-n", self.namespace, str(OPERATOR)]
        log = (self.workdir / f"{framework}-{len(figures.latencies)}.log").open("w")
        process = start(command, env, log)
        proof = f"checked by {framework}"
        try:
            await self.wait_for_webhook(proof, process, log.name)
            await self.measure(figures, baseline, pid=process.pid, proof=proof)
        finally:
            process.send_signal(signal.SIGINT)
            try:
                await trio.to_thread.run_sync(partial(process.wait, 30))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
            log.close()
            for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"]:
                self.kubectl_run("delete", kind, name, "--ignore-not-found", check=False)

    async def wait_for_webhook(self, proof: str, process: subprocess.Popen[str], log: str) -> None:
        deadline = trio.current_time() + 90
        while trio.current_time() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"The operator exited; see {log}")
            _, warning = await self.review()
            if proof in warning:
                return
            await trio.sleep(0.2)
        raise RuntimeError(f"The webhook was not called within 90 s; see {log}")

    def prepare(self) -> None:
        self.kubectl_run("apply", "-f", str(CRD))
        self.kubectl_run(
            "wait",
            "--for=condition=Established",
            "crd/benchobjects.bench.trioperator.dev",
            "--timeout=60s",
        )
        self.kubectl_run("create", "namespace", self.namespace)
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        certs = self.workdir / "certs"
        certs.mkdir()
        (certs / "tls.crt").write_bytes(b"".join(pem.bytes() for pem in cert.cert_chain_pems))
        (certs / "tls.key").write_bytes(cert.private_key_pem.bytes())
        (certs / "ca.crt").write_bytes(ca.cert_pem.bytes())

    def cleanup(self) -> None:
        self.kubectl_run("delete", "namespace", self.namespace, "--wait=false", check=False)


def start(command: list[str], env: dict[str, str], log: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def report(results: dict[str, tuple[Figures, Figures]], args: argparse.Namespace) -> str:
    lines = [
        f"Admission latency: {args.requests} sequential dry-run creates with the webhook and as "
        f"many without it (alternating) per framework and round; {args.rounds} round(s), "
        f"{args.warmup} warm-up pairs each; measured at the client.",
        "",
        "| framework | p50 ms | p95 ms | without webhook p50 / p95 ms "
        "| webhook excess p50 / p95 ms | operator CPU ms/review | unconfirmed |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (figures, baseline) in results.items():
        p50, p95 = figures.quantile(0.5), figures.quantile(0.95)
        b50, b95 = baseline.quantile(0.5), baseline.quantile(0.95)
        cpu = "-" if figures.cpu is None else f"{figures.cpu * 1000 / len(figures.latencies):.2f}"
        lines.append(
            f"| {name} | {p50:.2f} | {p95:.2f} | {b50:.2f} / {b95:.2f} "
            f"| {p50 - b50:+.2f} / {p95 - b95:+.2f} | {cpu} "
            f"| {figures.unconfirmed + baseline.unconfirmed} |"
        )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> dict[str, tuple[Figures, Figures]]:
    kubeconfig = await trio.to_thread.run_sync(kubeconfig_path, args.kubeconfig)
    if "kopf" in args.frameworks and not args.kopf:
        args.kopf = await trio.to_thread.run_sync(kopf_binary)
    workdir = Path(tempfile.mkdtemp(prefix="bench-admission-"))
    bench = Bench(args, kubeconfig, workdir)
    results = {name: (Figures(name), Figures(f"{name} (no webhook)")) for name in args.frameworks}
    bench.prepare()
    try:
        async with bench.api:
            for _ in range(args.rounds):
                for framework in args.frameworks:
                    await bench.with_operator(framework, *results[framework])
    finally:
        bench.cleanup()
    print(f"Logs: {workdir}", file=sys.stderr)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--requests", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--frameworks", type=lambda s: s.split(","), default=["trioperator", "kopf"]
    )
    parser.add_argument("--kubeconfig")
    parser.add_argument("--kopf", help="Kopf's CLI (default: from scripts/kopf-venv)")
    parser.add_argument("--json", help="also write the raw latencies (seconds) to this file")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile trioperator's CPU time (benchmarks/cpu_profile.py; in the logs' dir)",
    )
    args = parser.parse_args()
    results = trio.run(main_async, args)
    print(report(results, args))
    if args.json:
        raw = {
            name: [dataclasses.asdict(figures) for figures in pair]
            for name, pair in results.items()
        }
        Path(args.json).write_text(json.dumps(raw, indent=1))
    if any(figures.unconfirmed for pair in results.values() for figures in pair):
        sys.exit("Some reviews did not reach the handler (see 'unconfirmed').")


if __name__ == "__main__":
    main()
