"""State compatibility with Kopf 1.45.2 on a live cluster: switching never re-runs a handler.

Kopf comes from PyPI into its own venv (``scripts/kopf-venv``); both frameworks run the same
operator source, once with ``import kopf`` and once with ``import trioperator as kopf``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import (
    EXAMPLES,
    Kubectl,
    OperatorProcess,
    framework_operator_file,
    start_kopf,
    start_trioperator,
)

OPERATOR_SOURCE = """
{import_line}


@kopf.on.create("kopfexamples")
def create_fn(name, **kwargs):
    print(f"CREATE-CALLED {{name}}", flush=True)
    return {{"by": "{framework}"}}


@kopf.on.update("kopfexamples")
def update_fn(diff, **kwargs):
    print(f"UPDATE-CALLED {{list(diff)}}", flush=True)


@kopf.on.delete("kopfexamples")
def delete_fn(name, **kwargs):
    print(f"DELETE-CALLED {{name}}", flush=True)
"""


def _start(
    run_operator: Any, kopf_bin: str, framework: str, namespace: str, file: str
) -> OperatorProcess:
    if framework == "kopf":
        return start_kopf(run_operator, kopf_bin, "--standalone", "-n", namespace, file)
    return start_trioperator(run_operator, "-n", namespace, file)


def _operator_file(tmp_path: Path, framework: str) -> str:
    return framework_operator_file(tmp_path, OPERATOR_SOURCE, framework)


def _patch_field(kubectl: Kubectl, namespace: str, value: str) -> None:
    patch = json.dumps({"spec": {"field": value}}, separators=(",", ":"))
    kubectl("patch", "kopfexample", "kopf-example-1", "-n", namespace, "--type=merge", "-p", patch)


@pytest.mark.parametrize(("first", "second"), [("kopf", "trioperator"), ("trioperator", "kopf")])
def test_switching_frameworks_reruns_nothing(
    first: str,
    second: str,
    example_crd: None,
    kubectl: Kubectl,
    namespace: str,
    run_operator: Any,
    kopf_bin: str,
    tmp_path: Path,
) -> None:
    old = _start(run_operator, kopf_bin, first, namespace, _operator_file(tmp_path, first))
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    old.wait_for(r"Handler 'create_fn' succeeded")
    old.wait_for(r"Creation is processed|All handlers succeeded for creation", timeout=30)
    assert old.stop() == 0
    obj = kubectl.get("kopfexample", "kopf-example-1", "-n", namespace)
    assert obj["status"]["create_fn"] == {"by": first}
    assert obj["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]

    new = _start(run_operator, kopf_bin, second, namespace, _operator_file(tmp_path, second))
    _patch_field(kubectl, namespace, "switched")
    new.wait_for(r"Handler 'update_fn' succeeded")
    # The diff is relative to what the first framework stored: only the changed field.
    new.wait_for(r"UPDATE-CALLED \[\('change', \('spec', 'field'\), 'value', 'switched'\)\]")

    kubectl("delete", "-n", namespace, "kopfexample", "kopf-example-1", "--wait=false")
    new.wait_for(r"Handler 'delete_fn' succeeded")
    new.wait_for(r"Deleted, really deleted")
    assert new.stop() == 0
    assert new.count("CREATE-CALLED") == 0, new.output
    assert old.count("CREATE-CALLED") == 1
    assert new.count("DELETE-CALLED") == 1
    assert "Traceback" not in new.output


def test_restart_reruns_nothing(
    example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any, tmp_path: Path
) -> None:
    file = _operator_file(tmp_path, "trioperator")
    first = start_trioperator(run_operator, "-n", namespace, file)
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    first.wait_for(r"Creation is processed")
    assert first.stop() == 0

    second = start_trioperator(run_operator, "-n", namespace, file)
    _patch_field(kubectl, namespace, "after-restart")
    second.wait_for(r"Handler 'update_fn' succeeded")
    assert second.stop() == 0
    assert second.count("CREATE-CALLED") == 0
    assert first.count("CREATE-CALLED") == 1
