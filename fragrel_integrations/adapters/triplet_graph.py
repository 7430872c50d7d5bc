"""A property graph over a :class:`~.store.TripletStore`, without a framework: what LlamaIndex's
``TripletGraphStore`` delegates to (the adapter converts ``EntityNode``/``ChunkNode``/``Relation`` objects).

A relation ``(source, label, target)`` is the triplet ``(t1, t2, t3)``, its properties the triplet payload;
entity and chunk nodes keep their label and properties in the store's node table; a term used in a triplet
without a stored node is an implicit entity (returned as its name). Deletes end the triplets' validity (history
stays readable through the core store) unless ``hard_delete``.

>>> from fragrel_integrations.testing import HashingEmbedder
>>> graph = TripletGraph(TripletStore(":memory:", embedder=HashingEmbedder(dim=16)))
>>> graph.upsert_relations([("Dan", "works at", "Google", {"since": 2019})])
>>> [(r.t1, r.t2, r.t3) for r in graph.records(["Dan"])], graph.nodes(), graph.schema()
([('Dan', 'works at', 'Google')], ['Dan', 'Google'], {'relations': ['works at'], 'node_labels': []})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.triplets.facts import Namespace, TripletRecord, namespace_tuple
from ..core.triplets.memory_store import TripletStore, TripletWrite
from ..core.triplets.node_table import NodeRecord
from ..core.triplets.text_api import parse_calls
from .triplet_views import best_terms, find_records, reachable, relation_key

__all__ = ["TripletGraph"]

#: The node-table kinds a graph view owns (others belong to other views).
NODE_KINDS = ("entity", "chunk")


def _has_any(props: Mapping[str, Any], properties: Mapping[str, Any]) -> bool:
    return any(props.get(k) == v for k, v in properties.items())


class TripletGraph:
    """Nodes, relations and reads of one ``namespace`` of a triplet store, as a property-graph store sees them."""

    def __init__(self, core: TripletStore, namespace: Namespace = (), hard_delete: bool = False) -> None:
        self.core = core
        self.namespace = namespace_tuple(namespace)  # a str is one label, never split into characters
        self.hard_delete = bool(hard_delete)

    def node_records(
        self, ids: list[str] | None = None, properties: Mapping[str, Any] | None = None
    ) -> list[NodeRecord]:
        """Stored nodes (optionally those of ``ids``, or with one of ``properties``); not the implicit entities."""
        recs = [r for r in self.core.get_nodes(ids, namespace=self.namespace) if r.kind in NODE_KINDS]
        return [r for r in recs if _has_any(r.properties, properties)] if properties else recs

    def records(
        self,
        entity_names: Sequence[str] | None = None,
        relation_names: Sequence[str] | None = None,
        properties: dict[str, Any] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[TripletRecord]:
        """Current triplets touching ``entity_names``/``ids``, with a relation in ``relation_names`` and a payload or
        node matching ``properties`` (see :func:`~.views.find_records`)."""
        names = list(entity_names or []) + list(ids or [])
        return find_records(self.core, self.namespace, names, relation_names, properties, NODE_KINDS)

    def reachable(self, names: Sequence[str], depth: int, limit: int, ignore: Iterable[str]) -> list[TripletRecord]:
        """Triplets reachable from ``names`` following subject -> object up to ``depth`` hops."""
        return reachable(self.core, self.namespace, names, depth, limit, ignore, NODE_KINDS)

    def known_nodes(self, records: Iterable[TripletRecord]) -> dict[str, NodeRecord]:
        """The stored nodes of the subjects and objects of ``records``, by id."""
        ids = sorted({term for r in records for term in (r.t1, r.t3)})
        return {r.id: r for r in self.node_records(ids)}

    def with_nodes(
        self, records: Iterable[TripletRecord]
    ) -> list[tuple[NodeRecord | str, TripletRecord, NodeRecord | str]]:
        """``(subject, record, object)`` per record: each end's stored node, else its term (an implicit entity)."""
        records = list(records)
        known = self.known_nodes(records)
        return [(known.get(r.t1) or r.t1, r, known.get(r.t3) or r.t3) for r in records]

    def nodes(self, properties: dict[str, Any] | None = None, ids: list[str] | None = None) -> list[NodeRecord | str]:
        """Stored nodes and (by name) the implicit entities of every term used in a triplet, filtered by ``ids``
        or ``properties`` (an implicit entity has no properties)."""
        stored: dict[str, NodeRecord | str] = {r.id: r for r in self.node_records(ids)}
        if ids:
            for name in ids:
                if name not in stored and self.records(entity_names=[name]):
                    stored[name] = name
        elif not properties:
            for r in self.core.records(namespace=self.namespace):
                for term in (r.t1, r.t3):
                    stored.setdefault(term, term)
        nodes = list(stored.values())
        if properties:
            nodes = [n for n in nodes if _has_any({} if isinstance(n, str) else n.properties, properties)]
        return nodes

    def upsert_relations(self, relations: Iterable[tuple[str, str, str, Mapping[str, Any]]]) -> None:
        """Write ``(source, label, target, properties)`` relations (one key per source/label/target)."""
        writes = [
            TripletWrite((s, label, t), key=relation_key(s, label, t), namespace=self.namespace, payload=dict(props))
            for s, label, t, props in relations
        ]
        if writes:
            self.core.write_many(writes)

    def delete(
        self,
        entity_names: list[str] | None = None,
        relation_names: list[str] | None = None,
        properties: dict[str, Any] | None = None,
        ids: list[str] | None = None,
    ) -> None:
        """End (or erase, with ``hard_delete``) the matching triplets and delete the matching stored nodes."""
        if entity_names or relation_names or properties or ids:
            for r in self.records(entity_names, relation_names, properties, ids):
                self.core.delete(r.key, namespace=self.namespace, hard=self.hard_delete)
        doomed = [n.id for n in self.node_records(ids, properties)] if (properties or ids) else []
        if doomed:
            self.core.delete_nodes(doomed, namespace=self.namespace)

    def read_query(self, query: str) -> list[TripletRecord]:
        """The triplets a ``[MEM_READ{..}]`` query reads; NotImplementedError for any other query."""
        calls = [c for c in parse_calls(query) if c.kind == "read"]
        if not calls:
            raise NotImplementedError(
                "TripletGraphStore has no query language; pass '[MEM_READ{subject>>relation>>}]' or use "
                "get_triplets() / TripletMemoryRetriever"
            )
        return self.core.read(*calls[0].fields, namespace=self.namespace)

    def terms(self, query: str, k: int) -> list[tuple[str, float]]:
        """The ``k`` stored terms closest to ``query`` with their scores (the store's embeddings and term index)."""
        return best_terms(self.core.search(query, namespace=self.namespace, k=k), k)

    def schema(self) -> dict[str, Any]:
        """The relation labels in use and the node labels stored."""
        relations = sorted({r.t2 for r in self.core.records(namespace=self.namespace)})
        return {"relations": relations, "node_labels": sorted({r.label for r in self.node_records()})}
