"""``trioperator crd``: CRD manifests of the resource models in the operator's code."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from trioperator.cli import CLIControls, main

ROOT = Path(__file__).parents[2]
TYPED = ROOT / "examples" / "typed"


def _crd(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["crd", *argv], controls=CLIControls(handle_signals=False))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_examples_committed_crd_is_what_the_generator_makes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # the command line is written into the header
    code, out, err = _crd(["examples/typed/widgets.py"], capsys)
    assert (code, err) == (0, "")
    assert out == (TYPED / "crd.yaml").read_text(), (
        "examples/typed/crd.yaml is stale: regenerate it with "
        "`trioperator crd examples/typed/widgets.py > examples/typed/crd.yaml`"
    )


def test_one_crd_per_model_from_files_and_modules(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "models_mod.py").write_text(
        "import msgspec\n"
        "from trioperator import typed\n"
        "class S(msgspec.Struct):\n"
        "    size: int = 1\n"
        "@typed.resource('a.example.com', 'v1', kind='Apple')\n"
        "class Apple(msgspec.Struct):\n"
        "    spec: S\n"
        "@typed.resource('a.example.com', 'v2', kind='Pear', scope='Cluster')\n"
        "class Pear(msgspec.Struct):\n"
        "    spec: S\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for argv in (["-m", "models_mod"], ["-m", "models_mod"], [str(tmp_path / "models_mod.py")]):
        code, out, _ = _crd(argv, capsys)  # twice as a module: the second import is cached
        assert code == 0
        docs = [doc for doc in yaml.safe_load_all(out) if doc]
        assert [doc["metadata"]["name"] for doc in docs] == [
            "apples.a.example.com",
            "pears.a.example.com",
        ]
        assert docs[1]["spec"]["scope"] == "Cluster"


def test_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert _crd([], capsys)[0] == 2
    assert _crd([str(tmp_path / "missing.py")], capsys)[2].startswith("Usage error: No such file")
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    code, _, err = _crd([str(empty)], capsys)
    assert code == 2
    assert "No resource models" in err
    recursive = tmp_path / "recursive.py"
    recursive.write_text(
        "from __future__ import annotations\n"
        "import msgspec\n"
        "from trioperator import typed\n"
        "class Tree(msgspec.Struct):\n"
        "    children: list[Tree] = []\n"
        "@typed.resource('t.example.com', 'v1', kind='Forest')\n"
        "class Forest(msgspec.Struct):\n"
        "    spec: Tree\n"
    )
    code, _, err = _crd([str(recursive)], capsys)
    assert code == 2
    assert "Cannot generate a CRD: $.spec.children[*]: Tree contains itself" in err
