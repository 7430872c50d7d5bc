"""Cross-language call resolution: which definitions a call site may reach (see :mod:`.graph` for the rules)."""

from __future__ import annotations

import posixpath
from collections import defaultdict
from collections.abc import Sequence
from itertools import accumulate

from .languages import SPECS
from .syntax import CallSite, FileSyntax

__all__ = ["CallResolver", "folder_chain", "folder_of"]

_JS_EXTENSIONS = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts")


def folder_of(path: str) -> str:
    """The folder holding ``path`` ("" for the root)."""
    return posixpath.dirname(path)


def folder_chain(path: str) -> list[str]:
    """Folders from the root ("") down to the folder holding ``path``."""
    parts = folder_of(path).split("/") if folder_of(path) else []
    return [""] + ["/".join(parts[: i + 1]) for i in range(len(parts))]


class CallResolver:
    """Symbol tables over all files and the per-language call resolution described in the module docstring."""

    def __init__(self, files: Sequence[FileSyntax], root_name: str | None) -> None:
        self.files = {f.path: f for f in files}
        self.top: dict[str, dict[str, list[int]]] = {p: defaultdict(list) for p in self.files}
        self.nested: dict[str, dict[str, list[int]]] = {p: defaultdict(list) for p in self.files}
        self.methods: dict[str, dict[tuple[str, str], list[int]]] = {p: defaultdict(list) for p in self.files}
        self.classes: dict[str, dict[str, int]] = {p: {} for p in self.files}
        self.default_export: dict[str, list[int]] = defaultdict(list)
        self.by_name: dict[str, list[tuple[str, int]]] = defaultdict(list)
        self.class_of: dict[tuple[str, int], str] = {}
        self.java_pkg: dict[str, list[str]] = defaultdict(list)  # Java package -> files
        self.dir_files: dict[str, list[str]] = defaultdict(list)  # folder (a Go package) -> files
        for f in files:
            if f.language == "java":
                self.java_pkg[f.package or ""].append(f.path)
            self.dir_files[folder_of(f.path)].append(f.path)
            for d in f.definitions:
                self.by_name[d.name].append((f.path, d.node))
                if d.scope is not None:
                    self.methods[f.path][(d.scope, d.name)].append(d.node)
                elif d.top_level:
                    self.top[f.path][d.name].append(d.node)
                else:
                    self.nested[f.path][d.name].append(d.node)
                if d.kind == "class":
                    self.classes[f.path].setdefault(d.name, d.node)
                    self.class_of[(f.path, d.node)] = d.name
                if d.default_export:
                    self.default_export[f.path].append(d.node)
        # Python module names: root-relative and package-qualified (walking up folders holding __init__.py)
        py_paths = {f.path for f in files if f.language == "python"}
        init_dirs = {folder_of(p) for p in py_paths if p.rsplit("/", 1)[-1] == "__init__.py"}
        self.py_modules: dict[str, str] = {}
        for p in sorted(py_paths):
            is_init = posixpath.basename(p) == "__init__.py"
            parts = p[:-3].split("/")[: -1 if is_init else None]
            if parts:
                self.py_modules.setdefault(".".join(parts), p)
            d = folder_of(p)
            qual = [] if is_init else [parts[-1]]
            while d and d in init_dirs:
                qual.insert(0, d.rsplit("/", 1)[-1])
                d = folder_of(d)
            if not d and "" in init_dirs and root_name:
                qual.insert(0, root_name)
            if qual:
                self.py_modules.setdefault(".".join(qual), p)
        self.bindings = {f.path: self._bindings(f) for f in files}

    # ----------------------------------------------------------------------------------------- modules

    def _py_module(self, module: str, from_path: str) -> str | None:
        if module.startswith("."):
            dots = len(module) - len(module.lstrip("."))
            base = folder_of(from_path).split("/") if folder_of(from_path) else []
            if dots - 1 > len(base):
                return None
            base = base[: len(base) - (dots - 1)]
            rest = [p for p in module[dots:].split(".") if p]
            stem = "/".join(base + rest)
            cands = ((stem + ".py") if rest else None, (stem + "/__init__.py").lstrip("/"))
            return next((c for c in cands if c and c in self.files), None)
        return self.py_modules.get(module)

    def _js_module(self, module: str, from_path: str) -> str | None:
        if not module.startswith("."):
            return None
        joined = posixpath.normpath(posixpath.join(folder_of(from_path), module))
        if joined.startswith(".."):
            return None
        cands = [joined] + [joined + e for e in _JS_EXTENSIONS] + [joined + "/index" + e for e in _JS_EXTENSIONS]
        stem, ext = posixpath.splitext(joined)
        if ext in (".js", ".jsx", ".mjs", ".cjs"):  # TS sources imported with their compiled .js name
            cands += [stem + e for e in (".ts", ".tsx", ".mts", ".cts")]
        return next((c for c in cands if c in self.files), None)

    def _go_dir(self, import_path: str) -> str | None:
        parts = [p for p in import_path.split("/") if p]
        for i in range(len(parts)):
            cand = "/".join(parts[i:])
            if cand in self.dir_files and any(self.files[p].language == "go" for p in self.dir_files[cand]):
                return cand
        return None

    def _java_class(self, package: str, name: str) -> tuple[str, int] | None:
        return next(
            ((p, self.classes[p][name]) for p in self.java_pkg.get(package, ()) if name in self.classes[p]), None
        )

    def _bindings(self, f: FileSyntax) -> dict[str, list[tuple]]:
        """Local name -> targets: ("module", path), ("symbol", path, name), ("dir", folder),
        ("class", path, class_name), ("member", path, class_name, member); key "*" holds star imports."""
        out: dict[str, list[tuple]] = defaultdict(list)
        lang = f.language
        for imp in f.imports:
            if lang == "python":
                if imp.star or (imp.name is None and imp.alias):  # from m import * / import a.b as c
                    if p := self._py_module(imp.module, f.path):
                        out["*" if imp.star else imp.alias].append(("module", p))
                elif imp.name is None:  # import a.b binds a, and a.b
                    for prefix in accumulate(imp.module.split("."), lambda a, b: f"{a}.{b}"):
                        if p := self._py_module(prefix, f.path):
                            out[prefix].append(("module", p))
                else:  # from m import x: the submodule m.x, else the symbol x of m
                    sub = self._py_module(imp.module + ("" if imp.module.endswith(".") else ".") + imp.name, f.path)
                    p = self._py_module(imp.module, f.path)
                    if sub or p:
                        out[imp.alias or imp.name].append(("module", sub) if sub else ("symbol", p, imp.name))
            elif lang in ("javascript", "typescript", "tsx"):
                if (p := self._js_module(imp.module, f.path)) and imp.alias:
                    out[imp.alias].append(("module", p) if imp.name is None else ("symbol", p, imp.name))
            elif lang == "java":
                pkg, _, cls = imp.module.rpartition(".")
                if imp.star:
                    out["*"].append(("package", imp.module))
                elif hit := self._java_class(imp.module, imp.name or ""):
                    out[imp.alias or ""].append(("class", hit[0], imp.name))
                elif (hit := self._java_class(pkg, cls)) and imp.alias:
                    out[imp.alias].append(("member", hit[0], cls, imp.name))
            elif lang == "go" and (d := self._go_dir(imp.module)) is not None:
                out["*" if imp.star else (imp.alias or "")].append(("dir", d))
        return out

    # ----------------------------------------------------------------------------------------- calls

    def _via(self, binds: dict[str, list[tuple]], key: str, name: str | None) -> list[tuple[str, int]]:
        """Definitions reached through the bindings of ``key`` (a local name, or "*": the star imports)."""
        return [h for t in binds.get(key, []) for h in self._target(t, name)]

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
                return [(t[1], n) for n in [self.classes[t[1]].get(t[2])] if n is not None]
            return self._methods(t[1], t[2], name)
        if kind == "member":
            return self._methods(t[1], t[2], t[3]) if name is None else []
        if kind == "symbol":
            path, sym = t[1], t[2]
            defs = (
                [(path, n) for n in self.default_export.get(path, [])] if sym == "default" else self._export(path, sym)
            )
            if name is None:
                return defs
            return [h for p, n in defs for h in self._methods(p, self.class_of.get((p, n), ""), name)]
        return []

    def resolve(self, f: FileSyntax, call: CallSite) -> list[tuple[str, int]]:
        lang, name, recv = f.language, call.name, call.receiver
        binds = self.bindings[f.path]
        if recv is None:
            if lang == "java":
                if call.is_new:
                    hits = [(f.path, n) for n in [self.classes[f.path].get(name)] if n is not None]
                    hits = hits or self._via(binds, name, None)
                    hits = hits or [c for c in [self._java_class(f.package or "", name)] if c]
                    return hits or [c for t in binds.get("*", []) if (c := self._java_class(t[1], name))]
                hits = self._methods(f.path, call.enclosing_class, name) if call.enclosing_class else []
                return hits or self._via(binds, name, None) or self._unique(name)
            if lang == "go":
                return self._in_dir(folder_of(f.path), name) or self._via(binds, "*", name)
            hits = self._in_module(f.path, name) or [(f.path, n) for n in self.nested[f.path].get(name, [])]
            return hits or self._via(binds, name, None) or self._via(binds, "*", name)
        if recv in SPECS[lang].self_names:
            hits = self._methods(f.path, call.enclosing_class, name) if call.enclosing_class else []
            return hits or self._unique(name)
        if recv != "?":
            hits = self._via(binds, recv, name)
            if not hits and recv in self.classes[f.path]:
                hits = self._methods(f.path, recv, name)
            if not hits and lang == "java" and (same := self._java_class(f.package or "", recv)):
                hits = self._methods(same[0], recv, name)
            if not hits and lang == "go" and "." not in recv:
                # a method value on a same-package type: T.M
                hits = [h for p in self.dir_files.get(folder_of(f.path), ()) for h in self._methods(p, recv, name)]
            if hits:
                return hits
        return self._unique(name)
