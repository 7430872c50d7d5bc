"""Ask a LangChain base retriever for a pool of ``n`` candidates, with its own scores where it has them.

Most ``BaseRetriever`` classes ignore an invoke kwarg ``k``, so the pool size is set on a copy of the retriever:
``search_kwargs["k"]`` of a vector-store retriever, the ``k`` field of retrievers that have one, and each member of
an ``EnsembleRetriever``. The copy also hands over the base's own scores, so nothing needs re-embedding: a
vector store's relevance scores, a ``BM25Retriever``'s BM25 scores (its ranking unchanged) and, for an
``EnsembleRetriever``, the weighted sum of its members' min-max scaled scores instead of reciprocal rank fusion.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableBinding
from langchain_core.vectorstores import VectorStoreRetriever

from ..core.kit.pool import fuse_minmax, oriented_scores

__all__ = ["BASE_SCORE_KEY", "oriented", "ranks_by_words", "sized_base", "takes_k"]

#: Metadata key under which a vector store's own relevance score reaches the re-ranker.
BASE_SCORE_KEY = "fragrel_base_score"
_SCORED_SEARCHES = ("similarity", "similarity_score_threshold")


def takes_k(runnable: object) -> bool:
    """Whether ``runnable`` forwards invoke kwargs (such as ``k``) to a BaseRetriever that reads them."""
    while isinstance(runnable, RunnableBinding):
        runnable = runnable.bound
    return isinstance(runnable, BaseRetriever) and _forwards_invoke_kwargs(runnable)


def _forwards_invoke_kwargs(retriever: BaseRetriever) -> bool:
    """The one place that reads LangChain internals: ``BaseRetriever`` forwards invoke kwargs only when its
    ``_get_relevant_documents`` takes more than ``query`` and ``run_manager``, and records that in the class flag
    ``_expects_other_args`` (set in ``__init_subclass__``); LangChain offers no public way to ask."""
    return bool(type(retriever)._expects_other_args)


def oriented(pairs: list[tuple[Document, float]]) -> list[tuple[Document, float]]:
    """Raw store scores made "higher is better": a store lists its best match first, so scores that grow down the
    list are distances and are negated (an affine change, which FragRel's ranking does not see).

    >>> [s for _, s in oriented([(Document("a"), 0.1), (Document("b"), 0.4)])]
    [-0.1, -0.4]
    """
    return [(d, s) for (d, _), s in zip(pairs, oriented_scores([s for _, s in pairs]), strict=True)]


def _with_score(doc: Document, score: float) -> Document:
    return doc.model_copy(update={"metadata": {**doc.metadata, BASE_SCORE_KEY: float(score)}})


def _is_bm25(base: object) -> bool:
    """A ``BM25Retriever``-like retriever (langchain-community): a rank-bm25 ``vectorizer`` over ``docs``."""
    return (
        isinstance(base, BaseRetriever)
        and callable(getattr(getattr(base, "vectorizer", None), "get_scores", None))
        and isinstance(getattr(base, "docs", None), list)
        and callable(getattr(base, "preprocess_func", None))
        and isinstance(getattr(base, "k", None), int)
    )


def _is_fusion(base: object) -> bool:
    """An ``EnsembleRetriever``-like retriever: weighted reciprocal rank fusion of ``retrievers``."""
    return (
        isinstance(base, BaseRetriever)
        and isinstance(getattr(base, "retrievers", None), list)
        and isinstance(getattr(base, "weights", None), list)
        and isinstance(getattr(base, "c", None), int | float)
        and callable(getattr(base, "weighted_reciprocal_rank", None))
    )


def ranks_by_words(base: object) -> bool:
    """Whether ``base`` already ranks by the query's words: a ``BM25Retriever`` with its own ``preprocess_func``,
    or an ``EnsembleRetriever`` with one among its members (then the wrapper fuses no second BM25 score of the pool
    into its scores). LangChain's default preprocessing only splits on spaces ("Boat," is not "boat"), so the
    pool's BM25 on lower-cased words still adds to it (HotpotQA sentences dev R@5 +7.5 instead of -2.0)."""
    while isinstance(base, RunnableBinding):
        base = base.bound
    if _is_bm25(base):
        return getattr(base.preprocess_func, "__name__", None) != "default_preprocessing_func"
    members = getattr(base, "retrievers", None)
    return _is_fusion(base) and isinstance(members, list) and any(ranks_by_words(r) for r in members)


class _ScoredBM25Retriever(BaseRetriever):
    """A ``BM25Retriever`` that returns its ranking unchanged, each Document with its BM25 score."""

    bm25: Any

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        b = self.bm25
        scores = np.asarray(b.vectorizer.get_scores(b.preprocess_func(query)), dtype=np.float64)
        if scores.shape != (len(b.docs),):
            return b.invoke(query, {"callbacks": run_manager.get_child()})  # an index out of step: its ranking
        top = np.argsort(scores)[::-1][: b.k]  # the order rank-bm25's get_top_n returns
        return [_with_score(b.docs[i], scores[i]) for i in top]


class _ScoredFusionRetriever(BaseRetriever):
    """An ``EnsembleRetriever`` that fuses its members' own scores: ``sum_i weight_i * minmax_i(score)`` (0 where
    member ``i`` did not return the Document), best first, the fused score in each Document's metadata.

    The ensemble's reciprocal rank fusion keeps only ranks; on the dev LoCoMo conversations FragRel gained
    +1.6 R@5 over RRF scores and +6.3 over the min-max fusion of the same members (which alone is +2.3 over RRF).
    """

    fusion: Any

    def _key(self, doc: Document) -> Any:
        id_key = getattr(self.fusion, "id_key", None)
        return doc.page_content if id_key is None else doc.metadata[id_key]

    def _fuse(self, lists: list[list[Document]]) -> list[Document]:
        lists = lists[: len(self.fusion.weights)]  # members without a weight do not count
        first: dict[Any, Document] = {}
        for doc in (doc for docs in lists for doc in docs):
            first.setdefault(self._key(doc), doc)
        members = [[(self._key(d), d.metadata.get(BASE_SCORE_KEY)) for d in docs] for docs in lists]
        return [_with_score(first[key], score) for key, score in fuse_minmax(members, self.fusion.weights)]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        lists = [
            r.invoke(query, {"callbacks": run_manager.get_child(tag=f"retriever_{i + 1}")})
            for i, r in enumerate(self.fusion.retrievers)
        ]
        return self._fuse(lists)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        lists = await asyncio.gather(
            *(
                r.ainvoke(query, {"callbacks": run_manager.get_child(tag=f"retriever_{i + 1}")})
                for i, r in enumerate(self.fusion.retrievers)
            )
        )
        return self._fuse(list(lists))


class _ScoredVectorStoreRetriever(VectorStoreRetriever):
    """A vector-store retriever that returns the store's own score in each Document's metadata: its relevance
    score, else its raw similarity/distance oriented by its ranking, else none (the ranking is used)."""

    def _with_scores(self, pairs: list[tuple[Document, float]]) -> list[Document]:
        return [_with_score(d, s) for d, s in pairs]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        search = self.search_kwargs | kwargs
        try:
            return self._with_scores(self.vectorstore.similarity_search_with_relevance_scores(query, **search))
        except NotImplementedError:  # no relevance function (e.g. InMemoryVectorStore): the raw score
            pass
        try:
            return self._with_scores(oriented(self.vectorstore.similarity_search_with_score(query, **search)))
        except NotImplementedError:  # a store without scores: its ranking is all we get
            return super()._get_relevant_documents(query, run_manager=run_manager, **kwargs)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        search = self.search_kwargs | kwargs
        try:
            return self._with_scores(await self.vectorstore.asimilarity_search_with_relevance_scores(query, **search))
        except NotImplementedError:
            pass
        try:
            return self._with_scores(oriented(await self.vectorstore.asimilarity_search_with_score(query, **search)))
        except NotImplementedError:
            return await super()._aget_relevant_documents(query, run_manager=run_manager, **kwargs)


def sized_base(base: Any, n: int) -> Any | None:
    """A copy of ``base`` that returns ``n`` candidates (scored where the store can), or None if it has no knob.

    The original retriever is never changed; the copy shares its vector store, index and documents.
    """
    if isinstance(base, VectorStoreRetriever):
        kwargs = {**base.search_kwargs, "k": n}
        if base.search_type == "mmr":
            kwargs["fetch_k"] = max(int(kwargs.get("fetch_k", 20)), 2 * n)
            return base.model_copy(update={"search_kwargs": kwargs})
        if base.search_type in _SCORED_SEARCHES and type(base) is VectorStoreRetriever:
            fields = {name: getattr(base, name) for name in type(base).model_fields}
            return _ScoredVectorStoreRetriever(**{**fields, "search_kwargs": kwargs})
        return base.model_copy(update={"search_kwargs": kwargs})
    if not isinstance(base, BaseRetriever):
        return None
    fields = type(base).model_fields
    if "k" in fields and isinstance(getattr(base, "k", None), int):
        copy = base.model_copy(update={"k": n})
        return _ScoredBM25Retriever(bm25=copy) if _is_bm25(copy) else copy
    members = getattr(base, "retrievers", None)
    if "retrievers" in fields and isinstance(members, list):  # EnsembleRetriever and the like
        sized = [sized_base(r, n) for r in members]
        if any(s is not None for s in sized):
            merged = [r if s is None else s for r, s in zip(members, sized, strict=True)]
            copy = base.model_copy(update={"retrievers": merged})
            return _ScoredFusionRetriever(fusion=copy) if _is_fusion(copy) else copy
    return None
