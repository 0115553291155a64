"""The examples, run by the CLI against the real kube-apiserver, through an object's life."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.e2e.conftest import EXAMPLES, Kubectl


def _apply_object(kubectl: Kubectl, namespace: str) -> None:
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))


def test_minimal_example_creates_and_records(
    example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    operator = run_operator("-n", namespace, str(EXAMPLES / "01-minimal" / "example.py"))
    operator.wait_for("The operator is ready")
    _apply_object(kubectl, namespace)
    operator.wait_for(r"Handler 'create_fn' succeeded\.")
    operator.wait_for(r"Creation is processed: 1 succeeded; 0 failed\.")

    obj = kubectl.get("kopfexample", "kopf-example-1", "-n", namespace)
    assert obj["status"]["create_fn"] == {"message": "hello world"}
    assert "kopf.zalando.org/last-handled-configuration" in obj["metadata"]["annotations"]

    kubectl("delete", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    operator.wait_for(r"Deleted, really deleted, and we are notified\.")
    assert operator.stop() == 0
    assert "Traceback" not in operator.output
    assert operator.count(r"Handler 'create_fn' succeeded\.") == 1


def test_handlers_example_through_create_update_delete(
    example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    operator = run_operator("-n", namespace, str(EXAMPLES / "05-handlers" / "example.py"))
    operator.wait_for("The operator is ready")
    _apply_object(kubectl, namespace)
    prefix = rf"\[{namespace}/kopf-example-1\]"
    operator.wait_for(rf"{prefix} Adding the finalizer, thus preventing the actual deletion\.")
    operator.wait_for(r"Creation is processed: \d+ succeeded; 0 failed\.")

    kubectl(
        "patch",
        "kopfexample",
        "kopf-example-1",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"field":"changed"}}',
    )
    operator.wait_for(r"Handler 'update_fn' succeeded\.")
    operator.wait_for(r"Handler 'field_fn/spec\.field' succeeded\.", count=2)
    operator.wait_for("FIELD CHANGED: value -> changed")

    kubectl("delete", "-n", namespace, "kopfexample", "kopf-example-1", "--wait=false")
    operator.wait_for(r"Deletion is in progress:")
    operator.wait_for(r"Removing the finalizer, thus allowing the actual deletion\.")
    operator.wait_for(r"Deleted, really deleted, and we are notified\.")
    assert operator.stop() == 0

    for handler in ("create_fn_1", "create_fn_2", "update_fn", "delete_fn_1", "delete_fn_2"):
        assert operator.count(rf"Handler '{handler}' succeeded\.") == 1, handler
    assert operator.count(r"Handler 'resume_fn_\d' succeeded\.") == 0
    assert "Traceback" not in operator.output


def test_controller_example_applies_and_restores_its_children(
    kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    """The shared server runs no kube-controller-manager: the children are applied and kept,
    but no Deployment controller rolls them out, so Ready stays False (RolloutPending).
    With the controller-manager: tests/e2e/test_controller_example.py."""
    example = EXAMPLES / "controller"
    kubectl("apply", "-f", str(example / "crd.yaml"))
    kubectl("wait", "--for=condition=Established", "crd/webapps.demo.trioperator.dev")
    operator = run_operator("-n", namespace, str(example / "operator.py"))
    operator.wait_for("The operator is ready")
    kubectl("apply", "-n", namespace, "-f", str(example / "webapp.yaml"))
    kubectl(
        *("wait", "-n", namespace, "--for=condition=ChildrenSynced", "webapp/web"),
        "--timeout=30s",
    )
    webapp = kubectl.get("webapp", "web", "-n", namespace)
    ready = next(c for c in webapp["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "RolloutPending")
    configmap = kubectl.get("configmap", "web-settings", "-n", namespace)
    assert configmap["data"] == {"greeting": "hello", "log_level": "info"}
    assert kubectl.get("deployment", "web", "-n", namespace)["spec"]["replicas"] == 2

    kubectl("delete", "configmap", "web-settings", "-n", namespace)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = kubectl(
            "get", "configmap", "web-settings", "-n", namespace, "-o", "json", check=False
        )
        if found and json.loads(found)["metadata"]["uid"] != configmap["metadata"]["uid"]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the deleted ConfigMap was not made again")
    kubectl("delete", "webapp", "web", "-n", namespace)
    assert operator.stop() == 0
    assert "Traceback" not in operator.output
