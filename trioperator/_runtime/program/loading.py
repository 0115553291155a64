"""Running an operator's code so that its decorators register its handlers.

``trioperator run``/``rbac`` and the test kit's ``load_registry()`` both do it, in one of two
ways. Imported (the command line): each file becomes a module of its own in ``sys.modules``
and named modules are imported as Python imports them, once, so the operator's classes stay
resolvable by name (pickling, type hints) for as long as it runs. Fresh (the test kit): every
call executes the code again (``runpy``) and keeps nothing in ``sys.modules``, so every test
gets its own handlers. Either way, a file's directory is importable for its sibling imports, as
with ``python file.py``, and the given registry is the default one while the code runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import runpy
import sys
from collections.abc import Iterable
from pathlib import Path

from trioperator._engine.registry import (
    OperatorRegistry,
    get_default_registry,
    set_default_registry,
)


class OperatorCodeError(Exception):
    """The named operator code cannot be found or is not Python (not an error inside it)."""


class NoSuchFile(OperatorCodeError, FileNotFoundError):
    pass


class NoSuchModule(OperatorCodeError, ModuleNotFoundError):
    pass


def load_operator_code(
    paths: Iterable[str | os.PathLike[str]],
    modules: Iterable[str],
    *,
    registry: OperatorRegistry,
    fresh: bool = False,
) -> None:
    """Run the files, then the modules, with ``registry`` as the default registry meanwhile.

    Raises :class:`OperatorCodeError` for a missing file or (when imported) module; errors
    raised by the code itself propagate unchanged.
    """
    previous = get_default_registry()
    set_default_registry(registry)
    try:
        for path in paths:
            file = Path(path).resolve()
            if not file.is_file():
                raise NoSuchFile(f"No such file: {os.fspath(path)}")
            directory = str(file.parent)
            if directory not in sys.path:
                sys.path.insert(0, directory)
            if fresh:
                runpy.run_path(str(file), run_name=f"__trioperator_test_{file.stem}__")
            else:
                _import_file(Path(path))
        if fresh:
            for name in modules:
                runpy.run_module(name, run_name=f"__trioperator_test_{name}__")
        else:
            # Like `python -m`: modules are found relative to the current directory too.
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            for name in modules:
                _import_module(name)
    finally:
        set_default_registry(previous)


def _import_file(file: Path) -> None:
    # A unique module name: the same file named twice (or two files of one name) both run.
    name = f"__trioperator_main_{len(sys.modules)}_{file.stem}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise OperatorCodeError(f"Cannot import {file}: not a Python file.")
    module_obj = importlib.util.module_from_spec(spec)
    sys.modules[name] = module_obj
    spec.loader.exec_module(module_obj)


def _import_module(name: str) -> None:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        # Only the named module (or a package on its way) being absent is a usage problem;
        # a missing import inside the operator's code is the code's own error.
        if exc.name == name or (exc.name and name.startswith(exc.name + ".")):
            raise NoSuchModule(f"No such module: {name}", name=name) from None
        raise
