"""Kopf's KopfRunner: the command line in a background thread, against a FakeAPI in another one.

These are synchronous tests on real time, as Kopf users write them.
"""

from __future__ import annotations

import copy
import logging
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trioperator as kopf
from tests.integration.conftest import CRD
from trioperator.testing import FakeAPIThread, KopfRunner, RecordedRequest

pytest_plugins = ["trioperator.testing.pytest_plugin"]

OBJ: dict[str, Any] = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "metadata": {"name": "kopf-example-1", "namespace": "default"},
    "spec": {"field": "value"},
}
OPERATOR = """
    import trioperator as kopf

    @kopf.on.create("kopfexamples")
    def create_fn(spec, logger, **kwargs):
        logger.info("And here we are!")
        return {"message": f"hello {spec['field']}"}

    @kopf.on.delete("kopfexamples")
    def delete_fn(logger, **kwargs):
        logger.info("Goodbye, cruel world.")
"""


@pytest.fixture
def operator_file(tmp_path: Path) -> Path:
    path = tmp_path / "operator.py"
    path.write_text(textwrap.dedent(OPERATOR))
    return path


@pytest.fixture
def crd(fake_api_thread: FakeAPIThread) -> None:
    fake_api_thread.create_object("customresourcedefinitions", copy.deepcopy(CRD))


def test_an_operator_file_runs_against_the_fake_api(
    fake_api_thread: FakeAPIThread, fake_kubeconfig: Path, crd: None, operator_file: Path
) -> None:
    api = fake_api_thread
    args = ["run", "-A", "--verbose", str(operator_file)]
    with KopfRunner(args, registry=kopf.OperatorRegistry(), timeout=30) as runner:
        assert "The operator is ready" in runner.output  # entering waits for readiness
        api.create_object("kopfexamples", copy.deepcopy(OBJ))
        obj = api.wait_for(
            lambda api: api.get_object("kopfexamples", "kopf-example-1", "default")["status"][
                "create_fn"
            ]
        )
        assert obj == {"message": "hello value"}

        api.delete_object("kopfexamples", "kopf-example-1", "default")
        api.wait_for(lambda api: not api.has_object("kopfexamples", "kopf-example-1", "default"))
        runner.wait_for_output(r"Deleted, really deleted, and we are notified")

    assert runner.exit_code == 0
    assert runner.exception is None
    assert "[default/kopf-example-1] And here we are!" in runner.output
    assert "Goodbye, cruel world." in runner.stderr
    assert "Traceback" not in runner.output
    assert RecordedRequest("GET", "/api", {}, None) in api.requests


def test_a_failing_startup_is_reraised(
    fake_api_thread: FakeAPIThread, fake_kubeconfig: Path, crd: None, tmp_path: Path
) -> None:
    path = tmp_path / "failing.py"
    path.write_text(
        "import trioperator as kopf\n"
        "@kopf.on.startup()\n"
        "def startup_fn(**_):\n"
        "    raise kopf.PermanentError('no configuration')\n"
    )
    reached = False
    with (
        pytest.raises(kopf.ActivityError, match="startup_fn"),
        KopfRunner(["run", "-A", str(path)], registry=kopf.OperatorRegistry(), timeout=30),
    ):
        reached = True
    assert not reached  # raised on entering: the operator could not start

    with KopfRunner(
        ["run", "-A", str(path)], registry=kopf.OperatorRegistry(), timeout=30, reraise=False
    ) as runner:
        pass
    assert runner.exit_code == 1
    assert isinstance(runner.exception, kopf.ActivityError)
    assert "The operator has failed" in runner.output


def test_a_usage_error_has_exit_code_2(tmp_path: Path) -> None:
    with KopfRunner(["run", "-A"], reraise=False, timeout=30) as runner:
        pass
    assert runner.exit_code == 2
    assert runner.exception is not None
    assert "Nothing to run" in runner.stderr


def test_the_runner_gives_back_the_streams_and_logging(
    fake_api_thread: FakeAPIThread, fake_kubeconfig: Path, crd: None, operator_file: Path
) -> None:
    stdout, stderr = sys.stdout, sys.stderr
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    with KopfRunner(["run", "-A", "-q", str(operator_file)], registry=kopf.OperatorRegistry()):
        print("from the test")
        assert sys.stdout is not stdout
    assert sys.stdout is stdout
    assert sys.stderr is stderr
    assert root.handlers == handlers
    assert root.level == level
    assert logging.getLogger("trioperator.objects").level == logging.NOTSET


def test_the_fake_api_thread(tmp_path: Path) -> None:
    with FakeAPIThread(tokens=["sesame"]) as api:
        assert api.url.startswith("http://127.0.0.1:")
        api.create_object("configmaps", {"metadata": {"name": "cm", "namespace": "default"}})
        api.patch_object("configmaps", "cm", {"data": {"a": "b"}}, "default")
        assert api.get_object("configmaps", "cm", "default")["data"] == {"a": "b"}
        applied = api.apply_object(
            "configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "cm"},
                "data": {"c": "d"},
            },
            manager="me",
            namespace="default",
        )
        assert applied["data"] == {"a": "b", "c": "d"}
        assert [o["metadata"]["name"] for o in api.objects("configmaps", "default")] == ["cm"]
        assert "sesame" in api.kubeconfig(tmp_path).read_text()
        assert api.call(lambda fake: fake.tokens) == {"sesame"}
        with pytest.raises(KeyError):
            api.get_object("configmaps", "absent", "default")
        with pytest.raises(TimeoutError, match="last lookup failed"):
            api.wait_for(lambda fake: fake.get_object("configmaps", "absent"), timeout=0.05)
    with pytest.raises(RuntimeError, match="inside the `with` block"):
        api.get_object("configmaps", "cm", "default")
