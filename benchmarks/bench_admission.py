"""Admission latency: one validating handler behind the real kube-apiserver, trioperator vs Kopf.

    python benchmarks/bench_admission.py [--reviews 300] [--kubeconfig FILE]

Both frameworks run the same operator file (``import kopf`` or ``import trioperator as kopf``):
one async ``@kopf.on.validate("configmaps")`` handler served by each framework's own
``WebhookServer`` on ``https://127.0.0.1:<port>``, with the same certificate (made here with
trustme). The webhook configuration is made here too, the same for both (Kopf has no namespace
selector): it covers configmaps of this run's namespace only, so nothing else on the API server
is affected, and it is deleted at the end.

Measured, per framework: the latency of ``POST configmaps?dryRun=All`` from one client, one
request after the other (p50/p95/p99; the API server calls the webhook for each), against the
same requests with no webhook at all (the API server's own latency, measured first); and the
operator's CPU (utime+stime from ``/proc/<pid>/stat``) per review. Takes about a minute on the
local cluster (``scripts/kube-up``, used unless ``--kubeconfig``/``TRIOPERATOR_KUBECONFIG``).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import trustme

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kubeconf import Cluster, load_cluster

ROOT = Path(__file__).resolve().parent.parent
HANDLER_ID = "check"

OPERATOR = """
{import_line}
import os


@kopf.on.startup()
def configure(settings, **_):
    settings.admission.server = kopf.WebhookServer(
        addr="127.0.0.1",
        port=int(os.environ["BENCH_PORT"]),
        certfile=os.environ["BENCH_CERT"],
        pkeyfile=os.environ["BENCH_KEY"],
    )
    settings.posting.enabled = False


@kopf.on.validate("configmaps", id="{handler_id}")
async def check(body, warnings, **_):
    if (body.get("data") or {{}}).get("reject") == "yes":
        raise kopf.AdmissionError("Rejected by the benchmark.", code=400)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Client:
    """One keep-alive HTTPS connection to the API server (stdlib: nothing of either framework)."""

    def __init__(self, cluster: Cluster) -> None:
        url = urllib.parse.urlsplit(cluster.server)
        self.headers = {"Content-Type": "application/json", **cluster.headers()}
        self.conn = http.client.HTTPSConnection(
            url.hostname or "127.0.0.1", url.port or 443, context=cluster.ssl_context()
        )

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        payload = json.dumps(body).encode() if body is not None else None
        self.conn.request(method, path, body=payload, headers=self.headers)
        response = self.conn.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else None

    def dry_create(self, namespace: str, reject: bool = False) -> tuple[int, Any]:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "bench", "labels": {"bench": "admission"}},
            "data": {"reject": "yes" if reject else "no", "payload": "x" * 200},
        }
        path = f"/api/v1/namespaces/{namespace}/configmaps?dryRun=All"
        return self.request("POST", path, body)


def timed_creates(client: Client, namespace: str, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        status, body = client.dry_create(namespace)
        latencies.append(time.perf_counter() - started)
        if status != 201:
            raise RuntimeError(f"A dry-run create failed with {status}: {body}")
    return latencies


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000

    return {
        "p50_ms": pct(0.50),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "mean_ms": statistics.fmean(ordered) * 1000,
    }


def webhook_configuration(name: str, namespace_label: str, port: int, ca_pem: bytes) -> Any:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": name,
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}/{HANDLER_ID}",
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["configmaps"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {namespace_label: "yes"}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1", "v1beta1"],
                "timeoutSeconds": 10,
            }
        ],
    }


def run_framework(
    framework: str,
    *,
    cluster: Cluster,
    kubeconfig: str,
    namespace: str,
    namespace_label: str,
    workdir: Path,
    ca: trustme.CA,
    reviews: int,
    warmup: int,
) -> dict[str, Any]:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_file, key_file = workdir / f"{framework}-cert.pem", workdir / f"{framework}-key.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    import_line = "import kopf" if framework == "kopf" else "import trioperator as kopf"
    source = workdir / f"operator_{framework}.py"
    source.write_text(OPERATOR.format(import_line=import_line, handler_id=HANDLER_ID))
    port = free_port()
    env = {
        **os.environ,
        "KUBECONFIG": kubeconfig,
        "BENCH_PORT": str(port),
        "BENCH_CERT": str(cert_file),
        "BENCH_KEY": str(key_file),
        "PYTHONUNBUFFERED": "1",
    }
    if framework == "kopf":
        kopf_python = (
            subprocess.run(
                [str(ROOT / "scripts" / "kopf-venv")], check=True, capture_output=True, text=True
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        command = [str(Path(kopf_python).parent / "kopf"), "run"]
    else:
        command = [sys.executable, "-m", "trioperator", "run"]
    log = open(workdir / f"{framework}.log", "w")  # noqa: SIM115 -- closed below
    process = subprocess.Popen(
        [*command, "--standalone", "-n", namespace, str(source)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    name = f"{namespace_label}.{framework}.bench.trioperator.dev"
    client = Client(cluster)
    try:
        config = webhook_configuration(name, namespace_label, port, ca.cert_pem.bytes())
        status, body = client.request(
            "POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", config
        )
        if status != 201:
            raise RuntimeError(f"Cannot create the webhook configuration: {status} {body}")
        # Until the server listens and the API server's webhook cache has the configuration,
        # a rejection is not seen (the dry-run create is refused by a failing call, or passes).
        deadline = time.monotonic() + 60
        while True:
            status, body = client.dry_create(namespace, reject=True)
            if status == 400 and "Rejected by the benchmark" in json.dumps(body):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{framework} never answered a review: {status} {body}")
            time.sleep(0.2)
        timed_creates(client, namespace, warmup)
        cpu_before = cpu_seconds(process.pid)
        latencies = timed_creates(client, namespace, reviews)
        cpu = cpu_seconds(process.pid) - cpu_before
    finally:
        client.request(
            "DELETE",
            f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{name}",
        )
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
    return {**summary(latencies), "cpu_ms_per_review": cpu / reviews * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reviews", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--kubeconfig", default=os.environ.get("TRIOPERATOR_KUBECONFIG"))
    parser.add_argument("--frameworks", default="trioperator,kopf")
    args = parser.parse_args()
    kubeconfig = (
        args.kubeconfig
        or subprocess.run(
            [str(ROOT / "scripts" / "kube-up")], check=True, capture_output=True, text=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )

    with tempfile.TemporaryDirectory(prefix="bench-admission-") as tmp:
        workdir = Path(tmp)
        cluster = load_cluster(kubeconfig, tmp_dir=tmp)
        client = Client(cluster)
        label = f"bench-admission-{uuid.uuid4().hex[:6]}"
        namespace = label
        ns_body = {"metadata": {"name": namespace, "labels": {label: "yes"}}}
        status, body = client.request("POST", "/api/v1/namespaces", ns_body)
        if status != 201:
            raise RuntimeError(f"Cannot create the namespace: {status} {body}")
        results: dict[str, Any] = {}
        try:
            timed_creates(client, namespace, args.warmup)
            results["no webhook"] = {
                **summary(timed_creates(client, namespace, args.reviews)),
                "cpu_ms_per_review": None,
            }
            ca = trustme.CA()
            for framework in args.frameworks.split(","):
                results[framework] = run_framework(
                    framework,
                    cluster=cluster,
                    kubeconfig=kubeconfig,
                    namespace=namespace,
                    namespace_label=label,
                    workdir=workdir,
                    ca=ca,
                    reviews=args.reviews,
                    warmup=args.warmup,
                )
        finally:
            client.request("DELETE", f"/api/v1/namespaces/{namespace}")
            logs = {p.name: p.read_text()[-3000:] for p in workdir.glob("*.log")}

    print(f"{args.reviews} dry-run creates of a configmap, one at a time:\n")
    print("| | p50 ms | p95 ms | p99 ms | mean ms | operator CPU ms/review |")
    print("|---|---|---|---|---|---|")
    for what, row in results.items():
        cpu = row["cpu_ms_per_review"]
        print(
            f"| {what} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} | {row['p99_ms']:.1f} "
            f"| {row['mean_ms']:.1f} | {'' if cpu is None else f'{cpu:.2f}'} |"
        )
    for name, text in logs.items():
        if "Traceback" in text:
            print(f"\n{name} (tail):\n{text}")
    print("\n" + json.dumps(results))


if __name__ == "__main__":
    ssl.create_default_context()  # fail early if ssl is unusable
    main()
