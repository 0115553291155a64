"""The package uses no private name of another library: no ``_``-prefixed module, imported name
or attribute of a third-party package, wherever it is visible in the source.

A private name is the library's to change in any release, so code that reaches it breaks
without a deprecation (or, worse, silently does something else). This is a test rather than an
import-linter contract or a ruff rule: import-linter's contracts name the forbidden modules one
by one and see neither imported names (``from x import _y``) nor attributes (``x._y``), and
ruff has no rule for a library's private names (SLF001 is about ``self``-less access to any
object's members, our own included). The walk below sees every spelling of such a use that can
be seen without running the code: a dotted import, an imported name, an attribute of a name an
import bound, and ``getattr``/``hasattr``/``setattr`` with a literal name on such a name.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "trioperator"
ATTRIBUTE_CALLS = {"getattr", "hasattr", "setattr", "delattr"}


def _private(name: str) -> bool:
    """``_x`` is private; ``__x__`` (a dunder such as ``__version__``) is not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _third_party(module: str) -> bool:
    top = module.partition(".")[0]
    return top != "trioperator" and top not in sys.stdlib_module_names and top != "__future__"


def private_uses(source: str, filename: str = "<source>") -> Iterator[tuple[int, str]]:
    """``(line, what)`` for every private name of a third-party library used in ``source``."""
    tree = ast.parse(source, filename)
    # The names that imports of third-party modules (or of their members) bind in this file.
    # A file's names are taken together, whatever the scope: a name rebound to something else
    # in one function would only make the check stricter there.
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _third_party(alias.name):
                    continue
                if any(_private(part) for part in alias.name.split(".")):
                    yield node.lineno, f"import {alias.name}"
                if alias.asname is not None:
                    bound[alias.asname] = alias.name
                else:
                    top = alias.name.partition(".")[0]
                    bound[top] = top
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level or not _third_party(module):
                continue
            if any(_private(part) for part in module.split(".")):
                yield node.lineno, f"from {module} import ..."
            for alias in node.names:
                if _private(alias.name):
                    yield node.lineno, f"from {module} import {alias.name}"
                bound[alias.asname or alias.name] = f"{module}.{alias.name}"
    if not bound:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = _bound_base(node.value, bound)
            if base is not None:
                yield node.lineno, f"{base}.{node.attr}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ATTRIBUTE_CALLS
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            base = _bound_base(node.args[0], bound)
            if base is not None:
                yield node.lineno, f"{node.func.id}({base}, {node.args[1].value!r})"


def _bound_base(node: ast.expr, bound: dict[str, str]) -> str | None:
    """The library path of ``node`` if it is an imported name or a public attribute chain of
    one (``trio.lowlevel``), else None."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute) and not _private(node.attr):
        base = _bound_base(node.value, bound)
        return None if base is None else f"{base}.{node.attr}"
    return None


def test_the_package_uses_no_private_name_of_another_library() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, what in private_uses(path.read_text(), str(path))
    ]
    assert found == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("import h11._writers", ["import h11._writers"]),
        ("import h11._writers as w", ["import h11._writers"]),
        ("from h11._writers import write_request", ["from h11._writers import ..."]),
        ("from prometheus_client.metrics import _use_created", [
            "from prometheus_client.metrics import _use_created"
        ]),
        ("import h11\nh11._util.bytesify(b'')", ["h11._util"]),
        ("import trio\ntrio.lowlevel._private()", ["trio.lowlevel._private"]),
        ("from prometheus_client import metrics as m\nm._use_created", [
            "prometheus_client.metrics._use_created"
        ]),
        ("from prometheus_client import metrics\ngetattr(metrics, '_use_created', True)", [
            "getattr(prometheus_client.metrics, '_use_created')"
        ]),
        ("import trio\ndef f():\n    import h11\n    return h11._writers", ["h11._writers"]),
    ],
)
def test_each_spelling_of_a_private_use_is_found(source: str, found: list[str]) -> None:
    assert [what for _, what in private_uses(source)] == found


@pytest.mark.parametrize(
    "source",
    [
        "import trio\ntrio.lowlevel.checkpoint()",  # public
        "import trioperator._runtime.metrics",  # our own
        "from trioperator._util import clock\nclock._private",  # our own
        "import sys\nsys._getframe()",  # the standard library is not a third party
        "from . import _sibling",  # relative: our own
        "import trio\ntrio.__version__",  # a dunder is public
        "class C:\n    def f(self):\n        return self._x",  # not a library's
        "import msgspec\nvalue = msgspec.json.decode(b'1')\nvalue._x",  # a value, not a name
    ],
)
def test_public_names_and_our_own_private_ones_pass(source: str) -> None:
    assert list(private_uses(source)) == []
