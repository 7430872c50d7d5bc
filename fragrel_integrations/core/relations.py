"""Fragment relations ``w_ij`` and their relation-weighted sums, without N x N matrices where avoidable.

A :class:`Relation` is a small frozen configuration. ``relation.prepare(layout)`` does the per-corpus work once
(sorting, neighbour graphs) and returns a :class:`PreparedRelation` whose ``sums(s)`` gives
``(sum_{j!=i} w_ij s_j, sum_{j!=i} w_ij)`` for any score vector ``s``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Protocol

import numpy as np
import scipy.sparse as sp

from .._validation import check_positive_int
from ..models.embedder import normalise_rows
from .fragments import Fragment
from .relation_aware import matrix_sums

__all__ = [
    "LOOP_CELLS",
    "CallableRelation",
    "CompositeRelation",
    "ContextRelation",
    "FragmentLayout",
    "PreparedRelation",
    "Relation",
    "SemanticRelation",
    "check_unit",
    "context_weights",
    "decayed_cumsum",
]


@dataclass(frozen=True)
class FragmentLayout:
    """What relations read about a corpus: document codes, positions, optional embeddings, the fragments."""

    doc_codes: np.ndarray
    positions: np.ndarray
    fragments: Sequence[Fragment] = ()
    embeddings: np.ndarray | None = None

    @classmethod
    def from_fragments(cls, fragments: Sequence[Fragment], embeddings: np.ndarray | None = None) -> FragmentLayout:
        ids: dict[str, int] = {}
        codes = np.fromiter((ids.setdefault(f.doc_id, len(ids)) for f in fragments), np.int64, len(fragments))
        positions = np.fromiter((f.position for f in fragments), np.int64, len(fragments))
        if embeddings is not None:
            embeddings = np.asarray(embeddings)
            if embeddings.ndim != 2 or embeddings.shape[0] != len(fragments):
                raise ValueError(f"embeddings must have shape ({len(fragments)}, dim), got {embeddings.shape}")
        return cls(codes, positions, fragments, embeddings)

    def __len__(self) -> int:
        return int(self.doc_codes.shape[0])


class PreparedRelation(Protocol):
    def sums(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(sum_{j!=i} w_ij s_j, sum_{j!=i} w_ij)``."""
        ...


class Relation(ABC):
    """A fragment relation. Subclasses implement :meth:`prepare`."""

    needs_embeddings: bool = False

    @abstractmethod
    def prepare(self, layout: FragmentLayout) -> PreparedRelation:
        """Do the per-corpus work once; the result scores any number of queries."""

    def full_weight(self) -> float | None:
        """``sum_{j != i} w_ij`` over every position of an unbounded document, if the relation defines it.

        A re-ranker that sees only a pool of candidates uses it to count the fragments outside the pool (with an
        imputed score) instead of normalising over the pool alone. None: not defined (the default).
        """
        return None


@dataclass(frozen=True)
class _MatrixSums:
    weights: np.ndarray | sp.csr_array

    def sums(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return matrix_sums(self.weights, s)


# --------------------------------------------------------------------------------------------- context


def check_unit(value: object, name: str) -> float:
    """``value`` as a float in [0, 1] (a relation weight), else TypeError / ValueError naming ``name``.

    >>> check_unit(0.3, "w_rel")
    0.3
    """
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise TypeError(f"{name} must be a number in [0, 1], got {type(value).__name__}")
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return value


@dataclass(frozen=True)
class ContextRelation(Relation):
    """Context-structure relation ``w_ij = w_rel ** |pos_i - pos_j|`` within one document, 0 across documents.

    Computed in O(N) with two first-order recurrences (left and right sums), never an N x N matrix.
    ``w_rel = 0`` gives every fragment an empty environment, i.e. plain retrieval. Paper defaults: 0.3 for
    stories and code, 0.8 for dialogue.

    >>> layout = FragmentLayout.from_fragments([Fragment("a", "d", 0), Fragment("b", "d", 1), Fragment("c", "d", 3)])
    >>> num, den = ContextRelation(0.5).prepare(layout).sums(np.array([1.0, 0.0, 0.0]))
    >>> num.tolist(), den.tolist()
    ([0.0, 0.5, 0.125], [0.625, 0.75, 0.375])
    """

    w_rel: float = 0.3

    def __post_init__(self) -> None:
        object.__setattr__(self, "w_rel", check_unit(self.w_rel, "w_rel"))

    def prepare(self, layout: FragmentLayout) -> PreparedRelation:
        return _PreparedContext(layout.doc_codes, layout.positions, self.w_rel)

    def full_weight(self) -> float | None:
        """``sum_{d != 0} w_rel ** |d| = 2 w_rel / (1 - w_rel)`` (None for ``w_rel = 1``: unbounded).

        >>> ContextRelation(0.5).full_weight()
        2.0
        """
        return None if self.w_rel >= 1.0 else 2.0 * self.w_rel / (1.0 - self.w_rel)


#: Up to this many grid cells :func:`decayed_cumsum` runs its own loop; beyond, scipy's ``lfilter`` (importing
#: ``scipy.signal`` costs more than the loop on the grids a question usually has).
LOOP_CELLS = 20_000


def decayed_cumsum(x: np.ndarray, w: float) -> np.ndarray:
    """``u_k = x_k + w u_(k-1)`` (``u_k = sum_{m <= k} w^(k-m) x_m``), computed in that order, so the values are
    bit for bit those of ``scipy.signal.lfilter([1], [1, -w], x)``, which runs it beyond :data:`LOOP_CELLS` cells.

    >>> decayed_cumsum(np.array([1.0, 0.0, 0.0, 2.0]), 0.5).tolist()
    [1.0, 0.5, 0.25, 2.125]
    """
    if x.shape[0] > LOOP_CELLS:
        from scipy.signal import lfilter

        return np.asarray(lfilter([1.0], [1.0, -w], x))
    return np.asarray(list(accumulate(x.tolist(), lambda acc, value: acc * w + value, initial=0.0))[1:])


class _PreparedContext:
    """Left/right exponentially-decayed sums per document on a position grid (:func:`decayed_cumsum`)."""

    def __init__(self, doc_codes: np.ndarray, positions: np.ndarray, w: float) -> None:
        n = doc_codes.shape[0]
        self.n, self.w = n, w
        order = np.lexsort((positions, doc_codes))
        d, p = doc_codes[order], positions[order]
        new_doc = np.ones(n, dtype=bool)
        new_doc[1:] = d[1:] != d[:-1]
        dup = ~new_doc[1:] & (p[1:] == p[:-1]) if n else np.zeros(0, bool)
        if dup.any():
            k = int(np.flatnonzero(dup)[0])
            raise ValueError(
                f"two fragments share document code {int(d[k])} and position {int(p[k])}; "
                "positions must be unique within a document (deduplicate fragments first)"
            )
        self.order = order
        starts = np.flatnonzero(new_doc)
        doc_of = np.cumsum(new_doc) - 1  # document index of each sorted fragment
        pmin = p[starts]
        ends = np.append(starts[1:], n) - 1
        span = p[ends] - pmin + 1 if n else np.zeros(0, np.int64)
        base = np.concatenate(([0], np.cumsum(span)[:-1])) if n else span
        self.grid_size = int(span.sum())
        self.use_grid = w > 0.0 and self.grid_size <= 4 * n + 4096
        if self.use_grid:
            self.cell = base[doc_of] + (p - pmin[doc_of])  # grid cell of each sorted fragment
            first, last = base, base + span - 1  # first/last grid cell of each document
            with np.errstate(under="ignore"):  # decay of the carry from neighbouring documents
                self.left_decay = w ** (self.cell - first[doc_of] + 1).astype(np.float64)
                self.right_decay = w ** (last[doc_of] - self.cell + 1).astype(np.float64)
            self.prev_end = first - 1  # grid cell before each document (-1 for the first)
            self.next_start = last + 1
            self.doc_of = doc_of
        else:
            self.p, self.new_doc = p, new_doc
        self.den = np.empty(n)
        self.den[order] = self._sorted_sums(np.ones(n))

    def _sorted_sums(self, s_sorted: np.ndarray) -> np.ndarray:
        if self.n == 0 or self.w == 0.0:
            return np.zeros(self.n)
        if not self.use_grid:
            return self._loop_sums(s_sorted)
        w, g = self.w, self.grid_size
        x = np.zeros(g)
        x[self.cell] = s_sorted
        # u_k = sum_{m <= k} w^(k-m) x_m over the whole grid; the part carried over from earlier documents
        # is u[first-1] * w^(k-first+1), subtracted below (and symmetrically from the right).
        u = decayed_cumsum(x, w)
        v = decayed_cumsum(x[::-1], w)[::-1]
        carry_l = np.where(self.prev_end >= 0, u[np.maximum(self.prev_end, 0)], 0.0)
        carry_r = np.where(self.next_start < g, v[np.minimum(self.next_start, g - 1)], 0.0)
        left = u[self.cell] - carry_l[self.doc_of] * self.left_decay
        right = v[self.cell] - carry_r[self.doc_of] * self.right_decay
        return left + right - 2.0 * s_sorted

    def _loop_sums(self, s_sorted: np.ndarray) -> np.ndarray:
        """Exact O(N) fallback for very sparse positions (a grid would be too large)."""
        w, p, new_doc, n = self.w, self.p.tolist(), self.new_doc.tolist(), self.n
        s = s_sorted.tolist()
        out = [0.0] * n
        acc = 0.0
        for i in range(n):
            acc = 0.0 if new_doc[i] else (acc + s[i - 1]) * w ** (p[i] - p[i - 1])
            out[i] = acc
        acc = 0.0
        for i in range(n - 1, -1, -1):
            acc = 0.0 if i == n - 1 or new_doc[i + 1] else (acc + s[i + 1]) * w ** (p[i + 1] - p[i])
            out[i] += acc
        return np.asarray(out)

    def sums(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        num = np.empty(self.n)
        num[self.order] = self._sorted_sums(s[self.order])
        return num, self.den.copy()


def context_weights(layout: FragmentLayout, w_rel: float) -> np.ndarray:
    """The dense ``N x N`` context weights (reference and tests only: O(N^2) memory)."""
    w_rel = check_unit(w_rel, "w_rel")
    same = layout.doc_codes[:, None] == layout.doc_codes[None, :]
    dist = np.abs(layout.positions[:, None] - layout.positions[None, :]).astype(np.float64)
    with np.errstate(under="ignore"):
        w = np.where(same, np.power(w_rel, dist), 0.0)
    np.fill_diagonal(w, 0.0)
    return w


# --------------------------------------------------------------------------------------------- semantic


@dataclass(frozen=True)
class SemanticRelation(Relation):
    """Semantic relation ``w_ij = max(0, cos(e_i, e_j))`` over fragment embeddings.

    The paper prints ``1 - cos``, which contradicts its own "larger = stronger"; we use the clipped cosine.
    Up to ``dense_limit`` fragments the full matrix is used; above it (or when ``top_m`` is set) each fragment
    keeps only its ``top_m`` most similar neighbours (a sparse graph, built in blocks).
    """

    top_m: int | None = None
    dense_limit: int = 2048
    default_top_m: int = 32
    block_size: int = 2048
    needs_embeddings: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        for name in ("dense_limit", "default_top_m", "block_size"):
            check_positive_int(getattr(self, name), name)
        if self.top_m is not None:
            check_positive_int(self.top_m, "top_m", hint=" or None")

    def prepare(self, layout: FragmentLayout) -> PreparedRelation:
        if layout.embeddings is None:
            raise ValueError("SemanticRelation needs fragment embeddings: pass an embedder to the index")
        e = normalise_rows(layout.embeddings)
        n = e.shape[0]
        if self.top_m is None and n <= self.dense_limit:
            w = np.maximum(e @ e.T, 0.0).astype(np.float64)
            np.fill_diagonal(w, 0.0)
            return _MatrixSums(w)
        return _MatrixSums(self.neighbour_graph(e, self.top_m or self.default_top_m))

    def neighbour_graph(self, e: np.ndarray, m: int) -> sp.csr_array:
        """Sparse graph keeping each row's ``m`` largest positive cosines (self excluded)."""
        n = e.shape[0]
        m = min(m, max(n - 1, 0))
        if m == 0:
            return sp.csr_array((n, n), dtype=np.float64)
        rows, cols, vals = [], [], []
        for start in range(0, n, self.block_size):
            sims = e[start : start + self.block_size] @ e.T
            idx = np.arange(sims.shape[0])
            sims[idx, start + idx] = -np.inf
            top = np.argpartition(-sims, m - 1, axis=1)[:, :m]
            v = np.take_along_axis(sims, top, axis=1)
            rows.append(np.repeat(start + idx, m))
            cols.append(top.ravel())
            vals.append(np.maximum(v.ravel(), 0.0))
        data = np.concatenate(vals).astype(np.float64)
        return sp.csr_array((data, (np.concatenate(rows), np.concatenate(cols))), shape=(n, n))


# --------------------------------------------------------------------------------------------- combinators


@dataclass(frozen=True)
class CallableRelation(Relation):
    """A user relation: ``fn(fragments) -> N x N weights`` (dense array or scipy.sparse, entries >= 0).

    >>> rel = CallableRelation(lambda frs: np.ones((len(frs), len(frs))))
    """

    fn: Callable[[Sequence[Fragment]], np.ndarray | sp.sparray | sp.spmatrix]
    needs_embeddings: bool = False

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError("CallableRelation needs a callable fn(fragments) -> weights")

    def prepare(self, layout: FragmentLayout) -> PreparedRelation:
        if len(layout.fragments) != len(layout):
            raise ValueError("CallableRelation needs the fragments in the layout")
        w = self.fn(layout.fragments)
        return _MatrixSums(sp.csr_array(w) if sp.issparse(w) else np.asarray(w, dtype=np.float64))


@dataclass(frozen=True)
class _PreparedComposite:
    parts: tuple[tuple[PreparedRelation, float], ...]

    def sums(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        num, den = np.zeros_like(s), np.zeros_like(s)
        for prepared, weight in self.parts:
            n_, d_ = prepared.sums(s)
            num += weight * n_
            den += weight * d_
        return num, den


@dataclass(frozen=True)
class CompositeRelation(Relation):
    """Weighted sum of relations: ``w_ij = sum_r lambda_r w^r_ij``.

    >>> rel = CompositeRelation([(ContextRelation(0.3), 1.0), (SemanticRelation(), 0.5)])
    """

    parts: Sequence[tuple[Relation, float]]

    def __post_init__(self) -> None:
        parts = tuple(self.parts)
        if not parts:
            raise ValueError("CompositeRelation needs at least one (relation, weight) pair")
        for item in parts:
            if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], Relation)):
                raise TypeError(f"CompositeRelation parts must be (Relation, weight) pairs, got {item!r}")
            weight = item[1]
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
                raise TypeError(f"relation weight must be a finite number, got {weight!r}")
            if weight < 0:
                raise ValueError(f"relation weight must be >= 0, got {weight}")
        object.__setattr__(self, "parts", parts)

    @property
    def needs_embeddings(self) -> bool:  # type: ignore[override]
        return any(r.needs_embeddings for r, _ in self.parts)

    def prepare(self, layout: FragmentLayout) -> PreparedRelation:
        return _PreparedComposite(tuple((r.prepare(layout), float(w)) for r, w in self.parts))
