"""Random-hyperplane LSH (SimHash) for cosine similarity: seeded, with tunable bits per table and table count.

A vector's code in table ``t`` is the ``bits`` signs of its dot products with that table's random Gaussian
hyperplanes. Two vectors at angle ``θ`` agree on one bit with probability ``1 - θ/π``, so near vectors share a
code in at least one of ``tables`` tables with high probability while far ones rarely do. Codes become integer
*band keys* ``table * 2**bits + code`` (one integer column, indexable by any database). With ``probe_radius=1``
a query also probes every code one bit away in each table (multi-probe), which raises recall for the same tables.

>>> import numpy as np
>>> lsh = RandomHyperplaneLSH(dim=8, bits=4, tables=3, seed=0)
>>> keys = lsh.band_keys(np.eye(8, dtype=np.float32)[:2])
>>> keys.shape, bool(keys[0, 1] >= 16)     # table 1's keys start at 1 * 2**4
((2, 3), True)
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["LSHIndex", "RandomHyperplaneLSH", "collision_probability"]


def _positive_int(value: object, name: str, *, low: int = 1, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def collision_probability(cosine: float, bits: int, tables: int, probe_radius: int = 0) -> float:
    """Probability that two vectors with this cosine collide in at least one table (the LSH recall curve).

    >>> round(collision_probability(0.9, bits=12, tables=16), 3)
    0.933
    """
    p = 1.0 - float(np.arccos(np.clip(cosine, -1.0, 1.0))) / np.pi
    from math import comb

    per_table = sum(comb(bits, r) * p ** (bits - r) * (1 - p) ** r for r in range(probe_radius + 1))
    return 1.0 - (1.0 - per_table) ** tables


class RandomHyperplaneLSH:
    """``tables`` independent tables of ``bits`` random hyperplanes each, drawn from ``numpy`` with ``seed``.

    Args:
        dim: vector dimension.
        bits: hyperplanes (code bits) per table, 1-48. More bits: fewer, closer candidates.
        tables: number of tables, 1-4096. More tables: higher recall, more index rows. (Band keys
            ``table * 2**bits + code`` stay below ``2**60``, so they fit any 64-bit integer column.)
        seed: the hyperplanes are a pure function of ``(dim, bits, tables, seed)``.
        probe_radius: 0 probes each table's own code; 1 (or 2) also probes codes within that Hamming distance.
    """

    def __init__(self, dim: int, *, bits: int = 12, tables: int = 16, seed: int = 0, probe_radius: int = 1) -> None:
        self.dim = _positive_int(dim, "dim")
        self.bits = _positive_int(bits, "bits", high=48)
        self.tables = _positive_int(tables, "tables", high=4096)
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        self.seed = int(seed)
        self.probe_radius = _positive_int(probe_radius, "probe_radius", low=0, high=min(2, self.bits))
        rng = np.random.default_rng(self.seed)
        planes = rng.standard_normal((self.tables * self.bits, self.dim))
        self.hyperplanes = planes.astype(np.float32)
        self._weights = (np.int64(1) << np.arange(self.bits, dtype=np.int64)).astype(np.int64)
        self._offsets = np.arange(self.tables, dtype=np.int64) << np.int64(self.bits)
        flips = [np.int64(0)]
        for r in range(1, self.probe_radius + 1):
            for combo in itertools.combinations(range(self.bits), r):
                flips.append(np.int64(sum(1 << b for b in combo)))
        self._flips = np.array(flips, dtype=np.int64)

    # -- codes --------------------------------------------------------------------------------------------------
    def _check(self, vectors: object) -> np.ndarray:
        arr = np.asarray(vectors, dtype=np.float32)
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2 or arr.shape[1] != self.dim:
            raise ValueError(f"expected vectors of dimension {self.dim}, got shape {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise ValueError("vectors contain NaN or inf")
        return arr

    def codes(self, vectors: object) -> np.ndarray:
        """``(n, tables)`` int64 codes in ``[0, 2**bits)``."""
        arr = self._check(vectors)
        signs = (arr @ self.hyperplanes.T) > 0  # (n, tables*bits)
        signs = signs.reshape(arr.shape[0], self.tables, self.bits).astype(np.int64)
        return signs @ self._weights

    def band_keys(self, vectors: object) -> np.ndarray:
        """``(n, tables)`` int64 keys ``table * 2**bits + code``: what the database indexes."""
        return self.codes(vectors) + self._offsets

    def probe_keys(self, vector: object) -> np.ndarray:
        """Sorted unique keys to look up for one query vector (its own codes and, with probing, their neighbours)."""
        codes = self.codes(vector)[0]  # (tables,)
        keys = (codes[:, None] ^ self._flips[None, :]) + self._offsets[:, None]
        return np.unique(keys.ravel())

    # -- persistence ----------------------------------------------------------------------------------------------
    def config(self) -> dict[str, int]:
        """Everything needed to rebuild the same hyperplanes."""
        return {"dim": self.dim, "bits": self.bits, "tables": self.tables, "seed": self.seed}

    @classmethod
    def from_config(cls, config: dict[str, Any], *, probe_radius: int = 1) -> RandomHyperplaneLSH:
        return cls(
            int(config["dim"]),
            bits=int(config["bits"]),
            tables=int(config["tables"]),
            seed=int(config["seed"]),
            probe_radius=probe_radius,
        )

    def __repr__(self) -> str:
        return (
            f"RandomHyperplaneLSH(dim={self.dim}, bits={self.bits}, tables={self.tables}, seed={self.seed}, "
            f"probe_radius={self.probe_radius})"
        )


def _unit_rows(arr: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return arr / norms


class LSHIndex:
    """An in-memory LSH index over vectors (sorted band-key arrays + ``searchsorted``): the database-free
    counterpart of the store's SQL lookup, used by the benchmark and for quick experiments.

    ``query`` returns ``(id, cosine)`` pairs with cosine >= ``threshold``, best first, after an exact cosine
    re-check of at most ``max_candidates`` candidates (those colliding in the most tables first).

    >>> rng = np.random.default_rng(0)
    >>> data = rng.standard_normal((1000, 32)).astype(np.float32)
    >>> index = LSHIndex(RandomHyperplaneLSH(32, bits=8, tables=8, seed=1))
    >>> index.add(data)
    >>> index.query(data[42] + 0.05 * rng.standard_normal(32), threshold=0.9)[0][0]
    42
    """

    def __init__(self, lsh: RandomHyperplaneLSH) -> None:
        if not isinstance(lsh, RandomHyperplaneLSH):
            raise TypeError("LSHIndex needs a RandomHyperplaneLSH")
        self.lsh = lsh
        self._vectors = np.zeros((0, lsh.dim), dtype=np.float32)
        self._ids = np.zeros(0, dtype=np.int64)
        self._keys = np.zeros(0, dtype=np.int64)
        self._rows = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return int(self._vectors.shape[0])

    def add(self, vectors: object, ids: Sequence[int] | np.ndarray | None = None) -> None:
        """Add vectors (normalised internally) with integer ids (default: their insertion positions)."""
        arr = _unit_rows(self.lsh._check(vectors).astype(np.float32))
        start = len(self)
        new_ids = np.arange(start, start + arr.shape[0], dtype=np.int64) if ids is None else np.asarray(ids, np.int64)
        if new_ids.shape != (arr.shape[0],):
            raise ValueError(f"ids must have one entry per vector ({arr.shape[0]}), got shape {new_ids.shape}")
        keys = self.lsh.band_keys(arr)  # (n, tables)
        rows = np.repeat(np.arange(start, start + arr.shape[0], dtype=np.int64), self.lsh.tables)
        all_keys = np.concatenate([self._keys, keys.ravel()])
        all_rows = np.concatenate([self._rows, rows])
        order = np.argsort(all_keys, kind="stable")
        self._keys, self._rows = all_keys[order], all_rows[order]
        self._vectors = np.concatenate([self._vectors, arr])
        self._ids = np.concatenate([self._ids, new_ids])

    def candidates(self, vector: object, max_candidates: int | None = None) -> np.ndarray:
        """Row positions colliding with ``vector`` in any probed bucket, most collisions first."""
        probes = self.lsh.probe_keys(vector)
        lo = np.searchsorted(self._keys, probes, side="left")
        hi = np.searchsorted(self._keys, probes, side="right")
        hits = [self._rows[a:b] for a, b in zip(lo, hi, strict=True) if b > a]
        if not hits:
            return np.zeros(0, dtype=np.int64)
        rows, counts = np.unique(np.concatenate(hits), return_counts=True)
        if max_candidates is not None and rows.size > max_candidates:
            keep = np.argsort(-counts, kind="stable")[:max_candidates]
            rows = rows[keep]
        return rows

    def query(
        self, vector: object, *, threshold: float = 0.7, k: int = 1, max_candidates: int | None = None
    ) -> list[tuple[int, float]]:
        """Up to ``k`` ``(id, cosine)`` with cosine >= ``threshold`` among the LSH candidates, best first."""
        q = self.lsh._check(vector)[0]
        q = q / (float(np.linalg.norm(q)) or 1.0)
        rows = self.candidates(q, max_candidates)
        if rows.size == 0:
            return []
        sims = self._vectors[rows] @ q
        keep = sims >= threshold
        rows, sims = rows[keep], sims[keep]
        order = np.argsort(-sims, kind="stable")[:k]
        return [(int(self._ids[rows[i]]), float(sims[i])) for i in order]

    def scan(self, vector: object, *, threshold: float = 0.7, k: int = 1) -> list[tuple[int, float]]:
        """Exact brute-force cosine scan over every stored vector (the baseline LSH approximates)."""
        q = self.lsh._check(vector)[0]
        q = q / (float(np.linalg.norm(q)) or 1.0)
        if not len(self):
            return []
        sims = self._vectors @ q
        if k == 1:
            i = int(np.argmax(sims))
            return [(int(self._ids[i]), float(sims[i]))] if sims[i] >= threshold else []
        top = np.argsort(-sims, kind="stable")[:k]
        return [(int(self._ids[i]), float(sims[i])) for i in top if sims[i] >= threshold]
