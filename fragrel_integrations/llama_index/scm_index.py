"""Any LlamaIndex vector store (``SimpleVectorStore``, Chroma, pgvector, Qdrant, ...) as the index of an SCM
memory stream (see :mod:`fragrel_integrations.core.scm.stream_index`): one ``TextNode`` per turn, with the text the
stream embedded, the memory's embedding of it (the store does not embed), the metadata
``{session_key: session_id, index_key: interaction index}``, the id ``f"scm:{session_id}:{index}"`` and the source
(``ref_doc_id``) ``f"scm:{session_id}"``, so ``vector_store.delete(f"scm:{session_id}")`` removes a session.

>>> from llama_index.core.vector_stores import SimpleVectorStore
>>> from fragrel_integrations.core.scm import SelfControlledMemory
>>> from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel
>>> store = SimpleVectorStore()
>>> controller = ScriptedChatModel(lambda m: "yes" if "yes or no" in m[-1]["content"] else "")
>>> memory = SelfControlledMemory(
...     controller, embedder=HashingEmbedder(dim=64), k=1, index=VectorStoreStreamIndex(store)
... )
>>> for text in ["My cat is called Miso.", "I live in Lisbon.", "I play the cello."]:
...     _ = memory.record(text, "Nice.", session_id="ana")
>>> sorted(store.data.embedding_dict)
['scm:ana:0', 'scm:ana:1', 'scm:ana:2']
>>> [m.item.observation for m in memory.prepare("What is my cat called?", session_id="ana").memories]
['My cat is called Miso.']
>>> _ = memory.clear("ana"); store.data.embedding_dict
{}
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)

from .._validation import check_type
from ..adapters.store_index import StoreIndexAdapter, check_entry, check_filter, check_search, default_entry_id
from ..core.scm.interactions import MemoryItem
from ..core.scm.stream import check_session
from ..core.scm.stream_index import check_vector

__all__ = ["VectorStoreStreamIndex"]


class VectorStoreStreamIndex(StoreIndexAdapter):
    """A LlamaIndex vector store as an SCM :class:`~fragrel_integrations.core.scm.StreamIndex`.

    Args:
        vector_store: any ``BasePydanticVectorStore`` (``add``, ``query``, ``delete(ref_doc_id)``).
        filters: ``filters(session_id)`` returns the query's ``MetadataFilters`` (None: no filter); the default
            is ``key == session_id`` on ``session_key``. Results are always post-filtered too (by node metadata
            when the store returns nodes, else by node id), so another session's turns are never returned.
        session_key, index_key, fetch_k, make_id: see :class:`~..adapters.store_index.StoreIndexAdapter`.
            With a custom ``make_id`` and a store that returns ids only (``SimpleVectorStore``), only turns added
            by this object can be recognised; prefer the default there.
    """

    def __init__(
        self,
        vector_store: BasePydanticVectorStore,
        *,
        session_key: str = "scm_session",
        index_key: str = "scm_index",
        filters: Callable[[str], MetadataFilters | None] | None = None,
        fetch_k: int | None = None,
        make_id: Callable[[str, int], str] | None = None,
    ) -> None:
        check_type(
            vector_store,
            BasePydanticVectorStore,
            "vector_store must be a LlamaIndex BasePydanticVectorStore",
            hint="; for a LangChain VectorStore use fragrel_integrations.langchain.scm_index.VectorStoreStreamIndex",
        )
        super().__init__(vector_store, session_key=session_key, index_key=index_key, fetch_k=fetch_k, make_id=make_id)
        self.vector_store = vector_store
        check_filter(filters, "filters", "MetadataFilters")
        self.filters = filters

    @staticmethod
    def source_id(session_id: str) -> str:
        """The ``ref_doc_id`` of every node of a session: ``f"scm:{session_id}"``."""
        return f"scm:{session_id}"

    # ------------------------------------------------------------------------------------------- StreamIndex

    def add(self, item: MemoryItem, text: str, embedding: np.ndarray) -> None:
        """Add (or replace) one turn's node, with the memory's ``embedding``."""
        check_entry(item, text)
        vector = check_vector(embedding, finite=True)
        node_id = self.entry_id(item.session_id, item.index)
        node = TextNode(
            text=text,
            id_=node_id,
            embedding=vector.tolist(),
            metadata=self.entry_metadata(item),
            excluded_embed_metadata_keys=[self.session_key, self.index_key],
            excluded_llm_metadata_keys=[self.session_key, self.index_key],
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=self.source_id(item.session_id))},
        )
        self.vector_store.add([node])
        if self.make_id is not default_entry_id:
            self.added_ids.add(item.session_id, item.index, node_id)  # node id -> (session, index), for custom ids

    def search(self, session_id: str, query: str, embedding: np.ndarray, k: int) -> list[tuple[int, float]]:
        """At most ``k`` ``(interaction index, similarity)`` of ``session_id``, best first."""
        check_search(session_id, k)
        vector = check_vector(embedding)
        filters = (
            self.filters(session_id)
            if self.filters is not None
            else MetadataFilters(filters=[MetadataFilter(key=self.session_key, value=session_id)])
        )
        result = self.vector_store.query(
            VectorStoreQuery(
                query_embedding=vector.tolist(),
                similarity_top_k=self.fetch(k),
                filters=filters,
                query_str=query,
            )
        )
        nodes = list(result.nodes or [])
        ids = list(result.ids or [node.node_id for node in nodes])
        return self.ranked_hits(session_id, ids, [node.metadata for node in nodes], list(result.similarities or []), k)

    def delete_session(self, session_id: str) -> None:
        """Delete every node of the session (``vector_store.delete(f"scm:{session_id}")``)."""
        check_session(session_id)
        self.vector_store.delete(self.source_id(session_id))
        self.added_ids.forget(session_id)
