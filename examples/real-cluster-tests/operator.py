"""The operator of the real-control-plane example: each Greeting gets a ConfigMap.

The ConfigMap ``<name>-greeting`` holds the Greeting's message and language; it is applied
(server-side apply, field manager ``greeting-operator``) when the Greeting is created and
whenever its spec changes, and it is owned by the Greeting (a controller ownerReference). The
Greeting's ``Ready`` condition says that its ConfigMap holds the current spec. The tests in
``tests/`` run this operator against a real kube-apiserver (docs/testing.md).

    kubectl apply -f examples/real-cluster-tests/crd.yaml
    trioperator run -n default examples/real-cluster-tests/operator.py
"""

from __future__ import annotations

from typing import Any

import trioperator as kopf
from trioperator import conditions

GROUP, VERSION, PLURAL = "realcluster.examples.trioperator.dev", "v1", "greetings"
FIELD_MANAGER = "greeting-operator"


def desired_configmap(name: str, spec: kopf.Spec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-greeting"},
        "data": {"message": str(spec["message"]), "language": str(spec["language"])},
    }


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def publish(
    api: kopf.AsyncAPI,
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    patch: kopf.Patch,
    logger: Any,
    **_: Any,
) -> None:
    configmap = desired_configmap(name, spec)
    kopf.adopt(configmap, owner=body)  # its namespace, and a controller ownerReference
    await api.resource("configmaps").apply(configmap, field_manager=FIELD_MANAGER)
    logger.info(f"Published {spec['message']!r} ({spec['language']}) in {name}-greeting.")
    conditions.set_condition(patch, "Ready", True, reason="Published", body=body)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def retract(name: str, logger: Any, **_: Any) -> None:
    # The ConfigMap goes with its owner: the cluster's garbage collector deletes it.
    logger.info(f"Retracted {name}.")
