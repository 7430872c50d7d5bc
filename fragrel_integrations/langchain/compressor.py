"""FragRel as a LangChain document compressor: the re-ranker slot of ``ContextualCompressionRetriever`` and
``DocumentCompressorPipeline``."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import run_in_executor
from langchain_core.vectorstores import VectorStoreRetriever
from pydantic import ConfigDict

from .._validation import check_type
from ..core.selection import check_k
from ._pool import sized_base
from ._wrapper import FragRelFields, rerank_documents

__all__ = ["FragRelCompressor", "with_store_scores"]

_MORE_CANDIDATES = 'give the base retriever more candidates, e.g. vs.as_retriever(search_kwargs={"k": 50})'


class FragRelCompressor(FragRelFields, BaseDocumentCompressor):
    """Re-rank the documents a retriever returned with FragRel and keep the ``k`` best, as LangChain's rerankers
    do (Cohere, FlashRank, cross-encoders): put it in a ``ContextualCompressionRetriever``.

    The settings, their defaults and their errors are :class:`~fragrel_integrations.langchain.FragRelRetriever`'s
    (the kit's :class:`~fragrel_integrations.adapters.WrapperSettings`; ``.settings`` shows them resolved). It is
    handed the pool and cannot ask for more: give the base ``search_kwargs={"k": 50}``; it warns once when it gets
    no more documents than it keeps. ``s_ind`` is the base's score where the Documents carry one (``score_key``,
    else ``relevance_score`` / ``score`` metadata; a ``FragRelRetriever``'s sized base writes it), else their
    ranking; each returned copy has ``relevance_score``, ``fragrel_independent_score`` and
    ``fragrel_environment_score`` in its metadata.

    >>> from langchain_classic.retrievers import ContextualCompressionRetriever                 # doctest: +SKIP
    >>> retriever = ContextualCompressionRetriever(                                             # doctest: +SKIP
    ...     base_compressor=FragRelCompressor(k=5), base_retriever=vs.as_retriever(search_kwargs={"k": 50}))
    >>> retriever.invoke("Who found the footprint?")                                            # doctest: +SKIP
    """

    model_config = ConfigDict(extra="forbid")

    def _compress(self, documents: Sequence[Document], query: str) -> list[Document]:
        check_type(query, str, "query must be str")
        return rerank_documents(self, query, list(documents), self.k, advice=lambda: _MORE_CANDIDATES)

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """The ``k`` best of ``documents`` for ``query`` by FragRel's relation-aware score, best first (or in
        document order with ``order="position"``); the inputs are not modified."""
        return self._compress(documents, query)

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """:meth:`compress_documents` off the event loop (scoring the pool is CPU work)."""
        return await run_in_executor(None, self._compress, documents, query)


def with_store_scores(retriever: VectorStoreRetriever, k: int | None = None) -> BaseRetriever:
    """A copy of a vector-store retriever returning ``k`` Documents (None: its own ``search_kwargs["k"]``, else 4),
    each with the store's own score in its metadata (``fragrel_base_score``), which :class:`FragRelCompressor`
    reads as :class:`~fragrel_integrations.langchain.FragRelRetriever` does (a plain vector-store retriever returns
    Documents without scores). The retriever itself is not changed.

    >>> base = with_store_scores(vs.as_retriever(), k=50)                                         # doctest: +SKIP
    >>> ContextualCompressionRetriever(base_compressor=FragRelCompressor(k=5), base_retriever=base)  # doctest: +SKIP
    """
    check_type(
        retriever, VectorStoreRetriever, "with_store_scores needs a vector-store retriever (vectorstore.as_retriever())"
    )
    n = check_k(k) if k is not None else int(retriever.search_kwargs.get("k", 4))
    return sized_base(retriever, n)  # a copy for every VectorStoreRetriever
