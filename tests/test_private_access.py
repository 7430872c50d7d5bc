"""No module of the package reads another module's private (underscore) names (static: read with ``ast``).

A module may use the underscore names it defines itself: its module-level names, the attributes and methods of
the classes it defines (class body, ``self._x = ...`` / ``cls._x = ...`` in their methods), on ``self``, on
``cls`` or on any other object (``other._x`` in ``__eq__``, a helper class reading the engine it serves). Reading
or setting ``obj._name`` for any other name (including through ``getattr``/``setattr``/``hasattr`` with a
literal name), or ``from x import _name``, reaches into another module's privates: what is needed there should
be public API, or the dependency should turn around. Dunder names (``__init__``) are not private;
``self._x`` / ``cls._x`` / ``super()._x`` always count as the module's own (a subclass using its base's
framework hooks, e.g. pydantic private attributes).

``ALLOWED`` lists the places still to be fixed in files owned by other work streams of issue 26; remove an entry
when its place is fixed (a stale entry fails :func:`test_the_allow_list_has_no_stale_entry`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "fragrel_integrations"

#: Underscore names that are public by convention (``collections.namedtuple``'s API).
CONVENTIONAL = frozenset({"_asdict", "_replace", "_fields", "_make", "_field_defaults"})

#: (module path relative to the package, private name) -> whose work stream fixes it. These files belong to the
#: other helpers of issue 26 (the adapter kit; the models layer); remove an entry once its place is fixed.
ALLOWED: dict[tuple[str, str], str] = {
    # kit: both _pool.py files read or set private attributes of the frameworks' own classes
    ("langchain/_pool.py", "_expects_other_args"): "kit (langchain_core BaseRetriever._expects_other_args)",
    ("llama_index/_pool.py", "_retrievers"): "kit (llama_index QueryFusionRetriever._retrievers)",
    ("llama_index/_pool.py", "_vector_store"): "kit (llama_index VectorIndexRetriever._vector_store: its metric)",
}


@dataclass(frozen=True, order=True)
class Violation:
    path: str
    line: int
    column: int
    name: str
    how: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.how} {self.name}"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__")) and name not in CONVENTIONAL


def _is_own_receiver(node: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()`` (with or without arguments)."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _targets(node: ast.stmt) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, ast.AnnAssign | ast.AugAssign):
        return [node.target]
    return []


def _names_in(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [n for elt in target.elts for n in _names_in(elt)]
    return []


def defined_names(tree: ast.Module) -> set[str]:
    """The names a module defines: module-level names, and the attributes and methods of its classes."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        for target in _targets(node):
            names.update(_names_in(target))
        if isinstance(node, ast.If | ast.Try):  # conditional definitions at module level
            names |= defined_names(ast.Module(body=list(ast.iter_child_nodes(node)), type_ignores=[]))  # type: ignore[arg-type]
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in cls.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            for target in _targets(node):
                names.update(_names_in(target))
        for node in ast.walk(cls):
            for target in _targets(node) if isinstance(node, ast.stmt) else []:
                for t in ast.walk(target):
                    if isinstance(t, ast.Attribute) and _is_own_receiver(t.value):
                        names.add(t.attr)
    return names


def violations(source: str, path: str = "<module>") -> list[Violation]:
    """Every place in ``source`` that reads or sets another module's private name."""
    tree = ast.parse(source)
    own = defined_names(tree)
    found: list[Violation] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if _is_private(alias.name):
                    how = f"from {'.' * node.level}{node.module or ''} import"
                    found.append(Violation(path, node.lineno, node.col_offset, alias.name, how))
        elif isinstance(node, ast.Attribute):
            if _is_private(node.attr) and node.attr not in own and not _is_own_receiver(node.value):
                found.append(
                    Violation(
                        path,
                        node.lineno,
                        node.col_offset,
                        node.attr,
                        "reads" if isinstance(node.ctx, ast.Load) else "sets",
                    )
                )
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            name = node.args[1].value
            if _is_private(name) and name not in own and not _is_own_receiver(node.args[0]):
                found.append(Violation(path, node.lineno, node.col_offset, name, f"{node.func.id}()"))
    return sorted(found)


def package_violations() -> list[Violation]:
    out = []
    for file in sorted(PACKAGE.rglob("*.py")):
        rel = file.relative_to(PACKAGE).as_posix()
        out += violations(file.read_text(encoding="utf-8"), rel)
    return out


# ---------------------------------------------------------------------------------------------- the checker


OK_SOURCE = """
from .other import public_name, _Private as _P  # noqa
_CACHE = {}

class Engine:
    _shared = 1
    def __init__(self):
        self._count = 0
    def _clean(self, text):
        return text
    def __eq__(self, other):
        return self._count == other._count and super()._hook() is None and cls._shared

class _State:
    def run(self, engine: Engine):
        return engine._clean("x"), engine._count, _CACHE, getattr(engine, "_count"), self._mine, point._replace(x=1)

def helper(x):
    return x.__class__, x.__dict__
"""


def test_the_checker_passes_a_modules_own_privates():
    assert [(v.line, v.name) for v in violations(OK_SOURCE)] == [(2, "_Private")]


def test_the_checker_finds_reads_writes_imports_and_getattr_of_foreign_privates():
    source = (
        "from ..models import convert\n"
        "from .index import _check_fragments\n"
        "def f(memory, llm):\n"
        "    x = memory._turns\n"
        "    llm._client = None\n"
        "    return convert._find(x), getattr(llm, '_model', None), setattr(llm, '_pool', 1)\n"
    )
    found = [(v.line, v.name, v.how) for v in violations(source)]
    assert found == [
        (2, "_check_fragments", "from .index import"),
        (4, "_turns", "reads"),
        (5, "_client", "sets"),
        (6, "_find", "reads"),
        (6, "_model", "getattr()"),
        (6, "_pool", "setattr()"),
    ]


# ---------------------------------------------------------------------------------------------- the package


def test_no_module_reads_another_modules_privates():
    left = [v for v in package_violations() if (v.path, v.name) not in ALLOWED]
    assert not left, "modules reach into other modules' privates (make it public API):\n" + "\n".join(map(str, left))


def test_the_allow_list_has_no_stale_entry():
    seen = {(v.path, v.name) for v in package_violations()}
    stale = sorted(set(ALLOWED) - seen)
    assert not stale, f"fixed: remove these entries from ALLOWED: {stale}"


@pytest.mark.parametrize("entry", sorted(ALLOWED))
def test_allowed_entries_name_existing_files(entry):
    assert (PACKAGE / entry[0]).is_file()
