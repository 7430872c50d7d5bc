"""FragRel's relation-aware score (paper eq. 9-10), as pure array functions.

``s_env_i = sum_{j!=i} w_ij s_j / sum_{j!=i} w_ij`` (0 where the denominator is 0) and
``s_rel_i = s_ind_i + alpha * s_env_i``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

__all__ = [
    "check_alpha",
    "check_scores",
    "check_top_m",
    "environment_from_sums",
    "fragrel_scores",
    "matrix_sums",
    "relation_aware_scores",
    "top_m_excess",
]


def check_scores(scores: object, name: str = "scores") -> np.ndarray:
    """Return ``scores`` as a 1-D finite float64 array or raise ValueError/TypeError."""
    try:
        arr = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a 1-D array of numbers") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"{name} must be finite; {name}[{bad}] = {arr[bad]} (drop or fix NaN/inf scores)")
    return arr


def check_alpha(alpha: object) -> float:
    """Validate the environment weight ``alpha`` (a finite number >= 0)."""
    if isinstance(alpha, bool) or not isinstance(alpha, int | float | np.floating | np.integer):
        raise TypeError(f"alpha must be a number, got {type(alpha).__name__}")
    alpha = float(alpha)
    if not math.isfinite(alpha) or alpha < 0:
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha}")
    return alpha


def matrix_sums(weights: np.ndarray | sp.sparray | sp.spmatrix, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(sum_{j!=i} w_ij s_j, sum_{j!=i} w_ij)`` for a dense or sparse ``N x N`` weight matrix."""
    n = s.shape[0]
    w = sp.csr_array(weights, dtype=np.float64) if sp.issparse(weights) else np.asarray(weights, dtype=np.float64)
    if w.shape != (n, n):
        raise ValueError(f"weights must have shape ({n}, {n}), got {w.shape}")
    data = w.data if sp.issparse(w) else w
    diag = w.diagonal()
    if data.size and not np.all(np.isfinite(data)):
        raise ValueError("weights must be finite")
    if data.size and data.min() < 0:
        raise ValueError("weights must be >= 0 (a relation says how strongly, never against)")
    num = w @ s - diag * s
    den = np.asarray(w.sum(axis=1)).ravel() - diag
    return np.asarray(num).ravel(), den


def environment_from_sums(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` where ``den > 0``, else 0 (a fragment with no related fragment has no environment)."""
    out = np.zeros_like(num, dtype=np.float64)
    np.divide(num, den, out=out, where=den > 1e-300)
    return out


def check_top_m(top_m: object) -> int | None:
    """Validate ``top_m`` (a positive int, or None for "every fragment lends support")."""
    if top_m is None:
        return None
    if isinstance(top_m, bool) or not isinstance(top_m, int | np.integer) or top_m <= 0:
        raise ValueError(
            f"top_m must be a positive int (e.g. 10) or None (every fragment lends support), got {top_m!r}"
        )
    return int(top_m)


def top_m_excess(s: np.ndarray, m: int | None) -> np.ndarray:
    """The scores that lend support to their related fragments: ``max(0, s - s_(m+1))``, how far each of the top
    ``m`` scores stands above the ``(m+1)``-th best (0 for every other fragment); ``s`` itself when ``m`` is None.

    Only fragments the base ranks near the top then lift their neighbours, so a long tail of weakly related
    text cannot outvote the base (the dev sweep in ``benchmarks/results/quality.md``: one setting gains on
    dialogue and costs little on haystacks and multi-document sets).

    >>> top_m_excess(np.array([0.9, 0.5, 0.75, 0.0]), 2).tolist()
    [0.4, 0.0, 0.25, 0.0]
    """
    if m is None or s.size == 0:
        return s
    if s.size <= m:
        return s - s.min()
    return np.maximum(s - np.partition(s, -(m + 1))[-(m + 1)], 0.0)


def fragrel_scores(
    s_ind: np.ndarray,
    sums: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    alpha: float,
    *,
    top_m: int | None = None,
    full_weight: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The FragRel pipeline every component runs: ``(s_env, s_rel)`` for independent scores ``s_ind``.

    ``sums(s)`` gives ``(sum_{j!=i} w_ij s_j, sum_{j!=i} w_ij)`` (a prepared relation's ``sums``, or
    :func:`matrix_sums` over a weight matrix). ``top_m`` lends support only from the ``top_m`` best fragments
    (:func:`top_m_excess`; None: all, as in the paper). ``full_weight`` (a relation's
    :meth:`~fragrel_integrations.core.relations.Relation.full_weight`, for a pool cut from a larger corpus) counts
    the weight missing from ``den`` with the lowest support; None or 0 normalises over what ``sums`` sees.
    ``alpha`` must already be checked (:func:`check_alpha`).

    >>> ones = lambda s: (np.ones((3, 3)) @ s - s, np.full(3, 2.0))
    >>> [x.tolist() for x in fragrel_scores(np.array([1.0, 0.0, 0.5]), ones, 0.5)]
    [[0.25, 0.75, 0.5], [1.125, 0.375, 0.75]]
    """
    support = top_m_excess(s_ind, top_m)
    num, den = sums(support)
    if full_weight:
        floor = float(support.min())
        s_env = (num + floor * np.maximum(full_weight - den, 0.0)) / full_weight
    else:
        s_env = environment_from_sums(num, den)
    return s_env, s_ind + alpha * s_env


def relation_aware_scores(
    s_ind: np.ndarray,
    weights: np.ndarray | sp.sparray | sp.spmatrix,
    alpha: float = 0.5,
    *,
    return_environment: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Relation-aware scores ``s_ind + alpha * s_env`` (FragRel eq. 9-10, ``j != i``).

    ``weights`` is a dense array or scipy.sparse matrix; its diagonal is ignored.

    >>> relation_aware_scores(np.array([1.0, 0.0, 0.5]), np.ones((3, 3)), alpha=0.5).tolist()
    [1.125, 0.375, 0.75]
    """
    s = check_scores(s_ind, "s_ind")
    a = check_alpha(alpha)
    env, rel = fragrel_scores(s, lambda x: matrix_sums(weights, x), a)
    return (rel, env) if return_environment else rel
