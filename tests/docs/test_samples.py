"""The Python samples of the documentation (docs/**/*.md and the README) work as shown.

Every ```python block must compile. A block that is a whole operator module (it imports
trioperator, or kopf as Kopf's users write it, and registers handlers with a decorator) is run
as a file into a fresh registry, as ``trioperator run`` would import it, and must register at
least one handler without error. A block right after the line ``<!-- fragment -->`` is part of
a module and is only compiled.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
import trioperator
from trioperator.testing import load_registry

from tests.docs.markdown import Block, documentation_files, fenced_blocks

_IMPORTS_FRAMEWORK = re.compile(r"^\s*(import|from)\s+(trioperator|kopf)\b", re.MULTILINE)
_REGISTERS = re.compile(r"^\s*@\s*(kopf|trioperator)\.(on\.)?\w+", re.MULTILINE)


def _python_blocks() -> list[Block]:
    return [
        block
        for path in documentation_files()
        for block in fenced_blocks(path)
        if block.lang in ("python", "py", "python3")
    ]


BLOCKS = _python_blocks()


def is_operator_module(block: Block) -> bool:
    return (
        not block.fragment
        and _IMPORTS_FRAMEWORK.search(block.code) is not None
        and _REGISTERS.search(block.code) is not None
    )


def test_the_documentation_has_samples_of_both_kinds() -> None:
    # A guard on the collection itself: a broken fence parser would make every test vacuous.
    assert len(BLOCKS) >= 20
    assert any(is_operator_module(block) for block in BLOCKS)
    assert any(block.fragment for block in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_sample_compiles(block: Block) -> None:
    # A fragment may be the body of an async handler: `await` at its top level is fine.
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if block.fragment else 0
    try:
        compile(block.code, block.where, "exec", flags=flags)
    except SyntaxError as exc:
        pytest.fail(
            f"{block.where}: the sample does not compile ({exc.msg}, its line {exc.lineno}); "
            f"fix it, or mark a partial one with the line <!-- fragment --> before its fence"
        )


OPERATOR_BLOCKS = [block for block in BLOCKS if is_operator_module(block)]


@pytest.mark.parametrize("block", OPERATOR_BLOCKS, ids=[block.where for block in OPERATOR_BLOCKS])
def test_operator_sample_registers_its_handlers(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Kopf's users keep `import kopf`; the samples that do are meant for trioperator alike.
    if "kopf" not in sys.modules:
        monkeypatch.setitem(sys.modules, "kopf", trioperator)
    module = tmp_path / f"sample_{block.line}.py"
    module.write_text(block.code, encoding="utf-8")
    try:
        registry = load_registry(module)
    except Exception as exc:
        pytest.fail(
            f"{block.where}: the operator sample fails when imported: {exc!r}; fix it, or mark "
            f"a partial one with the line <!-- fragment --> before its fence"
        )
    assert list(registry.iter_all_handlers()), f"{block.where}: no handler was registered"
