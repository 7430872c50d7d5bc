"""RAPTOR-style clustering of summary embeddings: dimension reduction, Gaussian mixtures chosen by BIC, soft
assignment, global then local passes, and a token cap per cluster enforced by re-clustering (always terminates).

scikit-learn is required (the ``[tree]`` extra); UMAP is used when ``umap-learn`` is installed (``[umap]``), else
PCA, so trees built with and without UMAP differ.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x = np.concatenate([rng.normal(0, 0.05, (6, 8)) + np.eye(8)[0], rng.normal(0, 0.05, (6, 8)) + np.eye(8)[1]])
>>> clusters = cluster_embeddings(x, [10] * 12, max_cluster_tokens=1000, dim=2, seed=0)
>>> sorted(map(sorted, clusters))
[[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]]
"""

from __future__ import annotations

import importlib.util
import logging
import math
import warnings
from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np

from ..._optional import require
from ..._validation import check_positive_int

__all__ = ["BIC_PATIENCE", "REDUCERS", "cluster_embeddings", "gmm_clusters", "pack_by_tokens", "reduce_dimensions"]

logger = logging.getLogger(__name__)

REDUCERS = ("auto", "umap", "pca")
Reducer = Literal["auto", "umap", "pca"]


def reduce_dimensions(
    x: np.ndarray, dim: int = 10, *, n_neighbors: int | None = None, seed: int = 0, method: Reducer = "auto"
) -> np.ndarray:
    """Project ``x`` (n, d) to at most ``dim`` dimensions, never more than ``n - 2`` (GMMs need room).

    ``method="auto"`` uses UMAP (cosine metric, ``n_neighbors`` clipped to ``[2, n - 1]``) when it is installed
    and ``n > dim + 1``, else PCA. With ``n <= 2`` or ``d <= dim`` the data is returned as is (float64).

    >>> reduce_dimensions(np.eye(5), 2, method="pca").shape
    (5, 2)
    """
    if method not in REDUCERS:
        raise ValueError(f"method must be one of {REDUCERS}, got {method!r}")
    x = np.asarray(x, dtype=np.float64)
    n, d = x.shape
    target = max(1, min(dim, n - 2))
    if n <= 2 or d <= target:
        return x.copy()
    if np.unique(x, axis=0).shape[0] == 1:  # identical rows: nothing to project
        return np.zeros((n, target))
    if method == "auto":
        method = "umap" if importlib.util.find_spec("umap") is not None and n > dim + 1 else "pca"
    if method == "umap":
        umap = require("umap", "umap")
        nn = max(2, min(n_neighbors or int(math.sqrt(n - 1)), n - 1))
        reducer = umap.UMAP(n_neighbors=nn, n_components=target, metric="cosine", random_state=seed, n_jobs=1)
        return np.asarray(reducer.fit_transform(x), dtype=np.float64)
    decomposition = require("sklearn.decomposition", "tree")
    return decomposition.PCA(n_components=target, svd_solver="full", random_state=seed).fit_transform(x)


#: Components tried past the best BIC so far before the search stops (see :func:`gmm_clusters`).
BIC_PATIENCE = 8


def gmm_clusters(
    x: np.ndarray, *, max_clusters: int = 50, threshold: float = 0.1, seed: int = 0, reg_covar: float = 0.05
) -> list[list[int]]:
    """Fit Gaussian mixtures with 1, 2, ... components, keep the lowest BIC, assign softly.

    The search stops at ``max_clusters`` (and ``n - 1``) components, or once :data:`BIC_PATIENCE` counts in a row
    past the best so far have not lowered the BIC: the best count of a tree layer is small (2-6 for 3-169
    summaries on the needle benchmark, where BIC never improved again after more than 2 worse counts), and the
    mixtures with many components, which cost the most to fit, were most of a model-free tree's clustering time.

    A point joins every component whose posterior is at least ``threshold``, and always its most likely one, so
    clusters may overlap and no point is lost. Clusters are returned sorted by their first member. The points are
    centred and scaled to unit RMS radius first; spherical components and ``reg_covar`` (added to every variance,
    a spread floor of about a fifth of that radius) stop components from collapsing onto single points, which BIC
    would otherwise reward on the few points a tree layer has.

    >>> gmm_clusters(np.array([[0.0], [0.1], [5.0], [5.1], [9.9], [10.0]]), seed=0)
    [[0, 1], [2, 3], [4, 5]]
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    check_positive_int(max_clusters, "max_clusters")
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    if n <= 2:
        return [list(range(n))] if n else []
    mixture = require("sklearn.mixture", "tree")
    x = x - x.mean(axis=0)
    scale = float(np.sqrt((x**2).sum(axis=1).mean()))
    x = x / scale if scale > 0 else x  # unit RMS radius, so reg_covar is a relative floor on cluster spread
    distinct = np.unique(x, axis=0).shape[0]
    if distinct == 1:
        return [list(range(n))]
    best, best_bic, best_k = None, math.inf, 0
    for k in range(1, min(max_clusters, n - 1, distinct) + 1):
        if k - best_k > BIC_PATIENCE:
            break
        gm = mixture.GaussianMixture(
            n_components=k, covariance_type="spherical", random_state=seed, reg_covar=reg_covar
        )
        with warnings.catch_warnings():  # near-duplicate points make some k converge badly; BIC then rejects them
            warnings.simplefilter("ignore", category=UserWarning)
            gm.fit(x)
        bic = gm.bic(x)
        if bic < best_bic - 1e-9:
            best, best_bic, best_k = gm, bic, k
    probs = best.predict_proba(x)  # type: ignore[union-attr]
    member = probs >= threshold
    member[np.arange(n), probs.argmax(axis=1)] = True
    return _distinct(np.flatnonzero(column).tolist() for column in member.T)


def _distinct(clusters: Iterable[list[int]]) -> list[list[int]]:
    """The distinct non-empty clusters, sorted by their members."""
    return [list(c) for c in sorted({tuple(c) for c in clusters if c})]


def pack_by_tokens(indices: Sequence[int], lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Cut ``indices`` (in order) into consecutive groups whose ``lengths`` sum to at most ``max_tokens``;
    a single item over the cap forms a group of its own. The last-resort split, so it always makes progress.

    >>> pack_by_tokens([0, 1, 2, 3], [5, 5, 20, 1], 10)
    [[0, 1], [2], [3]]
    """
    groups: list[list[int]] = []
    current: list[int] = []
    used = 0
    for i in indices:
        n = int(lengths[i])
        if current and used + n > max_tokens:
            groups.append(current)
            current, used = [], 0
        current.append(int(i))
        used += n
    if current:
        groups.append(current)
    return groups


def cluster_embeddings(
    embeddings: np.ndarray,
    lengths: Sequence[int],
    *,
    max_cluster_tokens: int = 3000,
    dim: int = 10,
    threshold: float = 0.1,
    max_clusters: int = 50,
    seed: int = 0,
    method: Reducer = "auto",
    max_depth: int = 8,
) -> list[list[int]]:
    """Cluster rows of ``embeddings`` (one per summary): global pass, then a local pass inside each global
    cluster larger than ``dim + 1``; any cluster whose ``lengths`` (tokens) sum over ``max_cluster_tokens`` is
    clustered again on its own.

    Termination: a re-clustering only recurses into strict subsets; when it cannot split a cluster (one cluster
    back, or a cluster equal to its input), or after ``max_depth`` levels, the members are packed in order by
    :func:`pack_by_tokens`. Same input and seed give the same clusters.
    """
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"embeddings must be a 2-d array (n, dim), got shape {x.shape}")
    lengths = [int(v) for v in lengths]
    if len(lengths) != x.shape[0]:
        raise ValueError(f"got {len(lengths)} lengths for {x.shape[0]} embeddings: give one token count per row")
    check_positive_int(max_cluster_tokens, "max_cluster_tokens")
    check_positive_int(dim, "dim")

    def fit(idx: list[int], n_neighbors: int | None) -> list[list[int]]:
        z = reduce_dimensions(x[idx], dim, n_neighbors=n_neighbors, seed=seed, method=method)
        local = gmm_clusters(z, max_clusters=max_clusters, threshold=threshold, seed=seed)
        return [[idx[j] for j in c] for c in local]

    def global_local(idx: list[int]) -> list[list[int]]:
        return [c for g in fit(idx, None) for c in ([g] if len(g) <= dim + 1 else fit(g, 10))]

    def capped(cluster: list[int], depth: int) -> list[list[int]]:
        if len(cluster) == 1 or sum(lengths[i] for i in cluster) <= max_cluster_tokens:
            return [cluster]
        if depth >= max_depth:
            return pack_by_tokens(cluster, lengths, max_cluster_tokens)
        parts = global_local(cluster)
        if len(parts) <= 1 or any(len(p) >= len(cluster) for p in parts):
            logger.debug("cluster of %d summaries cannot be split by a GMM: packing it in order", len(cluster))
            return pack_by_tokens(cluster, lengths, max_cluster_tokens)
        return [c for p in parts for c in capped(p, depth + 1)]

    if x.shape[0] == 0:
        return []
    clusters = [c for g in global_local(list(range(x.shape[0]))) for c in capped(g, 0)]
    return _distinct(sorted(c) for c in clusters)
