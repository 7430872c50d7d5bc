"""Pick fragments from scores: top-k, a word budget, and re-ordering by position."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .fragments import Fragment

__all__ = ["check_k", "order_by_position", "select"]


def check_k(k: object, name: str = "k") -> int | None:
    """``None`` or a positive int."""
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k <= 0:
        raise ValueError(f"{name} must be a positive int or None, got {k!r}")
    return int(k)


def _ranked(scores: np.ndarray, m: int) -> np.ndarray:
    """Indices of the ``m`` best scores, best first; ties keep corpus order."""
    n = scores.shape[0]
    if m >= n:
        return np.argsort(-scores, kind="stable")
    part = np.argpartition(-scores, m - 1)[:m]
    cut = scores[part].min()
    part = np.flatnonzero(scores >= cut)  # keep all ties at the cut so the stable order is exact
    return part[np.argsort(-scores[part], kind="stable")][:m]


def select(
    scores: np.ndarray,
    *,
    k: int | None = None,
    budget: int | None = None,
    lengths: Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """Indices to return, best first: at most ``k``, and within ``budget`` (sum of ``lengths``) if given.

    With a budget, fragments are taken in rank order; one that does not fit is skipped and smaller ones after
    it may still fill the budget. Without ``k`` and ``budget``, nothing is cut: pass one of them.

    >>> select(np.array([0.1, 0.9, 0.5]), k=2).tolist()
    [1, 2]
    >>> select(np.array([0.1, 0.9, 0.5]), budget=5, lengths=[2, 4, 3]).tolist()
    [1]
    """
    k = check_k(k)
    budget = check_k(budget, "budget")
    n = scores.shape[0]
    if budget is None:
        return _ranked(scores, n if k is None else min(k, n))
    if lengths is None:
        raise ValueError("a budget needs the fragment lengths")
    lengths = np.asarray(lengths)
    out: list[int] = []
    left = budget
    m = min(n, max(64, 4 * (k or 16)))
    seen = 0
    while seen < n:
        ranked = _ranked(scores, m)
        for i in ranked[seen:]:
            if lengths[i] <= left:
                out.append(int(i))
                left -= int(lengths[i])
                if left == 0 or (k is not None and len(out) == k):
                    return np.asarray(out, dtype=np.int64)
        seen, m = m, min(n, 4 * m)
    return np.asarray(out, dtype=np.int64)


def order_by_position(fragments: Sequence[Fragment], indices: np.ndarray) -> np.ndarray:
    """Re-order selected indices by (first appearance of their document, position) — e.g. turns by time."""
    first_seen: dict[str, int] = {}
    for i in indices:
        first_seen.setdefault(fragments[i].doc_id, len(first_seen))
    return np.asarray(
        sorted(indices, key=lambda i: (first_seen[fragments[i].doc_id], fragments[i].position)),
        dtype=np.int64,
    )
