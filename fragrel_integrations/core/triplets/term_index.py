"""In-memory term index for the triplet store's fuzzy lookup: an inverted-file (IVF) partition of the unit
term vectors with an exact cosine over every vector of the probed partitions.

Below ``train_at`` vectors the index is one partition, i.e. an exact scan (one matrix-vector product). From
``train_at`` on, spherical k-means (on a sample) splits the vectors into about ``lists_factor * sqrt(n)``
partitions; a query ranks the centroids and scans the closest ``probe_share`` of the partitions (at least
``min_probe``) exactly, and up to ``widen`` times as many while the best cosine found is below ``widen_below``
(less 0.05 per extra round: a distant query's best term is the likeliest to sit in a partition ranked further
down). Near neighbours of a query fall in the partitions of its closest centroids, so recall of the best term
stays near 1 while the scan touches a small share of the vectors. New vectors join their nearest partition;
when the index has grown ``regrow`` times past the size it was trained at, it is re-partitioned.

Partitions are found after subtracting the mean vector (``center``): sentence embeddings share a common
direction (unrelated terms still have cosine 0.2-0.4), which otherwise makes a few central partitions huge and
probed by every query. Measured on such vectors at 100,000 terms: the largest partition shrinks 4x and the
vectors scanned per query halve at the same recall. The cosines returned are always those of the raw vectors.

The index is a cache: :class:`~fragrel_integrations.core.triplets.store.TripletStore` loads it from the
database and feeds it only committed terms, in id order (``max_id`` says how far it has read). The partition
can be exported (:meth:`TermIndex.partition_state`, :meth:`TermIndex.assignments`) and loaded back without
k-means (:meth:`TermIndex.restore`); the store saves it in the database (see ``index_persist``).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> vecs = rng.standard_normal((500, 16)).astype(np.float32)
>>> vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
>>> index = TermIndex(16, train_at=100)
>>> index.add(np.arange(1, 501), vecs)
>>> ids, sims = index.search(vecs[41], threshold=0.9)
>>> int(ids[0]), round(float(sims[0]), 3)
(42, 1.0)
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ..._validation import check_cosine, check_min_int

__all__ = ["TermIndex", "nearest_partition"]

#: how much lower the bar for another round of partitions is after each extra round
_WIDEN_STEP = 0.05


class _Partition:
    """A growable block of vectors and their ids (capacity doubles)."""

    __slots__ = ("ids", "n", "vecs")

    def __init__(self, dim: int, capacity: int = 16) -> None:
        self.vecs = np.empty((capacity, dim), dtype=np.float32)
        self.ids = np.empty(capacity, dtype=np.int64)
        self.n = 0

    def append(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        need = self.n + ids.shape[0]
        if need > self.ids.shape[0]:
            cap = max(need, 2 * self.ids.shape[0])
            grown = np.empty((cap, self.vecs.shape[1]), dtype=np.float32)
            grown[: self.n] = self.vecs[: self.n]
            grown_ids = np.empty(cap, dtype=np.int64)
            grown_ids[: self.n] = self.ids[: self.n]
            self.vecs, self.ids = grown, grown_ids
        self.vecs[self.n : need] = vecs
        self.ids[self.n : need] = ids
        self.n = need


def _centred(data: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Rows of ``data`` minus ``mean``, scaled to unit length (the space the partitions live in)."""
    out = data - mean
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return out / norms


def _kmeans(data: np.ndarray, k: int, *, iters: int, seed: int) -> np.ndarray:
    """Spherical k-means centroids (unit rows) of unit-row ``data``."""
    rng = np.random.default_rng(seed)
    cent = data[rng.choice(data.shape[0], size=k, replace=False)].copy()
    for _ in range(iters):
        assign = _nearest(data, cent)
        sums = np.zeros_like(cent)
        np.add.at(sums, assign, data)
        empty = np.flatnonzero(np.bincount(assign, minlength=k) == 0)
        sums[empty] = data[rng.choice(data.shape[0], size=empty.size, replace=False)]
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        cent = (sums / norms).astype(np.float32)
    return cent


def nearest_partition(vectors: np.ndarray, centroids: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Partition number of each unit row of ``vectors`` for a saved partition (``centroids`` around ``mean``)."""
    return _nearest(np.asarray(vectors, dtype=np.float32), centroids, mean)


def _nearest(data: np.ndarray, cent: np.ndarray, mean: np.ndarray | None = None, chunk: int = 16384) -> np.ndarray:
    """Index of the closest centroid to each row of ``data`` (once centred on ``mean``, if given)."""
    out = np.empty(data.shape[0], dtype=np.int64)
    for s in range(0, data.shape[0], chunk):
        rows = data[s : s + chunk] if mean is None else _centred(data[s : s + chunk], mean)
        out[s : s + chunk] = np.argmax(rows @ cent.T, axis=1)
    return out


class TermIndex:
    """Unit term vectors by integer id, searchable by cosine (see the module docstring).

    Args:
        dim: vector dimension.
        train_at: below this many vectors: one partition (exact scan).
        probe_share: share of the partitions scanned per query once partitioned (about the share of the
            vectors scanned, so about ``1 / probe_share`` times faster than an exact scan).
        min_probe: partitions scanned per query at least.
        lists_factor: partitions = ``lists_factor * sqrt(n)`` (more: smaller partitions, costlier k-means).
        center: partition mean-centred vectors (see the module docstring).
        widen, widen_below: a query whose best cosine in the probed partitions is below ``widen_below`` scans
            the next ``nprobe`` partitions too, up to ``widen`` rounds (the bar drops 0.05 per round after the
            second; ``widen=1``: never).
        sample: vectors k-means trains on at most.
        regrow: re-partition when the index holds this many times the vectors it was partitioned with.
        seed: k-means seed (the partition, never the result set above the cut, depends on it).

    Thread-safe: ``add`` and ``search`` may run concurrently.
    """

    def __init__(
        self,
        dim: int,
        *,
        train_at: int = 20_000,
        probe_share: float = 0.02,
        min_probe: int = 16,
        lists_factor: float = 2.0,
        center: bool = True,
        widen: int = 4,
        widen_below: float = 0.9,
        sample: int = 50_000,
        regrow: float = 4.0,
        seed: int = 0,
    ) -> None:
        for name, value in (
            ("dim", dim),
            ("train_at", train_at),
            ("min_probe", min_probe),
            ("sample", sample),
            ("widen", widen),
        ):
            check_min_int(value, name, 1)
        check_cosine(widen_below, "widen_below")
        if not 0 < probe_share <= 1:
            raise ValueError(f"probe_share must be in (0, 1], got {probe_share!r}")
        if isinstance(lists_factor, bool) or not isinstance(lists_factor, int | float) or not lists_factor > 0:
            raise ValueError(f"lists_factor must be a number > 0, got {lists_factor!r}")
        if not regrow > 1:
            raise ValueError(f"regrow must be > 1, got {regrow!r}")
        self.dim, self.train_at, self.sample, self.regrow, self.seed = dim, train_at, sample, float(regrow), seed
        self.probe_share, self.min_probe = float(probe_share), min_probe
        self.max_id = 0
        self._n = 0
        self._trained_n = 0
        self._centroids: np.ndarray | None = None
        self._mean = np.zeros(dim, dtype=np.float32)
        self.lists_factor, self.center = float(lists_factor), bool(center)
        self.widen, self.widen_below = widen, float(widen_below)
        self._parts: list[_Partition] = [_Partition(dim)]
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return self._n

    @property
    def partitions(self) -> int:
        """Number of partitions (1 = exact scan)."""
        return len(self._parts)

    @property
    def nprobe(self) -> int:
        """Partitions scanned per query."""
        return min(len(self._parts), max(self.min_probe, math.ceil(self.probe_share * len(self._parts))))

    def ids(self) -> np.ndarray:
        """Every held id, ascending (for consistency checks against the database)."""
        with self._lock:
            return np.sort(np.concatenate([p.ids[: p.n] for p in self._parts]))

    @property
    def nbytes(self) -> int:
        """Memory held by vectors, ids and centroids (allocated capacity included)."""
        with self._lock:
            total = sum(p.vecs.nbytes + p.ids.nbytes for p in self._parts)
            return total + (0 if self._centroids is None else self._centroids.nbytes)

    def add(self, ids: np.ndarray, vectors: np.ndarray, *, rebalance: bool = True) -> None:
        """Add unit vectors with ids greater than every id already held (the store's id order).

        ``rebalance=False`` defers (re-)partitioning to a later :meth:`rebalance` (bulk loads in pages)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        vecs = np.asarray(vectors, dtype=np.float32).reshape(ids.shape[0], self.dim)
        if ids.size == 0:
            return
        with self._lock:
            if int(ids.min()) <= self.max_id:
                raise ValueError(f"term ids must grow: got {int(ids.min())} after {self.max_id}")
            if self._centroids is None:
                self._parts[0].append(ids, vecs)
            else:
                assign = _nearest(vecs, self._centroids, self._mean)
                for part in np.unique(assign):
                    sel = assign == part
                    self._parts[int(part)].append(ids[sel], vecs[sel])
            self._n += ids.size
            self.max_id = int(ids.max())
            if rebalance:
                self.rebalance()

    def rebalance(self) -> None:
        """Partition the index once it reaches ``train_at`` vectors, and again each time it grows ``regrow``-fold."""
        with self._lock:
            if self._n >= self.train_at and (self._centroids is None or self._n >= self.regrow * self._trained_n):
                self._partition()

    def _partition(self) -> None:
        ids = np.concatenate([p.ids[: p.n] for p in self._parts])
        vecs = np.concatenate([p.vecs[: p.n] for p in self._parts])
        k = max(2, min(self._n // 4, round(self.lists_factor * math.sqrt(self._n))))
        rng = np.random.default_rng(self.seed)
        take = rng.choice(self._n, size=min(self._n, max(self.sample, 8 * k)), replace=False)
        sample = vecs[np.sort(take)]
        mean = sample.mean(axis=0) if self.center else np.zeros(self.dim, dtype=np.float32)
        cent = _kmeans(_centred(sample, mean), k, iters=8, seed=self.seed)
        self._install(cent, mean.astype(np.float32), self._n, ids, vecs, _nearest(vecs, cent, mean))

    def _install(
        self, cent: np.ndarray, mean: np.ndarray, trained_n: int, ids: np.ndarray, vecs: np.ndarray, assign: np.ndarray
    ) -> None:
        k = cent.shape[0]
        order = np.argsort(assign, kind="stable")
        bounds = np.searchsorted(assign[order], np.arange(k + 1))
        parts = []
        for i in range(k):
            part = _Partition(self.dim, capacity=max(16, int(bounds[i + 1] - bounds[i]) * 5 // 4))
            rows = order[bounds[i] : bounds[i + 1]]
            part.append(ids[rows], vecs[rows])
            parts.append(part)
        self._parts, self._centroids, self._mean, self._trained_n = parts, cent, mean, trained_n

    # ------------------------------------------------------------------ persistence (see ``index_persist``)
    @property
    def trained_n(self) -> int:
        """Vectors held when the current partition was computed (0: not partitioned)."""
        return self._trained_n

    def partition_state(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(mean, centroids)`` of the current partition (``None`` while one exact-scan partition). The same
        array objects until the next re-partition, so identity tells whether the partition changed."""
        with self._lock:
            return None if self._centroids is None else (self._mean, self._centroids)

    def assignments(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, partition numbers)`` of every held vector (partition 0 for all while unpartitioned)."""
        with self._lock:
            ids = [p.ids[: p.n] for p in self._parts]
            parts = [np.full(p.n, i, dtype=np.int64) for i, p in enumerate(self._parts)]
            return np.concatenate(ids), np.concatenate(parts)

    def restore(
        self,
        mean: np.ndarray,
        centroids: np.ndarray,
        trained_n: int,
        ids: np.ndarray,
        vectors: np.ndarray,
        parts: np.ndarray,
    ) -> np.ndarray:
        """Load a saved partition into this EMPTY index: ``centroids`` (k x dim unit rows) around ``mean``, and the
        vectors with their partition numbers (``-1``: not assigned yet, assigned here to the nearest centroid).
        Ids must be ascending. Returns the partition numbers used (the ``-1`` ones filled in). No k-means."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        vecs = np.asarray(vectors, dtype=np.float32).reshape(ids.shape[0], self.dim)
        cent = np.asarray(centroids, dtype=np.float32).reshape(-1, self.dim)
        mean = np.asarray(mean, dtype=np.float32).reshape(self.dim)
        assign = np.asarray(parts, dtype=np.int64).reshape(ids.shape[0]).copy()
        if ids.size and np.any(np.diff(ids) <= 0):
            raise ValueError("restore needs ascending, distinct ids")
        if assign.size and (assign.min() < -1 or assign.max() >= cent.shape[0]):
            raise ValueError(f"partition numbers must be in [-1, {cent.shape[0]}), got {assign.min()}..{assign.max()}")
        with self._lock:
            if self._n:
                raise ValueError("restore loads an empty index; this one holds vectors")
            todo = np.flatnonzero(assign < 0)
            if todo.size:
                assign[todo] = _nearest(vecs[todo], cent, mean)
            self._install(cent, mean, int(trained_n), ids, vecs, assign)
            self._n = int(ids.size)
            self.max_id = int(ids[-1]) if ids.size else 0
        return assign

    def search(self, query: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
        """Ids and cosines of the held vectors with cosine >= ``threshold`` to the unit ``query`` among the
        probed partitions, best first (ties: lower id first).

        Once partitioned: the ``nprobe`` closest partitions; then, up to ``widen`` rounds in all, the next
        ``nprobe`` while the best cosine found is below ``widen_below`` (less 0.05 per round after the second):
        a distant query, whose best term is the likeliest to sit in another partition, scans more."""
        q = np.asarray(query, dtype=np.float32).reshape(self.dim)
        got_ids, got_sims = [], []
        with self._lock:
            if self._centroids is None:
                rounds = [self._parts]
            else:
                cs = self._centroids @ (q - self._mean)
                probe = self.nprobe
                wide = min(cs.size, probe * self.widen)
                top = np.argpartition(-cs, wide - 1)[:wide] if wide < cs.size else np.arange(cs.size)
                top = top[np.argsort(-cs[top], kind="stable")]
                rounds = [[self._parts[int(i)] for i in top[s : s + probe]] for s in range(0, wide, probe)]
            best = -1.0
            for r, parts in enumerate(rounds):
                if r and best >= self.widen_below - _WIDEN_STEP * (r - 1):
                    break
                for p in parts:
                    if not p.n:
                        continue
                    sims = p.vecs[: p.n] @ q
                    best = max(best, float(sims.max()))
                    keep = np.flatnonzero(sims >= threshold)
                    if keep.size:
                        got_ids.append(p.ids[keep])
                        got_sims.append(sims[keep])
        if not got_ids:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        ids, sims = np.concatenate(got_ids), np.concatenate(got_sims)
        order = np.lexsort((ids, -sims))
        return ids[order], sims[order]
