"""Re-rank the candidates of ANY base retriever with FragRel (the core of every framework wrapper)."""

from __future__ import annotations

from collections.abc import Sequence

from ..models.base import Embedder, embed_documents
from .relations import FragmentLayout, Relation
from .scorers import DenseScorer
from .scoring import check_alpha, check_scores, environment_from_sums
from .selection import check_k, order_by_position, select
from .store import FragmentStore
from .types import Fragment, ScoredFragment

__all__ = ["dedupe", "rerank"]


def dedupe(fragments: Sequence[Fragment], scores: Sequence[float | None] | None = None):
    """Drop repeated ``(doc_id, position)`` keys, keeping the first (best-ranked) occurrence."""
    seen: set[tuple[str, int]] = set()
    keep = []
    for i, f in enumerate(fragments):
        key = (f.doc_id, f.position)
        if key not in seen:
            seen.add(key)
            keep.append(i)
    out_f = [fragments[i] for i in keep]
    return out_f, (None if scores is None else [scores[i] for i in keep])


def rerank(
    query: str,
    candidates: Sequence[Fragment],
    *,
    relation: Relation,
    alpha: float = 0.5,
    k: int | None = None,
    scores: Sequence[float | None] | None = None,
    embedder: Embedder | None = None,
    store: FragmentStore | None = None,
    expand: int = 0,
    order: str = "score",
) -> list[ScoredFragment]:
    """FragRel over a candidate pool from a base retriever.

    Candidates are de-duplicated by ``(doc_id, position)``. With a ``store`` and ``expand > 0``, the stored
    fragments within ``expand`` positions of each candidate join the pool. Independent scores are the base
    retriever's ``scores`` when every pool member has one; otherwise (missing scores, or expanded neighbours)
    every pool member is scored by the ``embedder``'s cosine, so that all scores share one scale. Without an
    ``embedder`` the embedded default is used behind an LRU cache, so a pool is embedded once across queries.
    """
    if not isinstance(query, str):
        raise TypeError(f"query must be str, got {type(query).__name__}")
    alpha = check_alpha(alpha)
    k = check_k(k)
    if scores is not None and len(scores) != len(candidates):
        raise ValueError(f"{len(scores)} scores for {len(candidates)} candidates")
    pool, pool_scores = dedupe(list(candidates), scores)
    if not pool:
        return []
    if store is not None and expand > 0:
        extra = store.neighbours([(f.doc_id, f.position) for f in pool], radius=expand)
        pool += extra
        pool_scores = None if pool_scores is None else [*pool_scores, *([None] * len(extra))]
    use_base = pool_scores is not None and all(s is not None for s in pool_scores)
    embeddings = None
    if not use_base or relation.needs_embeddings:
        if embedder is None:
            from ..models.local import default_cached_embedder

            embedder = default_cached_embedder()
        embeddings = embed_documents(embedder, [f.text for f in pool])
    if use_base:
        s_ind = check_scores(pool_scores, "base retriever scores")
    else:
        s_ind = DenseScorer(embeddings, embedder)(query)
    layout = FragmentLayout.from_fragments(pool, embeddings)
    s_env = environment_from_sums(*relation.prepare(layout).sums(s_ind))
    s_rel = s_ind + alpha * s_env
    picked = select(s_rel, k=k)
    if order == "position":
        picked = order_by_position(pool, picked)
    return [ScoredFragment(pool[i], float(s_rel[i]), float(s_ind[i]), float(s_env[i])) for i in picked]
