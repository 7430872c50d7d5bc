"""FragRel as native LangChain retrievers: a re-ranker around any base retriever, and one over a core index."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from functools import partial
from typing import Any, Literal, Self

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever, RetrieverLike
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.runnables.config import run_in_executor
from pydantic import ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from ..core import kit
from ..core.index import FragRelIndex
from ..core.kit import pool
from ..core.kit.args import split_kwargs
from ..core.kit.pool import default_pool_size
from ..core.presets import DEFAULT_PRESET
from ..core.relations import Relation
from ..core.selection import check_k
from ..core.types import Fragment
from ._documents import check_documents, fragment_to_document, isolated_key, with_scores
from ._pool import BASE_SCORE_KEY, ranks_by_words, sized_base, takes_k
from .indexing import add_positions

__all__ = ["FragRelIndexRetriever", "FragRelRetriever"]

logger = logging.getLogger(__name__)

_MISSING_POSITION = (
    "document {i} from the base retriever has no {doc_id_key!r} / {position_key!r} metadata, which the context "
    "relation needs. Index the chunks with fragrel_integrations.langchain.add_positions(chunks) before adding "
    "them to the vector store, set doc_id_key / position_key to the metadata keys you use, or pass "
    "on_missing_position='isolate' to score such documents on their own (no environment)."
)


#: The settings kit's check of each field (run before pydantic's own type check, so the words are the kit's).
_CHECKS = kit.field_checks(("k", "pool_size", "score_key", *kit.FIELD_SETTINGS), links=False)
_INDEX_CHECKS = kit.field_checks(("k", "order", "budget_words"))
_DOCS = kit.SETTING_DOCS


class FragRelRetriever(BaseRetriever):
    """Re-rank the documents of ANY base retriever with FragRel's relation-aware score ``s_ind + alpha * s_env``.

    The base is asked for ``pool_size`` candidates on a copy (``search_kwargs["k"]`` of a vector-store retriever,
    the ``k`` field of e.g. ``BM25Retriever``, each member of an ``EnsembleRetriever``), so FragRel chooses *which*
    ``k`` documents come back. ``s_ind`` is the base's own score (a vector store's relevance score, else metadata
    ``score_key``, else its ranking ``1 - rank/n``) fused with a BM25 score of the pool; no second model scores
    behind your back. ``s_env`` comes from ``relation`` over ``doc_id`` / ``position`` metadata: write it with
    :func:`~fragrel_integrations.langchain.add_positions` before indexing. The settings mean the same in every
    wrapper (:data:`~fragrel_integrations.core.kit.SETTING_DOCS`; ``.settings`` shows them resolved).

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
    k: int = 5
    """Number of documents to return."""
    preset: str = Field(DEFAULT_PRESET, description=_DOCS["preset"])
    alpha: float | None = Field(None, description=_DOCS["alpha"])
    top_m: int | None = Field(None, description=_DOCS["top_m"])
    relation: Relation | None = Field(None, description=_DOCS["relation"])
    lexical: float | None = Field(None, description=_DOCS["lexical"])
    embedder: Any = Field(None, description=_DOCS["embedder"])
    score_embedder: Any = Field(None, description=_DOCS["score_embedder"])
    pool_size: int | None = Field(None, description=_DOCS["pool_size"])
    store: Any = Field(None, description=_DOCS["store"])
    expand: int | None = Field(None, description=_DOCS["expand"])
    outside: Literal["floor", "ignore"] = Field("floor", description=_DOCS["outside"])
    doc_id_key: str = Field(kit.DEFAULT_DOC_ID_KEY, description=_DOCS["doc_id_key"])
    position_key: str = Field(kit.DEFAULT_POSITION_KEY, description=_DOCS["position_key"])
    score_key: str | None = Field(None, description=_DOCS["score_key"])
    on_missing_position: Literal["raise", "error", "isolate"] = Field("raise", description=_DOCS["on_missing_position"])
    order: Literal["score", "position"] | None = Field(None, description=_DOCS["order"])

    _sized: dict[int, Any] = PrivateAttr(default_factory=dict)
    _warned: bool = PrivateAttr(default=False)
    _settings: kit.WrapperSettings = PrivateAttr()
    _ranks_by_words: bool = PrivateAttr(default=False)

    @field_validator("base_retriever", mode="before")
    @classmethod
    def _coerce_base(cls, value: Any) -> Any:
        if callable(value) and not isinstance(value, Runnable):
            return RunnableLambda(value)  # a plain function query -> list[Document], as LCEL pipes accept
        return value

    @field_validator(*_CHECKS, mode="before")
    @classmethod
    def _check_setting(cls, value: Any, info: ValidationInfo) -> Any:
        return _CHECKS[info.field_name](value)  # the kit's check: the same words as in LlamaIndex

    @model_validator(mode="after")
    def _check_combination(self) -> Self:
        settings = kit.WrapperSettings.of(self, links=False)
        self._settings = settings
        self._ranks_by_words = ranks_by_words(self.base_retriever)
        # the fields show the resolved settings (None with preset="auto": chosen per pool; top_m 0: all lend support)
        self.alpha, self.top_m, self.relation = settings.alpha, settings.top_m, settings.relation
        self.order, self.expand, self.lexical = settings.order, settings.expand, settings.lexical
        self.on_missing_position = settings.on_missing_position  # type: ignore[assignment]
        sizable = self.pool_size is None or sized_base(self.base_retriever, self.pool_size) is not None
        if not sizable and not takes_k(self.base_retriever):
            raise ValueError(
                f"pool_size cannot be set on {type(self.base_retriever).__name__}: it is not a retriever with a "
                "k / search_kwargs / retrievers field that takes invoke kwargs; set the number of candidates on "
                "the base itself and leave pool_size=None"
            )
        return self

    @property
    def settings(self) -> kit.WrapperSettings:
        """The resolved, checked FragRel settings (the kit's :class:`WrapperSettings`)."""
        return self._settings

    # ------------------------------------------------------------------------------------------------ helpers

    def _base(self, k: int, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The runnable to invoke for a pool of candidates, and the kwargs to pass it."""
        if kwargs and not takes_k(self.base_retriever):
            raise TypeError(
                f"extra invoke arguments {sorted(kwargs)} can only be forwarded to a base retriever that takes "
                f"them, not to {type(self.base_retriever).__name__}"
            )
        n = max(self.pool_size or default_pool_size(k), k)
        if n not in self._sized:
            self._sized[n] = sized_base(self.base_retriever, n)
        sized = self._sized[n]
        if sized is not None:
            return sized, dict(kwargs)
        if takes_k(self.base_retriever):
            return self.base_retriever, {"k": n, **kwargs}
        return self.base_retriever, dict(kwargs)

    def _check_pool(self, n_docs: int, k: int) -> None:
        if n_docs <= k and not self._warned and self.pool_size is None:
            self._warned = True
            warnings.warn(
                f"FragRelRetriever: the base retriever returned {n_docs} documents for k={k}, so FragRel can only "
                f"re-order them; make {type(self.base_retriever).__name__} return more (e.g. k=50) or pass "
                "pool_size with a retriever that has a k / search_kwargs field",
                UserWarning,
                stacklevel=4,
            )

    def _base_score(self, doc: Document) -> tuple[Document, float | None]:
        """``doc`` without the base's score that the sized copy put in its metadata, and that score (else the
        ``score_key`` metadata)."""
        if BASE_SCORE_KEY not in doc.metadata:
            return doc, pool.read_score(doc.metadata, self.score_key)
        metadata = dict(doc.metadata)
        score = float(metadata.pop(BASE_SCORE_KEY))
        return doc.model_copy(update={"metadata": metadata}), score

    def _rerank(self, query: str, documents: object, k: int) -> list[Document]:
        docs = check_documents(documents, "the base retriever's result")
        if not docs:
            return []
        self._check_pool(len(docs), k)
        kept, scores = zip(*(self._base_score(doc) for doc in docs), strict=True)
        ranked = pool.rerank_items(
            self._settings,
            query,
            kept,
            locate=lambda doc: pool.read_location(doc.metadata, self.doc_id_key, self.position_key),
            fragment=lambda doc, key: Fragment(doc.page_content, *key, dict(doc.metadata)),
            isolated=lambda i: (isolated_key(docs[i]), 0),  # the Document as the base returned it
            error=lambda missing: ValueError(
                _MISSING_POSITION.format(i=missing[0], doc_id_key=self.doc_id_key, position_key=self.position_key)
            ),
            scores=None if all(s is None for s in scores) else list(scores),
            k=k,
            ranks_by_words=self._ranks_by_words,
            neighbour=partial(fragment_to_document, doc_id_key=self.doc_id_key, position_key=self.position_key),
        )
        logger.debug("FragRel re-ranked %d candidates into %d documents", len(docs), len(ranked))
        return [with_scores(doc, hit) for doc, hit in ranked]

    # ------------------------------------------------------------------------------------------------ retrieval

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None, **kwargs: Any
    ) -> list[Document]:
        kit.check_query(query)
        k = self.k if k is None else check_k(k)
        base, base_kwargs = self._base(k, kwargs)
        config: RunnableConfig = {"callbacks": run_manager.get_child()}
        documents = base.invoke(query, config, **base_kwargs)
        return self._rerank(query, documents, k)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        kit.check_query(query)
        k = self.k if k is None else check_k(k)
        base, base_kwargs = self._base(k, kwargs)
        config: RunnableConfig = {"callbacks": run_manager.get_child()}
        documents = await base.ainvoke(query, config, **base_kwargs)
        # embedding the pool is CPU-bound: keep it off the event loop
        return await run_in_executor(None, self._rerank, query, documents, k)


class FragRelIndexRetriever(BaseRetriever):
    """A LangChain retriever over a core :class:`~fragrel_integrations.FragRelIndex` (no vector store needed).

    Build it from raw texts (split into word windows), from Documents (e.g. text-splitter chunks, in order), or
    wrap an index you already have. Returned Documents carry the fragment's metadata, ``doc_id``, ``position``
    and the three FragRel scores; Documents given to :meth:`from_documents` come back as copies of themselves
    (same ``id`` and metadata) with those keys added.

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
    doc_id_key: str = "doc_id"
    position_key: str = "position"

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
        doc_id_key = fields.get("doc_id_key", "doc_id")
        position_key = fields.get("position_key", "position")
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
        fresh = partial(fragment_to_document, doc_id_key=self.doc_id_key, position_key=self.position_key)
        found = [self._documents.get((h.fragment.doc_id, h.fragment.position)) for h in hits]  # from_documents'
        return [with_scores(fresh(h.fragment) if d is None else d, h) for d, h in zip(found, hits, strict=True)]
