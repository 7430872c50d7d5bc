"""Ask a LlamaIndex base retriever for a pool of ``n`` candidates, on a copy (the user's retriever is unchanged).

``similarity_top_k`` is the knob of ``VectorIndexRetriever``, ``BM25Retriever``, ``QueryFusionRetriever`` and
most others; a fusion retriever also passes it to each of its member retrievers. A ``QueryFusionRetriever`` in
``reciprocal_rerank`` mode is asked in ``relative_score`` mode (LlamaIndex's own weighted min-max fusion of the
same members' scores): reciprocal-rank scores keep only ranks, which FragRel gains little from (as with
LangChain's ``EnsembleRetriever``; see ``benchmarks/results/wrapper_dev.md``).
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["ranks_by_words", "sized_base"]


def _corpus_size(retriever: Any) -> int | None:
    """Nodes a BM25 retriever indexed (bm25s refuses a k above it), else None."""
    scores = getattr(getattr(retriever, "bm25", None), "scores", None)
    n = scores.get("num_docs") if isinstance(scores, dict) else None
    return int(n) if n else None


def ranks_by_words(retriever: Any) -> bool:
    """Whether ``retriever`` already ranks by the query's words: a BM25 retriever, or a fusion retriever with one
    among its members (then the wrapper fuses no second BM25 score of the pool into its scores)."""
    if _corpus_size(retriever) is not None:
        return True
    members = _fusion_members(retriever)
    return isinstance(members, list) and any(ranks_by_words(r) for r in members)


def sized_base(retriever: Any, n: int) -> Any | None:
    """A shallow copy of ``retriever`` returning ``n`` candidates, or None when it has no ``similarity_top_k``."""
    if not isinstance(getattr(retriever, "similarity_top_k", None), int):
        return None
    sized = copy.copy(retriever)
    limit = _corpus_size(retriever)
    sized.similarity_top_k = n if limit is None else min(n, limit)
    members = _fusion_members(retriever)
    if isinstance(members, list):
        _set_fusion_members(sized, [sized_base(r, n) or r for r in members])
        mode = getattr(retriever, "mode", None)
        if getattr(mode, "value", mode) == "reciprocal_rerank":
            sized.mode = type(mode)("relative_score") if not isinstance(mode, str) else "relative_score"
    return sized


# The one place that touches LlamaIndex internals: ``QueryFusionRetriever`` keeps its members in ``_retrievers``
# with no public accessor, and rebuilding it through its constructor would need its private ``_llm`` and
# ``_retriever_weights`` too (re-normalising the weights could change them in the last bit).


def _fusion_members(retriever: Any) -> Any:
    """A fusion retriever's member retrievers (a list), else None."""
    return getattr(retriever, "_retrievers", None)


def _set_fusion_members(retriever: Any, members: list[Any]) -> None:
    """Replace the members of a (copied) fusion retriever."""
    retriever._retrievers = members
