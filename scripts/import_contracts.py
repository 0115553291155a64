"""import-linter contract types of our own (registered in pyproject.toml, ``contract_types``).

``acyclic_modules``: no module of the root package imports itself through others -- counting
every import, also those inside functions and under ``TYPE_CHECKING``. The built-in
``acyclic_siblings`` contract sees cycles between the children of each package only (packages
squashed); a cycle between a package's ``__init__`` and its own submodules escapes it. This one
walks the whole module graph (Tarjan's strongly connected components) and reports one cycle per
component, with the line of every import on it.
"""

from __future__ import annotations

import itertools
from typing import Any

import grimp
from importlinter.application import output
from importlinter.domain.contract import Contract, ContractCheck

__all__ = ["AcyclicModulesContract", "strongly_connected"]


def strongly_connected(graph: grimp.ImportGraph, roots: list[str]) -> list[list[str]]:
    """The components of more than one module among the roots' modules (iterative Tarjan)."""
    modules = sorted(
        m for m in graph.modules if any(m == r or m.startswith(r + ".") for r in roots)
    )
    inside = set(modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & inside) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in modules:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            successors = edges[node]
            if position < len(successors):
                work.append((node, position + 1))
                nxt = successors[position]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:  # the caller's low-link learns from the finished callee
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def _one_cycle(graph: grimp.ImportGraph, component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module: ``[a, b, ..., a]``."""
    first = component[0]
    best: tuple[str, ...] | None = None
    for successor in sorted(graph.find_modules_directly_imported_by(first) & set(component)):
        chain = graph.find_shortest_chain(importer=successor, imported=first)
        if chain is not None and (best is None or len(chain) < len(best)):
            best = chain
    assert best is not None
    return [first, *best]


class AcyclicModulesContract(Contract):
    """No cycles at all in the module graph of the root packages."""

    type_name = "acyclic_modules"

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        roots = list(self.session_options["root_packages"])
        cycles = []
        for component in strongly_connected(graph, roots):
            cycle = _one_cycle(graph, component)
            steps = []
            for importer, imported in itertools.pairwise(cycle):
                details = graph.get_import_details(importer=importer, imported=imported)
                lines = ", ".join(f"l.{detail['line_number']}" for detail in details)
                steps.append(f"{importer} -> {imported} ({lines or 'indirect'})")
            cycles.append({"modules": component, "steps": steps})
        return ContractCheck(kept=not cycles, metadata={"cycles": cycles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        found: list[dict[str, Any]] = check.metadata["cycles"]
        for cycle in found:
            output.print_error(f"Import cycle among {len(cycle['modules'])} modules:")
            for step in cycle["steps"]:
                output.indent_cursor()
                output.print_error(step, bold=False)
            output.new_line()
