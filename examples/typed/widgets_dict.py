"""The dict twin of ``widgets.py``: the same Widget operator as Kopf users write it.

Specs are dicts, defaults are applied by hand, and the CRD (``crd.yaml``, generated from the
typed twin) is the only place the fields are declared.
"""

from __future__ import annotations

from typing import Any

import trioperator as kopf

WIDGETS = "widgets.examples.trioperator.dev"


@kopf.on.create(WIDGETS)
def create_fn(spec: kopf.Spec, patch: kopf.Patch, logger: Any, **_: Any) -> None:
    replicas = spec.get("replicas", 1)
    logger.info(
        f"Creating {replicas} replica(s) of {spec['image']} in {spec.get('mode', 'safe')} mode."
    )
    patch["status"] = {"replicas": replicas, "phase": "Running"}


@kopf.on.update(WIDGETS)
def update_fn(old: Any, new: Any, patch: kopf.Patch, logger: Any, **_: Any) -> None:
    old_replicas = old.get("spec", {}).get("replicas", 1)
    new_replicas = new.get("spec", {}).get("replicas", 1)
    if old_replicas != new_replicas:
        logger.info(f"Scaling from {old_replicas} to {new_replicas} replica(s).")
    patch["status"] = {"replicas": new_replicas, "phase": "Running"}
