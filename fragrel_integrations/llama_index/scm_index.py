"""Any LlamaIndex vector store (``SimpleVectorStore``, Chroma, pgvector, Qdrant, ...) as the index of an SCM
memory stream.

The stream (SQLite by default) stays the ordered record of every turn; the vector store only finds the
candidate turns for memory activation (see :mod:`fragrel_integrations.core.scm.index`). Each turn becomes one
``TextNode``: its text is what the stream embedded (the controller's summary, else the full turn), its embedding
the memory's vector of that text (the store does not embed), its metadata
``{session_key: session_id, index_key: interaction index}``, its id ``f"scm:{session_id}:{index}"`` and its
source (``ref_doc_id``) ``f"scm:{session_id}"``, so ``vector_store.delete(f"scm:{session_id}")`` removes a
session. Queries use the memory's embedding of the observation.

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
from llama_index.core.schema import BaseNode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)

from ..core.scm.index import (
    EntryIds,
    check_entry,
    check_filter,
    check_search,
    check_store_options,
    default_entry_id,
    entry_id,
    first_hits,
    owned_index,
    read_index,
)
from ..core.scm.stream import check_session
from ..core.scm.types import MemoryItem

__all__ = ["VectorStoreStreamIndex"]


class VectorStoreStreamIndex:
    """A LlamaIndex vector store as an SCM :class:`~fragrel_integrations.core.scm.StreamIndex`.

    Args:
        vector_store: any ``BasePydanticVectorStore`` (``add``, ``query``, ``delete(ref_doc_id)``).
        session_key, index_key: the metadata keys of the turn's session id and interaction index.
        filters: ``filters(session_id)`` returns the query's ``MetadataFilters`` (None: no filter); the default
            is ``key == session_id`` on ``session_key``. Results are always post-filtered too (by node metadata
            when the store returns nodes, else by node id), so another session's turns are never returned.
        fetch_k: nodes asked from the store per search (at least the memory's ``k``); raise it when the filter is
            weak, so post-filtering still leaves enough turns.
        make_id: ``make_id(session_id, index)`` gives a turn's node id (default ``f"scm:{session}:{index}"``;
            stores that need UUIDs, such as Qdrant, can use ``uuid.uuid5`` of it). With a custom ``make_id`` and
            a store that returns ids only (``SimpleVectorStore``), only turns added by this object can be
            recognised; prefer the default there.
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
        if not isinstance(vector_store, BasePydanticVectorStore):
            raise TypeError(
                f"vector_store must be a LlamaIndex BasePydanticVectorStore, got {type(vector_store).__name__}; "
                "for a LangChain VectorStore use fragrel_integrations.langchain.scm_index.VectorStoreStreamIndex"
            )
        self.vector_store = vector_store
        self.session_key, self.index_key, self.fetch_k, self.make_id = check_store_options(
            session_key, index_key, fetch_k, make_id
        )
        check_filter(filters, "filters", "MetadataFilters")
        self.filters = filters
        self._owners = EntryIds()  # node id -> (session, index), for custom ids

    @staticmethod
    def source_id(session_id: str) -> str:
        """The ``ref_doc_id`` of every node of a session: ``f"scm:{session_id}"``."""
        return f"scm:{session_id}"

    # ------------------------------------------------------------------------------------------- StreamIndex

    def add(self, item: MemoryItem, text: str, embedding: np.ndarray) -> None:
        """Add (or replace) one turn's node, with the memory's ``embedding``."""
        check_entry(item, text)
        vector = np.asarray(embedding, dtype=np.float64).ravel()
        if vector.size == 0 or not np.all(np.isfinite(vector)):
            raise ValueError("embedding must be a non-empty finite vector")
        node_id = self._node_id(item.session_id, item.index)
        node = TextNode(
            text=text,
            id_=node_id,
            embedding=vector.tolist(),
            metadata={self.session_key: item.session_id, self.index_key: item.index},
            excluded_embed_metadata_keys=[self.session_key, self.index_key],
            excluded_llm_metadata_keys=[self.session_key, self.index_key],
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=self.source_id(item.session_id))},
        )
        self.vector_store.add([node])
        if self.make_id is not default_entry_id:
            self._owners.add(item.session_id, item.index, node_id)

    def search(self, session_id: str, query: str, embedding: np.ndarray, k: int) -> list[tuple[int, float]]:
        """At most ``k`` ``(interaction index, similarity)`` of ``session_id``, best first."""
        check_search(session_id, k)
        vector = np.asarray(embedding, dtype=np.float64).ravel()
        if vector.size == 0:
            raise ValueError("embedding must be a non-empty vector")
        filters = (
            self.filters(session_id)
            if self.filters is not None
            else MetadataFilters(filters=[MetadataFilter(key=self.session_key, value=session_id)])
        )
        result = self.vector_store.query(
            VectorStoreQuery(
                query_embedding=vector.tolist(),
                similarity_top_k=max(k, self.fetch_k or k),
                filters=filters,
                query_str=query,
            )
        )
        nodes = list(result.nodes or [])
        ids = list(result.ids or [node.node_id for node in nodes])
        similarities = list(result.similarities or [])
        candidates = (
            (
                self._owned_index(nodes[n] if n < len(nodes) else None, node_id, session_id),
                float(similarities[n]) if n < len(similarities) else 0.0,
            )
            for n, node_id in enumerate(ids)
        )
        return first_hits(candidates, k)

    def delete_session(self, session_id: str) -> None:
        """Delete every node of the session (``vector_store.delete(f"scm:{session_id}")``)."""
        check_session(session_id)
        self.vector_store.delete(self.source_id(session_id))
        self._owners.forget(session_id)

    # ------------------------------------------------------------------------------------------- helpers

    def _node_id(self, session_id: str, index: int) -> str:
        return entry_id(self.make_id, session_id, index)

    def _owned_index(self, node: BaseNode | None, node_id: str, session_id: str) -> int | None:
        """The interaction index of a hit if it is a turn of ``session_id``, else None."""
        if node is not None:
            return owned_index(node.metadata, session_id, self.session_key, self.index_key)
        if self.make_id is default_entry_id:
            prefix = f"scm:{session_id}:"
            return read_index(node_id[len(prefix) :]) if node_id.startswith(prefix) else None
        owner = self._owners.owner(node_id)
        return owner[1] if owner is not None and owner[0] == session_id else None

    def __repr__(self) -> str:
        return (
            f"VectorStoreStreamIndex({type(self.vector_store).__name__}, session_key={self.session_key!r}, "
            f"index_key={self.index_key!r})"
        )
