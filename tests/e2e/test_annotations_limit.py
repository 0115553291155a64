"""An object whose annotations are near kube-apiserver's 256 KiB limit is still handled.

kube-apiserver 1.20 rejects a write when all annotations together (keys and values) exceed
262,144 bytes ("metadata.annotations: Too long"). The diff-base of such an object cannot go into
its annotations: it goes to ``status.kopf.last-handled-configuration`` instead, and the object
is handled once per change, like any other.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.e2e.conftest import Kubectl, start_trioperator

OPERATOR = """
import trioperator as kopf


@kopf.on.create("kopfexamples", id="create_fn")
def create_fn(name, logger, **_):
    logger.info(f"Created {name}.")


@kopf.on.update("kopfexamples", id="update_fn")
def update_fn(name, logger, **_):
    logger.info(f"Updated {name}.")
"""

LIMIT = 262_144
UNPROCESSABLE = re.compile(r"(?i)unprocessable|(?<![,.:\d])\b422\b")
FILLER_KEY = "e2e.trioperator.dev/filler"


def manifest(name: str, filler: int) -> str:
    annotations = {FILLER_KEY: "x" * (filler - len(FILLER_KEY))} if filler else {}
    return json.dumps(
        {
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfExample",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"field": "value"},
        }
    )


def test_an_object_near_the_annotations_limit_is_handled_once_per_change(
    tmp_path: Path, example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    script = tmp_path / "operator.py"
    script.write_text(OPERATOR)
    operator = start_trioperator(run_operator, "-n", namespace, str(script))
    kubectl("create", "-n", namespace, "-f", "-", input=manifest("big", LIMIT - 100))
    kubectl("create", "-n", namespace, "-f", "-", input=manifest("small", 0))
    operator.wait_for("Created big.")
    operator.wait_for("Created small.")
    operator.wait_for("does not fit into its annotations")

    big = kubectl.get("-n", namespace, "kopfexample", "big")
    annotations = big["metadata"]["annotations"]
    assert "kopf.zalando.org/last-handled-configuration" not in annotations
    stored = json.loads(big["status"]["kopf"]["last-handled-configuration"])
    assert stored["spec"] == {"field": "value"}
    small = kubectl.get("-n", namespace, "kopfexample", "small")
    assert "kopf.zalando.org/last-handled-configuration" in small["metadata"]["annotations"]

    kubectl("patch", "-n", namespace, "kopfexample", "big", "--type=merge",
            "-p", '{"spec": {"field": "changed"}}')  # fmt: skip
    operator.wait_for("Updated big.")
    operator.stop()
    output = operator.output
    assert output.count("Created big.") == 1  # never taken for a new object again
    assert output.count("Updated big.") == 1
    assert "Too long" not in output
    # A rejected patch, not "422" inside a log timestamp's milliseconds (",422]").
    assert not UNPROCESSABLE.search(output)
