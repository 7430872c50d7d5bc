"""RET-LLM triplet memory for LlamaIndex: :class:`TripletGraphStore`, a ``PropertyGraphStore``, and
:class:`TripletMemoryRetriever`, a ``BaseRetriever`` that reads it the RET-LLM way.

Why ``PropertyGraphStore`` and not the older ``GraphStore`` protocol: ``PropertyGraphStore`` is what LlamaIndex's
current graph index (``PropertyGraphIndex``), its extractors and its sub-retrievers use, and it carries labels and
properties, which hold the triplets' payloads and node attributes. ``GraphStore`` only serves the deprecated
``KnowledgeGraphIndex``.

Mapping: a relation ``(source_id, label, target_id)`` is the triplet ``(t1, t2, t3)``, its properties the
triplet payload; entity and chunk nodes keep their labels and properties in the core store's node table; a term
used in a triplet without a stored node comes back as a plain ``EntityNode``. Deletes end the triplets'
validity (history stays readable through :attr:`TripletGraphStore.core`) unless ``hard_delete=True``.

Round trips return what was put: a relation comes back with exactly the properties it was upserted with (the
triplet's key and validity are read through :class:`TripletMemoryRetriever`'s node metadata or
:attr:`TripletGraphStore.core`, not added to the properties), and ``properties=`` filters match the relation's
or either node's properties, as in LlamaIndex's ``SimplePropertyGraphStore``.

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

from .._optional import require

require("llama_index.core", "llama-index")

from llama_index.core.base.base_retriever import BaseRetriever  # noqa: E402
from llama_index.core.graph_stores.types import (  # noqa: E402
    ChunkNode,
    EntityNode,
    LabelledNode,
    PropertyGraphStore,
    Relation,
)
from llama_index.core.graph_stores.types import Triplet as LITriplet  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode  # noqa: E402
from llama_index.core.vector_stores.types import VectorStoreQuery  # noqa: E402

from .._adapters import split_store_or_path  # noqa: E402
from .._validation import check_positive_int  # noqa: E402
from ..core.triplets import NodeRecord, TripletRecord, TripletStore, parse_calls  # noqa: E402
from ..core.triplets.store import TripletWrite, build_store  # noqa: E402
from ..core.triplets.types import namespace_tuple  # noqa: E402
from ..core.triplets.views import best_terms, find_records, lookup, reachable, relation_key  # noqa: E402
from ..models.base import Embedder  # noqa: E402
from ..models.convert import optional_embedder  # noqa: E402

__all__ = ["TripletGraphStore", "TripletMemoryRetriever"]


_NODE_KINDS = ("entity", "chunk")  # the node table's kinds this view owns (others belong to other views)


def _node_from_record(rec: NodeRecord) -> LabelledNode:
    if rec.kind == "chunk":
        return ChunkNode(text=rec.text, id_=rec.id, label=rec.label, properties=dict(rec.properties))
    return EntityNode(name=rec.text, label=rec.label, properties=dict(rec.properties))


class TripletGraphStore(PropertyGraphStore):
    """A LlamaIndex ``PropertyGraphStore`` backed by the RET-LLM triplet memory.

    Pass a core :class:`TripletStore` or a ``path`` (SQLite file, ``":memory:"`` or ``postgresql://`` URL) as
    the first argument, like the core ``TripletStore("memory.db")``, plus the arguments to build the store
    (``embedder``: a LlamaIndex embedding model such as ``MiniLMEmbedding()`` or anything
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
        self.core = build_store(store, path=path, embedder=optional_embedder(embedder), **store_kwargs)
        self.namespace = namespace_tuple(namespace)  # a str is one label, never split into characters
        self.hard_delete = bool(hard_delete)

    @property
    def client(self) -> TripletStore:
        return self.core

    # -- conversions -----------------------------------------------------------------------------------------
    def _node_records(self, ids: list[str] | None = None) -> list[NodeRecord]:
        return [r for r in self.core.get_nodes(ids, namespace=self.namespace) if r.kind in _NODE_KINDS]

    def _nodes_by_id(self, ids: list[str]) -> dict[str, LabelledNode]:
        return {r.id: _node_from_record(r) for r in self._node_records(ids)}

    def _triplets(self, records: list[TripletRecord]) -> list[LITriplet]:
        ids = sorted({r.t1 for r in records} | {r.t3 for r in records})
        known = self._nodes_by_id(ids)
        out = []
        for r in records:
            subj = known.get(r.t1) or EntityNode(name=r.t1)
            obj = known.get(r.t3) or EntityNode(name=r.t3)
            rel = Relation(label=r.t2, source_id=r.t1, target_id=r.t3, properties=dict(r.payload))
            out.append((subj, rel, obj))
        return out

    def _records(self, entity_names=None, relation_names=None, properties=None, ids=None) -> list[TripletRecord]:
        names = list(entity_names or []) + list(ids or [])
        return find_records(self.core, self.namespace, names, relation_names, properties, _NODE_KINDS)

    # -- PropertyGraphStore API ------------------------------------------------------------------------------
    def get(self, properties: dict | None = None, ids: list[str] | None = None) -> list[LabelledNode]:
        """Stored nodes, and entity nodes for every term used in a triplet (filtered by ids / properties)."""
        stored = {r.id: _node_from_record(r) for r in self._node_records(ids)}
        if ids:
            for name in ids:
                if name not in stored and self._records(entity_names=[name]):
                    stored[name] = EntityNode(name=name)
        elif not properties:
            for r in self.core.records(namespace=self.namespace):
                for term in (r.t1, r.t3):
                    stored.setdefault(term, EntityNode(name=term))
        nodes = list(stored.values())
        if properties:
            nodes = [n for n in nodes if any(n.properties.get(k) == v for k, v in properties.items())]
        return nodes

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
        return self._triplets(self._records(entity_names, relation_names, properties, ids))

    def get_rel_map(
        self,
        graph_nodes: list[LabelledNode],
        depth: int = 2,
        limit: int = 30,
        ignore_rels: list[str] | None = None,
    ) -> list[LITriplet]:
        """Triplets reachable from ``graph_nodes`` following subject -> object up to ``depth`` hops."""
        names = [n.id for n in graph_nodes]
        return self._triplets(reachable(self.core, self.namespace, names, depth, limit, ignore_rels or (), _NODE_KINDS))

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
        writes = []
        for rel in relations:
            props = dict(rel.properties)
            writes.append(
                TripletWrite(
                    (rel.source_id, rel.label, rel.target_id),
                    key=relation_key(rel.source_id, rel.label, rel.target_id),
                    namespace=self.namespace,
                    payload=props,
                )
            )
        if writes:
            self.core.write_many(writes)

    def delete(
        self,
        entity_names: list[str] | None = None,
        relation_names: list[str] | None = None,
        properties: dict | None = None,
        ids: list[str] | None = None,
    ) -> None:
        """End (or erase, with ``hard_delete``) the matching triplets and delete the matching nodes."""
        if entity_names or relation_names or properties or ids:
            for r in self._records(entity_names, relation_names, properties, ids):
                self.core.delete(r.key, namespace=self.namespace, hard=self.hard_delete)
        doomed = [n.id for n in self.core_nodes(properties=properties, ids=ids)] if (properties or ids) else []
        if doomed:
            self.core.delete_nodes(doomed, namespace=self.namespace)

    def core_nodes(self, properties: dict | None = None, ids: list[str] | None = None) -> list[NodeRecord]:
        """Stored node attribute records (not the implicit term entities)."""
        recs = self._node_records(ids)
        if properties:
            recs = [r for r in recs if any(r.properties.get(k) == v for k, v in properties.items())]
        return recs

    def structured_query(self, query: str, param_map: dict[str, Any] | None = None) -> Any:
        """Not a query-language store: read it with a ``[MEM_READ{..}]`` string instead (returns triplets)."""
        calls = [c for c in parse_calls(query) if c.kind == "read"]
        if not calls:
            raise NotImplementedError(
                "TripletGraphStore has no query language; pass '[MEM_READ{subject>>relation>>}]' or use "
                "get_triplets() / TripletMemoryRetriever"
            )
        return self._triplets(self.core.read(*calls[0].fields, namespace=self.namespace))

    def vector_query(self, query: VectorStoreQuery, **kwargs: Any) -> tuple[list[LabelledNode], list[float]]:
        """Entities whose term is close to ``query.query_str`` (the memory's own term embeddings and LSH)."""
        if not query.query_str:
            raise NotImplementedError(
                "TripletGraphStore matches terms with its own embedder: give VectorStoreQuery(query_str=...)"
            )
        hits = self.core.search(query.query_str, namespace=self.namespace, k=query.similarity_top_k)
        ranked = best_terms(hits, query.similarity_top_k)
        return [EntityNode(name=term) for term, _ in ranked], [score for _, score in ranked]

    def get_schema(self, refresh: bool = False) -> dict[str, Any]:
        """The relation labels in use and the node labels stored."""
        relations = sorted({r.t2 for r in self.core.records(namespace=self.namespace)})
        labels = sorted({r.label for r in self._node_records()})
        return {"relations": relations, "node_labels": labels}

    def persist(self, persist_path: str, fs: Any = None) -> None:
        """Nothing to do: every write is already committed to the database."""


class TripletMemoryRetriever(BaseRetriever):
    """Retrieve triplets from a :class:`TripletGraphStore` (or a core store) the RET-LLM way.

    The query is a read pattern (``"Dan Jaffe>>works at>>"`` or ``"[MEM_READ{..}]"``: exact match, else LSH
    fuzzy fallback) or free text (matched against every stored term). Each hit is a ``TextNode`` whose text is
    ``"subject relation object"``, with the triplet, key and validity in metadata and the lookup score.
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
            node = TextNode(
                text=f"{r.t1} {r.t2} {r.t3}",
                id_=f"triplet-{r.id}",
                metadata={
                    "subject": r.t1,
                    "relation": r.t2,
                    "object": r.t3,
                    "triplet_key": r.key,
                    "valid_from": r.valid_from,
                    "valid_to": r.valid_to,
                },
            )
            out.append(NodeWithScore(node=node, score=r.score))
        return out
