"""RET-LLM triplet memory for LlamaIndex: :class:`TripletGraphStore`, a ``PropertyGraphStore``, and
:class:`TripletMemoryRetriever`, a ``BaseRetriever`` that reads it the RET-LLM way.

A ``PropertyGraphStore`` (what ``PropertyGraphIndex``, its extractors and sub-retrievers use; the older
``GraphStore`` serves only the deprecated ``KnowledgeGraphIndex``). The mapping is that of
:class:`~fragrel_integrations.adapters.triplet_graph.TripletGraph`: a relation comes back with exactly the
properties it was upserted with, and ``properties=`` filters match the relation's or either node's properties, as
in LlamaIndex's ``SimplePropertyGraphStore``.

>>> from fragrel_integrations.testing import HashingEmbedder
>>> graph = TripletGraphStore(embedder=HashingEmbedder(dim=64))
>>> from llama_index.core.graph_stores.types import Relation
>>> graph.upsert_relations([Relation(label="works at", source_id="Dan Jaffe", target_id="Google")])
>>> [str(t[2]) for t in graph.get_triplets(entity_names=["Dan Jaffe"])]
['Google']
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.graph_stores.types import (
    ChunkNode,
    EntityNode,
    LabelledNode,
    PropertyGraphStore,
    Relation,
)
from llama_index.core.graph_stores.types import Triplet as LITriplet
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery

from .._validation import check_positive_int
from ..adapters.arguments import split_store_or_path
from ..adapters.triplet_graph import TripletGraph
from ..adapters.triplet_views import lookup, triplet_hit
from ..core.triplets import NodeRecord, TripletRecord, TripletStore
from ..core.triplets.facts import namespace_tuple
from ..core.triplets.memory_store import build_store
from ..models.convert import optional_embedder
from ..models.embedder import Embedder

__all__ = ["TripletGraphStore", "TripletMemoryRetriever"]


def _node(rec: NodeRecord | str) -> LabelledNode:
    if isinstance(rec, str):  # an implicit entity: a term without a stored node
        return EntityNode(name=rec)
    if rec.kind == "chunk":
        return ChunkNode(text=rec.text, id_=rec.id, label=rec.label, properties=dict(rec.properties))
    return EntityNode(name=rec.text, label=rec.label, properties=dict(rec.properties))


class TripletGraphStore(PropertyGraphStore):
    """A LlamaIndex ``PropertyGraphStore`` backed by the RET-LLM triplet memory.

    Pass a core :class:`TripletStore` or a ``path`` (SQLite file, ``":memory:"`` or ``postgresql://`` URL), plus
    the arguments to build the store (``embedder``: e.g. ``MiniLMEmbedding()`` or anything
    :func:`~fragrel_integrations.models.as_embedder` accepts; other :class:`TripletStore` keywords).
    ``namespace`` selects the part of the memory this graph sees.
    """

    supports_structured_queries: bool = False
    supports_vector_queries: bool = False

    def __init__(
        self,
        store: TripletStore | str | Path | None = None,
        *,
        path: str | Path | None = None,
        embedder: Embedder | Any | None = None,
        namespace: tuple[str, ...] = (),
        hard_delete: bool = False,
        **store_kwargs: Any,
    ) -> None:
        store, path = split_store_or_path(store, path)
        core = build_store(store, path=path, embedder=optional_embedder(embedder), **store_kwargs)
        self.graph = TripletGraph(core, namespace, hard_delete)

    @property
    def core(self) -> TripletStore:
        """The core triplet store (also ``client``); ``namespace`` and ``hard_delete`` are the graph view's."""
        return self.graph.core

    client = core

    @property
    def namespace(self) -> tuple[str, ...]:
        return self.graph.namespace

    @property
    def hard_delete(self) -> bool:
        return self.graph.hard_delete

    def _triplets(self, records: list[TripletRecord]) -> list[LITriplet]:
        return [
            (_node(s), Relation(label=r.t2, source_id=r.t1, target_id=r.t3, properties=dict(r.payload)), _node(o))
            for s, r, o in self.graph.with_nodes(records)
        ]

    # -- PropertyGraphStore API ------------------------------------------------------------------------------
    def get(self, properties: dict | None = None, ids: list[str] | None = None) -> list[LabelledNode]:
        """Stored nodes, and entity nodes for every term used in a triplet (filtered by ids / properties)."""
        return [_node(n) for n in self.graph.nodes(properties, ids)]

    def get_triplets(
        self,
        entity_names: list[str] | None = None,
        relation_names: list[str] | None = None,
        properties: dict | None = None,
        ids: list[str] | None = None,
    ) -> list[LITriplet]:
        """Current triplets touching ``entity_names``/``ids`` (as subject or object), with a relation in
        ``relation_names`` and a payload matching ``properties``; nothing given -> ``[]``."""
        if not (entity_names or relation_names or properties or ids):
            return []
        return self._triplets(self.graph.records(entity_names, relation_names, properties, ids))

    def get_rel_map(
        self,
        graph_nodes: list[LabelledNode],
        depth: int = 2,
        limit: int = 30,
        ignore_rels: list[str] | None = None,
    ) -> list[LITriplet]:
        """Triplets reachable from ``graph_nodes`` following subject -> object up to ``depth`` hops."""
        return self._triplets(self.graph.reachable([n.id for n in graph_nodes], depth, limit, ignore_rels or ()))

    def upsert_nodes(self, nodes: list[LabelledNode]) -> None:
        records = []
        for n in nodes:
            if isinstance(n, ChunkNode):
                records.append(NodeRecord(n.id, n.label, "chunk", n.text, dict(n.properties)))
            elif isinstance(n, EntityNode):
                records.append(NodeRecord(n.id, n.label, "entity", n.name, dict(n.properties)))
            else:
                raise TypeError(f"TripletGraphStore stores EntityNode and ChunkNode, got {type(n).__name__}")
        self.core.put_nodes(records, namespace=self.namespace)

    def upsert_relations(self, relations: list[Relation]) -> None:
        self.graph.upsert_relations((r.source_id, r.label, r.target_id, r.properties) for r in relations)

    def delete(
        self,
        entity_names: list[str] | None = None,
        relation_names: list[str] | None = None,
        properties: dict | None = None,
        ids: list[str] | None = None,
    ) -> None:
        """End (or erase, with ``hard_delete``) the matching triplets and delete the matching nodes."""
        self.graph.delete(entity_names, relation_names, properties, ids)

    def core_nodes(self, properties: dict | None = None, ids: list[str] | None = None) -> list[NodeRecord]:
        """Stored node attribute records (not the implicit term entities)."""
        return self.graph.node_records(ids, properties)

    def structured_query(self, query: str, param_map: dict[str, Any] | None = None) -> Any:
        """Not a query-language store: read it with a ``[MEM_READ{..}]`` string instead (returns triplets)."""
        return self._triplets(self.graph.read_query(query))

    def vector_query(self, query: VectorStoreQuery, **kwargs: Any) -> tuple[list[LabelledNode], list[float]]:
        """Entities whose term is close to ``query.query_str`` (the memory's own term embeddings and term index)."""
        if not query.query_str:
            raise NotImplementedError(
                "TripletGraphStore matches terms with its own embedder: give VectorStoreQuery(query_str=...)"
            )
        ranked = self.graph.terms(query.query_str, query.similarity_top_k)
        return [EntityNode(name=term) for term, _ in ranked], [score for _, score in ranked]

    def get_schema(self, refresh: bool = False) -> dict[str, Any]:
        """The relation labels in use and the node labels stored."""
        return self.graph.schema()

    def persist(self, persist_path: str, fs: Any = None) -> None:
        """Nothing to do: every write is already committed to the database."""


class TripletMemoryRetriever(BaseRetriever):
    """Retrieve triplets from a :class:`TripletGraphStore` (or a core store) the RET-LLM way.

    The query is a read pattern (``"Dan Jaffe>>works at>>"``: exact match, else the closest stored term) or free text
    (see :func:`~fragrel_integrations.adapters.triplet_views.lookup`); each hit is a ``TextNode``
    (:func:`~fragrel_integrations.adapters.triplet_views.triplet_hit`) with the lookup score.
    """

    def __init__(
        self,
        store: TripletGraphStore | TripletStore,
        *,
        similarity_top_k: int = 10,
        namespace: tuple[str, ...] | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(store, TripletGraphStore):
            self.core, default_ns = store.core, store.namespace
        elif isinstance(store, TripletStore):
            self.core, default_ns = store, ()
        else:
            raise TypeError(f"store must be a TripletGraphStore or TripletStore, got {type(store).__name__}")
        self.similarity_top_k = check_positive_int(similarity_top_k, "similarity_top_k")
        self.namespace = default_ns if namespace is None else namespace_tuple(namespace)
        super().__init__(**kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        out = []
        for r in lookup(self.core, query_bundle.query_str, self.namespace, self.similarity_top_k):
            text, node_id, metadata = triplet_hit(r)
            out.append(NodeWithScore(node=TextNode(text=text, id_=node_id, metadata=metadata), score=r.score))
        return out
