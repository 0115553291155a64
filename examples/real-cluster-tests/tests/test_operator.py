"""The Greeting operator against a real etcd + kube-apiserver, started for the test session.

What only a real API server shows: the CRD's schema rejects an invalid Greeting and fills in
the default language; server-side apply makes the ConfigMap and records its field manager; the
ownerReference points at the Greeting's real uid; the finalizer holds the Greeting until the
operator's deletion handler has run.

The binaries come from ``$KUBEBUILDER_ASSETS`` (controller-runtime's envtest convention:
``export KUBEBUILDER_ASSETS=$(setup-envtest use -p path)``), else from trioperator's own
scripts/kube-up cache. The operator runs in the test's nursery, on real time. See
docs/testing.md, "Against a real control plane".
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trioperator as kopf
from trioperator import conditions
from trioperator.testing import OperatorRunner, RealControlPlane, load_registry

# In your project: this line in the top-level conftest.py instead.
pytest_plugins = ["trioperator.testing.pytest_plugin"]
# This project runs the tests that need a control plane in its end-to-end tier (`./dev e2e`);
# drop the mark in your project, or use a marker of your own for such a tier.
pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent.parent
OPERATOR = HERE / "operator.py"
CRD = HERE / "crd.yaml"
GREETINGS = "greetings"


def greeting(message: str | None) -> dict[str, object]:
    spec = {} if message is None else {"message": message}
    return {
        "apiVersion": "realcluster.examples.trioperator.dev/v1",
        "kind": "Greeting",
        "metadata": {"name": "hello"},
        "spec": spec,
    }


@pytest.fixture
def namespace(real_control_plane: RealControlPlane) -> str:
    # The control plane is shared by the session's tests: each takes a namespace of its own.
    return real_control_plane.create_namespace("greetings-")


async def test_a_greeting_is_published_in_its_configmap(
    real_operator_runner: OperatorRunner, namespace: str
) -> None:
    registry = load_registry(OPERATOR)
    async with real_operator_runner(
        registry=registry, crds=[CRD], namespaces=[namespace], wait_timeout=30
    ) as operator:
        cluster = operator.cluster

        # The server validates against the CRD's schema: no object, no handler run.
        for invalid in (greeting(None), greeting("")):
            with pytest.raises(kopf.APIError) as raised:
                await cluster.create(GREETINGS, invalid, namespace=namespace)
            assert raised.value.status == 422

        created = await cluster.create(GREETINGS, greeting("Hello!"), namespace=namespace)
        assert created["spec"]["language"] == "en"  # the schema's default, set by the server
        obj = await operator.wait_for_object(
            GREETINGS, "hello", namespace, lambda obj: conditions.is_condition_true(obj, "Ready")
        )
        assert obj["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]

        configmap = await cluster.get("configmaps", "hello-greeting", namespace)
        assert configmap["data"] == {"message": "Hello!", "language": "en"}
        (owner,) = configmap["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == (
            "Greeting",
            "hello",
            obj["metadata"]["uid"],
        )
        assert owner["controller"] is True
        managers = {entry["manager"] for entry in configmap["metadata"]["managedFields"]}
        assert "greeting-operator" in managers

        await cluster.patch(GREETINGS, "hello", {"spec": {"language": "fr"}}, namespace)
        await operator.wait_for_object(
            "configmaps", "hello-greeting", namespace, lambda cm: cm["data"]["language"] == "fr"
        )

        await cluster.delete(GREETINGS, "hello", namespace)
        await operator.wait_for_deletion(GREETINGS, "hello", namespace)

    assert operator.exception is None
    operator.logs.assert_in_order(
        r"Published 'Hello!' \(en\) in hello-greeting\.",
        r"Published 'Hello!' \(fr\) in hello-greeting\.",
        r"Retracted hello\.",
    )
