"""The code graph of FragRel's appendix A, built from tree-sitter syntax trees.

Nodes: one per folder, one per file, and one per *named* tree-sitter node of every file (anonymous tokens such as
punctuation and keywords are left out). Undirected weighted edges:

=========================================  ======
syntax tree (named parent <-> named child)  0.5
directory tree (folder <-> sub-folder/file)  0.3
file node <-> syntax root                    1.0
call site <-> definition (in-file, cross-file)  0.8
=========================================  ======

Edges are undirected, so the relation between two fragments is mutual (a caller is related to its callee and
back). Node relation ``Dis(a, b)`` is the product of the weights along the maximum-product path
(:meth:`CodeGraph.node_relation`: Dijkstra on ``-log w``).

Call resolution (``call site -> definition``) is static and partly heuristic:

- exact: a bare call to a name defined at module level of the same file; a name bound by an import that resolves
  to a file of the repository (Python absolute and relative imports, ``from m import *``; JS/TS relative
  ``import``/``require``; Java single-type, on-demand and static imports and the file's own package; Go import
  paths matched to a folder of the repository, and same-folder (same-package) functions); ``self.f()`` /
  ``this.f()`` to a method of the enclosing class; ``module.f()`` and ``Class.f()`` through such bindings;
- heuristic: a method call on an object of unknown type (``obj.f()``), or an unresolved bare call in Java
  (inherited methods), links to the definition named ``f`` only when exactly one definition in the whole
  repository has that name; ``self.f()`` not found in the enclosing class falls back the same way; a JS default
  import links to the file's ``export default`` function or class. Everything else (builtins, third-party
  packages, dynamic dispatch) gets no edge.
"""

from __future__ import annotations

import hashlib
import logging
import math
import posixpath
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from .languages import SPECS, ImportRecord, get_language, get_parser, get_query, package_name
from .loader import Repository, SourceFile

__all__ = [
    "CallSite",
    "CodeGraph",
    "Definition",
    "EdgeWeights",
    "FileSyntax",
    "parse_source",
]

logger = logging.getLogger(__name__)

#: Cost given to weight-1.0 edges in the ``-log w`` graph: scipy.sparse.csgraph drops explicit zeros in many
#: operations (and treats zeros of dense input as "no edge"), so a cost of exactly 0 would silently cut
#: file <-> root edges. exp(-1e-12) differs from 1 by 1e-12 per such edge on a path.
MIN_COST = 1e-12
_SIMPLE_RECEIVER = re.compile(r"^[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*$")
_JS_EXTENSIONS = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts")


@dataclass(frozen=True)
class EdgeWeights:
    """Edge weights of the code graph (paper appendix A defaults); each in (0, 1]."""

    syntax: float = 0.5
    directory: float = 0.3
    file_root: float = 1.0
    call: float = 0.8

    def __post_init__(self) -> None:
        for name in ("syntax", "directory", "file_root", "call"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 < float(v) <= 1.0:
                raise ValueError(f"EdgeWeights.{name} must be a number in (0, 1], got {v!r}")


@dataclass(frozen=True, slots=True)
class Definition:
    """A function, method or class definition (``node`` is the local id of the definition node)."""

    node: int
    name: str
    kind: str  # "function" or "class"
    scope: str | None  # enclosing class (or Go receiver type) of a method
    top_level: bool  # defined at file level (not inside a function or class)
    default_export: bool = False  # JS/TS ``export default``


@dataclass(frozen=True, slots=True)
class CallSite:
    """A call expression (``node`` local id): ``receiver.name(...)``; ``receiver`` None for a bare call and
    ``"?"`` for a complex receiver expression."""

    node: int
    name: str
    receiver: str | None
    is_new: bool
    enclosing_class: str | None


@dataclass
class FileSyntax:
    """One parsed file: its named syntax nodes (arrays indexed by local id, pre-order, root = 0) and the
    definitions, call sites and imports found by the language's query. Lines are 1-based and inclusive."""

    path: str
    language: str
    sha1: str
    n_lines: int
    has_error: bool
    parent: np.ndarray  # int32, -1 for the root
    start_line: np.ndarray  # int32
    end_line: np.ndarray  # int32
    size: np.ndarray  # int32, bytes
    kind: np.ndarray  # int32 tree-sitter kind id
    definitions: list[Definition] = field(default_factory=list)
    calls: list[CallSite] = field(default_factory=list)
    imports: list[ImportRecord] = field(default_factory=list)
    package: str | None = None

    @property
    def n_nodes(self) -> int:
        return int(self.parent.shape[0])

    def kind_name(self, local: int) -> str:
        return str(get_language(self.language).node_kind_for_id(int(self.kind[local])))

    # JSON-safe records for persistence (no pickle)
    def records(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "language": self.language,
            "sha1": self.sha1,
            "n_lines": self.n_lines,
            "has_error": self.has_error,
            "package": self.package,
            "definitions": [list(astuple(d)) for d in self.definitions],
            "calls": [list(astuple(c)) for c in self.calls],
            "imports": [list(i) for i in self.imports],
        }

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "parent": self.parent,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "size": self.size,
            "kind": self.kind,
        }

    @classmethod
    def from_records(cls, records: dict[str, Any], arrays: dict[str, np.ndarray]) -> FileSyntax:
        return cls(
            path=records["path"],
            language=records["language"],
            sha1=records["sha1"],
            n_lines=int(records["n_lines"]),
            has_error=bool(records["has_error"]),
            parent=np.asarray(arrays["parent"], np.int32),
            start_line=np.asarray(arrays["start_line"], np.int32),
            end_line=np.asarray(arrays["end_line"], np.int32),
            size=np.asarray(arrays["size"], np.int32),
            kind=np.asarray(arrays["kind"], np.int32),
            definitions=[Definition(*d) for d in records["definitions"]],
            calls=[CallSite(*c) for c in records["calls"]],
            imports=[ImportRecord(*i) for i in records["imports"]],
            package=records.get("package"),
        )


# --------------------------------------------------------------------------------------------- parsing


def _kind_ids(language: str, names: Iterable[str]) -> frozenset[int]:
    lang = get_language(language)
    wanted = set(names)
    return frozenset(
        i for i in range(lang.node_kind_count) if lang.node_kind_is_named(i) and lang.node_kind_for_id(i) in wanted
    )


def _receiver_text(node: Any) -> str:
    text = node.text.decode("utf-8", "replace")
    if node.type in ("this", "super"):
        return text
    return text if _SIMPLE_RECEIVER.match(text) else "?"


def _go_receiver_type(node: Any) -> str | None:
    receiver = node.child_by_field_name("receiver")
    if receiver is None:
        return None
    for param in receiver.named_children:
        t = param.child_by_field_name("type")
        while t is not None and t.type in ("pointer_type", "generic_type", "parenthesized_type"):
            t = t.child_by_field_name("type") or (t.named_children[0] if t.named_children else None)
        if t is not None:
            return t.text.decode("utf-8", "replace")
    return None


def parse_source(source: SourceFile) -> FileSyntax:
    """Parse one file with its tree-sitter grammar: named nodes, definitions, call sites, imports.

    A file with syntax errors still parses (tree-sitter recovers; ``has_error`` is set and ERROR nodes are kept
    as ordinary nodes); the definitions and calls in its well-formed parts are found as usual.
    """
    spec = SPECS[source.language]
    data = source.text.encode("utf-8", "surrogatepass")
    tree = get_parser(source.language).parse(data)
    parent: list[int] = []
    start: list[int] = []
    end: list[int] = []
    size: list[int] = []
    kind: list[int] = []
    local: dict[int, int] = {}
    cursor = tree.walk()
    anc = [-1]
    while True:
        node = cursor.node
        me = anc[-1]
        if node.is_named and not node.is_missing:
            me = len(parent)
            local[node.id] = me
            parent.append(anc[-1])
            s, e = node.start_point, node.end_point
            start.append(s[0] + 1)
            end.append(e[0] if e[1] == 0 and e[0] > s[0] else e[0] + 1)
            size.append(node.end_byte - node.start_byte)
            kind.append(node.kind_id)
        if cursor.goto_first_child():
            anc.append(me)
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                break
            anc.pop()
        else:
            continue
        break
    parent_arr = np.asarray(parent, np.int32)
    kind_arr = np.asarray(kind, np.int32)
    class_ids = _kind_ids(source.language, spec.class_kinds)
    function_ids = _kind_ids(source.language, spec.function_kinds)

    defs_raw: list[tuple[int, str, str, Any]] = []
    calls_raw: list[tuple[int, str, str | None, bool]] = []
    imports: list[ImportRecord] = []
    package = None
    qc = _query_cursor(source.language)
    for _, caps in qc.matches(tree.root_node):
        if "function" in caps or "class" in caps:
            what = "function" if "function" in caps else "class"
            node = caps[what][0]
            if node.id in local:
                name = caps[f"{what}.name"][0].text.decode("utf-8", "replace")
                defs_raw.append((local[node.id], name, what, node))
        elif "call" in caps or "new" in caps:
            what = "call" if "call" in caps else "new"
            node = caps[what][0]
            if node.id in local:
                recv = caps.get(f"{what}.receiver")
                calls_raw.append(
                    (
                        local[node.id],
                        caps[f"{what}.name"][0].text.decode("utf-8", "replace"),
                        _receiver_text(recv[0]) if recv else None,
                        what == "new",
                    )
                )
        elif "import" in caps:
            imports.extend(spec.read_imports(caps["import"][0]))
        elif "package" in caps:
            package = package_name(caps["package"][0])

    def_at = {d[0]: d for d in defs_raw}
    class_name = {d[0]: d[1] for d in defs_raw if d[2] == "class"}
    go_scope = {d[0]: _go_receiver_type(d[3]) for d in defs_raw if d[3].type == "method_declaration"}

    def enclosing(lid: int) -> tuple[int, int]:
        """(nearest class-kind ancestor, nearest function-kind ancestor), -1 when none; nearest first."""
        p = int(parent_arr[lid])
        cls_anc = fn_anc = -1
        while p >= 0 and (cls_anc < 0 or fn_anc < 0):
            k = int(kind_arr[p])
            if cls_anc < 0 and k in class_ids:
                cls_anc = p
            if fn_anc < 0 and k in function_ids:
                fn_anc = p
            p = int(parent_arr[p])
        return cls_anc, fn_anc

    definitions = []
    for lid, name, what, node in sorted(defs_raw, key=lambda d: d[0]):
        cls_anc, fn_anc = enclosing(lid)
        if lid in go_scope:
            scope, top = go_scope[lid], False
        elif cls_anc >= 0 and (fn_anc < 0 or fn_anc < cls_anc):  # pre-order: the larger id is the nearer one
            scope, top = class_name.get(cls_anc), False
        else:
            scope, top = None, cls_anc < 0 and fn_anc < 0
        par = node.parent
        default = par is not None and par.type == "export_statement" and any(c.type == "default" for c in par.children)
        definitions.append(Definition(lid, name, what, scope, top, default))

    calls = []
    seen_calls = set()
    for lid, name, recv, is_new in calls_raw:
        if (lid, name) in seen_calls:
            continue
        seen_calls.add((lid, name))
        owner = None
        p = int(parent_arr[lid])
        while p >= 0:
            if p in class_name and def_at[p][2] == "class":
                owner = class_name[p]
                break
            if p in go_scope:
                owner = go_scope[p]
                break
            p = int(parent_arr[p])
        calls.append(CallSite(lid, name, recv, is_new, owner))
    return FileSyntax(
        path=source.path,
        language=source.language,
        sha1=source.sha1,
        n_lines=source.n_lines,
        has_error=bool(tree.root_node.has_error),
        parent=parent_arr,
        start_line=np.asarray(start, np.int32),
        end_line=np.asarray(end, np.int32),
        size=np.asarray(size, np.int32),
        kind=kind_arr,
        definitions=definitions,
        calls=calls,
        imports=imports,
        package=package,
    )


def _query_cursor(language: str) -> Any:
    from ..._optional import require

    ts = require("tree_sitter", "code")
    return ts.QueryCursor(get_query(language))


# --------------------------------------------------------------------------------------------- resolution


def _dirname(path: str) -> str:
    return posixpath.dirname(path)


def _dir_chain(path: str) -> list[str]:
    """Folders from the root ("") down to the folder holding ``path``."""
    parts = _dirname(path).split("/") if _dirname(path) else []
    return [""] + ["/".join(parts[: i + 1]) for i in range(len(parts))]


class _Resolver:
    """Symbol tables over all files and the per-language call resolution described in the module docstring."""

    def __init__(self, files: Sequence[FileSyntax], root_name: str | None) -> None:
        self.files = {f.path: f for f in files}
        self.top: dict[str, dict[str, list[int]]] = {}
        self.nested: dict[str, dict[str, list[int]]] = {}
        self.methods: dict[str, dict[tuple[str, str], list[int]]] = {}
        self.classes: dict[str, dict[str, int]] = {}
        self.default_export: dict[str, list[int]] = {}
        self.by_name: dict[str, list[tuple[str, int]]] = defaultdict(list)
        self.class_of: dict[tuple[str, int], str] = {}
        for f in files:
            top, nested, methods, classes = defaultdict(list), defaultdict(list), defaultdict(list), {}
            for d in f.definitions:
                self.by_name[d.name].append((f.path, d.node))
                if d.scope is not None:
                    methods[(d.scope, d.name)].append(d.node)
                elif d.top_level:
                    top[d.name].append(d.node)
                else:
                    nested[d.name].append(d.node)
                if d.kind == "class":
                    classes.setdefault(d.name, d.node)
                    self.class_of[(f.path, d.node)] = d.name
                if d.default_export:
                    self.default_export.setdefault(f.path, []).append(d.node)
            self.top[f.path], self.nested[f.path], self.methods[f.path], self.classes[f.path] = (
                top,
                nested,
                methods,
                classes,
            )
        # Python module names: root-relative and package-qualified (walking up folders holding __init__.py)
        py_paths = {f.path for f in files if f.language == "python"}
        init_dirs = {_dirname(p) for p in py_paths if p.rsplit("/", 1)[-1] == "__init__.py"}
        self.py_modules: dict[str, str] = {}
        for p in sorted(py_paths):
            parts = p[:-3].split("/")
            is_init = parts[-1] == "__init__"
            if is_init:
                parts = parts[:-1]
            if parts:
                self.py_modules.setdefault(".".join(parts), p)
            d = _dirname(p)
            qual = [] if is_init else [parts[-1]]
            while d and d in init_dirs:
                qual.insert(0, d.rsplit("/", 1)[-1])
                d = _dirname(d)
            if not d and "" in init_dirs and root_name:
                qual.insert(0, root_name)
            if qual:
                self.py_modules.setdefault(".".join(qual), p)
        self.paths = set(self.files)
        # Java packages and Go folders
        self.java_pkg: dict[str, list[str]] = defaultdict(list)
        for f in files:
            if f.language == "java":
                self.java_pkg[f.package or ""].append(f.path)
        self.dir_files: dict[str, list[str]] = defaultdict(list)
        for f in files:
            self.dir_files[_dirname(f.path)].append(f.path)
        self.bindings = {f.path: self._bindings(f) for f in files}

    # ----------------------------------------------------------------------------------------- modules

    def _py_module(self, module: str, from_path: str) -> str | None:
        if module.startswith("."):
            dots = len(module) - len(module.lstrip("."))
            base = _dirname(from_path).split("/") if _dirname(from_path) else []
            if dots - 1 > len(base):
                return None
            base = base[: len(base) - (dots - 1)]
            rest = [p for p in module[dots:].split(".") if p]
            stem = "/".join(base + rest)
            for cand in ((stem + ".py") if rest else None, (stem + "/__init__.py").lstrip("/")):
                if cand and cand in self.paths:
                    return cand
            return None
        return self.py_modules.get(module)

    def _js_module(self, module: str, from_path: str) -> str | None:
        if not module.startswith("."):
            return None
        joined = posixpath.normpath(posixpath.join(_dirname(from_path), module))
        if joined.startswith(".."):
            return None
        cands = [joined] + [joined + e for e in _JS_EXTENSIONS] + [joined + "/index" + e for e in _JS_EXTENSIONS]
        stem, ext = posixpath.splitext(joined)
        if ext in (".js", ".jsx", ".mjs", ".cjs"):  # TS sources imported with their compiled .js name
            cands += [stem + e for e in (".ts", ".tsx", ".mts", ".cts")]
        return next((c for c in cands if c in self.paths), None)

    def _go_dir(self, import_path: str) -> str | None:
        parts = [p for p in import_path.split("/") if p]
        for i in range(len(parts)):
            cand = "/".join(parts[i:])
            if cand in self.dir_files and any(self.files[p].language == "go" for p in self.dir_files[cand]):
                return cand
        return None

    def _java_class(self, package: str, name: str) -> tuple[str, int] | None:
        for p in self.java_pkg.get(package, ()):
            node = self.classes[p].get(name)
            if node is not None:
                return p, node
        return None

    def _bindings(self, f: FileSyntax) -> dict[str, list[tuple]]:
        """Local name -> targets: ("module", path), ("symbol", path, name), ("dir", folder),
        ("class", path, class_name), ("member", path, class_name, member); key "*" holds star imports."""
        out: dict[str, list[tuple]] = defaultdict(list)
        lang = f.language
        for imp in f.imports:
            if lang == "python":
                if imp.star:
                    p = self._py_module(imp.module, f.path)
                    if p:
                        out["*"].append(("module", p))
                elif imp.name is None:
                    if imp.alias:
                        p = self._py_module(imp.module, f.path)
                        if p:
                            out[imp.alias].append(("module", p))
                    else:
                        parts = imp.module.split(".")
                        for i in range(1, len(parts) + 1):
                            p = self._py_module(".".join(parts[:i]), f.path)
                            if p:
                                out[".".join(parts[:i])].append(("module", p))
                else:
                    sep = "" if imp.module.endswith(".") else "."
                    sub = self._py_module(imp.module + sep + imp.name, f.path)
                    if sub:
                        out[imp.alias or imp.name].append(("module", sub))
                        continue
                    p = self._py_module(imp.module, f.path)
                    if p:
                        out[imp.alias or imp.name].append(("symbol", p, imp.name))
            elif lang in ("javascript", "typescript", "tsx"):
                p = self._js_module(imp.module, f.path)
                if p and imp.alias:
                    out[imp.alias].append(("module", p) if imp.name is None else ("symbol", p, imp.name))
            elif lang == "java":
                if imp.star:
                    out["*"].append(("package", imp.module))
                    continue
                hit = self._java_class(imp.module, imp.name or "")
                if hit:
                    out[imp.alias or ""].append(("class", hit[0], imp.name))
                    continue
                pkg, _, cls = imp.module.rpartition(".")
                hit = self._java_class(pkg, cls)
                if hit and imp.alias:
                    out[imp.alias].append(("member", hit[0], cls, imp.name))
            elif lang == "go":
                d = self._go_dir(imp.module)
                if d is not None:
                    out["*" if imp.star else (imp.alias or "")].append(("dir", d))
        return out

    # ----------------------------------------------------------------------------------------- calls

    def _unique(self, name: str) -> list[tuple[str, int]]:
        hits = self.by_name.get(name, [])
        return list(hits) if len(hits) == 1 else []

    def _in_module(self, path: str, name: str) -> list[tuple[str, int]]:
        return [(path, n) for n in self.top[path].get(name, [])]

    def _in_dir(self, folder: str, name: str) -> list[tuple[str, int]]:
        return [(p, n) for p in self.dir_files.get(folder, ()) for n in self.top[p].get(name, [])]

    def _methods(self, path: str, cls: str, name: str) -> list[tuple[str, int]]:
        return [(path, n) for n in self.methods[path].get((cls, name), [])]

    def _export(self, path: str, sym: str, depth: int = 0) -> list[tuple[str, int]]:
        """Definitions the module ``path`` offers under ``sym``: its own top-level ones, else re-exports
        (``from .x import sym``, ``from .x import *``) followed up to 3 steps."""
        hits = self._in_module(path, sym)
        if hits or depth >= 3:
            return hits
        binds = self.bindings.get(path, {})
        for t in binds.get(sym, []):
            if t[0] == "symbol":
                hits += self._export(t[1], t[2], depth + 1)
        for t in binds.get("*", []):
            if t[0] == "module":
                hits += self._export(t[1], sym, depth + 1)
        return hits

    def _target(self, t: tuple, name: str | None) -> list[tuple[str, int]]:
        """Definitions a binding target offers: ``name`` inside a module/folder/class, or the target itself."""
        kind = t[0]
        if kind == "module":
            return self._export(t[1], name) if name else []
        if kind == "dir":
            return self._in_dir(t[1], name) if name else []
        if kind == "class":
            if name is None:
                node = self.classes[t[1]].get(t[2])
                return [(t[1], node)] if node is not None else []
            return self._methods(t[1], t[2], name)
        if kind == "member":
            return self._methods(t[1], t[2], t[3]) if name is None else []
        if kind == "symbol":
            path, sym = t[1], t[2]
            if sym == "default":
                defs = [(path, n) for n in self.default_export.get(path, [])]
            else:
                defs = self._export(path, sym)
            if name is None:
                return defs
            return [h for p, n in defs for h in self._methods(p, self.class_of.get((p, n), ""), name)]
        return []

    def resolve(self, f: FileSyntax, call: CallSite) -> list[tuple[str, int]]:
        lang, name, recv = f.language, call.name, call.receiver
        spec = SPECS[lang]
        binds = self.bindings[f.path]
        if recv is None:
            if lang == "java":
                if call.is_new:
                    hits = [(f.path, n) for n in [self.classes[f.path].get(name)] if n is not None]
                    hits = hits or [h for t in binds.get(name, []) for h in self._target(t, None)]
                    if not hits:
                        same = self._java_class(f.package or "", name)
                        hits = [same] if same else []
                    if not hits:
                        for t in binds.get("*", []):
                            c = self._java_class(t[1], name)
                            hits += [c] if c else []
                    return hits
                hits = self._methods(f.path, call.enclosing_class, name) if call.enclosing_class else []
                hits = hits or [h for t in binds.get(name, []) for h in self._target(t, None)]
                return hits or self._unique(name)
            if lang == "go":
                return self._in_dir(_dirname(f.path), name) or [
                    h for t in binds.get("*", []) for h in self._target(t, name)
                ]
            hits = self._in_module(f.path, name) or [(f.path, n) for n in self.nested[f.path].get(name, [])]
            hits = hits or [h for t in binds.get(name, []) for h in self._target(t, None)]
            if not hits:
                hits = [h for t in binds.get("*", []) for h in self._target(t, name)]
            return hits
        if recv in spec.self_names:
            hits = self._methods(f.path, call.enclosing_class, name) if call.enclosing_class else []
            return hits or self._unique(name)
        if recv != "?":
            hits = []
            if recv in binds:
                hits = [h for t in binds[recv] for h in self._target(t, name)]
            if not hits and recv in self.classes[f.path]:
                hits = self._methods(f.path, recv, name)
            if not hits and lang == "java":
                same = self._java_class(f.package or "", recv)
                if same:
                    hits = self._methods(same[0], recv, name)
            if not hits and lang == "go" and "." not in recv:
                # a method value on a same-package type: T.M
                hits = [
                    (p, n)
                    for p in self.dir_files.get(_dirname(f.path), ())
                    for n in self.methods[p].get((recv, name), [])
                ]
            if hits:
                return hits
        return self._unique(name)


# --------------------------------------------------------------------------------------------- graph


class CodeGraph:
    """The repository graph: folder, file and named-syntax nodes, undirected weighted edges (appendix A).

    Node ids: folders ``[0, n_dirs)``, files ``[n_dirs, n_dirs + n_files)``, then the syntax nodes of each file
    in path order (``file_offset[i] + local id``). ``adjacency`` is the symmetric ``scipy.sparse.csr_array`` of
    edge weights (largest weight where two kinds of edge join the same nodes).

    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (pathlib.Path(d) / "a.py").write_text("def f():\\n    return 1\\n\\nf()\\n")
    ...     g = CodeGraph.from_path(d, show_progress=False)
    >>> g.n_files, len(g.call_edges)
    (1, 1)
    """

    def __init__(
        self,
        files: Sequence[FileSyntax],
        *,
        weights: EdgeWeights | None = None,
        root_name: str | None = None,
    ) -> None:
        self.weights = weights or EdgeWeights()
        self.root_name = root_name
        self.files: list[FileSyntax] = sorted(files, key=lambda f: f.path)
        paths = [f.path for f in self.files]
        if len(set(paths)) != len(paths):
            raise ValueError("two FileSyntax objects share a path: give each file once")
        self.file_index = {p: i for i, p in enumerate(paths)}
        dirs = sorted({d for p in paths for d in _dir_chain(p)} | {""})
        self.dirs = dirs
        self.dir_index = {d: i for i, d in enumerate(dirs)}
        self.n_dirs, self.n_files = len(dirs), len(self.files)
        sizes = np.fromiter((f.n_nodes for f in self.files), np.int64, self.n_files)
        base = self.n_dirs + self.n_files
        self.file_offset = (
            base + np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
            if self.n_files
            else np.zeros(0, np.int64)
        )
        self.n_nodes = int(base + sizes.sum())
        self._resolver = _Resolver(self.files, root_name)
        self.call_edges = self._resolve_calls()
        self.adjacency = self._build_adjacency()
        self._cost: sp.csr_array | None = None

    # ----------------------------------------------------------------------------------------- builders

    @classmethod
    def from_repository(
        cls,
        repository: Repository,
        *,
        weights: EdgeWeights | None = None,
        show_progress: bool = True,
    ) -> CodeGraph:
        """Parse every file of a loaded repository (progress bar unless ``show_progress=False``)."""
        files = [
            parse_source(f) for f in tqdm(repository.files, desc="parsing", unit="file", disable=not show_progress)
        ]
        bad = [f.path for f in files if f.has_error]
        if bad:
            logger.info("%d file(s) with syntax errors (parsed with error recovery): %s", len(bad), bad[:10])
        return cls(files, weights=weights, root_name=repository.root.name)

    @classmethod
    def from_path(cls, root: str, *, show_progress: bool = True, **load_kwargs: Any) -> CodeGraph:
        """Load (see :func:`~.loader.load_repository`) and parse the repository at ``root``."""
        from .loader import load_repository

        return cls.from_repository(load_repository(root, **load_kwargs), show_progress=show_progress)

    def with_file(self, path: str, syntax: FileSyntax | None) -> CodeGraph:
        """A new graph with ``path`` replaced by ``syntax`` (added if new; removed when ``syntax`` is None).

        Other files are not parsed again; call resolution and edges are rebuilt (cheap next to parsing).
        """
        if syntax is not None and syntax.path != path:
            raise ValueError(f"syntax is for {syntax.path!r}, not {path!r}")
        files = [f for f in self.files if f.path != path]
        if syntax is not None:
            files.append(syntax)
        elif len(files) == len(self.files):
            raise ValueError(f"{path!r} is not in the graph: nothing to remove")
        return CodeGraph(files, weights=self.weights, root_name=self.root_name)

    # ----------------------------------------------------------------------------------------- structure

    def _resolve_calls(self) -> np.ndarray:
        """``(n, 2)`` int64 array of (call site node, definition node), global ids, unique rows."""
        rows: list[tuple[int, int]] = []
        for i, f in enumerate(self.files):
            off = int(self.file_offset[i])
            for call in f.calls:
                for path, node in self._resolver.resolve(f, call):
                    target = int(self.file_offset[self.file_index[path]]) + node
                    src = off + call.node
                    if target != src:
                        rows.append((src, target))
        if not rows:
            return np.zeros((0, 2), np.int64)
        return np.unique(np.asarray(rows, np.int64), axis=0)

    def _build_adjacency(self) -> sp.csr_array:
        w = self.weights
        us, vs, ws = [], [], []
        dir_parent = [self.dir_index[_dirname(d)] if d else -1 for d in self.dirs]
        for i, p in enumerate(dir_parent):
            if p >= 0:
                us.append(np.array([i]))
                vs.append(np.array([p]))
                ws.append(np.array([w.directory]))
        file_nodes = np.arange(self.n_dirs, self.n_dirs + self.n_files, dtype=np.int64)
        if self.n_files:
            us.append(file_nodes)
            vs.append(np.array([self.dir_index[_dirname(f.path)] for f in self.files], np.int64))
            ws.append(np.full(self.n_files, w.directory))
            has_root = np.array([f.n_nodes > 0 for f in self.files])
            us.append(file_nodes[has_root])
            vs.append(self.file_offset[has_root])
            ws.append(np.full(int(has_root.sum()), w.file_root))
        for i, f in enumerate(self.files):
            child = np.flatnonzero(f.parent >= 0)
            off = self.file_offset[i]
            us.append(off + child)
            vs.append(off + f.parent[child].astype(np.int64))
            ws.append(np.full(child.size, w.syntax))
        if len(self.call_edges):
            us.append(self.call_edges[:, 0])
            vs.append(self.call_edges[:, 1])
            ws.append(np.full(len(self.call_edges), w.call))
        n = self.n_nodes
        if not us:
            return sp.csr_array((n, n), dtype=np.float64)
        u, v, wt = np.concatenate(us), np.concatenate(vs), np.concatenate(ws).astype(np.float64)
        rows, cols, vals = np.concatenate([u, v]), np.concatenate([v, u]), np.concatenate([wt, wt])
        # the largest weight wins where two kinds of edge join the same pair
        key = rows * n + cols
        order = np.lexsort((-vals, key))
        key, rows, cols, vals = key[order], rows[order], cols[order], vals[order]
        first = np.ones(key.size, bool)
        first[1:] = key[1:] != key[:-1]
        return sp.csr_array((vals[first], (rows[first], cols[first])), shape=(n, n))

    # ----------------------------------------------------------------------------------------- lookups

    def file_node(self, path: str) -> int:
        """Global id of the file node of ``path``."""
        return self.n_dirs + self._file(path)

    def dir_node(self, folder: str) -> int:
        """Global id of a folder node ("" is the root)."""
        try:
            return self.dir_index[folder]
        except KeyError:
            raise ValueError(f"{folder!r} is not a folder of the graph") from None

    def _file(self, path: str) -> int:
        try:
            return self.file_index[path]
        except KeyError:
            raise ValueError(f"{path!r} is not a file of the graph (paths are relative to the root, '/')") from None

    def syntax(self, path: str) -> FileSyntax:
        return self.files[self._file(path)]

    def node(self, path: str, local: int) -> int:
        """Global id of syntax node ``local`` of ``path``."""
        i = self._file(path)
        if not 0 <= local < self.files[i].n_nodes:
            raise ValueError(f"{path!r} has {self.files[i].n_nodes} syntax nodes; no local id {local}")
        return int(self.file_offset[i]) + local

    def nodes_at(self, path: str, line: int, kind: str | None = None) -> list[int]:
        """Global ids of the syntax nodes of ``path`` that start on ``line`` (optionally of one ``kind``),
        outermost first."""
        i = self._file(path)
        f = self.files[i]
        hits = np.flatnonzero(f.start_line == line)
        out = [int(self.file_offset[i]) + int(h) for h in hits if kind is None or f.kind_name(int(h)) == kind]
        return out

    def definition(self, name: str, path: str | None = None) -> list[int]:
        """Global ids of the definitions called ``name`` (in ``path`` only, when given)."""
        files = [self.syntax(path)] if path is not None else self.files
        return [self.node(f.path, d.node) for f in files for d in f.definitions if d.name == name]

    def describe(self, node: int) -> str:
        """A readable label: ``dir:pkg``, ``file:pkg/a.py`` or ``pkg/a.py:3-5 function_definition``."""
        if not 0 <= node < self.n_nodes:
            raise ValueError(f"node {node} is out of range [0, {self.n_nodes})")
        if node < self.n_dirs:
            return f"dir:{self.dirs[node] or '.'}"
        if node < self.n_dirs + self.n_files:
            return f"file:{self.files[node - self.n_dirs].path}"
        i = int(np.searchsorted(self.file_offset, node, side="right") - 1)
        f, lid = self.files[i], node - int(self.file_offset[i])
        return f"{f.path}:{f.start_line[lid]}-{f.end_line[lid]} {f.kind_name(lid)}"

    def call_edge_labels(self) -> list[tuple[str, str]]:
        """Call edges as readable ``(call site, definition)`` labels (for inspection and tests)."""
        return [(self.describe(int(a)), self.describe(int(b))) for a, b in self.call_edges]

    def stable_call_edges(self) -> set[tuple[str, int, str, int]]:
        """Call edges keyed by ``(path, local id)`` pairs: comparable across graphs of the same repository."""
        out = set()
        for a, b in self.call_edges:
            pa, la = self._locate(int(a))
            pb, lb = self._locate(int(b))
            out.add((pa, la, pb, lb))
        return out

    def _locate(self, node: int) -> tuple[str, int]:
        i = int(np.searchsorted(self.file_offset, node, side="right") - 1)
        return self.files[i].path, node - int(self.file_offset[i])

    @property
    def n_lines(self) -> int:
        return sum(f.n_lines for f in self.files)

    def content_hash(self) -> str:
        """Hash of the files' contents and the edge weights (identifies what a relation matrix was built on)."""
        h = hashlib.sha1()
        for f in self.files:
            h.update(f"{f.path}\0{f.sha1}\0".encode())
        h.update(repr(self.weights).encode())
        return h.hexdigest()

    # ----------------------------------------------------------------------------------------- relations

    @property
    def cost(self) -> sp.csr_array:
        """Edge costs ``-log w`` for Dijkstra, with weight-1.0 edges at :data:`MIN_COST` (never an explicit 0)."""
        if self._cost is None:
            c = self.adjacency.copy()
            c.data = np.maximum(-np.log(c.data), MIN_COST)
            self._cost = c
        return self._cost

    def node_relation(self, a: int, b: int | Sequence[int] | None = None, *, threshold: float = 0.0) -> Any:
        """``Dis(a, b)``: the largest product of edge weights over paths from ``a`` to ``b`` (0 if none, or if
        it is below ``threshold``), by scipy's Dijkstra on ``-log w``. ``b=None`` gives the row for every node.

        A reference for single queries; :class:`~.relation.CodeRelation` uses a batched, pruned search.
        """
        from scipy.sparse.csgraph import dijkstra

        if not 0 <= int(a) < self.n_nodes:
            raise ValueError(f"node {a} is out of range [0, {self.n_nodes})")
        limit = np.inf if threshold <= 0 else -math.log(threshold) + 1e-9
        dist = dijkstra(self.cost, directed=False, indices=int(a), limit=limit)
        rel = np.where(np.isfinite(dist), np.exp(-dist), 0.0)
        rel[int(a)] = 1.0
        rel[rel > 1.0 - 1e-6] = 1.0  # only all-1.0 paths get here: undo the MIN_COST rounding
        if b is None:
            return rel
        if isinstance(b, int | np.integer):
            return float(rel[int(b)])
        return rel[np.asarray(b, np.int64)]

    def __repr__(self) -> str:
        return (
            f"CodeGraph({self.n_files} files, {self.n_dirs} folders, {self.n_nodes} nodes, "
            f"{len(self.call_edges)} call edges)"
        )
