"""One CA across three operator replicas, on the real kube-apiserver (docs/admission.md).

Three ``trioperator run`` processes are configured as ``manifests-sharded/`` configures its
replicas (``POD_ID``, ``POD_NAMESPACE``, ``TRIOPERATOR_SHARDS=auto``; the test's namespace
stands for the operator's), each with one validating handler served by
``WebhookServiceServer(name="webhooks")`` in its default mode, the CA kept in a Secret, and all
managing the same ValidatingWebhookConfiguration. They start at the same moment (whether their
creations of the Secret really collide is up to timing here; the fake-API tests force that).

What this shows:

* one Secret ``webhooks-ca`` exists, created by exactly one replica (the others say they read
  it), and the configuration's ``caBundle`` is that Secret's ``ca.crt``;
* the configuration holds still after all three wrote it: its ``generation`` is that of one
  write (the API server ignores the two identical ones; different bundles would each have
  counted), and its ``caBundle`` stays the same;
* each replica's TLS handshake verifies with that ``caBundle`` for the Service's DNS names
  (``webhooks.<ns>.svc`` and its ``.cluster.local`` form), checked by the test itself;
* real reviews: the API server, under that same ``caBundle``, calls each replica in turn and
  gets its answer back (kubectl prints the replica's warning).

What it cannot show: there is no kubelet, no Service endpoints and no cluster DNS here, so the
API server cannot reach the replicas through ``clientConfig.service``. For the reviews the test
points the same configuration's ``clientConfig`` at each replica's URL on the loopback
(``https://127.0.0.1:PORT/check``), keeping the replicas' ``caBundle`` (a JSON-patch ``test``
op checks it is unchanged): the API server then verifies the certificate for ``127.0.0.1``
(the certificates name the loopback too), while the Service's names are verified by the test's
own handshakes above. This API server allows everything: that the printed RBAC for the Secret
is enough, and needed, is shown on an RBAC-enforcing one in test_rbac.py.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Kubectl, OperatorProcess

OPERATOR_SOURCE = """
import os

import trioperator as kopf

REPLICA = os.environ["POD_ID"]


@kopf.on.startup()
def configure(settings, **_):
    # The Service's namespace and the Secret's: POD_NAMESPACE, as manifests-sharded/ sets it.
    settings.admission.server = kopf.WebhookServiceServer(
        name="webhooks", addr="127.0.0.1", port=int(os.environ["WEBHOOK_PORT"])
    )
    settings.admission.managed = os.environ["WEBHOOK_CONFIGURATION"]
    settings.admission.namespace_selector = {
        "matchLabels": {os.environ["WEBHOOK_LABEL"]: "yes"}
    }
    settings.posting.enabled = False


@kopf.on.validate("configmaps", id="check", persistent=True)
def check(warnings, **_):
    warnings.append(f"reviewed by {REPLICA}")
"""

REPLICAS = ("r1", "r2", "r3")


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@pytest.fixture
def configuration(kubectl: Kubectl, namespace: str) -> Iterator[tuple[str, str]]:
    """The managed configuration's name and the label that admits the test's namespace only."""
    label = f"webhook-ca-e2e-{uuid.uuid4().hex[:8]}"
    kubectl("label", "namespace", namespace, f"{label}=yes")
    name = f"{label}.trioperator.dev"
    yield name, label
    # Cluster-wide objects: never left behind for the other tests on this API server.
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        kubectl("delete", kind, name, "--ignore-not-found", check=False)


def test_three_replicas_share_one_ca_and_each_answers_reviews_under_its_bundle(
    kubeconfig: Path,
    kubectl: Kubectl,
    namespace: str,
    configuration: tuple[str, str],
    tmp_path: Path,
    example_crd: None,  # the namespace's cleanup looks for its objects
) -> None:
    name, label = configuration
    source = tmp_path / "webhook_operator.py"
    source.write_text(OPERATOR_SOURCE)
    ports = dict(zip(REPLICAS, free_ports(len(REPLICAS)), strict=True))
    processes: dict[str, OperatorProcess] = {}
    try:
        for replica in REPLICAS:
            env = {
                **os.environ,
                "KUBECONFIG": str(kubeconfig),
                "PYTHONUNBUFFERED": "1",
                "POD_ID": replica,
                "POD_NAMESPACE": namespace,
                "TRIOPERATOR_SHARDS": "auto",
                "WEBHOOK_PORT": str(ports[replica]),
                "WEBHOOK_CONFIGURATION": name,
                "WEBHOOK_LABEL": label,
            }
            args = [sys.executable, "-m", "trioperator", "run", "--verbose", "--standalone"]
            args += ["-n", namespace, str(source)]
            processes[replica] = OperatorProcess(args, env)
        for process in processes.values():
            process.wait_for(r"Reconfiguring the admission webhooks", timeout=90)

        # One Secret, made by one replica; the others took its CA.
        secrets = kubectl.get("secrets", "-n", namespace, "-l", "app.kubernetes.io/managed-by")
        assert [item["metadata"]["name"] for item in secrets["items"]] == ["webhooks-ca"]
        outputs = [process.output for process in processes.values()]
        assert sum(output.count("Created the Secret") for output in outputs) == 1
        ca_crt = secrets["items"][0]["data"]["ca.crt"]

        # The configuration as the three replicas left it. A PATCH may still be in flight
        # right after a replica's log line, so it must hold still for a while.
        config = _stable_configuration(kubectl, name)
        (webhook,) = config["webhooks"]
        assert webhook["clientConfig"]["service"] == {
            "namespace": namespace,
            "name": "webhooks",
            "path": "/check",
            "port": 443,
        }
        bundle = webhook["clientConfig"]["caBundle"]
        assert bundle == ca_crt
        # Created empty (1), then written once (2); the two identical writes changed nothing.
        assert config["metadata"]["generation"] == 2

        # Each replica presents a certificate of that CA for the Service's names.
        for replica, port in ports.items():
            for hostname in (
                f"webhooks.{namespace}.svc",
                f"webhooks.{namespace}.svc.cluster.local",
            ):
                peer = _handshake(port, base64.b64decode(bundle), hostname)
                assert ("DNS", f"webhooks.{namespace}.svc") in peer["subjectAltName"], replica

        # Real reviews by the API server, under the same caBundle, to each replica in turn.
        for replica, port in ports.items():
            patch = [
                {"op": "test", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle},
                {
                    "op": "replace",
                    "path": "/webhooks/0/clientConfig",
                    "value": {"url": f"https://127.0.0.1:{port}/check", "caBundle": bundle},
                },
            ]
            kubectl(
                "patch", "validatingwebhookconfiguration", name, "--type=json",
                "-p", json.dumps(patch),
            )  # fmt: skip
            assert _reviewed_by(kubectl, namespace, replica)[-1] == replica
        after = kubectl.get("validatingwebhookconfiguration", name)
        assert after["webhooks"][0]["clientConfig"]["caBundle"] == ca_crt
    finally:
        for process in processes.values():
            process.stop()
    for replica, process in processes.items():
        assert "Traceback" not in process.output, (replica, process.output[-4000:])


def _stable_configuration(kubectl: Kubectl, name: str, *, reads: int = 5) -> dict[str, object]:
    """The configuration once ``reads`` reads in a row (0.5 s apart) found it unchanged."""
    deadline = time.monotonic() + 60
    seen: list[str] = []
    while time.monotonic() < deadline:
        config = kubectl.get("validatingwebhookconfiguration", name)
        seen.append(config["metadata"]["resourceVersion"])
        if len(seen) >= reads and len(set(seen[-reads:])) == 1:
            result: dict[str, object] = config
            return result
        time.sleep(0.5)
    raise AssertionError(f"The configuration {name} kept changing: {seen}")


def _handshake(port: int, bundle: bytes, hostname: str) -> dict[str, object]:
    """The peer certificate of a TLS handshake verified with ``bundle`` for ``hostname``."""
    context = ssl.create_default_context(cadata=bundle.decode("ascii"))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as sock,
        context.wrap_socket(sock, server_hostname=hostname) as tls,
    ):
        peer: dict[str, object] | None = tls.getpeercert()
    assert peer is not None
    return peer


def _reviewed_by(kubectl: Kubectl, namespace: str, replica: str) -> list[str]:
    """Who reviewed each server-side dry run of a ConfigMap creation, until ``replica`` did.

    A patched configuration takes a moment to reach the API server's webhook cache: until then
    the previous replica answers. Every creation must succeed: the webhook fails closed
    (``failurePolicy: Fail``), so a failed TLS handshake would fail it.
    """
    deadline = time.monotonic() + 60
    answers: list[str] = []
    while time.monotonic() < deadline:
        probe = f"probe-{uuid.uuid4().hex[:6]}"
        result = subprocess.run(
            [kubectl.binary, "create", "configmap", probe, "-n", namespace, "--dry-run=server"],
            env=kubectl.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, (answers, result.stderr)
        warnings = [line for line in result.stderr.splitlines() if line.startswith("Warning:")]
        answers.append(" ".join(line.rsplit(" ", 1)[-1] for line in warnings))
        if answers[-1] == replica:
            return answers
        time.sleep(0.5)
    raise AssertionError(f"{replica} never reviewed; the reviewers were: {answers}")
