"""Loading an operator's code: imported once (the CLI) or executed afresh (the test kit)."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest
import trioperator as kopf
from trioperator._engine.handlers import ChangingHandler
from trioperator._engine.registry import OperatorRegistry
from trioperator._runtime.program.loading import OperatorCodeError, load_operator_code

OPERATOR = """
import dataclasses
import trioperator as kopf

@dataclasses.dataclass
class Note:
    text: str

@kopf.on.create("kopfexamples")
def create_fn(**_):
    return Note("made")
"""


def test_imported_code_stays_importable_by_name(tmp_path: Path) -> None:
    (tmp_path / "op_imported.py").write_text(OPERATOR)
    registry = OperatorRegistry()
    default = kopf.get_default_registry()
    load_operator_code([tmp_path / "op_imported.py"], [], registry=registry)
    assert kopf.get_default_registry() is default
    [handler] = registry.get_handlers(ChangingHandler)
    note = handler.fn()
    # The module is in sys.modules: what it defines survives pickling (e.g. to a subprocess).
    assert sys.modules[type(note).__module__].__file__ == str(tmp_path / "op_imported.py")
    assert pickle.loads(pickle.dumps(note)) == note


def test_fresh_code_runs_again_on_every_load(tmp_path: Path) -> None:
    (tmp_path / "op_fresh.py").write_text(OPERATOR)
    first, second = OperatorRegistry(), OperatorRegistry()
    load_operator_code([tmp_path / "op_fresh.py"], [], registry=first, fresh=True)
    load_operator_code([tmp_path / "op_fresh.py"], [], registry=second, fresh=True)
    assert len(first) == len(second) == 1
    [handler1], [handler2] = (r.get_handlers(ChangingHandler) for r in (first, second))
    assert handler1.fn is not handler2.fn


@pytest.mark.parametrize("fresh", [False, True])
def test_a_missing_file_is_a_clear_error(tmp_path: Path, fresh: bool) -> None:
    with pytest.raises(OperatorCodeError, match=r"No such file: .*missing\.py"):
        load_operator_code([tmp_path / "missing.py"], [], registry=OperatorRegistry(), fresh=fresh)


def test_a_missing_module_is_a_clear_error_but_a_missing_import_inside_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "op_broken_import.py").write_text("import no_such_dependency_here\n")
    with pytest.raises(OperatorCodeError, match="No such module: no_such_module_here"):
        load_operator_code([], ["no_such_module_here"], registry=OperatorRegistry())
    with pytest.raises(ModuleNotFoundError) as info:
        load_operator_code([], ["op_broken_import"], registry=OperatorRegistry())
    assert not isinstance(info.value, OperatorCodeError)
    assert info.value.name == "no_such_dependency_here"
