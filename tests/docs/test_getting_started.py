"""docs/getting-started.md works as written.

Its files are the repository's examples (the operator is examples/01-minimal/example.py, which
the end-to-end tier runs against a real kube-apiserver with examples/crd.yaml and obj.yaml:
tests/e2e/test_examples.py), its commands parse, and its operator, taken from the page, does
on the fake API what the page says it does.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import trio.testing
import yaml
from trioperator.cli import app
from trioperator.testing import OperatorRunner, load_registry

from tests.docs.markdown import DOCS, ROOT, Block, fenced_blocks

pytest_plugins = ["trioperator.testing.pytest_plugin"]

PAGE = DOCS / "getting-started.md"
EXAMPLES = ROOT / "examples"


def _blocks(lang: str) -> list[Block]:
    return [block for block in fenced_blocks(PAGE) if block.lang == lang]


def _manifest(path: Path) -> str:
    """A YAML file from its first document line on (the page shows it without the comments)."""
    text = path.read_text(encoding="utf-8")
    return text[text.index("apiVersion:") :]


def test_the_operator_is_the_minimal_example() -> None:
    (operator,) = _blocks("python")
    assert operator.code == (EXAMPLES / "01-minimal" / "example.py").read_text(encoding="utf-8")


def test_the_manifests_are_the_examples() -> None:
    crd, obj = _blocks("yaml")
    assert crd.code == _manifest(EXAMPLES / "crd.yaml")
    assert obj.code == _manifest(EXAMPLES / "obj.yaml")


def test_the_trioperator_commands_parse() -> None:
    commands = [
        shlex.split(line, comments=True)
        for block in _blocks("bash")
        for line in block.code.splitlines()
        if line.startswith("trioperator ")
    ]
    assert ["trioperator", "run", "--verbose", "-n", "default", "operator.py"] in commands
    for command in commands:
        if command[1:] == ["--version"]:
            continue
        app.parse_args(command[1:])  # a usage error exits (SystemExit) and fails the test


async def test_the_pages_operator_handles_the_pages_object(
    autojump_clock: trio.testing.MockClock, operator_runner: OperatorRunner, tmp_path: Path
) -> None:
    (operator_code,) = _blocks("python")
    crd_yaml, obj_yaml = _blocks("yaml")
    (tmp_path / "operator.py").write_text(operator_code.code, encoding="utf-8")
    (tmp_path / "crd.yaml").write_text(crd_yaml.code, encoding="utf-8")
    obj = yaml.safe_load(obj_yaml.code)

    registry = load_registry(tmp_path / "operator.py")
    async with operator_runner(
        registry=registry, crds=[tmp_path / "crd.yaml"], namespaces=["default"]
    ) as operator:
        operator.api.create_object("kopfexamples", obj, namespace="default")
        done = await operator.wait_for_object(
            "kopfexamples",
            "kopf-example-1",
            "default",
            lambda o: o.get("status", {}).get("create_fn") is not None,
        )
        # What the page says `kubectl get ... jsonpath` prints.
        assert done["status"]["create_fn"]["message"] == "hello world"
        operator.logs.assert_in_order(
            r"The operator is ready",
            r"\[default/kopf-example-1\] Creating kopf-example-1: \{",
            r"\[default/kopf-example-1\] Handler 'create_fn' succeeded\.",
            r"\[default/kopf-example-1\] Creation is processed: 1 succeeded; 0 failed\.",
        )
    assert operator.exception is None
