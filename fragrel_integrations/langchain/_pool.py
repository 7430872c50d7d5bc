"""Ask a LangChain base retriever for a pool of ``n`` candidates, with its own scores where it has them.

FragRel can only change *what* is returned if the base hands it more candidates than it returns. A
``BaseRetriever`` forwards invoke kwargs only when its ``_get_relevant_documents`` takes them; most do not
(``BM25Retriever`` silently ignores ``k``), so the pool size is set on a copy of the retriever instead:
``search_kwargs["k"]`` of a vector-store retriever, the ``k`` field of retrievers that have one, and each member
of an ``EnsembleRetriever``. A vector-store retriever that searches by similarity is asked for the store's
relevance scores (``similarity_search_with_relevance_scores``), so nothing needs re-embedding.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableBinding
from langchain_core.vectorstores import VectorStoreRetriever

__all__ = ["BASE_SCORE_KEY", "default_pool_size", "oriented", "sized_base", "takes_k"]

#: Metadata key under which a vector store's own relevance score reaches the re-ranker.
BASE_SCORE_KEY = "fragrel_base_score"
_SCORED_SEARCHES = ("similarity", "similarity_score_threshold")


def default_pool_size(k: int) -> int:
    """Candidates asked of the base when the user sets no ``pool_size``: ``max(10 * k, 50)``.

    >>> default_pool_size(5), default_pool_size(10)
    (50, 100)
    """
    return max(10 * k, 50)


def takes_k(runnable: object) -> bool:
    """Whether ``runnable`` forwards invoke kwargs (such as ``k``) to a BaseRetriever that reads them."""
    while isinstance(runnable, RunnableBinding):
        runnable = runnable.bound
    return isinstance(runnable, BaseRetriever) and bool(runnable._expects_other_args)


def oriented(pairs: list[tuple[Document, float]]) -> list[tuple[Document, float]]:
    """Raw store scores made "higher is better": a store lists its best match first, so scores that grow down the
    list are distances and are negated (an affine change, which FragRel's ranking does not see).

    >>> [s for _, s in oriented([(Document("a"), 0.1), (Document("b"), 0.4)])]
    [-0.1, -0.4]
    """
    scores = [s for _, s in pairs]
    if len(scores) > 1 and scores[-1] > scores[0]:
        return [(d, -s) for d, s in pairs]
    return pairs


class _ScoredVectorStoreRetriever(VectorStoreRetriever):
    """A vector-store retriever that returns the store's own score in each Document's metadata: its relevance
    score, else its raw similarity/distance oriented by its ranking, else none (the ranking is used)."""

    def _with_scores(self, pairs: list[tuple[Document, float]]) -> list[Document]:
        return [d.model_copy(update={"metadata": {**d.metadata, BASE_SCORE_KEY: float(s)}}) for d, s in pairs]

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
        return base.model_copy(update={"k": n})
    members = getattr(base, "retrievers", None)
    if "retrievers" in fields and isinstance(members, list):  # EnsembleRetriever and the like
        sized = [sized_base(r, n) for r in members]
        if any(s is not None for s in sized):
            merged = [r if s is None else s for r, s in zip(members, sized, strict=True)]
            return base.model_copy(update={"retrievers": merged})
    return None
