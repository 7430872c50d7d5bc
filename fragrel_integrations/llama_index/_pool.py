"""Ask a LlamaIndex base retriever for a pool of ``n`` candidates, on a copy (the user's retriever is unchanged).

What the base's node scores are is read from its vector store's own metric (:func:`score_kind`): LlamaIndex
passes a store's raw scores on as node scores, and some are distances (FAISS ``IndexFlatL2``, Milvus and Qdrant
with an L2 metric).

``similarity_top_k`` is the knob of ``VectorIndexRetriever``, ``BM25Retriever``, ``QueryFusionRetriever`` and
most others; a fusion retriever also passes it to each of its member retrievers. A ``QueryFusionRetriever`` in
``reciprocal_rerank`` mode is asked in ``relative_score`` mode (LlamaIndex's own weighted min-max fusion of the
same members' scores): reciprocal-rank scores keep only ranks, which FragRel gains little from (as with
LangChain's ``EnsembleRetriever``; see ``benchmarks/results/wrapper_dev.md``).
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["ranks_by_words", "score_kind", "sized_base"]


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
        sized._retrievers = [sized_base(r, n) or r for r in members]
        mode = getattr(retriever, "mode", None)
        if getattr(mode, "value", mode) == "reciprocal_rerank":
            sized.mode = type(mode)("relative_score") if not isinstance(mode, str) else "relative_score"
    return sized


# ------------------------------------------------------------------------------------------ what scores mean

#: Milvus ``similarity_metric`` -> score kind (Milvus returns squared L2 distances for "L2").
_MILVUS_KINDS = {"L2": "squared_l2", "IP": "similarity", "COSINE": "similarity"}
#: Qdrant ``Distance`` -> score kind (Qdrant returns the Euclidean and Manhattan distances themselves).
_QDRANT_KINDS = {"Euclid": "l2", "Manhattan": "distance", "Cosine": "similarity", "Dot": "similarity"}


def _faiss_kind(index: Any) -> str | None:
    """A FAISS index's metric (``IndexFlatL2`` and every ``METRIC_L2`` index give squared L2 distances)."""
    metric = getattr(index, "metric_type", None)
    if not isinstance(metric, int):
        return None
    import faiss  # present: the index is a faiss object

    return "squared_l2" if metric == faiss.METRIC_L2 else "similarity" if metric == faiss.METRIC_INNER_PRODUCT else None


def _qdrant_kind(store: Any) -> str | None:
    """A Qdrant collection's distance, as the server reports it (None when the collection does not exist yet)."""
    try:
        vectors = store.client.get_collection(store.collection_name).config.params.vectors
    except Exception:
        return None
    if isinstance(vectors, dict):
        vectors = vectors.get(getattr(store, "dense_vector_name", None)) or next(iter(vectors.values()), None)
    distance = getattr(getattr(vectors, "distance", None), "value", None)
    return _QDRANT_KINDS.get(distance)  # type: ignore[arg-type]


def score_kind(retriever: Any) -> str | None:
    """What the node scores of ``retriever`` are, from its vector store's own metric where it says (see
    :data:`~fragrel_integrations.adapters.pools.SCORE_KINDS`); None when it does not (the orientation rule decides).
    A ``VectorIndexRetriever`` keeps its store in ``_vector_store``, with no public accessor."""
    store = getattr(retriever, "_vector_store", None)
    name = type(store).__name__
    if name == "FaissVectorStore":
        return _faiss_kind(store.client)
    if name == "MilvusVectorStore":
        return _MILVUS_KINDS.get(str(getattr(store, "similarity_metric", "")).upper())
    if name == "QdrantVectorStore":
        return _qdrant_kind(store)
    if name in ("SimpleVectorStore", "ChromaVectorStore", "LanceDBVectorStore"):
        return "similarity"  # cosine; the Chroma and LanceDB wrappers turn their distances into exp(-d)
    return None


def _fusion_members(retriever: Any) -> Any:
    """A fusion retriever's member retrievers (a list), else None. ``QueryFusionRetriever`` keeps them in
    ``_retrievers`` with no public accessor, and rebuilding it through its constructor would need its private
    ``_llm`` and ``_retriever_weights`` too (re-normalising the weights could change them in the last bit)."""
    return getattr(retriever, "_retrievers", None)
