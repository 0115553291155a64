"""Admission webhooks against the real kube-apiserver: examples/17-admission run by the CLI.

The API server calls the operator's WebhookServer at ``https://127.0.0.1:<port>`` and trusts
it by the CA bundle in the managed configurations. Those configurations are cluster-wide, so
the example limits them to namespaces labelled ``kopf.dev/admission=enabled``: only this
test's namespace, so other tests on the same API server are never affected. They are deleted
at the end whatever happens.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import EXAMPLES, Kubectl

MANAGED = "auto.kopf.dev"
CONFIGURATIONS = ("validatingwebhookconfiguration", "mutatingwebhookconfiguration")


def kubectl_run(kubectl: Kubectl, *args: str, obj: Any = None) -> subprocess.CompletedProcess[str]:
    """kubectl with its exit code, stdout and stderr (where it prints warnings and errors)."""
    return subprocess.run(
        [kubectl.binary, *args],
        env=kubectl.env,
        input=json.dumps(obj) if obj is not None else None,
        capture_output=True,
        text=True,
        timeout=60,
    )


def example(name: str, *, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def webhook_names(kubectl: Kubectl) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for kind in CONFIGURATIONS:
        result = kubectl_run(kubectl, "get", kind, MANAGED, "-o", "json")
        if result.returncode == 0:
            found[kind] = [w["name"] for w in json.loads(result.stdout).get("webhooks") or []]
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(predicate: Any, timeout: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"Not within {timeout}s: {what}")
        time.sleep(0.3)


@pytest.fixture
def admitted_namespace(kubectl: Kubectl, namespace: str) -> Any:
    kubectl("label", "namespace", namespace, "kopf.dev/admission=enabled")
    yield namespace
    for kind in CONFIGURATIONS:
        kubectl("delete", kind, MANAGED, "--ignore-not-found", check=False)


def test_admission_example_through_the_api_server(
    example_crd: None, kubectl: Kubectl, admitted_namespace: str, run_operator: Any
) -> None:
    ns = admitted_namespace
    metrics_url = f"http://127.0.0.1:{free_port()}/metrics"
    example_file = str(EXAMPLES / "17-admission" / "example.py")
    operator = run_operator("-n", ns, "--metrics", metrics_url, example_file)
    operator.wait_for("The operator is ready")

    # The managed configurations: one webhook per handler, named after it.
    wait_for(
        lambda: (
            webhook_names(kubectl)
            == {
                "validatingwebhookconfiguration": [
                    "check-field.auto.kopf.dev",
                    "forbid-value.spec.field.auto.kopf.dev",
                ],
                "mutatingwebhookconfiguration": ["inject-defaults.auto.kopf.dev"],
            }
        ),
        what="the managed webhook configurations",
    )
    config = kubectl.get("validatingwebhookconfiguration", MANAGED)
    webhook = config["webhooks"][0]
    assert webhook["clientConfig"]["url"].startswith("https://127.0.0.1:")
    assert webhook["clientConfig"]["url"].endswith("/check_field")
    assert webhook["clientConfig"]["caBundle"]
    assert webhook["namespaceSelector"] == {"matchLabels": {"kopf.dev/admission": "enabled"}}
    assert webhook["timeoutSeconds"] == 30
    assert webhook["failurePolicy"] == "Fail"

    # Dry runs reach the handlers with dryrun=True (retried until the API server's webhook
    # cache has the new configuration) and store nothing.
    probe = example("probe", field="value", duration="1m")

    def reviewed_dry_run() -> bool:
        result = kubectl_run(kubectl, "apply", "-n", ns, "--dry-run=server", "-f", "-", obj=probe)
        assert result.returncode == 0, result.stderr
        return operator.count(r"Reviewing a CREATE \(dry run: True\)") > 0

    wait_for(reviewed_dry_run, what="a dry-run review")
    assert kubectl.get("kopfexamples", "-n", ns)["items"] == []

    # A rejection: the handler's message reaches the client; nothing is stored.
    result = kubectl_run(kubectl, "apply", "-n", ns, "-f", "-", obj=example("bad", field="wrong"))
    assert result.returncode != 0
    assert 'admission webhook "check-field.auto.kopf.dev" denied the request' in result.stderr
    assert "The field must not be 'wrong'; change it." in result.stderr
    result = kubectl_run(
        kubectl, "apply", "-n", ns, "-f", "-", obj=example("bad2", field="forbidden")
    )
    assert result.returncode != 0
    assert "The value 'forbidden' is not allowed." in result.stderr
    assert kubectl.get("kopfexamples", "-n", ns)["items"] == []

    # A mutation is stored; a warning reaches the client.
    labelled = example("good", labels={"somelabel": "somevalue"}, field="value")
    result = kubectl_run(kubectl, "apply", "-n", ns, "-f", "-", obj=labelled)
    assert result.returncode == 0, result.stderr
    assert "Warning: No spec.duration given: 1m is assumed." in result.stderr
    stored = kubectl.get("kopfexample", "good", "-n", ns)
    assert stored["spec"] == {"field": "value", "injected": 123, "items": ["default-item"]}
    # Without the label, the mutating webhook is not even called (its objectSelector).
    result = kubectl_run(
        kubectl, "apply", "-n", ns, "-f", "-", obj=example("plain", field="value", duration="1m")
    )
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr
    assert kubectl.get("kopfexample", "plain", "-n", ns)["spec"] == {
        "field": "value",
        "duration": "1m",
    }

    # The reviews in the metrics: the two rejections above, by the webhook that denied them
    # (how many were allowed depends on the dry runs' retries).
    denied = {
        dict(sample.labels)["webhook"]: sample.value
        for family in text_string_to_metric_families(
            urllib.request.urlopen(metrics_url, timeout=10).read().decode()
        )
        for sample in family.samples
        if sample.name == "trioperator_admission_reviews_total"
        and sample.labels["result"] == "denied"
    }
    assert denied == {"check_field": 1, "forbid_value/spec.field": 1}

    # The operator stops promptly and removes its (non-persistent) webhooks.
    started = time.monotonic()
    assert operator.stop() == 0
    assert time.monotonic() - started < 15
    assert "Traceback" not in operator.output
    assert webhook_names(kubectl) == {
        "validatingwebhookconfiguration": [],
        "mutatingwebhookconfiguration": [],
    }
    # With no webhooks left, admission no longer depends on the stopped operator.
    result = kubectl_run(
        kubectl, "apply", "-n", ns, "-f", "-", obj=example("after", field="wrong", duration="1m")
    )
    assert result.returncode == 0, result.stderr
