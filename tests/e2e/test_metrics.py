"""The metrics endpoint of a CLI-run operator (``--metrics``), scraped as Prometheus scrapes it,
while one object lives its whole life in the real API server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import ROOT, Kubectl

OPERATOR = textwrap.dedent(
    """
    import trioperator as kopf

    @kopf.on.create("kopfexamples", id="create_fn")
    def create_fn(body, **_):
        kopf.info(body, reason="Metered", message="Created.")
        return "created"

    @kopf.on.update("kopfexamples", id="update_fn", field="spec.field")
    async def update_fn(**_):
        pass

    @kopf.on.delete("kopfexamples", id="delete_fn")
    def delete_fn(body, **_):
        kopf.info(body, reason="Metered", message="Deleted.")
    """
)
OBJ = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "metadata": {"name": "metered"},
    "spec": {"field": "value"},
}
RESOURCE = "kopfexamples.v1.kopf.dev"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["content-type"].startswith("text/plain")
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def runs(samples: Samples, handler: str, outcome: str = "success") -> float:
    labels = {"handler": handler, "resource": RESOURCE, "outcome": outcome}
    return value(samples, "trioperator_handler_runs_total", **labels)


def by_verb(samples: Samples) -> dict[str, dict[str, float]]:
    """``{verb: {code: count}}`` of the API requests."""
    found: dict[str, dict[str, float]] = {}
    for (name, labels), number in samples.items():
        if name == "trioperator_api_requests_total":
            label = dict(labels)
            found.setdefault(label["verb"], {})[label["code"]] = number
    return found


def wait_scraped(url: str, check: Callable[[Samples], bool], what: str) -> Samples:
    deadline = time.monotonic() + 60
    while True:
        try:
            samples = scrape(url)
        except urllib.error.URLError:  # not serving yet
            samples = {}
        if samples and check(samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"Not in the metrics within 60 s: {what}")
        time.sleep(0.2)


def test_the_counters_follow_an_object_through_its_life(
    example_crd: None, namespace: str, run_operator: Any, kubectl: Kubectl, tmp_path: Path
) -> None:
    source = tmp_path / "operator.py"
    source.write_text(OPERATOR)
    url = f"http://127.0.0.1:{_free_port()}/metrics"
    operator = run_operator("-n", namespace, "--standalone", "--metrics", url, str(source))
    operator.wait_for("The operator is ready")
    operator.wait_for("Serving the metrics at")
    samples = scrape(url)
    assert value(samples, "trioperator_watchers", resource=RESOURCE) == 1
    assert value(samples, "trioperator_objects", resource=RESOURCE) == 0

    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(OBJ))
    samples = wait_scraped(url, lambda s: runs(s, "create_fn") == 1, "create_fn succeeded")
    assert value(samples, "trioperator_objects", resource=RESOURCE) == 1
    created = kubectl.get("kopfexample", "metered", "-n", namespace)
    assert created["status"]["create_fn"] == "created"

    kubectl("patch", "kopfexample", "metered", "-n", namespace, "--type=merge",
            "-p", '{"spec": {"field": "changed"}}')  # fmt: skip
    wait_scraped(url, lambda s: runs(s, "update_fn/spec.field") == 1, "update_fn succeeded")

    kubectl("delete", "kopfexample", "metered", "-n", namespace, "--timeout=60s")
    # The object's last event handled: its worker ends right after this line, without a
    # checkpoint in between, and no later event can come for it. The scrapes are served by the
    # same trio run, so every one from now on sees all the object's requests and handler runs.
    operator.wait_for(r"\[.*/metered\] Deleted, really deleted, and we are notified\.")
    # The k8s Events go out from a queue of their own: both posted (nothing else posts).
    samples = wait_scraped(url, lambda s: by_verb(s).get("create") == {"201": 2}, "both Events")
    output = operator.output

    assert runs(samples, "create_fn") == 1
    assert runs(samples, "update_fn/spec.field") == 1
    assert runs(samples, "delete_fn") == 1
    for handler in ("create_fn", "update_fn/spec.field", "delete_fn"):
        for outcome in ("failure", "retry", "timeout"):
            assert runs(samples, handler, outcome) == 0
    assert value(samples, "trioperator_handler_duration_seconds_count", handler="create_fn") == 1
    events = "trioperator_watch_events_total"
    assert value(samples, events, resource=RESOURCE, type="ADDED") == 1
    assert value(samples, events, resource=RESOURCE, type="DELETED") == 1
    assert value(samples, events, resource=RESOURCE, type="MODIFIED") >= 3
    assert value(samples, "trioperator_objects", resource=RESOURCE) == 0
    assert value(samples, "trioperator_workers_busy", resource=RESOURCE) == 0
    assert value(samples, "trioperator_queue_depth", resource=RESOURCE) == 0

    verbs = by_verb(samples)
    # Every patch the operator logged is one PATCH request, all of them successful.
    patches = output.count("Patching with") + output.count("Patching the status with")
    assert patches >= 4  # the finalizer, the create's result, the update's, the finalizer's removal
    assert verbs["patch"] == {"200": patches}
    # Every k8s Event it posted is one POST (the namespace has no other source of events).
    posted = kubectl.get("events", "-n", namespace)["items"]
    assert sorted(event["message"] for event in posted) == ["Created.", "Deleted."]
    assert verbs["create"] == {"201": 2}
    # The watch streams (the resource's, the namespaces', the CRDs') opened, after listings (of
    # more than one page if the cluster has many namespaces).
    assert verbs["watch"]["200"] >= 3
    assert verbs["list"]["200"] >= 3
    assert set(verbs["watch"]) == set(verbs["list"]) == {"200"}
    assert set(verbs) <= {"get", "list", "watch", "patch", "create"}
    hist = "trioperator_api_request_duration_seconds_count"
    assert value(samples, hist, verb="patch") == patches

    assert operator.stop() == 0
    assert "Traceback" not in operator.output


def test_the_metrics_from_the_environment_on_the_liveness_server(
    example_crd: None, namespace: str, kubeconfig: Path, tmp_path: Path
) -> None:
    source = tmp_path / "operator.py"
    source.write_text(OPERATOR)
    port = _free_port()
    env = {
        "KUBECONFIG": str(kubeconfig),
        "PYTHONUNBUFFERED": "1",
        "PATH": "/usr/bin:/bin",
        "TRIOPERATOR_LIVENESS": f"http://127.0.0.1:{port}/healthz",
        "TRIOPERATOR_METRICS": f"http://127.0.0.1:{port}/metrics",
        "TRIOPERATOR_STANDALONE": "true",
        "TRIOPERATOR_NAMESPACE": namespace,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "trioperator", "run", str(source)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        samples = wait_scraped(
            f"http://127.0.0.1:{port}/metrics",
            lambda s: value(s, "trioperator_watchers", resource=RESOURCE) == 1,
            "the watcher",
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as response:
            assert response.status == 200
    finally:
        process.terminate()
        assert process.wait(30) == 0
    assert value(samples, "trioperator_paused") == 0
