"""The webhook servers as the real kube-apiserver sees them: it verifies our generated
certificate with the advertised CA bundle and reaches the handler id in the URL path.

The webhook configuration here is made by the test (the operator's managed configurations are
tested with the admission feature); it only covers configmaps of the test's own namespace, and
fails open, so that other tests on the same API server are never affected.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Mapping
from functools import partial
from typing import Any

import trio
from trioperator._engine.webhooks import WebhookClientConfig
from trioperator._kits.webhooks import WebhookServer

from .conftest import Kubectl


class Reviewer:
    def __init__(self) -> None:
        self.seen: list[tuple[str | None, dict[str, Any], Mapping[str, str] | None]] = []

    async def __call__(
        self,
        request: bytes | Mapping[str, Any],
        *,
        webhook: str | None = None,
        headers: Mapping[str, str] | None = None,
        sslpeer: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        assert isinstance(request, bytes)
        review = json.loads(request)
        self.seen.append((webhook, review, headers))
        return {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {
                "uid": review["request"]["uid"],
                "allowed": False,
                "status": {"code": 403, "message": f"denied by {webhook}"},
            },
        }


async def run_kubectl(
    kubectl: Kubectl, *args: str, input: str | None = None, check: bool = True
) -> str:
    return await trio.to_thread.run_sync(partial(kubectl, *args, input=input, check=check))


async def test_the_api_server_trusts_the_generated_certificate(
    kubectl: Kubectl, namespace: str
) -> None:
    server = WebhookServer(addr="127.0.0.1", path="/hooks")
    label = f"webhook-e2e-{uuid.uuid4().hex[:8]}"
    await run_kubectl(kubectl, "label", "namespace", namespace, f"{label}=yes")
    reviewer = Reviewer()
    send, receive = trio.open_memory_channel[WebhookClientConfig](1)
    name = f"{label}.trioperator.dev"
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(server.serve, reviewer, configs=send))
        config = await receive.receive()
        webhook_config = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": name,
                    "clientConfig": {**config, "url": f"{config['url']}/check-configmaps"},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["configmaps"],
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {label: "yes"}},
                    "failurePolicy": "Ignore",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 10,
                }
            ],
        }
        await run_kubectl(kubectl, "apply", "-f", "-", input=json.dumps(webhook_config))
        try:
            # The configuration takes a moment to reach the API server's webhook cache.
            with trio.fail_after(30):
                while not reviewer.seen:
                    output = await run_kubectl(
                        kubectl,
                        "create", "configmap", "probe", "-n", namespace, "--dry-run=server",
                        check=False,
                    )  # fmt: skip
                    if not reviewer.seen:
                        assert "created" in output  # failed open: not called yet
                        await trio.sleep(0.5)
            result = await trio.to_thread.run_sync(
                partial(
                    subprocess.run,
                    [kubectl.binary, "create", "configmap", "denied", "-n", namespace],
                    env=kubectl.env,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
            )
        finally:
            await run_kubectl(
                kubectl, "delete", "validatingwebhookconfiguration", name, check=False
            )
            nursery.cancel_scope.cancel()
    assert result.returncode != 0
    assert "denied by check-configmaps" in result.stderr
    webhook, review, headers = reviewer.seen[-1]
    assert webhook == "check-configmaps"
    assert review["request"]["name"] == "denied"
    assert review["request"]["namespace"] == namespace
    assert headers is not None
    assert headers["content-type"] == "application/json"
    assert not kubectl.get("configmaps", "-n", namespace, "--field-selector=metadata.name=denied")[
        "items"
    ]
