"""The triplet store's term index: unit term vectors by integer id, searched by cosine against a threshold.

One interface, two kinds (the store's ``fuzzy_index``):

* ``"exact"`` (default): the vectors in one float32 matrix; a query is one matrix-vector product, so every
  stored term at or above the threshold is found.
* ``"faiss"`` (the ``[faiss]`` extra): the same matrix, and from ``train_at`` vectors on a faiss inverted-file
  index (``IndexIVFScalarQuantizer``: about ``sqrt(n)`` lists of 8-bit residual codes, L2 distance, which orders
  unit vectors as cosine does and, unlike an inner-product k-means, is not thrown off by the direction that
  sentence embeddings share). A query range-searches the closest ``nprobe`` lists with a small cosine
  ``margin`` for the 8-bit codes, then re-checks each candidate's exact cosine in the matrix; a query whose best
  cosine is below the threshold plus ``widen_gap`` (a distant query, whose best term is the likeliest to sit in a
  list ranked further down) searches ``widen`` times as many lists. The lists are retrained once the
  index has grown ``regrow`` times past the size they were trained at.

Either way the cosines returned are exact. The index is a cache of the store's ``terms`` table: the store
builds it from the stored embeddings on the first fuzzy lookup and feeds it committed terms in id order
(``max_id`` says how far it has read).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> vecs = rng.standard_normal((500, 16)).astype(np.float32)
>>> vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
>>> index = TermIndex(16)
>>> index.add(np.arange(1, 501), vecs)
>>> ids, sims = index.search(vecs[41], threshold=0.9)
>>> int(ids[0]), round(float(sims[0]), 3)
(42, 1.0)
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from ..._optional import require
from ..._validation import check_cosine, check_min_int

__all__ = ["INDEX_KINDS", "TermIndex", "check_kind"]

#: the kinds of term index (the store's ``fuzzy_index``)
INDEX_KINDS = ("exact", "faiss")


def check_kind(kind: object) -> str:
    """``kind`` if it is one of :data:`INDEX_KINDS` (``"faiss"`` also needs faiss installed), else ValueError."""
    if kind not in INDEX_KINDS:
        raise ValueError(f"fuzzy_index must be one of {INDEX_KINDS}, got {kind!r}")
    if kind == "faiss":
        require("faiss", "faiss")
    return str(kind)


class TermIndex:
    """Unit term vectors by integer id, searchable by cosine (see the module docstring).

    Args:
        dim: vector dimension.
        kind: ``"exact"`` or ``"faiss"``.
        train_at: with faiss, below this many vectors the search is the exact scan.
        lists_factor: faiss lists = ``lists_factor * sqrt(n)``.
        probe_share: share of the lists searched per query (at least ``min_probe``).
        min_probe: lists searched per query at least.
        widen, widen_gap: a query whose best cosine is below the threshold plus ``widen_gap`` searches ``widen``
            times as many lists (``widen=1``: never).
        margin: cosine margin of the range search on 8-bit codes (candidates are re-checked exactly).
        regrow: retrain the lists when the index holds this many times the vectors they were trained on.
        seed: the faiss k-means seed (the lists, never the cosines returned, depend on it).

    Thread-safe: ``add`` and ``search`` may run concurrently.
    """

    def __init__(
        self,
        dim: int,
        *,
        kind: str = "exact",
        train_at: int = 20_000,
        lists_factor: float = 1.0,
        probe_share: float = 0.02,
        min_probe: int = 8,
        widen: int = 4,
        widen_gap: float = 0.1,
        margin: float = 0.05,
        regrow: float = 4.0,
        seed: int = 0,
    ) -> None:
        for name, value in (("dim", dim), ("train_at", train_at), ("min_probe", min_probe), ("widen", widen)):
            check_min_int(value, name, 1)
        check_cosine(widen_gap, "widen_gap")
        if not 0 < probe_share <= 1:
            raise ValueError(f"probe_share must be in (0, 1], got {probe_share!r}")
        if isinstance(lists_factor, bool) or not isinstance(lists_factor, int | float) or not lists_factor > 0:
            raise ValueError(f"lists_factor must be a number > 0, got {lists_factor!r}")
        if not 0 <= margin < 1:
            raise ValueError(f"margin must be in [0, 1), got {margin!r}")
        if not regrow > 1:
            raise ValueError(f"regrow must be > 1, got {regrow!r}")
        self.dim, self.kind = dim, check_kind(kind)
        self.train_at, self.lists_factor = train_at, lists_factor
        self.probe_share, self.min_probe = probe_share, min_probe
        self.widen, self.widen_gap, self.margin, self.regrow, self.seed = widen, widen_gap, margin, regrow, seed
        self.max_id = self._n = self._trained_n = 0
        self._vecs = np.empty((16, dim), dtype=np.float32)
        self._ids = np.empty(16, dtype=np.int64)
        self._ivf: Any = None  # the faiss index over rows 0..n-1 of the matrix (None: exact scan)
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return self._n

    @property
    def lists(self) -> int:
        """Inverted lists of the faiss index (0: exact scan)."""
        return 0 if self._ivf is None else int(self._ivf.nlist)

    @property
    def nprobe(self) -> int:
        """Lists searched per query (0: exact scan)."""
        return min(self.lists, max(self.min_probe, math.ceil(self.probe_share * self.lists)))

    @property
    def nbytes(self) -> int:
        """Memory held by the vectors, the ids and the faiss codes (allocated capacity included)."""
        with self._lock:
            codes = 0 if self._ivf is None else self._n * (self.dim + 8) + self._ivf.nlist * self.dim * 4
            return self._vecs.nbytes + self._ids.nbytes + codes

    def ids(self) -> np.ndarray:
        """Every held id, ascending."""
        with self._lock:
            return self._ids[: self._n].copy()

    def reserve(self, count: int) -> None:
        """Make room for ``count`` more vectors at once (a bulk load of known size grows the matrix once)."""
        with self._lock:
            self._grow(self._n + max(0, int(count)), exact=True)

    def _grow(self, need: int, *, exact: bool = False) -> None:
        if need > self._ids.shape[0]:
            cap = need if exact else max(need, 2 * self._ids.shape[0])
            self._vecs = np.resize(self._vecs, (cap, self.dim))
            self._ids = np.resize(self._ids, cap)

    def add(self, ids: np.ndarray, vectors: np.ndarray, *, rebalance: bool = True) -> None:
        """Add unit vectors with ids greater than every id already held (the store's id order).

        ``rebalance=False`` defers (re)training the faiss lists to a later :meth:`rebalance` (bulk loads)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        vecs = np.asarray(vectors, dtype=np.float32).reshape(ids.shape[0], self.dim)
        if ids.size == 0:
            return
        with self._lock:
            if int(ids.min()) <= self.max_id or np.any(np.diff(ids) <= 0):
                raise ValueError(f"term ids must grow: got {ids.tolist()[:5]}... after {self.max_id}")
            need = self._n + ids.size
            self._grow(need)
            self._vecs[self._n : need] = vecs
            self._ids[self._n : need] = ids
            self._n, self.max_id = need, int(ids[-1])
            if self._ivf is not None:
                self._ivf.add(vecs)
            if rebalance:
                self.rebalance()

    def rebalance(self) -> None:
        """With faiss: train the lists once the index reaches ``train_at`` vectors, again each ``regrow``-fold."""
        with self._lock:
            due = self._ivf is None or self._n >= self.regrow * self._trained_n
            if self.kind == "faiss" and self._n >= self.train_at and due:
                self._train()

    def _train(self) -> None:
        faiss = require("faiss", "faiss")
        n, data = self._n, self._vecs[: self._n]
        lists = max(2, min(n // 39, round(self.lists_factor * math.sqrt(n))))
        quantizer = faiss.IndexFlatL2(self.dim)
        ivf = faiss.IndexIVFScalarQuantizer(quantizer, self.dim, lists, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_L2)
        ivf.cp.seed = self.seed
        sample = np.random.default_rng(self.seed).choice(n, size=min(n, 64 * lists), replace=False)
        ivf.train(data[np.sort(sample)])
        ivf.add(data)
        self._ivf, self._trained_n = ivf, n

    def search(self, query: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
        """Ids and exact cosines of the held vectors with cosine >= ``threshold`` to the unit ``query`` (all of
        them with ``"exact"``; those in the searched lists with faiss), best first (ties: lower id first)."""
        q = np.asarray(query, dtype=np.float32).reshape(self.dim)
        with self._lock:
            if self._ivf is None:
                rows = np.flatnonzero(self._vecs[: self._n] @ q >= threshold)
            else:
                rows = self._ivf_rows(q, threshold, self.nprobe)
                best = float((self._vecs[rows] @ q).max()) if rows.size else -1.0
                if best < threshold + self.widen_gap and self.widen > 1:
                    rows = self._ivf_rows(q, threshold, min(self.lists, self.nprobe * self.widen))
            sims = self._vecs[rows] @ q
            keep = sims >= threshold
            ids, sims = self._ids[rows[keep]], sims[keep]
        order = np.lexsort((ids, -sims))
        return ids[order], sims[order]

    def _ivf_rows(self, q: np.ndarray, threshold: float, nprobe: int) -> np.ndarray:
        """Matrix rows the faiss range search finds within the cosine ``threshold - margin`` in ``nprobe`` lists."""
        params = require("faiss", "faiss").SearchParametersIVF(nprobe=nprobe)
        cos = max(-1.0, threshold - self.margin)
        _, _, rows = self._ivf.range_search(q[None, :], 2.0 - 2.0 * cos, params=params)
        return np.asarray(rows, dtype=np.int64)
