"""examples/controller on a real cluster: kube-apiserver *with* kube-controller-manager.

The shared kube-apiserver runs without kube-controller-manager (other tests count on that: no
namespace finalization, no service accounts made for them), so this module starts a control
plane of its own with it (``scripts/kube-up --controller-manager``, its own state directory and
port) and stops it at the end. There is no kubelet: the Deployment controller makes the
ReplicaSet (and the ReplicaSet controller the pods, which stay Pending), so the example's
``Ready`` ("rolled out") comes true and its ``Available`` does not, for real.

The operator runs as ``trioperator run examples/controller/operator.py``; the children are
deleted and edited from outside, as a user would.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trioperator as kopf
import yaml

from tests.e2e.conftest import EXAMPLES, Kubectl, OperatorProcess, private_control_plane

EXAMPLE = EXAMPLES / "controller"
# Its own port (and etcd's, PORT+7347/+7357): not the shared 16443, RBAC's 17443, nor the
# 18443 of the chaos tier and the benchmarks.
PORT = os.environ.get("TRIOPERATOR_CONTROLLER_KUBE_PORT", "19443")
MANAGER = "webapp-operator"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A control plane with kube-controller-manager, for this module only; its kubeconfig."""
    with private_control_plane(
        tmp_path_factory.mktemp("kube-controllers"),
        PORT,
        timeout=3600,  # kube-controller-manager is compiled on its first use
        TRIOPERATOR_KUBE_CONTROLLER_MANAGER="1",
    ) as kubeconfig:
        yield kubeconfig


@pytest.fixture(scope="module")
def kubectl(cluster: Path) -> Kubectl:
    kubectl = Kubectl(cluster)
    kubectl("apply", "-f", str(EXAMPLE / "crd.yaml"))
    kubectl("wait", "--for=condition=Established", "crd/webapps.demo.trioperator.dev")
    return kubectl


@pytest.fixture
def namespace(kubectl: Kubectl) -> Iterator[str]:
    name = f"ctl-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def api(cluster: Path) -> Iterator[kopf.SyncAPI]:
    with kopf.connect_sync_api(str(cluster)) as client:
        yield client


@pytest.fixture
def operator(cluster: Path, namespace: str) -> Iterator[OperatorProcess]:
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster),
        "PYTHONUNBUFFERED": "1",
        "WEBAPP_CONFLICT_POLICY": "Force",
    }
    process = OperatorProcess(
        [
            *(sys.executable, "-m", "trioperator", "run", "--verbose"),
            *("-n", namespace, str(EXAMPLE / "operator.py")),
        ],
        env,
    )
    try:
        process.wait_for("The operator is ready")
        yield process
    finally:
        process.stop()


def wait_until(check: Any, what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not in {timeout}s: {what}")


def managers_of(obj: dict[str, Any], *path: str) -> set[str]:
    """The field managers that own the field at ``path`` (``"spec", "replicas"``)."""
    owners = set()
    for entry in obj["metadata"].get("managedFields", []):
        fields = entry.get("fieldsV1") or {}
        for key in path:
            fields = fields.get(f"f:{key}")
            if fields is None:
                break
        else:
            owners.add(entry["manager"])
    return owners


def condition(obj: dict[str, Any], type: str) -> dict[str, Any]:
    found = kopf.conditions.find_condition(obj, type)
    assert found is not None, obj.get("status")
    return found


def restored_after(api: kopf.SyncAPI, resource: str, name: str, namespace: str) -> float:
    """Delete a child as a user would; seconds until the operator has made it again (within
    the usual wait limit: how fast is reported, not asserted, as it is the machine's too)."""
    children = api.resource(resource)
    old_uid = children.get(name, namespace=namespace)["metadata"]["uid"]

    def remade() -> bool:
        try:
            current = children.get(name, namespace=namespace)
        except kopf.APINotFoundError:
            return False
        return bool(current["metadata"]["uid"] != old_uid)

    started = time.monotonic()
    children.delete(name, namespace=namespace)
    wait_until(remade, f"{resource} {name} made again after its deletion")
    return time.monotonic() - started


def settled(obj: dict[str, Any]) -> bool:
    """Its controller has seen its current spec and has the pods it wants (no kubelet: they
    stay Pending, and it writes the status no more)."""
    status = obj.get("status") or {}
    return bool(
        status.get("observedGeneration") == obj["metadata"]["generation"]
        and status.get("replicas") == obj["spec"]["replicas"]
    )


def rolled_out(api: kopf.SyncAPI, name: str, namespace: str) -> bool:
    """The Deployment and ReplicaSet controllers are done with the Deployment's spec."""
    deployment = api.resource("deployments.apps").get(name, namespace=namespace)
    uid = deployment["metadata"]["uid"]
    replicasets = [
        replicaset
        for replicaset in api.resource("replicasets.apps").list(namespace=namespace)
        if any(owner["uid"] == uid for owner in replicaset["metadata"].get("ownerReferences", []))
    ]
    return (
        settled(deployment)
        and deployment["status"].get("updatedReplicas") == deployment["spec"]["replicas"]
        and bool(replicasets)
        and all(settled(replicaset) for replicaset in replicasets)
    )


RUN = r"Reconciler 'reconcile' succeeded"


def first_run_of(generation: int) -> str:
    """The debug line of the status patch of the first run that sees ``generation``: it sets
    ``status.observedGeneration`` (the conditions carry the generation too, but inside a list:
    ``...}]`` or ``...}, {``, never ``...}}``)."""
    return rf"Patching the status with: .*'observedGeneration': {generation}\}}\}}"


def versions(api: kopf.SyncAPI, namespace: str) -> dict[str, str]:
    """The children's resourceVersions: any write to them, by anybody, moves them."""
    return {
        resource: api.resource(resource).get(name, namespace=namespace)["metadata"][
            "resourceVersion"
        ]
        for resource, name in [("configmaps", "web-settings"), ("deployments.apps", "web")]
    }


def test_ready_restored_children_and_conflicts_forced_back(
    kubectl: Kubectl,
    namespace: str,
    operator: Any,
    api: kopf.SyncAPI,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLE / "webapp.yaml"))
    # The Deployment controller made the ReplicaSet for the current template: Ready.
    kubectl("wait", "-n", namespace, "--for=condition=Ready", "webapp/web", "--timeout=60s")
    webapp = kubectl.get("webapp", "web", "-n", namespace)
    ready = condition(webapp, "Ready")
    assert (ready["reason"], ready["observedGeneration"]) == ("RolledOut", 1)
    assert ready["message"] == "0/2 replicas available"  # no kubelet: none run
    assert condition(webapp, "Available")["status"] == "False"
    assert webapp["status"]["observedGeneration"] == 1
    [replicaset] = kubectl.get("replicasets", "-n", namespace, "-l", "app=web")["items"]
    assert replicaset["metadata"]["ownerReferences"][0]["name"] == "web"

    deployment = api.resource("deployments.apps").get("web", namespace=namespace)
    assert managers_of(deployment, "spec", "replicas") == {MANAGER}
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == webapp["metadata"]["uid"]

    # Children deleted by hand come back (how fast is shown, not asserted: on a loaded machine
    # it is the machine's speed as much as the operator's).
    times = {
        resource: restored_after(api, resource, name, namespace)
        for resource, name in [("configmaps", "web-settings"), ("deployments.apps", "web")]
    }
    with capsys.disabled():
        print("\ndeletion -> restoration: " + ", ".join(f"{r} {t:.3f}s" for r, t in times.items()))
    kubectl("wait", "-n", namespace, "--for=condition=Ready", "webapp/web", "--timeout=60s")

    # Another manager takes spec.replicas (an update: the field is now theirs); forced back.
    kubectl(
        *("patch", "deployment", "web", "-n", namespace, "--field-manager=intruder"),
        *("--type=merge", "-p", '{"spec":{"replicas":5}}'),
    )
    deployments = api.resource("deployments.apps")
    back = wait_until(
        lambda: (d := deployments.get("web", namespace=namespace))["spec"]["replicas"] == 2 and d,
        "replicas taken back",
    )
    assert managers_of(back, "spec", "replicas") == {MANAGER}
    operator.wait_for(r"Deployment web: taking back \.spec\.replicas \(managed by intruder\)")

    # Converged: a run that finds the children as the spec wants them writes nothing, so it
    # wakes nothing, and nothing runs again. Shown with runs that must happen, not with sleeps:
    # two spec changes that leave the children as they are (the policy the operator uses
    # anyway, made explicit, then dropped), each run once for its new generation. First the
    # Deployment controller finishes with the replicas taken back: its status writes would
    # rightly run the reconcile again.
    wait_until(
        lambda: rolled_out(api, "web", namespace),
        "the Deployment controller done with the replicas taken back",
    )
    children = versions(api, namespace)
    webapps = api.resource("webapps.demo.trioperator.dev")

    def run_for(generation: int) -> dict[str, Any]:
        """The WebApp once the run for ``generation`` has logged and written its status."""
        operator.wait_for(first_run_of(generation))

        def written() -> dict[str, Any] | None:
            webapp = webapps.get("web", namespace=namespace)
            return webapp if webapp["status"].get("observedGeneration") == generation else None

        return wait_until(written, f"status.observedGeneration {generation}")

    kubectl(
        *("patch", "webapp", "web", "-n", namespace),
        *("--type=merge", "-p", '{"spec":{"conflictPolicy":"Force"}}'),
    )
    webapp = run_for(2)
    assert webapp["metadata"]["generation"] == 2
    ready = condition(webapp, "Ready")
    assert (ready["status"], ready["observedGeneration"]) == ("True", 2)
    assert versions(api, namespace) == children, "the run wrote to a child it found as wanted"
    # Its status write did not wake it (`generation_changed`), nor did anything else: between
    # the run for generation 2 and the one for generation 3, no other run.
    kubectl(
        *("patch", "webapp", "web", "-n", namespace),
        *("--type=merge", "-p", '{"spec":{"conflictPolicy":null}}'),
    )
    webapp = run_for(3)
    assert "conflictPolicy" not in webapp["spec"]
    assert versions(api, namespace) == children, "the run wrote to a child it found as wanted"
    output = operator.output
    after_2 = re.search(first_run_of(2), output)
    up_to_3 = re.search(first_run_of(3), output)
    assert after_2 is not None
    assert up_to_3 is not None
    between = output[after_2.end() : up_to_3.start()]
    assert len(re.findall(RUN, between)) == 1, f"runs other than generation 3's:\n{between}"
    assert "Traceback" not in output


def test_conflicts_reported_when_so_configured(
    kubectl: Kubectl, namespace: str, operator: Any, api: kopf.SyncAPI
) -> None:
    body = yaml.safe_load((EXAMPLE / "webapp.yaml").read_text())
    body["spec"]["conflictPolicy"] = "Report"
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    kubectl("wait", "-n", namespace, "--for=condition=Ready", "webapp/web", "--timeout=60s")

    kubectl(
        *("patch", "deployment", "web", "-n", namespace, "--field-manager=intruder"),
        *("--type=merge", "-p", '{"spec":{"replicas":4}}'),
    )
    kubectl(
        *("wait", "-n", namespace, "--for=condition=ChildrenSynced=false", "webapp/web"),
        "--timeout=30s",
    )
    webapp = kubectl.get("webapp", "web", "-n", namespace)
    synced = condition(webapp, "ChildrenSynced")
    assert synced["reason"] == "FieldConflict"
    assert synced["message"] == "Deployment web: .spec.replicas (managed by intruder)"
    assert (condition(webapp, "Ready")["status"], condition(webapp, "Ready")["reason"]) == (
        "False",
        "FieldConflict",
    )
    deployment = api.resource("deployments.apps").get("web", namespace=namespace)
    assert deployment["spec"]["replicas"] == 4  # the other manager's value stays
    assert managers_of(deployment, "spec", "replicas") == {"intruder"}
    operator.wait_for(r"Deployment web: fields changed by another manager: \.spec\.replicas")

    # The WebApp deleted: no handler needed, the garbage collector removes the children.
    kubectl("delete", "webapp", "web", "-n", namespace)

    def children_gone() -> bool:
        left = [
            kubectl("get", kind, name, "-n", namespace, "--ignore-not-found", "-o", "name")
            for kind, name in [("configmap", "web-settings"), ("deployment", "web")]
        ]
        return not any(line.strip() for line in left)

    wait_until(children_gone, "the children collected after their owner", timeout=60)
    assert "Traceback" not in operator.output
