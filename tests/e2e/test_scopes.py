"""Scopes on a real API server: namespaces and CRDs that appear while the operator runs.

The local kube-apiserver runs without kube-controller-manager: a deleted namespace stays
Terminating forever, which the operator treats as gone (it stops serving it).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from tests.e2e.conftest import EXAMPLES, Kubectl

OPERATOR = """
import trioperator as kopf


@kopf.on.create("kopfexamples")
def create_fn(namespace, name, logger, **_):
    logger.info(f"Created {name} in {namespace}.")


@kopf.on.create("e2e.trioperator.dev", "v1", PLURAL)
def create_scoped_fn(namespace, name, logger, **_):
    logger.info(f"Created a scoped test {name} in {namespace}.")
"""


def write_operator(tmp_path: Path, plural: str = "scopetests") -> Path:
    script = tmp_path / "operator.py"
    script.write_text(OPERATOR.replace("PLURAL", repr(plural)))
    return script


def crd_manifest(plural: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.e2e.trioperator.dev"},
        "spec": {
            "group": "e2e.trioperator.dev",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def test_a_namespace_created_after_the_start_gets_served(
    example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any, tmp_path: Path
) -> None:
    prefix = f"e2e-scope-{uuid.uuid4().hex[:6]}"
    served = f"{prefix}-a"
    operator = run_operator("-n", f"{prefix}-*", str(write_operator(tmp_path)))
    operator.wait_for("The operator is ready")
    try:
        # Not matching the pattern: never served (created first, so it would be seen first).
        kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))

        kubectl("create", "namespace", served)
        operator.wait_for(rf"Serving kopfexamples\.v1\.kopf\.dev in '{served}'\.")
        kubectl("apply", "-n", served, "-f", str(EXAMPLES / "obj.yaml"))
        operator.wait_for(rf"Created kopf-example-1 in {served}\.")
        # Every watcher is announced before it starts; by now the namespaces existing at the
        # start and the one created since have been judged: no watcher of the other one means
        # none of its objects can ever be handled (no wait of a few seconds needed to see it).
        assert f"in '{namespace}'" not in operator.output

        # A deleted namespace stays Terminating on this cluster: it is not served any more.
        kubectl("delete", "namespace", served, "--wait=false")
        operator.wait_for(rf"Stopping kopfexamples\.v1\.kopf\.dev in '{served}'\.")
    finally:
        kubectl("delete", "namespace", served, "--wait=false", "--ignore-not-found", check=False)

    assert operator.stop() == 0
    assert "Traceback" not in operator.output
    # All the operator ever did: the one object of the served namespace, handled once.
    assert f"in {namespace}" not in operator.output
    assert operator.count(r"Handler 'create_fn' succeeded\.") == 1


def test_a_crd_created_while_running_gets_served(
    kubectl: Kubectl, namespace: str, run_operator: Any, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:6]
    plural, kind = f"scopetests{suffix}", f"ScopeTest{suffix}"
    resource = rf"{plural}\.v1\.e2e\.trioperator\.dev"
    operator = run_operator("-n", namespace, str(write_operator(tmp_path, plural)))
    operator.wait_for("The operator is ready")
    try:
        kubectl("apply", "-f", "-", input=json.dumps(crd_manifest(plural, kind)))
        operator.wait_for(rf"Serving {resource} in '{namespace}'\.", timeout=60)
        obj = {
            "apiVersion": "e2e.trioperator.dev/v1",
            "kind": kind,
            "metadata": {"name": "scoped-1", "namespace": namespace},
            "spec": {"field": "value"},
        }
        kubectl("apply", "-f", "-", input=json.dumps(obj))
        operator.wait_for(rf"Created a scoped test scoped-1 in {namespace}\.")
        operator.wait_for(r"Handler 'create_scoped_fn' succeeded\.")

        kubectl("delete", "crd", f"{plural}.e2e.trioperator.dev", "--timeout=60s")
        operator.wait_for(rf"Stopping {resource} in '{namespace}'\.", timeout=60)
    finally:
        kubectl("delete", "crd", f"{plural}.e2e.trioperator.dev", "--ignore-not-found", check=False)

    assert operator.stop() == 0
    assert "Traceback" not in operator.output
