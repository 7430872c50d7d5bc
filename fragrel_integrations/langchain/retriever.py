"""FragRel as native LangChain retrievers: a re-ranker around any base retriever, and one over a core index."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Any, Literal, Self

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever, RetrieverLike
from langchain_core.runnables.config import run_in_executor
from pydantic import ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from .. import adapters as kit
from ..adapters import pools as pool
from ..adapters.arguments import split_kwargs
from ..adapters.pools import default_pool_size
from ..adapters.wrapper_settings import DEFAULT_DOC_ID_KEY, DEFAULT_POSITION_KEY
from ..core.fragments import Fragment
from ..core.index import FragRelIndex
from ..core.selection import check_k
from ._documents import as_runnable, check_documents, hit_document, with_scores
from ._pool import pool_advice, ranks_by_words, sized_base, takes_k
from ._wrapper import FragRelFields, rerank_documents
from .indexing import add_positions

__all__ = ["FragRelIndexRetriever", "FragRelRetriever"]

logger = logging.getLogger(__name__)

_INDEX_CHECKS = kit.field_checks(("k", "order", "budget_words"))
_DOCS = kit.SETTING_DOCS


class FragRelRetriever(FragRelFields, BaseRetriever):
    """Re-rank the documents of ANY base retriever with FragRel's relation-aware score ``s_ind + alpha * s_env``.

    The base is asked for ``pool_size`` candidates on a copy (``search_kwargs["k"]`` of a vector-store retriever,
    the ``k`` field of e.g. ``BM25Retriever``, each member of an ``EnsembleRetriever``), so FragRel chooses *which*
    ``k`` documents come back. ``s_ind`` is the base's own score (a vector store's relevance score, else metadata
    ``score_key``, else its ranking ``1 - rank/n``) fused with a BM25 score of the pool; no second model scores
    behind your back. ``s_env`` comes from ``relation`` over ``fragrel_doc_id`` / ``fragrel_position`` metadata
    (the old names ``doc_id`` / ``position`` are still read): write it with
    :func:`~fragrel_integrations.langchain.add_positions` before indexing. The settings mean the same in every
    wrapper (:data:`~fragrel_integrations.adapters.SETTING_DOCS`; ``.settings`` shows them resolved).

    Returns copies of the base's Documents with ``relevance_score`` (= s_rel), ``fragrel_independent_score`` and
    ``fragrel_environment_score`` added, best first (or in document order with ``order="position"``). ``k`` is a
    field and an invoke kwarg: ``retriever.invoke(query, k=2)``.

    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> from fragrel_integrations.langchain import MiniLMEmbeddings, add_positions
    >>> vs = InMemoryVectorStore.from_documents(add_positions(chunks), MiniLMEmbeddings())  # doctest: +SKIP
    >>> retriever = FragRelRetriever(base_retriever=vs.as_retriever(), k=5)                 # doctest: +SKIP
    >>> retriever.invoke("Who found the footprint?")                                        # doctest: +SKIP
    """

    model_config = ConfigDict(extra="forbid")

    base_retriever: RetrieverLike
    """Any Runnable[str, list[Document]] (typically ``vectorstore.as_retriever()``); a plain function is wrapped."""
    pool_size: int | None = Field(None, description=_DOCS["pool_size"])

    _sized: dict[int, Any] = PrivateAttr(default_factory=dict)
    _ranks_by_words: bool = PrivateAttr(default=False)

    _coerce_base = field_validator("base_retriever", mode="before")(as_runnable)
    _check_pool_size = field_validator("pool_size", mode="before")(staticmethod(kit.check_pool_size))

    @model_validator(mode="after")
    def _check_combination(self) -> Self:
        self._sized = {}  # sized copies of the base: made again after a reassignment
        self._ranks_by_words = ranks_by_words(self.base_retriever)
        sizable = self.pool_size is None or sized_base(self.base_retriever, self.pool_size) is not None
        if not sizable and not takes_k(self.base_retriever):
            raise ValueError(
                f"pool_size cannot be set on {type(self.base_retriever).__name__}: it is not a retriever with a "
                "k / search_kwargs / retrievers field that takes invoke kwargs; set the number of candidates on "
                "the base itself and leave pool_size=None"
            )
        return self

    # ------------------------------------------------------------------------------------------------ helpers

    def _base(self, query: str, k: int | None, kwargs: dict[str, Any]) -> tuple[int, Any, dict[str, Any]]:
        """The checked ``k``, the runnable to invoke for a pool of candidates and the kwargs to pass it."""
        kit.check_query(query)
        k = self.k if k is None else check_k(k)
        if kwargs and not takes_k(self.base_retriever):
            raise TypeError(
                f"extra invoke arguments {sorted(kwargs)} can only be forwarded to a base retriever that takes "
                f"them, not to {type(self.base_retriever).__name__}"
            )
        base, sized = self.base_retriever, self._sized  # one snapshot: a reassignment replaces both
        n = max(self.pool_size or default_pool_size(k), k)
        if n not in sized:
            sized[n] = sized_base(base, n)
        if sized[n] is not None:
            return k, sized[n], kwargs
        return k, base, {"k": n, **kwargs} if takes_k(base) else kwargs

    def _rerank(self, query: str, documents: object, k: int) -> list[Document]:
        advice = None if self.pool_size is not None else partial(pool_advice, self.base_retriever, default_pool_size(k))
        return rerank_documents(self, query, documents, k, ranks_by_words=self._ranks_by_words, advice=advice)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None, **kwargs: Any
    ) -> list[Document]:
        k, base, base_kwargs = self._base(query, k, kwargs)
        return self._rerank(query, base.invoke(query, {"callbacks": run_manager.get_child()}, **base_kwargs), k)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None, **kwargs: Any
    ) -> list[Document]:
        k, base, base_kwargs = self._base(query, k, kwargs)
        documents = await base.ainvoke(query, {"callbacks": run_manager.get_child()}, **base_kwargs)
        return await run_in_executor(None, self._rerank, query, documents, k)  # CPU-bound: off the event loop


class FragRelIndexRetriever(BaseRetriever):
    """A LangChain retriever over a core :class:`~fragrel_integrations.FragRelIndex` (no vector store needed).

    Build it from raw texts (split into word windows), from Documents (e.g. text-splitter chunks, in order), or
    wrap an index you already have. Returned Documents carry the fragment's metadata, ``fragrel_doc_id``,
    ``fragrel_position`` and the three FragRel scores; Documents given to :meth:`from_documents` come back as
    copies of themselves (same ``id`` and metadata) with those keys added.

    >>> retriever = FragRelIndexRetriever.from_texts([book_text], fragment_words=200, k=4)   # doctest: +SKIP
    >>> retriever.invoke("What did he build the boat with?")                               # doctest: +SKIP
    """

    model_config = ConfigDict(extra="forbid")

    index: FragRelIndex
    """The core index (holds the fragments, the relation, alpha and the scorer)."""
    k: int = 4
    budget_words: int | None = None
    """Also stop when the returned fragments reach this many words."""
    order: Literal["score", "position"] = "score"
    doc_id_key: str = DEFAULT_DOC_ID_KEY
    position_key: str = DEFAULT_POSITION_KEY

    _documents: dict[tuple[str, int], Document] = PrivateAttr(default_factory=dict)

    @field_validator(*_INDEX_CHECKS, mode="before")
    @classmethod
    def _check_setting(cls, value: Any, info: ValidationInfo) -> Any:
        return _INDEX_CHECKS[info.field_name](value)

    @model_validator(mode="after")
    def _check_keys(self) -> Self:
        kit.check_keys(self.doc_id_key, self.position_key)
        return self

    @classmethod
    def from_texts(cls, texts: Sequence[str], **kwargs: Any) -> FragRelIndexRetriever:
        """Split each text into ``fragment_words``-word windows (one document per text) and index them.

        ``kwargs`` that are retriever fields (``k``, ``order``, ``budget_words``, ...) go to the retriever; the
        rest to :meth:`FragRelIndex.from_texts <fragrel_integrations.FragRelIndex.from_texts>` (``fragment_words``,
        ``stride``, ``doc_ids``, ``metadatas``, ``embedder``, ``relation``, ``alpha``, ``scorer``,
        ``show_progress``, ...; its defaults).
        """
        fields, index_kwargs = split_kwargs(kwargs, cls.model_fields)
        return cls(index=FragRelIndex.from_texts(texts, **index_kwargs), **fields)

    @classmethod
    def from_documents(
        cls, documents: Sequence[Document], *, source_key: str | None = "source", **kwargs: Any
    ) -> FragRelIndexRetriever:
        """Index Documents as they are: one fragment each.

        If none has position metadata, positions are numbered in the given order (as :func:`add_positions` does,
        document ids from ``source_key``); if all have it, it is used; a mix raises ValueError.
        """
        fields, index_kwargs = split_kwargs(kwargs, cls.model_fields)
        doc_id_key = fields.get("doc_id_key", DEFAULT_DOC_ID_KEY)
        position_key = fields.get("position_key", DEFAULT_POSITION_KEY)
        docs = check_documents(list(documents), "documents")
        located = [pool.read_location(d.metadata, doc_id_key, position_key) for d in docs]
        if all(loc is None for loc in located):
            docs = add_positions(docs, doc_id_key=doc_id_key, position_key=position_key, source_key=source_key)
            located = [pool.read_location(d.metadata, doc_id_key, position_key) for d in docs]
        elif any(loc is None for loc in located):
            missing = next(i for i, loc in enumerate(located) if loc is None)
            raise ValueError(
                f"documents[{missing}] has no {doc_id_key!r} / {position_key!r} metadata while others have it: "
                "give all documents positions (add_positions) or none"
            )
        fragments = [Fragment(d.page_content, *loc, dict(d.metadata)) for d, loc in zip(docs, located, strict=True)]
        retriever = cls(index=FragRelIndex(fragments, **index_kwargs), **fields)
        retriever._documents = {loc: d for d, loc in zip(docs, located, strict=True)}
        return retriever

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        k = self.k if k is None else check_k(k)
        hits = self.index.retrieve(query, k=k, budget_words=self.budget_words, order=self.order)
        keys = {"doc_id_key": self.doc_id_key, "position_key": self.position_key}
        found = [self._documents.get((h.fragment.doc_id, h.fragment.position)) for h in hits]  # from_documents'
        return [hit_document(h, **keys) if d is None else with_scores(d, h) for d, h in zip(found, hits, strict=True)]
