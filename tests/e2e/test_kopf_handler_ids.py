"""Handler ids shaped by ``field=`` and sub-handlers key the same records in Kopf and trioperator.

Kopf starts an update whose field handler has two sub-handlers: the first succeeds, the second
fails for now. trioperator takes over: it must run only the second (the first one's record is
found under the same id), and the parent must not run the first again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e.conftest import (
    EXAMPLES,
    Kubectl,
    framework_operator_file,
    start_kopf,
    start_trioperator,
)

OPERATOR_SOURCE = """
{import_line}


@kopf.on.update("kopfexamples", field="spec.field")
def update_field(**_):

    @kopf.subhandler(id="first")
    def first(**_):
        print("FIRST-CALLED by {framework}", flush=True)

    @kopf.subhandler(id="second")
    def second(retry, **_):
        print(f"SECOND-CALLED by {framework} on retry {{retry}}", flush=True)
        if "{framework}" == "kopf":
            raise kopf.TemporaryError("not yet", delay=5)
"""


def test_field_and_subhandler_ids_carry_over_from_kopf(
    example_crd: None,
    kubectl: Kubectl,
    namespace: str,
    run_operator: Any,
    kopf_bin: str,
    tmp_path: Path,
) -> None:
    kopf_file = framework_operator_file(tmp_path, OPERATOR_SOURCE, "kopf", "ids_operator")
    kopf = start_kopf(run_operator, kopf_bin, "--standalone", "-n", namespace, kopf_file)
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    kopf.wait_for("Creation is processed|Creation event:|Handling cycle is finished", timeout=60)
    patch = json.dumps({"spec": {"field": "changed"}})
    kubectl("patch", "kopfexample", "kopf-example-1", "-n", namespace, "--type=merge", "-p", patch)
    kopf.wait_for("SECOND-CALLED by kopf on retry 0", timeout=60)
    assert kopf.stop() == 0
    annotations = kubectl.get("kopfexample", "kopf-example-1", "-n", namespace)["metadata"][
        "annotations"
    ]
    first = json.loads(annotations["kopf.zalando.org/update_field.spec.field.first"])
    second = json.loads(annotations["kopf.zalando.org/update_field.spec.field.second"])
    assert (first["success"], second["success"]) == (True, False)

    ours_file = framework_operator_file(tmp_path, OPERATOR_SOURCE, "trioperator", "ids_operator")
    ours = start_trioperator(run_operator, "--standalone", "-n", namespace, ours_file)
    ours.wait_for("SECOND-CALLED by trioperator on retry 1", timeout=60)
    ours.wait_for(r"Updating is processed: \d+ succeeded; 0 failed\.", timeout=60)
    assert ours.count("FIRST-CALLED") == 0
    assert ours.count(r"Handler 'update_field/spec\.field/second' succeeded\.") == 1
    assert ours.stop() == 0
