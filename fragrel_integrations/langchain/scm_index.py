"""Any LangChain ``VectorStore`` (Chroma, PGVector, Qdrant, ...) as the index of an SCM memory stream (see
:mod:`~fragrel_integrations.core.scm.stream_index`): one document per turn, with the text the stream embedded, the
metadata ``{session_key: session_id, index_key: interaction index}`` and the id ``f"scm:{session_id}:{index}"``. The
store embeds with its own model; the memory's ``embedder`` re-scores the pool the store returns.

>>> from langchain_core.vectorstores import InMemoryVectorStore
>>> from fragrel_integrations.core.scm import SelfControlledMemory
>>> from fragrel_integrations.langchain.embeddings import MiniLMEmbeddings
>>> from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel
>>> store = InMemoryVectorStore(MiniLMEmbeddings(HashingEmbedder(dim=64)))
>>> controller = ScriptedChatModel(lambda m: "yes" if "yes or no" in m[-1]["content"] else "")
>>> memory = SelfControlledMemory(
...     controller, embedder=HashingEmbedder(dim=64), k=1, index=VectorStoreStreamIndex(store)
... )
>>> for text in ["My cat is called Miso.", "I live in Lisbon.", "I play the cello."]:
...     _ = memory.record(text, "Nice.", session_id="ana")
>>> sorted(store.store)
['scm:ana:0', 'scm:ana:1', 'scm:ana:2']
>>> [m.item.observation for m in memory.prepare("What is my cat called?", session_id="ana").memories]
['My cat is called Miso.']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._optional import require

require("langchain_core", "langchain")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore  # noqa: E402

from .._validation import check_min_int, check_type  # noqa: E402
from ..adapters.store_index import StoreIndexAdapter, check_entry, check_filter, first_hits  # noqa: E402
from ..core.scm.interactions import MemoryItem  # noqa: E402
from ..core.scm.stream import check_session  # noqa: E402

__all__ = ["VectorStoreStreamIndex"]


class VectorStoreStreamIndex(StoreIndexAdapter):
    """A LangChain ``VectorStore`` as an SCM :class:`~fragrel_integrations.core.scm.StreamIndex`.

    Args:
        vectorstore: any LangChain ``VectorStore`` with ``add_texts(..., ids=...)``,
            ``similarity_search_with_score(query, k, filter=...)`` and ``delete(ids=...)``.
        filter: ``filter(session_id)`` returns the store's ``filter=`` argument for one session (None: no filter).
            Default: ``{session_key: session_id}`` (Chroma, PGVector, the community ``Qdrant``), a callable for
            ``InMemoryVectorStore``; ``langchain_qdrant.QdrantVectorStore`` needs its own ``models.Filter``.
            Results are always post-filtered by metadata too, so another session's turns never come back.
        relevance_scores: True: ``similarity_search_with_relevance_scores`` (for stores that return distances);
            False: ``similarity_search_with_score``; None (default): relevance scores where the store defines them.
        session_key, index_key, fetch_k, make_id: see :class:`~..adapters.store_index.StoreIndexAdapter`.

    ``delete_session`` deletes the ids this object added, plus (for stores with ``get_by_ids``) the session's ids
    found by probing ``make_id(session, 0), make_id(session, 1), ...`` in blocks until a block has none.
    """

    def __init__(
        self,
        vectorstore: VectorStore,
        *,
        session_key: str = "scm_session",
        index_key: str = "scm_index",
        filter: Callable[[str], Any] | None = None,
        fetch_k: int | None = None,
        relevance_scores: bool | None = None,
        make_id: Callable[[str, int], str] | None = None,
    ) -> None:
        check_type(
            vectorstore,
            VectorStore,
            "vectorstore must be a LangChain VectorStore",
            hint="; for a LlamaIndex vector store use "
            "fragrel_integrations.llama_index.scm_index.VectorStoreStreamIndex",
        )
        super().__init__(vectorstore, session_key=session_key, index_key=index_key, fetch_k=fetch_k, make_id=make_id)
        self.vectorstore = vectorstore
        check_filter(filter, "filter", "the store's filter argument", f"; e.g. filter=lambda s: {{'{session_key}': s}}")
        self.filter = filter
        if relevance_scores is not None and not isinstance(relevance_scores, bool):
            raise TypeError(f"relevance_scores must be True, False or None, got {relevance_scores!r}")
        self.relevance_scores = relevance_scores
        self._relevance_works: bool | None = None

    # ------------------------------------------------------------------------------------------- StreamIndex

    def add(self, item: MemoryItem, text: str, embedding: np.ndarray | None = None) -> None:
        """Add (or replace) one turn's document; the store embeds ``text`` itself (``embedding`` is unused)."""
        check_entry(item, text)
        doc_id = self.entry_id(item.session_id, item.index)
        self.vectorstore.add_texts([text], metadatas=[self.entry_metadata(item)], ids=[doc_id])
        self.added_ids.add(item.session_id, item.index, doc_id)

    def search(
        self, session_id: str, query: str, embedding: np.ndarray | None = None, k: int = 4
    ) -> list[tuple[int, float]]:
        """At most ``k`` ``(interaction index, score)`` of ``session_id``, in the store's order (best first)."""
        check_session(session_id)
        check_type(query, str, "query must be str")
        check_min_int(k, "k", 1)
        store_filter = self.filter(session_id) if self.filter is not None else self._default_filter(session_id)
        kwargs: dict[str, Any] = {} if store_filter is None else {"filter": store_filter}
        results = self._search(query, self.fetch(k), kwargs)
        return first_hits(((self.hit_index(doc.metadata or {}, None, session_id), float(s)) for doc, s in results), k)

    def delete_session(self, session_id: str) -> None:
        """Delete the session's documents (see the class docstring for how they are found)."""
        check_session(session_id)
        ids = self.added_ids.of(session_id) | self._probe(session_id)
        if ids:
            self.vectorstore.delete(ids=sorted(ids))
        self.added_ids.forget(session_id)

    # ------------------------------------------------------------------------------------------- helpers

    def _default_filter(self, session_id: str) -> Any:
        if isinstance(self.vectorstore, InMemoryVectorStore):
            key = self.session_key
            return lambda doc: (doc.metadata or {}).get(key) == session_id
        return {self.session_key: session_id}

    def _search(self, query: str, fetch: int, kwargs: dict[str, Any]) -> Sequence[tuple[Document, float]]:
        store = self.vectorstore
        if self.relevance_scores is not False and self._relevance_works is not False:
            try:
                results = store.similarity_search_with_relevance_scores(query, k=fetch, **kwargs)
                self._relevance_works = True
                return results
            except NotImplementedError:
                if self.relevance_scores:
                    raise
                self._relevance_works = False  # the store defines no relevance function: use its raw scores
        return store.similarity_search_with_score(query, k=fetch, **kwargs)

    def _probe(self, session_id: str) -> set[str]:
        def found(ids: list[str]) -> set[str]:
            try:
                docs = self.vectorstore.get_by_ids(ids)
            except NotImplementedError:
                return set()
            return {doc.id for doc in docs if doc.id in set(ids)}

        return self.probe_session(session_id, found)
