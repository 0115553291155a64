"""``manifests/``: the kustomization renders, and the API server accepts every object (dry run)."""

from __future__ import annotations

from typing import Any

import yaml

from tests.e2e.conftest import ROOT, Kubectl


def _retarget(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The object moved from the manifests' namespace into the test's own."""
    meta = obj["metadata"]
    if obj["kind"] == "Namespace":
        meta["name"] = namespace
    elif "namespace" in meta:
        meta["namespace"] = namespace
    for subject in obj.get("subjects", []):
        subject["namespace"] = namespace
    return obj


def _webhook_ca_rules(rendered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules of the Role for the webhook servers' CA Secret."""
    (role,) = [
        doc
        for doc in rendered
        if doc["kind"] == "Role" and doc["metadata"]["name"] == "trioperator-webhook-ca"
    ]
    rules: list[dict[str, Any]] = role["rules"]
    return rules


def test_the_manifests_are_accepted_by_the_api_server(kubectl: Kubectl, namespace: str) -> None:
    rendered = [doc for doc in yaml.safe_load_all(kubectl("kustomize", str(ROOT / "manifests")))]
    kinds = sorted(doc["kind"] for doc in rendered)
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "Deployment",
            "Namespace",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
        ]
    )
    by_kind = {doc["kind"]: doc for doc in rendered}
    assert by_kind["ClusterRoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "trioperator", "namespace": "trioperator"}
    ]
    pod = by_kind["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "localhost/my-operator:latest"  # kustomize's `images:`
    assert pod["serviceAccountName"] == by_kind["ServiceAccount"]["metadata"]["name"]
    deployment = by_kind["Deployment"]["spec"]
    assert (deployment["replicas"], deployment["strategy"]) == (1, {"type": "Recreate"})
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }
    # The probe asks the liveness endpoint the operator serves (-L).
    assert "--liveness=http://0.0.0.0:8080/healthz" in container["args"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "liveness"}
    assert {"name": "liveness", "containerPort": 8080} in container["ports"]
    assert container["resources"]["limits"]["memory"]
    # The webhook Service routes to the container's webhook port (WebhookServiceServer: 9443).
    assert by_kind["Service"]["spec"]["ports"][0]["targetPort"] == "webhooks"
    assert {"name": "webhooks", "containerPort": 9443} in container["ports"]
    # ... and its default CA Secret (`<Service name>-ca`) is readable and creatable.
    service = by_kind["Service"]["metadata"]["name"]
    assert _webhook_ca_rules(rendered) == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [f"{service}-ca"],
            "verbs": ["get"],
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]

    documents = yaml.safe_dump_all([_retarget(doc, namespace) for doc in rendered])
    output = kubectl("apply", "--dry-run=server", "-f", "-", input=documents)
    lines = output.strip().splitlines()
    assert len(lines) == len(rendered), output
    assert all(line.endswith("(server dry run)") for line in lines), output
    # Nothing was created for real.
    assert "trioperator" not in kubectl("get", "deployments", "-n", namespace, "-o", "name")


def test_the_sharded_variant_runs_three_replicas_with_their_lease_rules(
    kubectl: Kubectl, namespace: str
) -> None:
    rendered = [
        doc for doc in yaml.safe_load_all(kubectl("kustomize", str(ROOT / "manifests-sharded")))
    ]
    by_kind = {doc["kind"]: doc for doc in rendered}
    deployment = by_kind["Deployment"]["spec"]
    assert deployment["replicas"] == 3
    assert deployment["strategy"]["type"] == "RollingUpdate"
    (container,) = deployment["template"]["spec"]["containers"]
    env = {item["name"]: item for item in container["env"]}
    assert env["TRIOPERATOR_SHARDS"]["value"] == "auto"
    assert env["POD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    roles = {doc["metadata"]["name"]: doc for doc in rendered if doc["kind"] == "Role"}
    bindings = {doc["metadata"]["name"]: doc for doc in rendered if doc["kind"] == "RoleBinding"}
    assert roles["trioperator-shards"]["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "patch", "delete"],
        }
    ]
    assert {name: binding["roleRef"]["name"] for name, binding in bindings.items()} == {
        name: name for name in roles
    }
    # The replicas behind the webhook Service share the CA of one Secret in their namespace
    # (WebhookServiceServer's default; POD_NAMESPACE is that namespace).
    service = by_kind["Service"]
    assert service["spec"]["selector"] == deployment["selector"]["matchLabels"]
    assert _webhook_ca_rules(rendered) == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [f"{service['metadata']['name']}-ca"],
            "verbs": ["get"],
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]
    assert (
        roles["trioperator-webhook-ca"]["metadata"]["namespace"] == service["metadata"]["namespace"]
    )

    documents = yaml.safe_dump_all([_retarget(doc, namespace) for doc in rendered])
    output = kubectl("apply", "--dry-run=server", "-f", "-", input=documents)
    lines = output.strip().splitlines()
    assert len(lines) == len(rendered), output
    assert all(line.endswith("(server dry run)") for line in lines), output
