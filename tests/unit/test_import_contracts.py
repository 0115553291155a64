"""The import-linter contract of our own that keeps the package's import graph acyclic."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

import pytest

# The development tools (the `dev` extra): the contract is a plug-in of import-linter.
pytest.importorskip("importlinter")
grimp = pytest.importorskip("grimp")

SCRIPT = pathlib.Path(__file__).parents[2] / "scripts" / "import_contracts.py"


@pytest.fixture(scope="module")
def contracts() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_contracts_under_test", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _graph(*imports: tuple[str, str]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for importer, imported in imports:
        graph.add_import(importer=importer, imported=imported, line_number=1, line_contents="x")
    return graph


def test_no_cycles_in_a_tree_and_a_diamond(contracts: ModuleType) -> None:
    graph = _graph(("p.a", "p.b"), ("p.a", "p.c"), ("p.b", "p.d"), ("p.c", "p.d"), ("p", "p.a"))
    assert contracts.strongly_connected(graph, ["p"]) == []


def test_every_cycle_is_found_once(contracts: ModuleType) -> None:
    graph = _graph(
        ("p.a", "p.b"),
        ("p.b", "p.c"),
        ("p.c", "p.a"),  # a three-module ring
        ("p.c", "p.d"),
        ("p", "p.x"),
        ("p.x", "p"),  # a package and its own submodule
        ("p.y", "q.z"),
        ("q.z", "p.y"),  # through a module outside the roots: not counted
    )
    assert contracts.strongly_connected(graph, ["p"]) == [["p", "p.x"], ["p.a", "p.b", "p.c"]]


def test_the_package_has_no_cycles(contracts: ModuleType) -> None:
    graph = grimp.build_graph("trioperator", cache_dir=None)
    assert contracts.strongly_connected(graph, ["trioperator"]) == []
