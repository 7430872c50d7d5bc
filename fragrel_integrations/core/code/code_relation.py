"""FragRel's code-structure relation (paper eq. 8) as a sparse fragment x fragment matrix.

For fragments ``i`` and ``j`` with node sets ``G_i`` and ``G_j``::

    w_ij = sum_{k in G_i} sum_{l in G_j} len_k * len_l * Dis(g_k, g_l)  /  (sum_k len_k) * (sum_l len_l)

- ``G_i`` (the fragment's *non-overlapping nodes*) are the maximal syntax nodes lying wholly inside the
  fragment's line span: they do not overlap each other and together cover the fragment's code. A fragment that
  lies inside a single node (a window in the middle of a long string) is represented by that innermost node.
- ``len`` is a node's length in bytes of source.
- ``Dis`` is the maximum-product path weight in the :class:`~.graph.CodeGraph` (Dijkstra on ``-log w``), pruned:
  node pairs whose best path is weaker than ``threshold`` count as 0. The denominator keeps every pair, so the
  pruning only drops small terms.

How it is computed without enumerating node pairs: the graph is cut down to the nodes that can lie on a path
between two fragment nodes (fragment nodes, call sites, definitions, their syntax ancestors, files, folders);
sources are grouped, each group's reachable region within the threshold is found with one multi-source
Dijkstra (``min_only``), and the per-source Dijkstra runs inside that region with ``limit = -log(threshold)``.
The node relation ``D`` (sources x fragment nodes, sparse) then gives ``W_num = M D M^T`` where ``M`` holds the
node lengths of each fragment.

Fragments are mapped to the graph by ``metadata["path"]`` (relative to the repository root, or absolute inside
it), ``metadata["start_line"]`` and ``metadata["end_line"]`` (1-based, inclusive). A fragment that cannot be
mapped (no such metadata, a file not in the graph, a span outside the file or covering no syntax node) has
**no relation**: its row and column are 0, so its environment score is 0 and its score stays its independent
score.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from ..._validation import check_positive_int, check_type
from ..fragments import Fragment
from ..relations import FragmentLayout, Relation
from .graph import CodeGraph, EdgeWeights, FileSyntax, parse_source
from .index_cache import reuse_cache
from .index_file import is_code_index, read_index, write_index
from .loader import Repository, SkippedFile, SourceFile, language_for_path, load_repository, read_source_file

__all__ = ["CodeRelation", "UpdateReport", "code_lines", "fragment_relation", "split_code"]

logger = logging.getLogger(__name__)

_GROUP = 256  # sources per Dijkstra call (bounds the dense (sources x region) distance block)


# --------------------------------------------------------------------------------------------- windows


def _clean_path(path: str | os.PathLike[str]) -> str:
    return str(path).replace(os.sep, "/").removeprefix("./")


def code_lines(text: str) -> list[str]:
    """Lines as tree-sitter and editors count them: split on ``\\n`` only (a trailing ``\\r`` is dropped).

    ``str.splitlines`` also breaks on form feeds and other separators, which would shift line numbers
    against the syntax tree.

    >>> code_lines("a\\fb\\r\\nc\\n")
    ['a\\x0cb', 'c']
    """
    lines = text.removesuffix("\n").split("\n") if text else []
    return [line.removesuffix("\r") for line in lines]


def split_code(
    text: str,
    *,
    path: str,
    fragment_lines: int = 20,
    stride: int = 10,
    language: str | None = None,
    doc_id: str | None = None,
) -> list[Fragment]:
    """RepoCoder sliding windows over one file: ``fragment_lines`` lines every ``stride`` lines.

    ``doc_id`` defaults to ``path``; ``position`` counts windows; ``metadata`` holds ``path``, ``start_line``,
    ``end_line`` (1-based, inclusive) and ``language``. The last window ends at the last line.

    >>> [(f.position, f.metadata["start_line"], f.metadata["end_line"])
    ...  for f in split_code("\\n".join("abcde"), path="a.py", fragment_lines=2, stride=2)]
    [(0, 1, 2), (1, 3, 4), (2, 5, 5)]
    """
    check_positive_int(fragment_lines, "fragment_lines")
    check_positive_int(stride, "stride")
    if stride > fragment_lines:
        raise ValueError(f"stride ({stride}) must not exceed fragment_lines ({fragment_lines}): lines would be lost")
    lines = code_lines(text)
    language = language or language_for_path(path)
    out: list[Fragment] = []
    for pos, start in enumerate(range(0, len(lines), stride)):
        chunk = lines[start : start + fragment_lines]
        meta = {"path": path, "start_line": start + 1, "end_line": start + len(chunk), "language": language}
        out.append(Fragment("\n".join(chunk), doc_id or path, pos, meta))
        if start + fragment_lines >= len(lines):
            break
    return out


def _windows(files: Sequence[SourceFile], fragment_lines: int, stride: int) -> list[Fragment]:
    return [
        fr
        for f in files
        for fr in split_code(f.text, path=f.path, fragment_lines=fragment_lines, stride=stride, language=f.language)
    ]


# --------------------------------------------------------------------------------------------- covers


def _file_cover(f: FileSyntax, a: int, b: int) -> np.ndarray:
    """Local ids of the maximal nodes of ``f`` inside the line span ``a..b`` (see module docstring)."""
    if f.n_nodes == 0 or b < a or a > int(f.end_line[0]) or b < 1:
        return np.zeros(0, np.int64)
    lo, hi = np.searchsorted(f.start_line, [a, b + 1])  # pre-order => start lines are sorted
    idx = np.arange(lo, hi, dtype=np.int64)
    inside = f.end_line[lo:hi] <= b
    par = f.parent[lo:hi].astype(np.int64)
    parent_inside = np.zeros(hi - lo, bool)
    ok = par >= lo
    parent_inside[ok] = inside[par[ok] - lo]
    cover = idx[inside & ~parent_inside]
    if cover.size == 0:  # the span lies inside one node: take the innermost node containing it
        enclosing = np.flatnonzero((f.start_line[:hi] <= a) & (f.end_line[:hi] >= b))
        return enclosing[-1:].astype(np.int64)
    return cover


@dataclass(frozen=True)
class _Covers:
    """Fragment nodes: ``matrix`` (fragments x graph nodes) of node lengths; ``total`` = row sums."""

    matrix: sp.csr_array
    total: np.ndarray


def _covers(graph: CodeGraph, spans: Sequence[tuple[str, int, int] | None]) -> _Covers:
    rows, cols, vals = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0)]
    for i, span in enumerate(spans):
        if span is None or span[0] not in graph.file_index:
            continue
        fi = graph.file_index[span[0]]
        cover = _file_cover(graph.files[fi], span[1], span[2])
        rows.append(np.full(cover.size, i, np.int64))
        cols.append(graph.file_offset[fi] + cover)
        vals.append(graph.files[fi].size[cover].astype(np.float64))
    coords = (np.concatenate(rows), np.concatenate(cols))
    m = sp.csr_array((np.concatenate(vals), coords), shape=(len(spans), graph.n_nodes))
    return _Covers(m, np.asarray(m.sum(axis=1)).ravel())


# --------------------------------------------------------------------------------------------- search


def _relay_nodes(graph: CodeGraph, targets: np.ndarray) -> np.ndarray:
    """Nodes that can lie on a simple path between two ``targets``: the targets, call sites and definitions,
    their syntax ancestors, and every file and folder node. Other syntax nodes hang off these as dead ends."""
    keep = np.zeros(graph.n_nodes, bool)
    keep[: graph.n_dirs + graph.n_files] = True
    cur = np.unique(np.concatenate([targets, graph.call_edges.ravel(), graph.file_offset]).astype(np.int64))
    while cur.size:
        cur = cur[~keep[cur]]
        keep[cur] = True
        cur = graph.parent[cur]
        cur = np.unique(cur[cur >= 0])
    return np.flatnonzero(keep)


def _limit(threshold: float) -> float:
    return -math.log(threshold) + 1e-9


def _check_threshold(threshold: object) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, int | float | np.floating):
        raise TypeError(f"threshold must be a number in (0, 1], got {type(threshold).__name__}")
    threshold = float(threshold)
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1] (node pairs weaker than it count as 0), got {threshold}")
    return threshold


class _Search:
    """Pruned max-product search on the relay subgraph of a graph (built once, reused for many sources).

    Pendant targets are folded into their neighbour: a target node ``p`` with a single edge (weight ``a``) in
    the relay subgraph, whose neighbour ``h`` has other edges, lies on no path between other nodes, so
    ``Dis(p, x) = a * Dis(h, x)`` for every ``x != p``. Such nodes (every top-level statement of a flat module,
    every entry of a long literal) are left out of the search; a fragment's length on ``p`` is moved to ``h``
    with the factor ``a`` (:meth:`fold`). Without this, a node with ``n`` such children costs ``n`` searches that
    each visit ``n`` nodes (quadratic); with it, one search.
    """

    def __init__(self, graph: CodeGraph, targets: np.ndarray, threshold: float) -> None:
        self.graph = graph
        self.threshold = threshold
        targets = np.asarray(targets, np.int64)
        relay = _relay_nodes(graph, targets)
        cost = sp.csr_array(graph.cost[relay][:, relay])  # symmetric: directed search is exact
        deg = np.diff(cost.indptr)
        one = np.flatnonzero(np.isin(relay, targets) & (deg == 1))
        nb = cost.indices[cost.indptr[one]]
        pendant = one[deg[nb] >= 2]
        nb = cost.indices[cost.indptr[pendant]]
        factor = np.exp(-cost.data[cost.indptr[pendant]])
        factor[factor > 1.0 - 1e-6] = 1.0  # weight-1.0 edges (MIN_COST)
        #: global node -> the node it is folded into (itself when not folded) and the factor of that move
        self.anchor = np.arange(graph.n_nodes, dtype=np.int64)
        self.factor = np.ones(graph.n_nodes)
        self.anchor[relay[pendant]] = relay[nb]
        self.factor[relay[pendant]] = factor
        self.pendant = self.anchor != np.arange(graph.n_nodes)
        keep = ~self.pendant[relay]
        self.nodes = relay[keep]
        self.local = np.full(graph.n_nodes, -1, np.int64)
        self.local[self.nodes] = np.arange(self.nodes.size)
        self.cost = sp.csr_array(cost[keep][:, keep])
        self.is_target = np.isin(self.nodes, self.anchor[targets])
        # a folded pair needs Dis(anchors) >= t / (a * b) >= t: the search limit stays that of the threshold
        self.limit = _limit(threshold)

    def fold(self, m: sp.csr_array) -> list[tuple[float, sp.csr_array]]:
        """``m`` (fragments x nodes) with pendant columns moved to their anchors, one matrix per factor."""
        coo = m.tocoo()
        f = self.factor[coo.col]
        a = self.anchor[coo.col]
        out = []
        for val in np.unique(f):
            k = f == val
            out.append((float(val), sp.csr_array((coo.data[k] * val, (coo.row[k], a[k])), shape=m.shape)))
        return out

    def self_terms(self, m: sp.csr_array, m_rows: sp.csr_array) -> sp.csr_array:
        """What folding misses: a pendant shared by two fragments has ``Dis(p, p) = 1``, folded ``a * a``
        (or nothing when ``a * a`` is below the threshold). Sparse ``rows x fragments``."""
        cols = np.flatnonzero(self.pendant)
        a2 = self.factor[cols] ** 2
        missing = 1.0 - np.where(a2 >= self.threshold * math.exp(-1e-9), a2, 0.0)
        left = sp.csr_array(m_rows[:, cols]) @ sp.dia_array((missing, 0), shape=(cols.size, cols.size))
        return sp.csr_array(left @ sp.csr_array(m[:, cols]).T)

    def reach_any(self, seeds: np.ndarray, limit: float) -> np.ndarray:
        """Global ids of the nodes within cost ``limit`` of at least one of ``seeds``
        (a superset where folded nodes are involved: a folded node counts as near when its anchor is)."""
        from scipy.sparse.csgraph import dijkstra

        seeds = np.asarray(seeds, np.int64)
        direct = seeds[self.pendant[seeds]]
        seeds = self.local[self.anchor[seeds]]
        seeds = np.unique(seeds[seeds >= 0])
        if seeds.size == 0:
            return direct
        d = dijkstra(self.cost, directed=True, indices=seeds, limit=limit, min_only=True)
        near = self.nodes[np.isfinite(d)]
        folded = np.flatnonzero(self.pendant & np.isin(self.anchor, near))
        return np.unique(np.concatenate([near, folded, direct]))

    def blocks(self, sources: np.ndarray, show_progress: bool = False):
        """``Dis`` from groups of ``sources`` (global ids) to every target node.

        Yields ``(positions, block)``: the positions in ``sources`` of one group and the sparse
        ``(len(positions) x n_nodes)`` relation block of that group."""
        from scipy.sparse.csgraph import dijkstra

        src_local = self.local[np.asarray(sources, np.int64)]  # anchors of targets: always in the subgraph
        order = np.argsort(src_local, kind="stable")  # neighbouring ids share regions
        for start in tqdm(range(0, order.size, _GROUP), desc="code relation", unit="group", disable=not show_progress):
            pos = order[start : start + _GROUP]
            group = src_local[pos]
            near = dijkstra(self.cost, directed=True, indices=group, limit=self.limit, min_only=True)
            region = np.flatnonzero(np.isfinite(near))
            sub = self.cost[region][:, region]
            dist = dijkstra(sub, directed=True, indices=np.searchsorted(region, group), limit=self.limit)
            r, c = np.nonzero(np.isfinite(dist))
            keep = self.is_target[region[c]]
            r, c = r[keep], c[keep]
            val = np.exp(-dist[r, c])
            val[val > 1.0 - 1e-6] = 1.0  # only all-weight-1.0 paths get here (MIN_COST rounding)
            block = sp.csr_array((val, (r, self.nodes[region[c]])), shape=(pos.size, self.graph.n_nodes))
            yield pos, block


def _summed(parts: list[sp.coo_array], shape: tuple[int, int]) -> sp.coo_array:
    """The sum of the COO blocks ``parts`` (their concatenation is freed on return: it is the peak memory)."""
    data = np.concatenate([p.data for p in parts])
    coords = (np.concatenate([p.row for p in parts]), np.concatenate([p.col for p in parts]))
    return sp.csr_array((data, coords), shape=shape).tocoo()  # duplicates summed


def fragment_relation(
    graph: CodeGraph,
    spans: Sequence[tuple[str, int, int] | None],
    *,
    threshold: float = 0.01,
    rows: Sequence[int] | np.ndarray | None = None,
    show_progress: bool = False,
    _search: _Search | None = None,
    _covers_cache: _Covers | None = None,
) -> sp.csr_array:
    """Eq. 8 for fragments given as ``(path, start_line, end_line)`` spans (None: not mappable).

    Returns the ``len(rows) x len(spans)`` sparse matrix (all rows by default) with a zero diagonal.

    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (pathlib.Path(d) / "a.py").write_text("x = 1\\ny = 2\\n")
    ...     g = CodeGraph.from_path(d, show_progress=False)
    >>> fragment_relation(g, [("a.py", 1, 1), ("a.py", 2, 2)]).toarray().round(4).tolist()
    [[0.0, 0.25], [0.25, 0.0]]
    """
    threshold = _check_threshold(threshold)
    n = len(spans)
    covers = _covers_cache if _covers_cache is not None else _covers(graph, spans)
    rows_arr = np.arange(n, dtype=np.int64) if rows is None else np.asarray(rows, np.int64)
    if rows_arr.size and (rows_arr.min() < 0 or rows_arr.max() >= n):
        raise ValueError(f"rows must be indices in [0, {n})")
    m = covers.matrix
    targets = np.unique(m.indices).astype(np.int64)
    if targets.size == 0 or rows_arr.size == 0:
        return sp.csr_array((rows_arr.size, n), dtype=np.float64)
    search = _search if _search is not None else _Search(graph, targets, threshold)
    classes = search.fold(m)
    rows_classes = [(a, mc[rows_arr]) for a, mc in classes]
    sources = np.unique(np.concatenate([mr.indices for _, mr in rows_classes])).astype(np.int64)
    rows_src = [(a, sp.csc_array(mr[:, sources])) for a, mr in rows_classes]
    cols_t = [(b, sp.csr_array(mc.T)) for b, mc in classes]
    cut = threshold * math.exp(-1e-9)
    parts = []
    for pos, block in search.blocks(sources, show_progress=show_progress):
        for a, left in rows_src:
            left_pos = sp.csr_array(left[:, pos])
            if left_pos.nnz == 0:
                continue
            for b, right in cols_t:
                blk = block
                if a * b < 1.0:  # a folded node pair counts when a * Dis(anchors) * b reaches the threshold
                    blk = block.copy()
                    blk.data[blk.data * (a * b) < cut] = 0.0
                    blk.eliminate_zeros()
                parts.append((left_pos @ blk @ right).tocoo())  # rows x fragments, this group's share
    parts.append(search.self_terms(m, m[rows_arr]).tocoo())
    num = _summed(parts, (rows_arr.size, n))
    r, c, v = num.row, num.col, num.data
    den = covers.total[rows_arr][r] * covers.total[c]
    keep = (den > 0) & (rows_arr[r] != c) & (v > 0)
    return sp.csr_array((v[keep] / den[keep], (r[keep], c[keep])), shape=(rows_arr.size, n))


# --------------------------------------------------------------------------------------------- relation


def _settings(threshold: float, fragment_lines: int, stride: int, edge_weights: EdgeWeights) -> dict[str, Any]:
    return {"threshold": threshold, "fragment_lines": fragment_lines, "stride": stride, "edge_weights": edge_weights}


class _SparseSums:
    """``sums(s)`` for a fixed sparse symmetric weight matrix with zero diagonal."""

    def __init__(self, weights: sp.csr_array) -> None:
        self.weights = weights
        self.den = np.asarray(weights.sum(axis=1)).ravel()

    def sums(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.weights @ s).ravel(), self.den


@dataclass(frozen=True)
class UpdateReport:
    """What :meth:`CodeRelation.update_file` changed."""

    path: str
    action: str  # "updated", "added", "removed", "unchanged"
    fragments_removed: int
    fragments_added: int
    rows_recomputed: int
    seconds: float


class CodeRelation(Relation):
    """FragRel's code-structure relation over one repository (eq. 8 on the appendix-A code graph).

    Build it with :meth:`from_repository`; it holds the graph, the repository's sliding windows
    (:attr:`fragments`) and their relation matrix (:attr:`weights`, sparse, symmetric, zero diagonal).
    As a core :class:`~fragrel_integrations.core.relations.Relation` it plugs into ``FragRelIndex`` and, through
    ``rerank``, into both frameworks' FragRel retrievers: ``prepare`` maps the layout's fragments to spans through
    their metadata (``path``, ``start_line``, ``end_line``); spans it already knows are read from the stored
    matrix (eq. 8 is pairwise, so any subset is a sub-matrix); others are computed on the fly. Unmappable
    fragments get no relation (see the module docstring).

    ``threshold`` prunes the node relation: node pairs whose best path product is below it count as 0.
    """

    def __init__(
        self,
        graph: CodeGraph,
        *,
        threshold: float = 0.01,
        fragments: Sequence[Fragment] | None = None,
        weights: sp.csr_array | None = None,
        root: str | os.PathLike[str] | None = None,
        fragment_lines: int = 20,
        stride: int = 10,
        skipped: Sequence[SkippedFile] = (),
        show_progress: bool = False,
    ) -> None:
        check_type(graph, CodeGraph, "graph must be a CodeGraph (see CodeRelation.from_repository)")
        self.graph = graph
        self.threshold = _check_threshold(threshold)
        self.root = Path(root).resolve() if root is not None else None
        self.fragment_lines, self.stride = fragment_lines, stride
        self.skipped = list(skipped)
        self.fragments: list[Fragment] = list(fragments or [])
        self.versions: dict[str, str | None] | None = None  # grammar versions of a loaded index (None: built here)
        self._index = self._span_index(self.fragments)
        if weights is None:
            weights = fragment_relation(
                graph, [self.span(f) for f in self.fragments], threshold=self.threshold, show_progress=show_progress
            )
        self.weights = sp.csr_array(weights, dtype=np.float64)
        if self.weights.shape != (len(self.fragments), len(self.fragments)):
            raise ValueError(f"weights must be {len(self.fragments)} x {len(self.fragments)}, got {self.weights.shape}")

    # ----------------------------------------------------------------------------------------- building

    @classmethod
    def from_repository(
        cls,
        path: str | os.PathLike[str] | Repository,
        *,
        threshold: float = 0.01,
        fragment_lines: int = 20,
        stride: int = 10,
        edge_weights: EdgeWeights | None = None,
        cache: str | os.PathLike[str] | None = None,
        show_progress: bool = True,
        **load_kwargs: Any,
    ) -> CodeRelation:
        """Index a repository: load, parse, build the graph, cut RepoCoder windows, compute eq. 8.

        ``load_kwargs`` go to :func:`~.loader.load_repository` (``languages``, ``max_file_bytes``, ...).
        With ``cache`` (a SQLite file), a stored index built with the same settings is loaded and brought up to
        date file by file (changed, added and removed files); otherwise the index is built and stored there
        (replacing an outdated or damaged index of ours). A ``cache`` path holding anything else (a user's file,
        another database) raises ValueError before any work: it is never overwritten.
        """
        # a cache path holding anything but an index of ours is refused before any work (never overwritten)
        cached = cache is not None and is_code_index(cache)
        repo = path if isinstance(path, Repository) else load_repository(path, **load_kwargs)
        settings = _settings(_check_threshold(threshold), fragment_lines, stride, edge_weights or EdgeWeights())
        if cached and (stored := reuse_cache(cls.load, cache, repo, settings, show_progress=show_progress)) is not None:
            return stored
        graph = CodeGraph.from_repository(repo, weights=settings["edge_weights"], show_progress=show_progress)
        rel = cls(
            graph,
            threshold=threshold,
            fragments=_windows(repo.files, fragment_lines, stride),
            root=repo.root,
            fragment_lines=fragment_lines,
            stride=stride,
            skipped=repo.skipped,
            show_progress=show_progress,
        )
        if cache is not None:
            rel.save(cache)
        return rel

    def settings(self) -> dict[str, Any]:
        """The index settings a stored index must share to be reused (threshold, windows, edge weights)."""
        return _settings(self.threshold, self.fragment_lines, self.stride, self.graph.weights)

    # ----------------------------------------------------------------------------------------- mapping

    def span(self, fragment: Fragment, *, graph: CodeGraph | None = None) -> tuple[str, int, int] | None:
        """``(path, start_line, end_line)`` of a fragment from its metadata, or None when it cannot be mapped
        (to :attr:`graph`, or to ``graph`` when given)."""
        meta: Mapping[str, Any] = fragment.metadata
        path, start, end = meta.get("path"), meta.get("start_line"), meta.get("end_line")
        if path is None:
            return None
        try:
            start, end = int(start), int(end)
        except (TypeError, ValueError):  # None included
            return None
        path = _clean_path(path)
        if os.path.isabs(path) and self.root is not None:
            try:
                path = Path(path).resolve().relative_to(self.root).as_posix()
            except ValueError:
                return None
        if path not in (graph or self.graph).file_index or end < start:
            return None
        return path, start, end

    @staticmethod
    def _span_index(fragments: Sequence[Fragment]) -> dict[tuple[str, int, int], int]:
        out = {}
        for i, f in enumerate(fragments):
            m = f.metadata
            if {"path", "start_line", "end_line"} <= set(m):
                out.setdefault((str(m["path"]), int(m["start_line"]), int(m["end_line"])), i)
        return out

    def fragment_weights(self, fragments: Sequence[Fragment]) -> sp.csr_array:
        """Eq. 8 between any fragments (mapped through their metadata): ``len x len`` sparse, zero diagonal.

        When every mappable fragment is one of the stored windows (a candidate pool from a base retriever over
        this repository), the values are read from :attr:`weights`; otherwise they are computed."""
        n = len(fragments)
        spans = [self.span(f) for f in fragments]
        mapped = [i for i, s in enumerate(spans) if s is not None]
        stored = [self._index.get(spans[i]) for i in mapped]
        if mapped and all(k is not None for k in stored) and len(set(stored)) == len(stored):
            sub = self.weights[stored][:, stored].tocoo()
            rows = np.asarray(mapped, np.int64)
            return sp.csr_array((sub.data, (rows[sub.row], rows[sub.col])), shape=(n, n))
        return fragment_relation(self.graph, spans, threshold=self.threshold)

    def prepare(self, layout: FragmentLayout) -> _SparseSums:
        if len(layout.fragments) != len(layout):
            raise ValueError("CodeRelation needs the fragments in the layout (their metadata locates them)")
        return _SparseSums(self.fragment_weights(layout.fragments))

    def relation(self, a: Fragment, b: Fragment) -> float:
        """Eq. 8 between two fragments (0 when either cannot be mapped)."""
        return float(fragment_relation(self.graph, [self.span(a), self.span(b)], threshold=self.threshold)[0, 1])

    # ----------------------------------------------------------------------------------------- updates

    def update_file(self, path: str, text: str | None = None) -> UpdateReport:
        """Bring one file up to date without re-indexing the repository.

        ``text`` gives the new content (else the file is read from :attr:`root`; a file that is gone, or that
        the loader now skips, is removed). The file is parsed again, call edges are re-resolved, and only the
        rows of the relation matrix that can have changed are recomputed: the windows of this file, and the
        windows near (within the threshold of) the other end of any call edge that touches the file or that
        changed. Any other pair's best path cannot pass through the file's syntax nodes (it could only enter
        and leave through call edges, whose far ends are those seeds), so its value is unchanged.
        """
        path = _clean_path(path)
        if text is not None:
            language = language_for_path(path)
            if language is None:
                raise ValueError(f"{path!r} has no supported source extension; see loader.LANGUAGES")
            check_type(text, str, "text must be str")
            return self._apply(path, SourceFile(path, language, text))
        if self.root is None:
            raise ValueError("this relation has no root folder: pass the new content with text=...")
        item = read_source_file(self.root, path)
        self.skipped = [s for s in self.skipped if s.path != path]
        if isinstance(item, SkippedFile):
            if item.reason != "missing":
                self.skipped.append(item)
            item = None
        return self._apply(path, item)

    def remove_file(self, path: str) -> UpdateReport:
        """Drop one file from the index (its windows and its graph nodes)."""
        return self._apply(_clean_path(path), None)

    def _apply(self, path: str, source: SourceFile | None) -> UpdateReport:
        t0 = time.perf_counter()
        old = self.graph
        present = path in old.file_index
        if (source.sha1 if source is not None else None) == (old.syntax(path).sha1 if present else None):
            return UpdateReport(path, "unchanged", 0, 0, 0, time.perf_counter() - t0)
        new = old.with_file(path, parse_source(source) if source is not None else None)
        action = "removed" if source is None else ("updated" if present else "added")

        # fragments: drop this file's windows, add the new ones, keep (path, position) order
        kept_idx = [i for i, f in enumerate(self.fragments) if f.metadata.get("path") != path]
        added = _windows([source] if source is not None else [], self.fragment_lines, self.stride)
        merged = [(self.fragments[i], i) for i in kept_idx] + [(f, -1) for f in added]
        merged.sort(key=lambda t: (str(t[0].metadata.get("path", "")), t[0].doc_id, t[0].position))
        fragments = [f for f, _ in merged]
        old_of_new = np.array([i for _, i in merged], np.int64)

        # Seeds. A pair (x, y) outside the file whose best path changed passes through the file's syntax nodes
        # (entering or leaving by a call edge) or over a changed call edge, so one of x, y lies near such an
        # edge's far end e: Dis(x, e) * call * (rest of the path) >= threshold, where the rest (through the file
        # and out by another call edge, or up to the file node and its folder) is at most
        # max(call, syntax * file_root * directory); a changed edge elsewhere gives Dis(x, e) * call >= threshold.
        old_edges, new_edges = old.stable_call_edges(), new.stable_call_edges()
        touching, changed = [], []
        for edge in (old_edges ^ new_edges) | {e for e in old_edges | new_edges if path in (e[0], e[2])}:
            touches = path in (edge[0], edge[2])
            for p, loc in ((edge[0], edge[1]), (edge[2], edge[3])):
                if p != path and p in new.file_index:
                    (touching if touches else changed).append(new.node(p, loc))
        spans = [self.span(f, graph=new) for f in fragments]
        covers = _covers(new, spans)
        targets = np.unique(covers.matrix.indices).astype(np.int64)
        recompute = old_of_new < 0
        search = _Search(new, targets, self.threshold) if targets.size else None
        ew = new.weights
        rest = max(ew.call, ew.syntax * ew.file_root * ew.directory)
        near = np.zeros(new.n_nodes, bool)
        for seeds, factor in ((touching, ew.call * rest), (changed, ew.call)):
            if search is not None and seeds:
                near[search.reach_any(np.asarray(seeds, np.int64), _limit(min(1.0, self.threshold / factor)))] = True
        m = covers.matrix.tocoo()
        recompute[m.row[near[m.col]]] = True
        rows = np.flatnonzero(recompute)
        n = len(fragments)
        fresh = fragment_relation(
            new, spans, threshold=self.threshold, rows=rows, _search=search, _covers_cache=covers
        ).tocoo()  # empty without targets or rows
        # keep old entries between rows that were not recomputed; add the fresh rows and mirror them
        keep_new = np.flatnonzero(~recompute)
        new_of_old = np.full(len(self.fragments), -1, np.int64)
        new_of_old[old_of_new[keep_new]] = keep_new
        old_w = self.weights.tocoo()
        r, c = new_of_old[old_w.row], new_of_old[old_w.col]
        ok = (r >= 0) & (c >= 0)
        fr_rows = rows[fresh.row]
        mirror = ~recompute[fresh.col]  # (recomputed, kept) pairs are mirrored; (recomputed, recomputed) are not
        rr = np.concatenate([r[ok], fr_rows, fresh.col[mirror]])
        cc = np.concatenate([c[ok], fresh.col, fr_rows[mirror]])
        vv = np.concatenate([old_w.data[ok], fresh.data, fresh.data[mirror]])
        removed = len(self.fragments) - len(kept_idx)
        self.weights = sp.csr_array((vv, (rr, cc)), shape=(n, n))
        self.graph = new
        self.fragments = fragments
        self._index = self._span_index(fragments)
        return UpdateReport(path, action, removed, len(added), int(rows.size), time.perf_counter() - t0)

    def sync(self, repository: Repository, *, show_progress: bool = False) -> list[UpdateReport]:
        """Update every file whose content differs from ``repository`` (changed, added, removed files)."""
        current = {f.path: f for f in repository.files}
        stored = {f.path: f.sha1 for f in self.graph.files}
        todo = sorted(
            [p for p, f in current.items() if stored.get(p) != f.sha1] + [p for p in stored if p not in current]
        )
        progress = tqdm(todo, desc="updating", unit="file", disable=not show_progress or not todo)
        reports = [self._apply(p, current.get(p)) for p in progress]
        self.skipped = list(repository.skipped)
        return [r for r in reports if r.action != "unchanged"]

    # ----------------------------------------------------------------------------------------- persistence

    def save(self, path: str | os.PathLike[str]) -> None:
        """Store the index in one SQLite file (atomically replaced; no pickle). See :mod:`.index_file`."""
        write_index(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None) -> CodeRelation:
        """Load an index stored by :meth:`save` (``root`` overrides the stored repository folder).

        The stored relation matrix is used as is (no graph search). Raises ValueError for a file that is not
        such an index."""

        def build(versions: dict[str, str | None] | None, **stored: Any) -> CodeRelation:
            if root is not None:
                stored["root"] = root
            rel = cls(**stored)
            rel.versions = versions
            return rel

        return read_index(path, build)

    def __len__(self) -> int:
        return len(self.fragments)

    def __repr__(self) -> str:
        return (
            f"CodeRelation({self.graph.n_files} files, {len(self.fragments)} fragments, "
            f"{self.weights.nnz} relations, threshold={self.threshold})"
        )
