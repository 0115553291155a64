"""Testing ``example.py`` against a real kube-apiserver and etcd, started for the test session.

The same operator as in ``test_example.py``, now against the real API server's validation,
defaulting and watches. The ``real_control_plane`` fixture starts etcd and kube-apiserver from
the binaries in ``$KUBEBUILDER_ASSETS`` (controller-runtime's envtest convention: what
``setup-envtest use -p path`` prints), else from trioperator's own scripts/kube-up cache; the
operator runs in the test's nursery, on real time (no mock clock here).

In this project the test is in the end-to-end tier (``e2e``): it needs those binaries.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from trioperator.testing import OperatorRunner, RealControlPlane, load_registry

pytest_plugins = ["trioperator.testing.pytest_plugin"]
pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE / "example.py"
CRD = HERE.parent / "crd.yaml"
OBJ: dict[str, Any] = yaml.safe_load((HERE.parent / "obj.yaml").read_text())
NAME = OBJ["metadata"]["name"]  # kopf-example-1


@pytest.fixture
def namespace(real_control_plane: RealControlPlane) -> str:
    # The control plane is shared by the session's tests: each takes a namespace of its own.
    return real_control_plane.create_namespace("example-")


async def test_against_a_real_api_server(
    real_operator_runner: OperatorRunner, namespace: str
) -> None:
    registry = load_registry(EXAMPLE)
    async with real_operator_runner(
        registry=registry, crds=[CRD], namespaces=[namespace], wait_timeout=30
    ) as operator:
        cluster = operator.cluster  # the real server's objects, read and written from here
        await cluster.create("kopfexamples", copy.deepcopy(OBJ), namespace=namespace)
        obj = await operator.wait_for_object(
            "kopfexamples", NAME, namespace, lambda obj: "create_fn" in obj["status"]
        )
        assert obj["status"]["create_fn"] == {"message": f"hello {NAME}"}
        # The operator's finalizer is there, as the real server keeps it.
        assert obj["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]

        await cluster.patch("kopfexamples", NAME, {"spec": {"field": "changed"}}, namespace)
        await operator.wait_for_object(
            "kopfexamples", NAME, namespace, lambda obj: obj["status"]["seen"] == "changed"
        )

        await cluster.delete("kopfexamples", NAME, namespace)
        await operator.wait_for_deletion("kopfexamples", NAME, namespace)

    assert operator.exception is None
    operator.logs.assert_in_order(
        rf"\[{namespace}/kopf-example-1\] And here we are!",
        r"The field has changed: value -> changed",
        r"Goodbye, kopf-example-1\.",
    )
