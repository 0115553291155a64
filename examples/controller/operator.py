"""A controller in the style of controller-runtime and kube-rs, written with trioperator.

Each WebApp (``crd.yaml``) gets a ConfigMap with its settings and a Deployment running its
image. One reconcile handler keeps both true to the spec, whatever happened: the WebApp was
created or edited, a child was deleted or edited by someone else, or the Deployment
controller reported progress. Walk-through: docs/controllers.md.

    kubectl apply -f examples/controller/crd.yaml
    trioperator run examples/controller/operator.py -n default
    kubectl apply -f examples/controller/webapp.yaml
    kubectl wait --for=condition=Ready webapp/web

What it shows (all of it trioperator's own additions; Kopf has none of them):

- ``@kopf.on.reconcile(owns=[...])``: a change or deletion of a child whose controller
  ownerReference points at a WebApp runs that WebApp's reconcile again, so a deleted child is
  made again and an edited one is put back.
- the ``api`` kwarg: server-side apply as the field manager ``webapp-operator``. The intents
  name only the fields the operator cares about; the server keeps the rest (defaults, other
  managers' fields) and records who owns what in ``metadata.managedFields``.
- conflicts: when another manager (``kubectl edit``, a GitOps tool, an autoscaler) changed a
  field this operator applies, the apply fails with ``kopf.APIFieldConflictError``. The policy
  ``Force`` applies again with ``force=True`` and takes the field back; ``Report`` leaves the
  other manager's value and says so in the ``ChildrenSynced`` condition. Per object in
  ``spec.conflictPolicy``, else the operator-wide ``$WEBAPP_CONFLICT_POLICY``, else ``Force``
  (as the Kubernetes documentation advises controllers).
- ``trioperator.conditions``: ``ChildrenSynced``, ``Available`` and ``Ready``, each with the
  ``observedGeneration`` it describes, plus ``status.observedGeneration`` (a setting).
- ``when=kopf.generation_changed``: the WebApp's own status writes (this handler's and anyone
  else's) do not wake the handler; spec changes and the children's changes do.

``Ready`` means "rolled out": the children hold the current spec and the Deployment controller
has observed the Deployment's current generation and made its ReplicaSet (its ``Progressing``
condition is True). Whether the pods serve is ``Available``, copied from the Deployment. A
cluster without nodes (as the project's e2e tests run) never gets available pods, but does
roll out; an operator for real clusters would most likely make ``Ready`` require
``Available`` too (one line below).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import trioperator as kopf
from trioperator import conditions

FIELD_MANAGER = "webapp-operator"
POLICIES = ("Force", "Report")
CONFIG_HASH = "demo.trioperator.dev/config-hash"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.reconciling.observed_generation = True  # status.observedGeneration after each run
    default_policy()  # a bad $WEBAPP_CONFLICT_POLICY stops the operator at once


def default_policy() -> str:
    policy = os.environ.get("WEBAPP_CONFLICT_POLICY", "Force")
    if policy not in POLICIES:
        raise kopf.PermanentError(f"WEBAPP_CONFLICT_POLICY must be one of {POLICIES}: {policy!r}")
    return policy


def desired_configmap(name: str, spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-settings", "labels": {"app": name}},
        "data": {str(key): str(value) for key, value in (spec.get("settings") or {}).items()},
    }


def desired_deployment(name: str, spec: Any, configmap: dict[str, Any]) -> dict[str, Any]:
    # A hash of the settings in the pod template: changed settings roll the pods.
    settings = json.dumps(configmap["data"], sort_keys=True).encode()
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": spec.get("replicas", 1),
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": {CONFIG_HASH: hashlib.sha256(settings).hexdigest()[:16]},
                },
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": spec["image"],
                            "envFrom": [{"configMapRef": {"name": configmap["metadata"]["name"]}}],
                        }
                    ]
                },
            },
        },
    }


async def apply_child(
    api: kopf.AsyncAPI, resource: Any, intent: dict[str, Any], policy: str, logger: Any
) -> tuple[dict[str, Any] | None, list[str]]:
    """Apply one child; the object the server holds now and the conflicts left unresolved."""
    try:
        return await api.resource(resource).apply(intent, field_manager=FIELD_MANAGER), []
    except kopf.APIFieldConflictError as exc:
        found = [f"{c.field} (managed by {c.manager or 'another manager'})" for c in exc.conflicts]
        kind, name = intent["kind"], intent["metadata"]["name"]
        if policy == "Report":
            logger.warning(f"{kind} {name}: fields changed by another manager: {', '.join(found)}")
            return None, [f"{kind} {name}: {item}" for item in found]
        logger.info(f"{kind} {name}: taking back {', '.join(found)}")
        return await api.resource(resource).apply(
            intent, field_manager=FIELD_MANAGER, force=True
        ), []


def rollout(deployment: dict[str, Any]) -> tuple[bool, str, str]:
    """Whether the Deployment controller has rolled out the current template (see the top)."""
    generation = deployment["metadata"].get("generation")
    status = deployment.get("status") or {}
    if status.get("observedGeneration", 0) < (generation or 0):
        return False, "RolloutPending", "the Deployment controller has not seen the change yet"
    progressing = conditions.find_condition(deployment, "Progressing")
    if progressing is None or progressing.get("status") != "True":
        reason = (progressing or {}).get("reason") or "RolloutPending"
        return False, reason, (progressing or {}).get("message", "no ReplicaSet yet")
    replicas = status.get("replicas", 0)
    available = status.get("availableReplicas", 0)
    return True, "RolledOut", f"{available}/{replicas} replicas available"


@kopf.on.reconcile(
    "demo.trioperator.dev",
    "v1",
    "webapps",
    owns=["configmaps", "deployments.apps"],
    when=kopf.generation_changed,
)
async def reconcile(
    api: kopf.AsyncAPI,
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    patch: kopf.Patch,
    deleting: bool,
    logger: Any,
    **_: Any,
) -> None:
    if deleting:
        return  # the children carry ownerReferences: the garbage collector removes them
    policy = spec.get("conflictPolicy") or default_policy()

    configmap = desired_configmap(name, spec)
    deployment = desired_deployment(name, spec, configmap)
    kopf.adopt([configmap, deployment], owner=body)  # namespace, controller ownerReference
    cm_conflicts = (await apply_child(api, "configmaps", configmap, policy, logger))[1]
    applied, deploy_conflicts = await apply_child(
        api, "deployments.apps", deployment, policy, logger
    )
    conflicts = cm_conflicts + deploy_conflicts

    if conflicts:
        message = "; ".join(conflicts)
        conditions.set_condition(
            patch, "ChildrenSynced", False, reason="FieldConflict", message=message, body=body
        )
    else:
        conditions.set_condition(
            patch, "ChildrenSynced", True, reason="Applied", message="", body=body
        )

    if applied is None:  # not applied (a reported conflict): read what is there
        applied = await api.resource("deployments.apps").get(
            name, namespace=body.metadata.namespace
        )
    available = conditions.find_condition(applied, "Available") or {}
    conditions.set_condition(
        patch,
        "Available",
        available.get("status", "Unknown"),
        reason=available.get("reason") or "NoStatusYet",
        message=available.get("message", ""),
        body=body,
    )

    rolled_out, reason, message = rollout(applied)
    # For a cluster with nodes: `rolled_out and available.get("status") == "True"`.
    ready = rolled_out and not conflicts
    conditions.set_condition(
        patch,
        "Ready",
        ready,
        reason="FieldConflict" if conflicts else reason,
        message=message,
        body=body,
    )
