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
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from .loader import Repository, load_repository
from .parse import parse_source
from .resolve import CallResolver, folder_chain, folder_of
from .syntax import CallSite, Definition, FileSyntax

# CallSite, Definition, FileSyntax (:mod:`.syntax`) and parse_source (:mod:`.parse`) are re-exported here
__all__ = ["CallSite", "CodeGraph", "Definition", "EdgeWeights", "FileSyntax", "parse_source"]

logger = logging.getLogger(__name__)

#: Cost given to weight-1.0 edges in the ``-log w`` graph: scipy.sparse.csgraph drops explicit zeros in many
#: operations (and treats zeros of dense input as "no edge"), so a cost of exactly 0 would silently cut
#: file <-> root edges. exp(-1e-12) differs from 1 by 1e-12 per such edge on a path.
MIN_COST = 1e-12


@dataclass(frozen=True)
class EdgeWeights:
    """Edge weights of the code graph (paper appendix A defaults); each in (0, 1]."""

    syntax: float = 0.5
    directory: float = 0.3
    file_root: float = 1.0
    call: float = 0.8

    def __post_init__(self) -> None:
        for name, v in vars(self).items():
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 < float(v) <= 1.0:
                raise ValueError(f"EdgeWeights.{name} must be a number in (0, 1], got {v!r}")


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
        self, files: Sequence[FileSyntax], *, weights: EdgeWeights | None = None, root_name: str | None = None
    ) -> None:
        self.weights = weights or EdgeWeights()
        self.root_name = root_name
        self.files: list[FileSyntax] = sorted(files, key=lambda f: f.path)
        paths = [f.path for f in self.files]
        if len(set(paths)) != len(paths):
            raise ValueError("two FileSyntax objects share a path: give each file once")
        self.file_index = {p: i for i, p in enumerate(paths)}
        self.dirs = sorted({d for p in paths for d in folder_chain(p)} | {""})
        self.dir_index = {d: i for i, d in enumerate(self.dirs)}
        self.n_dirs, self.n_files = len(self.dirs), len(self.files)
        sizes = np.fromiter((f.n_nodes for f in self.files), np.int64, self.n_files)
        base = self.n_dirs + self.n_files
        self.file_offset = base + np.cumsum(sizes) - sizes
        self.n_nodes = int(base + sizes.sum())
        self._resolver = CallResolver(self.files, root_name)
        self.call_edges = self._resolve_calls()
        self.adjacency = self._build_adjacency()

    # ----------------------------------------------------------------------------------------- builders

    @classmethod
    def from_repository(
        cls, repository: Repository, *, weights: EdgeWeights | None = None, show_progress: bool = True
    ) -> CodeGraph:
        """Parse every file of a loaded repository (progress bar unless ``show_progress=False``)."""
        progress = tqdm(repository.files, desc="parsing", unit="file", disable=not show_progress)
        files = [parse_source(f) for f in progress]
        if bad := [f.path for f in files if f.has_error]:
            logger.info("%d file(s) with syntax errors (parsed with error recovery): %s", len(bad), bad[:10])
        return cls(files, weights=weights, root_name=repository.root.name)

    @classmethod
    def from_path(cls, root: str, *, show_progress: bool = True, **load_kwargs: Any) -> CodeGraph:
        """Load (see :func:`~.loader.load_repository`) and parse the repository at ``root``."""
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
        return np.unique(np.asarray(rows, np.int64).reshape(-1, 2), axis=0)

    @cached_property
    def parent(self) -> np.ndarray:
        """Global id of each node's syntax parent (-1 for folders, files and syntax roots)."""
        syntax = [np.where(f.parent >= 0, self.file_offset[i] + f.parent, -1) for i, f in enumerate(self.files)]
        return np.concatenate([np.full(self.n_dirs + self.n_files, -1, np.int64), *syntax])

    def _build_adjacency(self) -> sp.csr_array:
        w, n = self.weights, self.n_nodes
        has_root = np.array([f.n_nodes > 0 for f in self.files], bool)
        folders = [folder_of(d) for d in self.dirs[1:]] + [folder_of(f.path) for f in self.files]
        child = np.flatnonzero(self.parent >= 0)
        edges = [  # (u, v, weight): folder -> parent folder and file -> folder, file -> syntax root, syntax, calls
            (np.arange(1, self.n_dirs + self.n_files), [self.dir_index[d] for d in folders], w.directory),
            (self.n_dirs + np.flatnonzero(has_root), self.file_offset[has_root], w.file_root),
            (child, self.parent[child], w.syntax),
            (self.call_edges[:, 0], self.call_edges[:, 1], w.call),
        ]
        u = np.concatenate([np.asarray(a, np.int64) for a, _, _ in edges])
        v = np.concatenate([np.asarray(b, np.int64) for _, b, _ in edges])
        wt = np.concatenate([np.full(len(a), weight, np.float64) for a, _, weight in edges])
        rows, cols, vals = np.concatenate([u, v]), np.concatenate([v, u]), np.concatenate([wt, wt])
        # the largest weight wins where two kinds of edge join the same pair
        key = rows * n + cols
        order = np.lexsort((-vals, key))
        first = order[np.unique(key[order], return_index=True)[1]]
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
        f = self.syntax(path)
        hits = np.flatnonzero(f.start_line == line)
        return [self.node(path, int(h)) for h in hits if kind is None or f.kind_name(int(h)) == kind]

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
        path, lid = self._locate(node)
        f = self.syntax(path)
        return f"{path}:{f.start_line[lid]}-{f.end_line[lid]} {f.kind_name(lid)}"

    def call_edge_labels(self) -> list[tuple[str, str]]:
        """Call edges as readable ``(call site, definition)`` labels (for inspection and tests)."""
        return [(self.describe(int(a)), self.describe(int(b))) for a, b in self.call_edges]

    def stable_call_edges(self) -> set[tuple[str, int, str, int]]:
        """Call edges keyed by ``(path, local id)`` pairs: comparable across graphs of the same repository."""
        return {(*self._locate(int(a)), *self._locate(int(b))) for a, b in self.call_edges}

    def _locate(self, node: int) -> tuple[str, int]:
        i = int(np.searchsorted(self.file_offset, node, side="right") - 1)
        return self.files[i].path, node - int(self.file_offset[i])

    @property
    def n_lines(self) -> int:
        return sum(f.n_lines for f in self.files)

    def content_hash(self) -> str:
        """Hash of the files' contents and the edge weights (identifies what a relation matrix was built on)."""
        text = "".join(f"{f.path}\0{f.sha1}\0" for f in self.files) + repr(self.weights)
        return hashlib.sha1(text.encode()).hexdigest()

    # ----------------------------------------------------------------------------------------- relations

    @cached_property
    def cost(self) -> sp.csr_array:
        """Edge costs ``-log w`` for Dijkstra, with weight-1.0 edges at :data:`MIN_COST` (never an explicit 0)."""
        c = self.adjacency.copy()
        c.data = np.maximum(-np.log(c.data), MIN_COST)
        return c

    def node_relation(self, a: int, b: int | Sequence[int] | None = None, *, threshold: float = 0.0) -> Any:
        """``Dis(a, b)``: the largest product of edge weights over paths from ``a`` to ``b`` (0 if none, or if
        it is below ``threshold``), by scipy's Dijkstra on ``-log w``. ``b=None`` gives the row for every node.

        A reference for single queries; :class:`~.code_relation.CodeRelation` uses a batched, pruned search.
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
