"""Testing ``example.py`` without a cluster, in the two styles of ``trioperator.testing``.

1. Async, in the test's own nursery, on trio's mock clock (``operator_runner``): fast, exact,
   and no threads.
2. Sync, the way Kopf users write it (``KopfRunner``): the command line in a background
   thread, here against a fake API served from another thread instead of a real cluster.

Both need pytest-trio's ``trio_mode`` (this project sets it in ``pyproject.toml``) and the
fixtures of the plugin enabled below (in your project: in the top-level ``conftest.py``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import trio.testing
import trioperator as kopf
import yaml
from trioperator.testing import FakeAPI, FakeAPIThread, KopfRunner, OperatorRunner, load_registry

pytest_plugins = ["trioperator.testing.pytest_plugin"]

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE / "example.py"
CRD = HERE.parent / "crd.yaml"
OBJ: dict[str, Any] = yaml.safe_load((HERE.parent / "obj.yaml").read_text())
NAME = OBJ["metadata"]["name"]  # kopf-example-1


def greeted(obj: dict[str, Any]) -> bool:
    return obj["status"]["create_fn"]["message"] == f"hello {NAME}"


async def test_in_the_tests_nursery(
    autojump_clock: trio.testing.MockClock, operator_runner: OperatorRunner
) -> None:
    registry = load_registry(EXAMPLE)  # the file's handlers, loaded afresh for this test
    async with operator_runner(registry=registry, crds=[CRD]) as operator:
        api: FakeAPI = operator.api
        api.create_object("kopfexamples", copy.deepcopy(OBJ), namespace="default")
        await operator.wait_for_object("kopfexamples", NAME, "default", greeted)

        api.patch_object("kopfexamples", NAME, {"spec": {"field": "changed"}}, "default")
        obj = await operator.wait_for_object(
            "kopfexamples",
            NAME,
            "default",
            lambda obj: obj["status"]["seen"] == "changed",
        )
        assert obj["status"]["create_fn"] == {"message": f"hello {NAME}"}

        api.delete_object("kopfexamples", NAME, "default")
        await operator.wait_for_deletion("kopfexamples", NAME, "default")

    assert operator.exception is None
    operator.logs.assert_in_order(
        r"\[default/kopf-example-1\] And here we are!",
        r"The field has changed: value -> changed",
        r"Goodbye, kopf-example-1\.",
    )


def test_as_a_program_with_kopf_runner(
    fake_api_thread: FakeAPIThread, fake_kubeconfig: Path
) -> None:
    api = fake_api_thread  # served in a background thread; $KUBECONFIG points to it
    for crd in yaml.safe_load_all(CRD.read_text()):
        api.create_object("customresourcedefinitions", crd)

    args = ["run", "-A", "--verbose", str(EXAMPLE)]
    with KopfRunner(args, registry=kopf.OperatorRegistry(), timeout=60) as runner:
        api.create_object("kopfexamples", copy.deepcopy(OBJ), namespace="default")
        api.wait_for(lambda api: greeted(api.get_object("kopfexamples", NAME, "default")))

        api.delete_object("kopfexamples", NAME, "default")
        api.wait_for(lambda api: not api.has_object("kopfexamples", NAME, "default"))

    assert runner.exit_code == 0
    assert runner.exception is None
    assert "And here we are!" in runner.output
    assert "Goodbye, kopf-example-1." in runner.output
