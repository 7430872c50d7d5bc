"""No import cycle between the package's modules (static: the ``import`` statements, read with ``ast``).

A module-level cycle breaks imports depending on which module is imported first. The check follows every
``import``/``from ... import`` of the package at module level (inside ``try``/``if``, not under
``if TYPE_CHECKING:``); ``from package import name`` counts as an import of the submodule ``name`` when there is
one. A second test also follows the imports inside functions: a lazy import is how a protocol module ends up
knowing its adapters, which is the layering the cycle test guards.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "fragrel_integrations"


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_package)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(body: list[ast.stmt], *, in_functions: bool) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of ``body`` that run when the module (or, with ``in_functions``, a function) runs."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                found += _imports(node.body, in_functions=in_functions)
            found += _imports(node.orelse, in_functions=in_functions)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                found += _imports(block, in_functions=in_functions)
        elif isinstance(node, ast.With | ast.For | ast.While | ast.ClassDef) or (
            in_functions and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        ):
            found += _imports(node.body, in_functions=in_functions)
    return found


def import_graph(*, in_functions: bool = False) -> dict[str, set[str]]:
    """Module -> the package modules it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        deps: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")).body, in_functions=in_functions):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in modules)
                continue
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target not in modules:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                deps.add(sub if sub in modules else target)
        deps.discard(name)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_relative_and_submodule_imports():
    graph = import_graph()
    assert "fragrel_integrations.core.relation_aware" in graph["fragrel_integrations.core.index"]
    assert "fragrel_integrations.core.saved_index" in graph["fragrel_integrations.core.index"]
    assert "fragrel_integrations.models.embedder" in graph["fragrel_integrations.models.convert"]


@pytest.mark.parametrize("in_functions", [False, True], ids=["module-level", "with-function-imports"])
def test_no_import_cycle_inside_the_package(in_functions):
    assert cycles(import_graph(in_functions=in_functions)) == []


def test_the_model_layer_imports_nothing_above_it():
    """``models/`` is below ``core/``, ``adapters/`` and the framework packages: it imports none of them, even
    lazily (the core calls the models, never the other way round)."""
    above = tuple(f"fragrel_integrations.{p}" for p in ("core", "adapters", "langchain", "llama_index", "cli"))
    graph = import_graph(in_functions=True)
    wrong = {
        name: sorted(d for d in deps if d.startswith(above))
        for name, deps in graph.items()
        if name.startswith("fragrel_integrations.models")
    }
    assert {k: v for k, v in wrong.items() if v} == {}
