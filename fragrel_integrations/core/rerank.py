"""Re-rank the candidates of ANY base retriever with FragRel (the core of every framework wrapper)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np

from .._validation import check_type
from ..models.embedder import Embedder, embed_documents
from .fragments import Fragment, ScoredFragment
from .relation_aware import check_alpha, check_scores, check_top_m, fragrel_scores
from .relations import FragmentLayout, Relation
from .scorers import BM25Scorer, DenseScorer, minmax
from .selection import check_k, order_by_position, select

__all__ = ["NeighbourSource", "dedupe", "lexical_fusion", "rank_pool_size", "rank_scores", "rerank"]


class NeighbourSource(Protocol):
    """Where a re-ranker finds the fragments next to its candidates (:class:`FragmentStore` is one)."""

    def neighbours(self, keys: Sequence[tuple[str, int]], radius: int = 1) -> list[Fragment]: ...


def dedupe(fragments: Sequence[Fragment], scores: Sequence[float | None] | None = None):
    """Drop repeated ``(doc_id, position)`` keys, keeping the first (best-ranked) occurrence.

    A repeat must be the same fragment (same text), as when two base retrievers of an ensemble both return it;
    two *different* texts at one location raise ValueError instead of silently losing one of them.
    """
    seen: dict[tuple[str, int], str] = {}
    keep = []
    for i, f in enumerate(fragments):
        key = (f.doc_id, f.position)
        if key not in seen:
            seen[key] = f.text
            keep.append(i)
        elif seen[key] != f.text:
            raise ValueError(
                f"two different candidates share doc_id={f.doc_id!r} and position={f.position}: tag all chunks of a "
                "document in one add_positions / PositionTagger pass (positions restart at 0 on every call), or give "
                "each document its own doc_id"
            )
    out_f = [fragments[i] for i in keep]
    return out_f, (None if scores is None else [scores[i] for i in keep])


def rank_scores(n: int) -> np.ndarray:
    """Independent scores for a base that gives none, from its ranking alone: ``1 - r / n`` for rank ``r``.

    >>> rank_scores(4).tolist()
    [1.0, 0.75, 0.5, 0.25]
    """
    return 1.0 - np.arange(n, dtype=np.float64) / max(n, 1)


def rank_pool_size(k: int) -> int:
    """Candidates of a score-less base that are ranked: ``max(4 * k, 20)``.

    On the dev LoCoMo conversations (dialogue preset) a deeper rank pool lost recall (``docs/results.md``).

    >>> rank_pool_size(5), rank_pool_size(10)
    (20, 40)
    """
    return max(4 * k, 20)


def lexical_fusion(query: str, texts: Sequence[str], base: np.ndarray, lexical: float) -> np.ndarray:
    """``(1 - lexical) * minmax(base) + lexical * minmax(bm25)``: the base's scores (or ranks) fused with a BM25
    score computed on the candidates themselves (the pool's own term statistics), so that the words of the query
    count beside what the base knew; ``lexical=0`` returns ``base`` unchanged.

    >>> lexical_fusion("boats", ["goats", "boats", "coats"], np.array([1.0, 0.5, 0.0]), 0.5).round(2).tolist()
    [0.5, 0.75, 0.0]
    """
    if lexical == 0:
        return base
    bm25 = BM25Scorer(texts)(query)
    return (1.0 - lexical) * minmax(base) + lexical * minmax(bm25)


def rerank(
    query: str,
    candidates: Sequence[Fragment],
    *,
    relation: Relation,
    alpha: float = 0.5,
    k: int | None = None,
    scores: Sequence[float | None] | None = None,
    embedder: Embedder | None = None,
    store: NeighbourSource | None = None,
    expand: int = 0,
    order: str = "score",
    outside: Literal["floor", "ignore"] = "floor",
    top_m: int | None = None,
    lexical: float = 0.0,
    score_embedder: Embedder | None = None,
) -> list[ScoredFragment]:
    """FragRel over a candidate pool from a base retriever, best first.

    ``candidates`` come in the base's ranking, best first (duplicates by ``(doc_id, position)`` are dropped).
    Independent scores, always on one scale:

    - the base's ``scores`` when every candidate has one;
    - else, with a ``score_embedder``, the cosine of its embeddings for every candidate (your model, your explicit
      choice: it replaces the base's ranking);
    - else the base's ranking as :func:`rank_scores` — over the whole pool when ``lexical > 0`` (the pool's BM25
      lifts what the ranking alone could not, ``docs/results.md``), else over its best :func:`rank_pool_size` —
      no model is loaded.

    ``lexical > 0`` fuses the base's scores (or ranks) with a BM25 score computed on the pool itself
    (:func:`lexical_fusion`). ``embedder`` serves only a relation that needs embeddings; it never scores the pool.

    With a ``store`` (anything with ``neighbours(keys, radius=)``, e.g. a :class:`FragmentStore`) and
    ``expand > 0``, the stored fragments within ``expand`` positions of each candidate join the pool with the
    pool's lowest score (the base did not rank them higher than that), unless the embedder scores the pool.
    ``outside="floor"`` (default) counts every position outside the pool with that lowest score when the
    relation defines its full weight (:meth:`Relation.full_weight`, e.g. :class:`ContextRelation`), so a
    candidate whose neighbours the base missed is not judged by a far-away candidate alone; ``"ignore"``
    normalises over the pool only (eq. 9-10 on the pool, as if it were the whole corpus). ``top_m=m`` lets only
    the ``m`` best candidates lend support, by how far they stand above the ``(m+1)``-th
    (:func:`~fragrel_integrations.core.relation_aware.top_m_excess`); the pool then holds every fragment that lends
    support, so the environment is the one the whole corpus would give. The embedded MiniLM is loaded only for
    a relation that needs embeddings and no ``embedder``.
    """
    check_type(query, str, "query must be str")
    alpha = check_alpha(alpha)
    k = check_k(k)
    top_m = check_top_m(top_m)
    if outside not in ("floor", "ignore"):
        raise ValueError(f"outside must be 'floor' or 'ignore', got {outside!r}")
    if scores is not None and len(scores) != len(candidates):
        raise ValueError(f"{len(scores)} scores for {len(candidates)} candidates")
    pool, pool_scores = dedupe(list(candidates), scores)
    if not pool:
        return []
    if not 0.0 <= lexical <= 1.0:
        raise ValueError(f"lexical must be a number in [0, 1] (weight of the pool's BM25 score), got {lexical!r}")
    has_base = pool_scores is not None and all(s is not None for s in pool_scores)
    if not has_base and score_embedder is None and k is not None and lexical == 0:
        pool = pool[: rank_pool_size(k)]  # ranks alone carry little information further down
    n_base = len(pool)
    if store is not None and expand > 0:
        pool += store.neighbours([(f.doc_id, f.position) for f in pool], radius=expand)
    by_embedder = not has_base and score_embedder is not None
    embeddings = None
    if by_embedder or relation.needs_embeddings:
        if embedder is None:
            if score_embedder is not None:
                embedder = score_embedder
            else:
                from ..models.local import default_cached_embedder

                embedder = default_cached_embedder()
        embeddings = embed_documents(embedder, [f.text for f in pool])
    if by_embedder:
        if score_embedder is not embedder:
            s_ind = DenseScorer(embed_documents(score_embedder, [f.text for f in pool]), score_embedder)(query)
        else:
            s_ind = DenseScorer(embeddings, score_embedder)(query)
    else:
        base = check_scores(pool_scores, "base retriever scores") if has_base else rank_scores(n_base)
        base = lexical_fusion(query, [f.text for f in pool[:n_base]], base, lexical)
        s_ind = np.concatenate([base, np.full(len(pool) - n_base, base.min())])
    layout = FragmentLayout.from_fragments(pool, embeddings)
    full = relation.full_weight() if outside == "floor" else None
    s_env, s_rel = fragrel_scores(s_ind, relation.prepare(layout).sums, alpha, top_m=top_m, full_weight=full)
    picked = select(s_rel, k=k)
    if order == "position":
        picked = order_by_position(pool, picked)
    return [ScoredFragment(pool[i], float(s_rel[i]), float(s_ind[i]), float(s_env[i])) for i in picked]
