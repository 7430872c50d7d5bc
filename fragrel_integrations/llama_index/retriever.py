"""FragRel retrievers for LlamaIndex: one that wraps any LlamaIndex retriever, one over a core FragRelIndex."""

from __future__ import annotations

import asyncio
import inspect
import warnings
from collections.abc import Sequence
from typing import Any, Literal

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import Document, NodeWithScore, QueryBundle

from .._validation import check_type
from ..adapters.arguments import split_kwargs
from ..adapters.pools import default_pool_size
from ..adapters.wrapper_settings import (
    DEFAULT_DOC_ID_KEY,
    DEFAULT_POSITION_KEY,
    SETTING_NAMES,
    WrapperSettings,
    check_keys,
    check_order,
    check_pool_size,
    check_query,
    resolve_k,
)
from ..core.index import FragRelIndex
from ..core.presets import DEFAULT_PRESET
from ..core.relations import Relation
from ..core.selection import check_k
from ..core.store import FragmentStore
from ..models.convert import optional_embedder
from ._convert import NodeReranker, check_all, hit_node
from ._pool import ranks_by_words, score_kind, sized_base

__all__ = ["FragRelIndexRetriever", "FragRelRetriever"]

_DEFAULT_TOP_K = 5


class FragRelRetriever(BaseRetriever):
    """Re-rank the nodes of ANY LlamaIndex retriever with FragRel: ``s_rel = s_ind + alpha * s_env``.

    A copy of ``retriever`` is asked for ``pool_size`` nodes through its ``similarity_top_k`` (a fusion
    retriever's members too), so FragRel chooses which nodes come back. ``s_ind`` is the base's node score (its
    ranking ``1 - rank/n`` when a node has none), oriented as a similarity (a store whose metric is a distance,
    e.g. FAISS ``IndexFlatL2``, has its distances turned into similarities) and fused with a BM25 score of the
    pool's text (the node content without its metadata header); ``s_env`` comes from
    ``relation`` over ``fragrel_doc_id`` / ``fragrel_position`` metadata (or the source document id; the old
    names ``doc_id`` / ``position`` are still read): write it when indexing with
    :class:`~fragrel_integrations.llama_index.PositionTagger`. Returned nodes are copies scored ``s_rel``, with
    ``relevance_score``, ``fragrel_independent_score`` and ``fragrel_environment_score`` in their metadata.

    ``similarity_top_k`` (alias ``k``, default 5) is how many nodes to return; the other settings mean the same in
    every wrapper (:data:`~fragrel_integrations.adapters.SETTING_DOCS`; ``.settings`` shows them resolved).

    >>> index = VectorStoreIndex.from_documents(                                         # doctest: +SKIP
    ...     docs, transformations=[SentenceSplitter(), PositionTagger()], embed_model=MiniLMEmbedding())
    >>> retriever = FragRelRetriever(index.as_retriever(), similarity_top_k=5)           # doctest: +SKIP
    >>> nodes = retriever.retrieve("Who found the footprint?")                          # doctest: +SKIP
    """

    def __init__(
        self,
        retriever: BaseRetriever,
        similarity_top_k: int | None = None,
        *,
        k: int | None = None,
        preset: str = DEFAULT_PRESET,
        alpha: float | None = None,
        top_m: int | None = None,
        lexical: float | None = None,
        relation: Relation | None = None,
        embedder: Any = None,
        score_embedder: Any = None,
        pool_size: int | None = None,
        store: FragmentStore | None = None,
        expand: int | None = None,
        order: Literal["score", "position"] | None = None,
        doc_id_key: str = DEFAULT_DOC_ID_KEY,
        position_key: str = DEFAULT_POSITION_KEY,
        on_missing_position: Literal["raise", "error", "isolate", "links"] = "raise",
        outside: Literal["floor", "ignore"] = "floor",
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        check_type(
            retriever, BaseRetriever, "retriever must be a llama_index BaseRetriever (e.g. index.as_retriever())"
        )
        self._retriever = retriever
        settings = {name: value for name, value in locals().items() if name in SETTING_NAMES}
        k = resolve_k(similarity_top_k, k, _DEFAULT_TOP_K)
        self._reranker = NodeReranker(
            WrapperSettings.resolve(**settings), k, ranks_by_words(retriever), score_kind(retriever)
        )
        pool_size = check_pool_size(pool_size)
        sized = sized_base(retriever, max(pool_size or default_pool_size(k), k))
        if sized is None and pool_size is not None:
            raise ValueError(
                f"pool_size cannot be set on {type(retriever).__name__}: it has no similarity_top_k; build it with "
                "more candidates yourself and leave pool_size=None"
            )
        self._pool = retriever if sized is None else sized
        self._warned = False
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _check_pool(self, n: int) -> None:
        k = self.similarity_top_k
        if n <= k and not self._warned and self._pool is self._retriever:
            self._warned = True
            warnings.warn(
                f"FragRelRetriever: the base retriever returned {n} nodes for similarity_top_k={k}, so FragRel can "
                f"only re-order them; build {type(self._retriever).__name__} with more candidates "
                "(e.g. similarity_top_k=50)",
                UserWarning,
                stacklevel=3,
            )

    @property
    def retriever(self) -> BaseRetriever:
        """The wrapped base retriever."""
        return self._retriever

    @property
    def settings(self) -> WrapperSettings:
        """The resolved, checked FragRel settings (the kit's :class:`WrapperSettings`)."""
        return self._reranker.settings

    @property
    def similarity_top_k(self) -> int:
        return self._reranker.k  # type: ignore[return-value]

    @property
    def alpha(self) -> float | None:
        """The environment weight (None with ``preset="auto"``: chosen per pool)."""
        return self.settings.alpha

    @property
    def relation(self) -> Relation | None:
        """The relation (None with ``preset="auto"``: chosen per pool)."""
        return self.settings.relation

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        check_query(query_bundle.query_str)
        candidates = self._pool.retrieve(query_bundle)
        self._check_pool(len(candidates))
        return self._reranker(candidates, query_bundle.query_str)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        check_query(query_bundle.query_str)
        candidates = await self._pool.aretrieve(query_bundle)
        self._check_pool(len(candidates))
        # Embedding a few candidates is CPU work: keep it off the event loop.
        return await asyncio.to_thread(self._reranker, candidates, query_bundle.query_str)

    def __repr__(self) -> str:
        return (
            f"FragRelRetriever({type(self._retriever).__name__}, similarity_top_k={self._reranker.k}, "
            f"alpha={self.alpha}, relation={self.relation!r})"
        )


class FragRelIndexRetriever(BaseRetriever):
    """A LlamaIndex retriever over a core :class:`~fragrel_integrations.FragRelIndex` (no vector store needed).

    Scores every fragment of the corpus (dense, BM25 or hybrid) and returns the top ones by relation-aware score
    as ``TextNode`` objects with ``fragrel_doc_id``/``fragrel_position`` and the three scores in metadata.

    >>> retriever = FragRelIndexRetriever.from_texts([book_text], fragment_words=500)   # doctest: +SKIP
    >>> retriever.retrieve("Who found the footprint?")[0].node.metadata["fragrel_position"]  # doctest: +SKIP
    """

    def __init__(
        self,
        index: FragRelIndex,
        similarity_top_k: int | None = None,
        *,
        k: int | None = None,
        budget_words: int | None = None,
        order: Literal["score", "position"] = "score",
        doc_id_key: str = DEFAULT_DOC_ID_KEY,
        position_key: str = DEFAULT_POSITION_KEY,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        check_type(index, FragRelIndex, "index must be a FragRelIndex (or use FragRelIndexRetriever.from_texts)")
        self.index = index
        self.similarity_top_k = resolve_k(similarity_top_k, k, None)
        self.budget_words = check_k(budget_words, "budget_words")
        self.order = check_order(order) or "score"
        self.doc_id_key, self.position_key = check_keys(doc_id_key, position_key)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_texts(cls, texts: Sequence[str], **kwargs: Any) -> FragRelIndexRetriever:
        """Split each text into ``fragment_words``-word fragments (one document per text) and index them.

        ``kwargs`` that the constructor takes (``similarity_top_k``, ``budget_words``, ``order``, ...) go to it;
        the rest to :meth:`FragRelIndex.from_texts <fragrel_integrations.FragRelIndex.from_texts>`
        (``fragment_words``, ``stride``, ``doc_ids``, ``metadatas``, ``embedder``, ``relation``, ``alpha``,
        ``scorer``, ``show_progress``, ...; its defaults). ``embedder`` may be a LlamaIndex ``BaseEmbedding``.
        """
        retriever_kwargs, index_kwargs = split_kwargs(kwargs, inspect.signature(cls.__init__).parameters)
        if "embedder" in index_kwargs:
            index_kwargs["embedder"] = optional_embedder(index_kwargs["embedder"])
        return cls(FragRelIndex.from_texts(texts, **index_kwargs), **retriever_kwargs)

    @classmethod
    def from_documents(cls, documents: Sequence[Document], **kwargs: Any) -> FragRelIndexRetriever:
        """Like :meth:`from_texts` for LlamaIndex ``Document`` objects: ``doc_id`` is the document's id and its
        metadata is copied to every fragment."""
        documents = check_all(documents, "documents", Document, "a llama_index Document")
        return cls.from_texts(
            [d.text for d in documents],
            doc_ids=[d.doc_id for d in documents],
            metadatas=[dict(d.metadata) for d in documents],
            **kwargs,
        )

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self.index.retrieve(
            query_bundle.query_str, k=self.similarity_top_k, budget_words=self.budget_words, order=self.order
        )
        return [hit_node(h, self.doc_id_key, self.position_key) for h in hits]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await asyncio.to_thread(self._retrieve, query_bundle)

    def __repr__(self) -> str:
        return f"FragRelIndexRetriever({self.index!r}, similarity_top_k={self.similarity_top_k})"
