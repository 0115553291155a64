"""The RBAC rules ``trioperator rbac`` prints are enough, and each of them is needed.

These tests use a second kube-apiserver that enforces RBAC (``--authorization-mode=RBAC``:
``scripts/kube-up`` with ``TRIOPERATOR_KUBE_AUTHZ=RBAC``, its own state directory and port),
started for this module and stopped after it; the shared one allows everything. The operator
authenticates as a ServiceAccount with a token from the TokenRequest API (no controller-manager
runs, so token Secrets would stay empty) and gets exactly the printed Role and ClusterRole.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import EXAMPLES, ROOT, Kubectl, OperatorProcess, private_control_plane

# Its own port (and etcd's, PORT+7347/+7357), next to the shared server's 16443.
PORT = os.environ.get("TRIOPERATOR_RBAC_KUBE_PORT", "17443")
SERVICE_ACCOUNT = "op"

OPERATOR = """
import trioperator as kopf

@kopf.on.create("kopfexamples")
def create_fn(body, logger, **_):
    logger.info("Creating.")
    kopf.info(body, reason="Created", message="The object is served.")
    return {"message": "created"}

@kopf.on.update("kopfexamples")
def update_fn(**_):
    return {"message": "updated"}

@kopf.on.delete("kopfexamples")
def delete_fn(logger, **_):
    logger.info("Deleting.")
"""

# Not "403" inside a log timestamp's milliseconds (",403]"): only a status code.
FORBIDDEN = re.compile(r"(?i)forbidden|(?<![,.:\d])\b403\b|permission")

# What `trioperator rbac OPERATOR -n NS` prints for this operator: one rule per resource.
RULES = {
    ("ClusterRole", "", "namespaces"): ["list", "watch"],
    ("ClusterRole", "apiextensions.k8s.io", "customresourcedefinitions"): ["list", "watch"],
    ("Role", "", "events"): ["create", "patch"],
    ("Role", "kopf.dev", "kopfexamples"): ["list", "watch", "patch"],
    ("Role", "kopf.dev", "kopfexamples/status"): ["patch"],
    ("Role", "kopf.dev", "kopfpeerings"): ["list", "watch", "patch"],
}
# And with -A: everything in the ClusterRole, cluster-wide peering, no namespace observation.
RULES_CLUSTERWIDE = {
    ("ClusterRole", "", "events"): ["create", "patch"],
    ("ClusterRole", "apiextensions.k8s.io", "customresourcedefinitions"): ["list", "watch"],
    ("ClusterRole", "kopf.dev", "clusterkopfpeerings"): ["list", "watch", "patch"],
    ("ClusterRole", "kopf.dev", "kopfexamples"): ["list", "watch", "patch"],
    ("ClusterRole", "kopf.dev", "kopfexamples/status"): ["patch"],
}


@pytest.fixture(scope="module")
def rbac_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A kube-apiserver with RBAC enforced, for this module only; its admin kubeconfig."""
    with private_control_plane(
        tmp_path_factory.mktemp("kube-rbac"), PORT, timeout=600, TRIOPERATOR_KUBE_AUTHZ="RBAC"
    ) as kubeconfig:
        yield kubeconfig


@pytest.fixture(scope="module")
def admin(rbac_server: Path) -> Kubectl:
    kubectl = Kubectl(rbac_server)
    kubectl(
        "apply", "-f", str(EXAMPLES / "crd.yaml"), "-f", str(ROOT / "manifests" / "peering.yaml")
    )
    kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=30s")
    peering = {
        "apiVersion": "kopf.dev/v1",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": "default"},
    }
    kubectl("apply", "-f", "-", input=json.dumps(peering))
    return kubectl


@pytest.fixture
def setup(admin: Kubectl, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    """A namespace with the service account, a peering object, the operator file and the RBAC
    manifests ``trioperator rbac`` prints for it (not applied yet): for an operator serving
    this namespace, or (indirect parameter "clusterwide") the whole cluster."""
    scope = ["-A"] if getattr(request, "param", None) == "clusterwide" else ["-n"]
    namespace = f"rbac-{len(request.node.name)}-{int(time.monotonic() * 1000) % 100000}"
    scope = [*scope, namespace] if scope == ["-n"] else scope
    admin("create", "namespace", namespace)
    admin("create", "serviceaccount", SERVICE_ACCOUNT, "-n", namespace)
    peering = {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "default"}}
    admin("apply", "-n", namespace, "-f", "-", input=json.dumps(peering))
    operator = tmp_path / "operator.py"
    operator.write_text(OPERATOR)

    printed = subprocess.run(
        [
            *(sys.executable, "-m", "trioperator", "rbac", str(operator), *scope),
            *("--crd", str(EXAMPLES / "crd.yaml"), "--service-account", SERVICE_ACCOUNT),
            *("--service-account-namespace", namespace),
            *("--name", f"op-{namespace}"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    manifests = [doc for doc in yaml.safe_load_all(printed) if doc]

    return {
        "namespace": namespace,
        "scope": scope,
        "operator": operator,
        "manifests": manifests,
        "kubeconfig": _service_account_kubeconfig(admin, namespace, tmp_path),
        "user": f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}",
    }


def _service_account_kubeconfig(admin: Kubectl, namespace: str, tmp_path: Path) -> Path:
    """The service account's token (TokenRequest API), in a kubeconfig of its own."""
    request_body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{SERVICE_ACCOUNT}/token"
    token = json.loads(admin("create", "--raw", path, "-f", "-", input=json.dumps(request_body)))
    config = yaml.safe_load(Path(admin.env["KUBECONFIG"]).read_text())
    config["users"][0]["user"] = {"token": token["status"]["token"]}
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    return kubeconfig


def _rules(manifests: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[str]]:
    rules = {}
    for doc in manifests:
        for rule in doc.get("rules", []):
            (group,) = rule["apiGroups"]
            (resource,) = rule["resources"]
            rules[doc["kind"], group, resource] = rule["verbs"]
    return rules


def _apply(
    admin: Kubectl,
    manifests: list[dict[str, Any]],
    user: str,
    grant: tuple[str, str, str],
    verb: str,
    *,
    allowed: bool,
    namespace: str,
) -> None:
    admin("apply", "-f", "-", input=yaml.safe_dump_all(manifests))
    # The authorizer follows RBAC objects through a watch: wait until it sees the change.
    kind, group, resource = grant
    plural, _, subresource = resource.partition("/")
    args = ["auth", "can-i", verb, f"{plural}.{group}".rstrip("."), f"--as={user}"]
    args += [f"--subresource={subresource}"] if subresource else []
    args += ["-n", namespace] if kind == "Role" else []
    expected = "yes" if allowed else "no"
    deadline = time.monotonic() + 10
    while admin(*args, check=False).strip() != expected:
        assert time.monotonic() < deadline, f"RBAC did not settle: {args} is not {expected}"
        time.sleep(0.1)


def _start(setup: dict[str, Any]) -> OperatorProcess:
    env = {**os.environ, "KUBECONFIG": str(setup["kubeconfig"]), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "trioperator", "run", "--verbose", str(setup["operator"])]
    return OperatorProcess([*command, *setup["scope"]], env)


def _object_life(admin: Kubectl, namespace: str, process: OperatorProcess) -> None:
    admin("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    process.wait_for(r"Handler 'create_fn' succeeded")
    admin(
        "patch",
        "kopfexample",
        "kopf-example-1",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"field":"changed"}}',
    )
    process.wait_for(r"Handler 'update_fn' succeeded")
    obj = admin.get("kopfexample", "kopf-example-1", "-n", namespace)
    assert obj["status"]["create_fn"] == {"message": "created"}
    assert obj["status"]["update_fn"] == {"message": "updated"}
    admin("delete", "kopfexample", "kopf-example-1", "-n", namespace, "--wait=false")
    process.wait_for(r"Handler 'delete_fn' succeeded")
    admin("wait", "--for=delete", "kopfexample/kopf-example-1", "-n", namespace, "--timeout=30s")


@pytest.mark.parametrize(
    ("setup", "expected"),
    [("namespaced", RULES), ("clusterwide", RULES_CLUSTERWIDE)],
    indirect=["setup"],
    ids=["namespaced", "clusterwide"],
)
def test_the_printed_rules_are_enough_for_an_objects_whole_life(
    admin: Kubectl, setup: dict[str, Any], expected: dict[tuple[str, str, str], list[str]]
) -> None:
    manifests, namespace = setup["manifests"], setup["namespace"]
    assert _rules(manifests) == expected
    grant = ("Role" if "-n" in setup["scope"] else "ClusterRole", "kopf.dev", "kopfexamples")
    _apply(admin, manifests, setup["user"], grant, "patch", allowed=True, namespace=namespace)
    process = _start(setup)
    try:
        process.wait_for("The operator is ready")
        _object_life(admin, namespace, process)
        # The event the handler posts (in the background) reaches the API.
        deadline = time.monotonic() + 15
        while not any(
            event["involvedObject"].get("name") == "kopf-example-1"
            for event in admin.get("events", "-n", namespace)["items"]
        ):
            assert time.monotonic() < deadline, "no events were posted"
            time.sleep(0.2)
    finally:
        assert process.stop() == 0
    assert not FORBIDDEN.search(process.output), process.output[-6000:]


@pytest.mark.parametrize("removed", sorted(RULES), ids=lambda key: f"{key[0]}-{key[2]}")
def test_without_any_one_rule_the_log_says_what_is_forbidden(
    admin: Kubectl, setup: dict[str, Any], removed: tuple[str, str, str]
) -> None:
    kind, group, resource = removed
    manifests, namespace = setup["manifests"], setup["namespace"]
    for doc in manifests:
        if doc["kind"] == kind:
            doc["rules"] = [
                rule
                for rule in doc["rules"]
                if (rule["apiGroups"], rule["resources"]) != ([group], [resource])
            ]
    verb = RULES[removed][0]
    _apply(admin, manifests, setup["user"], removed, verb, allowed=False, namespace=namespace)
    process = _start(setup)
    try:
        admin("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
        plural = resource.split("/")[0]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if any(FORBIDDEN.search(line) and plural in line for line in process.lines):
                break
            time.sleep(0.2)
    finally:
        process.stop(timeout=15)
    lines = [line for line in process.lines if FORBIDDEN.search(line) and plural in line]
    assert lines, process.output[-6000:]
    print(f"\n{resource}: {lines[0]}")


def test_discovery_finds_what_the_crd_files_describe(
    kubeconfig: Path, example_crd: None, tmp_path: Path
) -> None:
    # On the shared API server (the CRD is there): asking it gives the same rules as the file.
    operator = tmp_path / "operator.py"
    operator.write_text(OPERATOR)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

    def printed(*args: str) -> list[Any]:
        command = [sys.executable, "-m", "trioperator", "rbac", str(operator), "-n", "x", *args]
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

    discovered = printed("--discover")
    assert _rules(discovered) == RULES
    assert discovered == printed("--crd", str(EXAMPLES / "crd.yaml"))


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


WEBHOOK_OPERATOR = """
import os

import trioperator as kopf


@kopf.on.startup()
def configure(settings, **_):
    settings.admission.server = kopf.WebhookServiceServer(
        name="webhooks", addr="127.0.0.1", port=int(os.environ["WEBHOOK_PORT"])
    )
    settings.admission.managed = os.environ["WEBHOOK_CONFIGURATION"]
    # Reviews are not the point here: no namespace is selected.
    settings.admission.namespace_selector = {"matchLabels": {"trioperator.dev/none": "none"}}


@kopf.on.validate("configmaps", id="check")
def check(**_):
    pass
"""


def test_the_webhook_ca_rules_are_enough_for_replicas_and_needed(
    admin: Kubectl, tmp_path: Path
) -> None:
    # WebhookServiceServer's shared CA: the first replica creates its Secret, the next reads it,
    # as the service account with exactly the printed rules (--webhook-ca-secret).
    namespace = f"rbac-ca-{int(time.monotonic() * 1000) % 100000}"
    admin("create", "namespace", namespace)
    admin("create", "serviceaccount", SERVICE_ACCOUNT, "-n", namespace)
    operator = tmp_path / "operator.py"
    operator.write_text(WEBHOOK_OPERATOR)
    printed = subprocess.run(
        [
            *(sys.executable, "-m", "trioperator", "rbac", str(operator), "-n", namespace),
            *("--standalone", "--webhook-ca-secret", "webhooks-ca"),
            *("--service-account", SERVICE_ACCOUNT, "--service-account-namespace", namespace),
            *("--name", f"op-{namespace}"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    manifests = [doc for doc in yaml.safe_load_all(printed) if doc]
    user = f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}"
    kubeconfig = _service_account_kubeconfig(admin, namespace, tmp_path)
    configuration = f"{namespace}.trioperator.dev"
    secret = ("Role", "", "secrets")

    def start(replica: str, port: int) -> OperatorProcess:
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "PYTHONUNBUFFERED": "1",
            "POD_NAMESPACE": namespace,
            "WEBHOOK_PORT": str(port),
            "WEBHOOK_CONFIGURATION": configuration,
        }
        command = [sys.executable, "-m", "trioperator", "run", "--verbose", "--standalone"]
        return OperatorProcess([*command, "-n", namespace, "--id", replica, str(operator)], env)

    try:
        # Without the Role of the Secret: the server stops the operator, saying what to grant.
        without = [doc for doc in manifests if not doc["metadata"]["name"].endswith("webhook-ca")]
        assert len(without) == len(manifests) - 2
        _apply(admin, without, user, secret, "create", allowed=False, namespace=namespace)
        ports = _free_ports(3)
        process = start("r0", ports[0])
        try:
            process.process.wait(60)
        finally:
            process.stop()
        assert process.process.returncode != 0
        assert f"Not allowed to get the Secret {namespace}/webhooks-ca" in process.output
        assert "--webhook-ca-secret webhooks-ca" in process.output

        # With it: one replica creates the Secret, the next one reads it.
        _apply(admin, manifests, user, secret, "create", allowed=True, namespace=namespace)
        first = start("r1", ports[1])
        try:
            first.wait_for("Created the Secret", timeout=60)
            first.wait_for("Reconfiguring the admission webhooks", timeout=60)
            second = start("r2", ports[2])
            try:
                second.wait_for("CA comes from the Secret", timeout=60)
                second.wait_for("Reconfiguring the admission webhooks", timeout=60)
            finally:
                assert second.stop() == 0
        finally:
            assert first.stop() == 0
        for process in (first, second):
            assert not FORBIDDEN.search(process.output), process.output[-6000:]
    finally:
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            admin("delete", kind, configuration, "--ignore-not-found", check=False)
