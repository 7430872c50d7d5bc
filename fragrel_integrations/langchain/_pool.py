"""Ask a LangChain base retriever for a pool of ``n`` candidates, with its own scores where it has them.

Most ``BaseRetriever`` classes ignore an invoke kwarg ``k``, so the pool size is set on a copy of the retriever:
``search_kwargs["k"]`` of a vector-store retriever, the ``k`` field of retrievers that have one, and each member of
an ``EnsembleRetriever``. The copy also hands over the base's own scores, so nothing needs re-embedding: a
vector store's relevance scores, a ``BM25Retriever``'s BM25 scores (its ranking unchanged) and, for an
``EnsembleRetriever``, the weighted sum of its members' min-max scaled scores instead of reciprocal rank fusion.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableBinding
from langchain_core.vectorstores import VectorStoreRetriever

from ..adapters.pools import fuse_minmax, oriented_scores

__all__ = ["BASE_SCORE_KEY", "oriented", "pool_advice", "post_filters", "ranks_by_words", "sized_base", "takes_k"]

#: Metadata key under which a vector store's own relevance score reaches the re-ranker.
BASE_SCORE_KEY = "fragrel_base_score"
_SCORED_SEARCHES = ("similarity", "similarity_score_threshold")
#: LangChain's own default ``fetch_k`` (candidates a post-filtering store searches before it filters).
_DEFAULT_FETCH_K = 20
#: The warning LangChain raises when a store's relevance function leaves [0, 1] (e.g. 1 - d / sqrt(2) on squared
#: L2 distances above sqrt(2)): the wrapper's own request for a large pool is what makes it appear.
_RELEVANCE_RANGE_WARNING = r"Relevance scores must be between 0 and 1"


def takes_k(runnable: object) -> bool:
    """Whether ``runnable`` forwards invoke kwargs (such as ``k``) to a BaseRetriever that reads them."""
    while isinstance(runnable, RunnableBinding):
        runnable = runnable.bound
    # the one read of LangChain internals: the class flag ``_expects_other_args`` (set in ``__init_subclass__``)
    # records whether ``_get_relevant_documents`` takes more than ``query`` and ``run_manager``
    return isinstance(runnable, BaseRetriever) and bool(type(runnable)._expects_other_args)


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
    pool's BM25 on lower-cased words still adds to it (measured on HotpotQA sentences, ``docs/results.md``)."""
    while isinstance(base, RunnableBinding):
        base = base.bound
    if _is_bm25(base):
        return getattr(base.preprocess_func, "__name__", None) != "default_preprocessing_func"
    return _is_fusion(base) and any(ranks_by_words(r) for r in base.retrievers)


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

    The ensemble's reciprocal rank fusion keeps only ranks; on the dev LoCoMo conversations FragRel gained more
    over the min-max fusion of the same members than over RRF scores (``docs/results.md``).
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


def post_filters(vectorstore: object) -> bool:
    """Whether ``vectorstore`` filters after its search (FAISS: it searches ``fetch_k`` candidates, then applies
    ``filter``), read from its ``similarity_search_with_score`` taking a ``fetch_k`` argument."""
    search = getattr(type(vectorstore), "similarity_search_with_score", None)
    try:
        return callable(search) and "fetch_k" in inspect.signature(search).parameters
    except (TypeError, ValueError):
        return False


@contextlib.contextmanager
def _own_request() -> Iterator[None]:
    """Silence exactly LangChain's "Relevance scores must be between 0 and 1" warning, around the wrapper's own
    request (the scores keep their order, which is all FragRel reads from them)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_RELEVANCE_RANGE_WARNING, category=UserWarning)
        yield


class _ScoredVectorStoreRetriever(VectorStoreRetriever):
    """A vector-store retriever that returns the store's own score in each Document's metadata: its relevance
    score, else its raw similarity/distance oriented by its ranking, else none (the ranking is used).

    A store that filters after its search (``fetch_k``, e.g. FAISS) is asked again with a four times larger
    ``fetch_k`` while the filter leaves fewer than ``k`` candidates and the store holds more."""

    def _more(self, search: dict[str, Any], found: int, previous: int) -> dict[str, Any] | None:
        """The search kwargs of the next, larger post-filter search, or None when this one is final."""
        fetch_k, size = search.get("fetch_k"), getattr(getattr(self.vectorstore, "index", None), "ntotal", None)
        size = size if isinstance(size, int) else None  # how many vectors the store holds (a FAISS index.ntotal)
        if not isinstance(fetch_k, int) or found >= search["k"] or (size is not None and fetch_k >= size):
            return None
        if size is None and found <= previous:  # no more candidates passed the filter: the store has no more
            return None
        return {**search, "fetch_k": fetch_k * 4 if size is None else min(fetch_k * 4, size)}

    def _scored_once(self, query: str, search: dict[str, Any]) -> list[tuple[Document, float]]:
        try:
            with _own_request():
                return self.vectorstore.similarity_search_with_relevance_scores(query, **search)
        except NotImplementedError:  # no relevance function (e.g. InMemoryVectorStore): the raw score
            return oriented(self.vectorstore.similarity_search_with_score(query, **search))

    async def _ascored_once(self, query: str, search: dict[str, Any]) -> list[tuple[Document, float]]:
        try:
            with _own_request():
                return await self.vectorstore.asimilarity_search_with_relevance_scores(query, **search)
        except NotImplementedError:
            return oriented(await self.vectorstore.asimilarity_search_with_score(query, **search))

    def _scored(self, query: str, search: dict[str, Any]) -> list[tuple[Document, float]]:
        pairs, previous = self._scored_once(query, search), -1
        while (larger := self._more(search, len(pairs), previous)) is not None:
            previous, search = len(pairs), larger
            pairs = self._scored_once(query, search)
        return pairs

    async def _ascored(self, query: str, search: dict[str, Any]) -> list[tuple[Document, float]]:
        pairs, previous = await self._ascored_once(query, search), -1
        while (larger := self._more(search, len(pairs), previous)) is not None:
            previous, search = len(pairs), larger
            pairs = await self._ascored_once(query, search)
        return pairs

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        try:
            return [_with_score(d, s) for d, s in self._scored(query, self.search_kwargs | kwargs)]
        except NotImplementedError:  # a store without scores: its ranking is all we get
            return super()._get_relevant_documents(query, run_manager=run_manager, **kwargs)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        try:
            return [_with_score(d, s) for d, s in await self._ascored(query, self.search_kwargs | kwargs)]
        except NotImplementedError:
            return await super()._aget_relevant_documents(query, run_manager=run_manager, **kwargs)


def pool_advice(base: Any, n: int) -> str:
    """What would give a FragRel wrapper over ``base`` a larger pool than it got when it asked for ``n``: the knob
    that limits it (a score threshold, a filter), else the base's own number of results."""
    name = type(base).__name__
    if isinstance(base, VectorStoreRetriever):
        search = base.search_kwargs
        if base.search_type == "similarity_score_threshold":
            return f"the store returned fewer than {n} above score_threshold={search.get('score_threshold')}: lower it"
        if search.get("filter") is not None:
            raised = " and fetch_k" if post_filters(base.vectorstore) else ""
            return f"its filter let fewer than {n} through (k{raised} were raised already): widen the filter"
        return f"the store holds fewer than {n} documents (k was raised already)"
    if sized_base(base, n) is not None:
        return f"{name} returned fewer than {n} (its k was raised already): it holds no more"
    return f"make {name} return more (e.g. k=50) or pass pool_size with a retriever that has a k / search_kwargs field"


def sized_base(base: Any, n: int) -> Any | None:
    """A copy of ``base`` that returns ``n`` candidates (scored where the store can), or None if it has no knob.

    ``fetch_k`` is raised with ``k``: for MMR, and for a ``filter`` on a store that filters after its search.

    The original retriever is never changed; the copy shares its vector store, index and documents.
    """
    if isinstance(base, VectorStoreRetriever):
        kwargs = {**base.search_kwargs, "k": n}
        if kwargs.get("filter") is not None and base.search_type != "mmr" and post_filters(base.vectorstore):
            kwargs["fetch_k"] = max(int(kwargs.get("fetch_k", _DEFAULT_FETCH_K)), 4 * n)  # FAISS filters after
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
