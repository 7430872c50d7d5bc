"""FragRel as native LangChain retrievers: a re-ranker around any base retriever, and one over a core index."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any, Literal, Self

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever, RetrieverLike
from langchain_core.runnables import Runnable, RunnableBinding, RunnableConfig, RunnableLambda
from langchain_core.runnables.config import run_in_executor
from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator

from ..core.index import FragRelIndex
from ..core.relations import ContextRelation, Relation
from ..core.rerank import rerank
from ..core.selection import check_k
from ..core.store import FragmentStore
from ..core.types import Fragment
from ..models.base import Embedder
from ._documents import (
    check_documents,
    fragment_to_document,
    isolated_key,
    read_location,
    read_score,
    with_scores,
)
from .indexing import add_positions

__all__ = ["FragRelIndexRetriever", "FragRelRetriever"]

logger = logging.getLogger(__name__)

_MISSING_POSITION = (
    "document {i} from the base retriever has no {doc_id_key!r} / {position_key!r} metadata, which the context "
    "relation needs. Index the chunks with fragrel_integrations.langchain.add_positions(chunks) before adding "
    "them to the vector store, set doc_id_key / position_key to the metadata keys you use, or pass "
    "on_missing_position='isolate' to score such documents on their own (no environment)."
)


def _takes_k(runnable: object) -> bool:
    """Whether ``runnable`` forwards invoke kwargs to a BaseRetriever (which merges ``k`` into its search)."""
    while isinstance(runnable, RunnableBinding):
        runnable = runnable.bound
    return isinstance(runnable, BaseRetriever)


def _check_key(value: str, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty metadata key, got {value!r}")
    return value


class FragRelRetriever(BaseRetriever):
    """Re-rank the documents of ANY base retriever with FragRel's relation-aware score.

    ``s_rel = s_ind + alpha * s_env``: ``s_ind`` is the base retriever's score (metadata ``score_key``; by default
    ``relevance_score``, then ``score``) when every candidate has one, else the cosine of ``embedder`` embeddings;
    ``s_env`` is the relation-weighted mean of the *other* candidates' ``s_ind`` (by default the context relation
    ``0.3 ** |position_i - position_j|`` within one document). Candidates need ``doc_id`` / ``position``
    metadata: write it with :func:`~fragrel_integrations.langchain.add_positions` before indexing.

    Returns copies of the base retriever's Documents (never the originals) with ``relevance_score`` (= s_rel),
    ``fragrel_independent_score`` and ``fragrel_environment_score`` added, best first (or in document order with
    ``order="position"``). ``k`` is a field and an invoke kwarg: ``retriever.invoke(query, k=2)``.

    Ask the base retriever for more than ``k`` candidates (``pool_size``, passed to it as ``k``) so that FragRel
    can change what is returned, not only the order. With ``store`` (a FragmentStore filled by ``add_positions``)
    and ``expand=r``, the stored neighbours within ``r`` positions of each candidate join the pool; those have no
    base score, so then every candidate is scored by ``embedder``. ``embedder=None`` means the embedded offline
    all-MiniLM-L6-v2, loaded only if needed.

    ``on_missing_position="isolate"`` makes each Document without position metadata a one-fragment document of
    its own: it keeps its base score (s_env = 0 under the context relation) instead of raising ValueError.

    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> from fragrel_integrations.langchain import MiniLMEmbeddings, add_positions
    >>> emb = MiniLMEmbeddings()                                                   # doctest: +SKIP
    >>> vs = InMemoryVectorStore.from_documents(add_positions(chunks), emb)         # doctest: +SKIP
    >>> retriever = FragRelRetriever(                                               # doctest: +SKIP
    ...     base_retriever=vs.as_retriever(), pool_size=20, k=4, embedder=emb)
    >>> retriever.invoke("Who found the footprint?")                                # doctest: +SKIP
    """

    model_config = ConfigDict(extra="forbid")

    base_retriever: RetrieverLike
    """Any Runnable[str, list[Document]] (typically ``vectorstore.as_retriever()``); a plain function is wrapped."""
    k: int = Field(default=4, gt=0)
    """Number of documents to return."""
    alpha: float = Field(default=0.5, ge=0)
    """Weight of the environment score."""
    relation: Relation = Field(default_factory=lambda: ContextRelation(0.3))
    """The fragment relation (core Relation); ``ContextRelation(0.3)`` by default."""
    embedder: Any = None
    """Object with ``embed_documents`` / ``embed_query`` (e.g. a LangChain Embeddings); None = embedded MiniLM."""
    pool_size: int | None = Field(default=None, gt=0)
    """Candidates to ask the base retriever for (sent as its ``k``); None = its own default."""
    store: FragmentStore | None = None
    """FragmentStore holding every chunk (see ``add_positions(..., store=...)``), for neighbour expansion."""
    expand: int = Field(default=0, ge=0)
    """Neighbour radius: stored fragments within ``expand`` positions of a candidate join the pool."""
    doc_id_key: str = "doc_id"
    position_key: str = "position"
    score_key: str | None = None
    """Metadata key of the base score; None tries ``relevance_score`` then ``score``."""
    on_missing_position: Literal["error", "isolate"] = "error"
    order: Literal["score", "position"] = "score"

    @field_validator("base_retriever", mode="before")
    @classmethod
    def _coerce_base(cls, value: Any) -> Any:
        if callable(value) and not isinstance(value, Runnable):
            return RunnableLambda(value)  # a plain function query -> list[Document], as LCEL pipes accept
        return value

    @field_validator("alpha")
    @classmethod
    def _finite_alpha(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError(f"alpha must be a finite number >= 0, got {value}")
        return value

    @field_validator("embedder")
    @classmethod
    def _check_embedder(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, Embedder):
            raise TypeError(
                "embedder must have embed_documents(texts) and embed_query(text) (e.g. a LangChain Embeddings), "
                f"got {type(value).__name__}"
            )
        return value

    @model_validator(mode="after")
    def _check_combination(self) -> Self:
        _check_key(self.doc_id_key, "doc_id_key")
        _check_key(self.position_key, "position_key")
        if self.doc_id_key == self.position_key:
            raise ValueError("doc_id_key and position_key must differ")
        if self.expand > 0 and self.store is None:
            raise ValueError(
                "expand > 0 needs store=FragmentStore() filled with add_positions(chunks, store=store); "
                "or leave expand=0"
            )
        if self.pool_size is not None and not _takes_k(self.base_retriever):
            raise ValueError(
                "pool_size is sent to the base retriever as its k, which only a BaseRetriever accepts; "
                f"{type(self.base_retriever).__name__} is not one: set the number of candidates on the base runnable "
                "itself and leave pool_size=None"
            )
        return self

    # ------------------------------------------------------------------------------------------------ helpers

    def _base_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if kwargs and not _takes_k(self.base_retriever):
            raise TypeError(
                f"extra invoke arguments {sorted(kwargs)} can only be forwarded to a BaseRetriever base, "
                f"not to {type(self.base_retriever).__name__}"
            )
        out = dict(kwargs)
        if self.pool_size is not None:
            out.setdefault("k", self.pool_size)
        return out

    def _rerank(self, query: str, documents: object, k: int | None) -> list[Document]:
        docs = check_documents(documents, "the base retriever's result")
        k = self.k if k is None else check_k(k)
        if not docs:
            return []
        fragments: list[Fragment] = []
        originals: dict[tuple[str, int], Document] = {}
        for i, doc in enumerate(docs):
            location = read_location(doc, self.doc_id_key, self.position_key)
            if location is None:
                if self.on_missing_position == "error":
                    raise ValueError(
                        _MISSING_POSITION.format(i=i, doc_id_key=self.doc_id_key, position_key=self.position_key)
                    )
                location = (isolated_key(doc), 0)
            fragments.append(Fragment(doc.page_content, location[0], location[1], dict(doc.metadata)))
            originals.setdefault(location, doc)
        scores = [read_score(doc, self.score_key) for doc in docs]
        hits = rerank(
            query,
            fragments,
            relation=self.relation,
            alpha=self.alpha,
            k=k,
            scores=None if all(s is None for s in scores) else scores,
            embedder=self.embedder,
            store=self.store,
            expand=self.expand,
            order=self.order,
        )
        logger.debug("FragRel re-ranked %d candidates into %d documents", len(docs), len(hits))
        out = []
        for hit in hits:
            original = originals.get((hit.fragment.doc_id, hit.fragment.position))
            if original is None:  # a neighbour fetched from the store
                original = fragment_to_document(
                    hit.fragment, doc_id_key=self.doc_id_key, position_key=self.position_key
                )
            out.append(with_scores(original, hit))
        return out

    # ------------------------------------------------------------------------------------------------ retrieval

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None, **kwargs: Any
    ) -> list[Document]:
        config: RunnableConfig = {"callbacks": run_manager.get_child()}
        documents = self.base_retriever.invoke(query, config, **self._base_kwargs(kwargs))
        return self._rerank(query, documents, k)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        config: RunnableConfig = {"callbacks": run_manager.get_child()}
        documents = await self.base_retriever.ainvoke(query, config, **self._base_kwargs(kwargs))
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
    k: int = Field(default=4, gt=0)
    budget_words: int | None = Field(default=None, gt=0)
    """Also stop when the returned fragments reach this many words."""
    order: Literal["score", "position"] = "score"
    doc_id_key: str = "doc_id"
    position_key: str = "position"

    _documents: dict[tuple[str, int], Document] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _check_keys(self) -> Self:
        _check_key(self.doc_id_key, "doc_id_key")
        _check_key(self.position_key, "position_key")
        if self.doc_id_key == self.position_key:
            raise ValueError("doc_id_key and position_key must differ")
        return self

    @classmethod
    def from_texts(
        cls,
        texts: Sequence[str],
        *,
        metadatas: Sequence[dict[str, Any]] | None = None,
        doc_ids: Sequence[str] | None = None,
        fragment_words: int = 500,
        stride: int | None = None,
        embedder: Embedder | None = None,
        relation: Relation | None = None,
        alpha: float = 0.5,
        scorer: Any = "dense",
        show_progress: bool = True,
        **kwargs: Any,
    ) -> FragRelIndexRetriever:
        """Split each text into ``fragment_words``-word windows (one document per text) and index them.

        ``kwargs`` are retriever fields (``k``, ``order``, ``budget_words``, ...); the rest go to the index.
        """
        index = FragRelIndex.from_texts(
            texts,
            fragment_words=fragment_words,
            stride=stride,
            doc_ids=doc_ids,
            metadatas=metadatas,
            embedder=embedder,
            relation=relation,
            alpha=alpha,
            scorer=scorer,
            show_progress=show_progress,
        )
        return cls(index=index, **kwargs)

    @classmethod
    def from_documents(
        cls,
        documents: Sequence[Document],
        *,
        source_key: str | None = "source",
        embedder: Embedder | None = None,
        relation: Relation | None = None,
        alpha: float = 0.5,
        scorer: Any = "dense",
        show_progress: bool = True,
        **kwargs: Any,
    ) -> FragRelIndexRetriever:
        """Index Documents as they are: one fragment each.

        If none has position metadata, positions are numbered in the given order (as :func:`add_positions` does,
        document ids from ``source_key``); if all have it, it is used; a mix raises ValueError.
        """
        doc_id_key = kwargs.get("doc_id_key", "doc_id")
        position_key = kwargs.get("position_key", "position")
        docs = check_documents(list(documents), "documents")
        located = [read_location(d, doc_id_key, position_key) for d in docs]
        if all(loc is None for loc in located):
            docs = add_positions(docs, doc_id_key=doc_id_key, position_key=position_key, source_key=source_key)
            located = [read_location(d, doc_id_key, position_key) for d in docs]
        elif any(loc is None for loc in located):
            missing = next(i for i, loc in enumerate(located) if loc is None)
            raise ValueError(
                f"documents[{missing}] has no {doc_id_key!r} / {position_key!r} metadata while others have it: "
                "give all documents positions (add_positions) or none"
            )
        fragments = [Fragment(d.page_content, *loc, dict(d.metadata)) for d, loc in zip(docs, located, strict=True)]
        index = FragRelIndex(
            fragments,
            embedder=embedder,
            relation=relation,
            alpha=alpha,
            scorer=scorer,
            show_progress=show_progress,
        )
        retriever = cls(index=index, **kwargs)
        retriever._documents = {loc: d for d, loc in zip(docs, located, strict=True)}
        return retriever

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        k = self.k if k is None else check_k(k)
        hits = self.index.retrieve(query, k=k, budget_words=self.budget_words, order=self.order)
        out = []
        for hit in hits:
            key = (hit.fragment.doc_id, hit.fragment.position)
            original = self._documents.get(key)
            if original is None:
                original = fragment_to_document(
                    hit.fragment, doc_id_key=self.doc_id_key, position_key=self.position_key
                )
            out.append(with_scores(original, hit))
        return out
