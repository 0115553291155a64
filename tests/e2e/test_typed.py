"""Typed resources against the real kube-apiserver: the generated CRD is accepted, validates
objects with the models' constraints, and the typed example (and its dict twin) run on it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import EXAMPLES, ROOT, Kubectl

TYPED = EXAMPLES / "typed"
WIDGETS = "widgets.examples.trioperator.dev"  # other tests have their own "widgets"


def generate_crd(models: Path) -> str:
    """What ``trioperator crd`` prints for a file of models (the generator as it is now)."""
    return subprocess.run(
        [sys.executable, "-m", "trioperator", "crd", str(models)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    ).stdout


@pytest.fixture(scope="module")
def typed_crd(kubectl: Kubectl) -> None:
    """The CRD as the generator makes it now (not only the committed copy)."""
    generated = generate_crd(TYPED / "widgets.py")
    kubectl("apply", "-f", "-", input=generated)
    kubectl(
        "wait",
        "--for=condition=Established",
        "crd/widgets.examples.trioperator.dev",
        "--timeout=30s",
    )


def _apply(kubectl: Kubectl, namespace: str, manifest: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        # --validate=false: the API server, not kubectl, must say what is wrong.
        [kubectl.binary, "apply", "--validate=false", "-n", namespace, "-f", "-"],
        env=kubectl.env,
        input=manifest,
        capture_output=True,
        text=True,
        timeout=60,
    )


WIDGET = """
apiVersion: examples.trioperator.dev/v1
kind: Widget
metadata: {{name: {name}}}
spec: {spec}
"""


def test_generated_crd_validates_objects(typed_crd: None, kubectl: Kubectl, namespace: str) -> None:
    accepted = _apply(kubectl, namespace, (TYPED / "widget.yaml").read_text())
    assert accepted.returncode == 0, accepted.stderr
    widget = kubectl.get(WIDGETS, "widget-1", "-n", namespace)
    assert widget["spec"]["mode"] == "safe"  # the model's default, applied by the API server
    assert widget["spec"]["port"] == "http"  # int-or-string
    assert widget["spec"]["settings"] == {"anything": ["goes", "here"]}  # kept, not pruned

    too_many = _apply(kubectl, namespace, (TYPED / "invalid-widget.yaml").read_text())
    assert too_many.returncode != 0
    assert "spec.replicas" in too_many.stderr
    assert "should be less than or equal to 10" in too_many.stderr

    cases = {
        "{image: x, replicas: two}": "must be of type integer",
        "{image: x, mode: turbo}": 'supported values: "fast", "safe"',
        "{replicas: 1}": "spec.image: Required value",
        "{image: ''}": "spec.image in body should be at least 1 chars long",
    }
    for spec, message in cases.items():
        rejected = _apply(kubectl, namespace, WIDGET.format(name="widget-bad", spec=spec))
        assert rejected.returncode != 0, spec
        assert message in rejected.stderr, (spec, rejected.stderr)
    assert kubectl.get(WIDGETS, "-n", namespace)["items"][0]["metadata"]["name"] == "widget-1"
    assert len(kubectl.get(WIDGETS, "-n", namespace)["items"]) == 1


@pytest.mark.parametrize("example", ["widgets.py", "widgets_dict.py"])
def test_typed_example_and_its_dict_twin(
    typed_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any, example: str
) -> None:
    operator = run_operator("-n", namespace, str(TYPED / example))
    operator.wait_for("The operator is ready")
    kubectl("apply", "-n", namespace, "-f", str(TYPED / "widget.yaml"))
    operator.wait_for(r"Creating 2 replica\(s\) of nginx:1\.27 in safe mode\.")
    operator.wait_for(r"Handler 'create_fn' succeeded\.")

    # The scale subresource (kubectl scale) changes spec.replicas: an update.
    kubectl("scale", WIDGETS, "widget-1", "-n", namespace, "--replicas=4")
    operator.wait_for(r"Scaling from 2 to 4 replica\(s\)\.")
    operator.wait_for(r"Handler 'update_fn' succeeded\.")
    widget = kubectl.get(WIDGETS, "widget-1", "-n", namespace)
    assert widget["status"]["replicas"] == 4
    assert widget["status"]["phase"] == "Running"
    printed = kubectl("get", WIDGETS, "-n", namespace)
    assert printed.split("\n")[0].split() == ["NAME", "IMAGE", "REPLICAS", "PHASE"]
    assert printed.split("\n")[1].split()[:4] == ["widget-1", "nginx:1.27", "4", "Running"]

    assert operator.stop() == 0
    assert "Traceback" not in operator.output
    assert operator.count(r"Handler '\w+' failed") == 0


GIZMOS = "gizmos.examples.trioperator.dev"


def _gizmo(version: str, name: str, spec: dict[str, Any]) -> str:
    return json.dumps(
        {
            "apiVersion": f"examples.trioperator.dev/{version}",
            "kind": "Gizmo",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


def _wait_for(predicate: Any, what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.3)
    raise AssertionError(f"Not within {timeout}s: {what}")


def test_conversion_webhook_reads_v1_as_v2_and_back(
    kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    generated = generate_crd(TYPED / "gizmos.py")
    kubectl("apply", "-f", "-", input=generated)
    kubectl("wait", "--for=condition=Established", f"crd/{GIZMOS}", "--timeout=30s")
    operator = run_operator("-n", namespace, str(TYPED / "gizmos.py"))
    try:
        operator.wait_for("The operator is ready")
        operator.wait_for(rf"Serving the conversions of {GIZMOS}\.")
        crd = kubectl.get("crd", GIZMOS)
        assert crd["spec"]["conversion"]["strategy"] == "Webhook"
        assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["url"].endswith(
            f"/conversion/{GIZMOS}"
        )

        # Written in v1 (stored as it is), read in v2 through the webhook.
        kubectl(
            "apply", "-n", namespace, "-f", "-", input=_gizmo("v1", "g1", {"size": "3 gadgets"})
        )

        def read_v2() -> Any:
            result = subprocess.run(
                [
                    kubectl.binary,
                    "get",
                    "-n",
                    namespace,
                    "-o",
                    "json",
                    f"{GIZMOS.replace('gizmos.', 'gizmos.v2.')}",
                    "g1",
                ],
                env=kubectl.env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            return json.loads(result.stdout) if result.returncode == 0 else None

        as_v2 = _wait_for(read_v2, "g1 read in v2")
        assert as_v2["apiVersion"] == "examples.trioperator.dev/v2"
        assert as_v2["spec"] == {"count": 3, "unit": "gadgets"}
        operator.wait_for(r"Gizmo g1: 3 gadgets\.")  # the operator's handler, in v1
        operator.wait_for(r"Handler 'create_fn' succeeded\.")

        # Written in v2, stored (and read) in v1.
        kubectl(
            "apply",
            "-n",
            namespace,
            "-f",
            "-",
            input=_gizmo("v2", "g2", {"count": 5, "unit": "bolts"}),
        )
        as_v1 = kubectl.get(GIZMOS.replace("gizmos.", "gizmos.v1."), "g2", "-n", namespace)
        assert as_v1["spec"] == {"size": "5 bolts"}
        operator.wait_for(r"Gizmo g2: 5 bolts\.")
        # What the operator wrote in v2 (its diff-base, its handler's progress) survives v1.
        assert "kopf.zalando.org/last-handled-configuration" in as_v1["metadata"].get(
            "annotations", {}
        ) or _wait_for(
            lambda: (
                "kopf.zalando.org/last-handled-configuration"
                in kubectl.get(GIZMOS, "g2", "-n", namespace)["metadata"].get("annotations", {})
            ),
            "the diff-base of g2",
        )
        kubectl("delete", GIZMOS, "--all", "-n", namespace)
        assert operator.stop() == 0
        assert "Traceback" not in operator.output
        assert operator.count(r"Conversion of .* failed") == 0
    finally:
        operator.stop()
        # Without the operator, the webhook is gone: the CRD goes too (its objects with it).
        kubectl("delete", "crd", GIZMOS, "--wait=false", check=False)


EMPTY_DEFAULTS = """
from __future__ import annotations

import msgspec
from trioperator import typed


class Label(msgspec.Struct, frozen=True):
    key: str


class BlankSpec(msgspec.Struct, kw_only=True):
    note: str = ""
    label: Label = Label(key="")
    words: tuple[str, ...] = ("a", "")
    size: int = 1


@typed.resource("noticed.trioperator.dev", "v1")
class Blank(msgspec.Struct, kw_only=True):
    spec: BlankSpec
"""


def test_a_crd_of_models_defaulting_to_empty_strings_is_accepted(
    tmp_path: Path, kubectl: Kubectl
) -> None:
    # kube-apiserver 1.20 refuses a CRD with "" in a default; the generator leaves those out.
    (tmp_path / "blanks.py").write_text(EMPTY_DEFAULTS)
    generated = generate_crd(tmp_path / "blanks.py")
    created = subprocess.run(
        [kubectl.binary, "create", "--dry-run=server", "-o", "json", "-f", "-"],
        env=kubectl.env,
        input=generated,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    crd = json.loads(created.stdout)
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["size"]["default"] == 1
    assert "default" not in spec["properties"]["note"]
