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

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.triplets.facts import Namespace, TripletRecord, namespace_tuple, normalize_term
from ..core.triplets.memory_store import TripletStore, TripletWrite
from ..core.triplets.node_table import NodeRecord
from ..core.triplets.text_api import parse_calls

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
        """Current triplets (oldest first) with a term in ``entity_names``/``ids`` as subject or object (exact), a
        relation in ``relation_names`` (normalised) and, with ``properties``, a payload or a subject/object node
        holding one of them, as LlamaIndex's ``SimplePropertyGraphStore`` matches."""
        names = list(entity_names or []) + list(ids or [])
        if names:
            reads = [{field: name} for name in dict.fromkeys(names) for field in ("t1", "t3")]
        else:
            reads = [{"t2": rel} for rel in dict.fromkeys(relation_names or ())]
        if reads:
            found = {r.id: r for where in reads for r in self.core.read(**where, namespace=self.namespace, fuzzy=False)}
            candidates = list(found.values())
        else:
            candidates = self.core.records(namespace=self.namespace)
        if relation_names:
            wanted = {normalize_term(x) for x in relation_names}
            candidates = [r for r in candidates if normalize_term(r.t2) in wanted]
        if properties:
            terms = sorted({x for r in candidates for x in (r.t1, r.t3)})
            nodes = {n.id: n.properties for n in self.node_records(terms)}

            def hit(props: Any) -> bool:
                return any(k in props and props[k] == v for k, v in properties.items())

            candidates = [
                r for r in candidates if hit(r.payload) or hit(nodes.get(r.t1, {})) or hit(nodes.get(r.t3, {}))
            ]
        return sorted(candidates, key=lambda r: r.id)

    def reachable(self, names: Sequence[str], depth: int, limit: int, ignore: Iterable[str]) -> list[TripletRecord]:
        """At most ``limit`` triplets reachable from the terms ``names`` following subject -> object up to ``depth``
        hops, leaving out the relations ``ignore``."""
        ignored = {normalize_term(x) for x in ignore}
        out: list[TripletRecord] = []
        seen: set[int] = set()
        frontier = list(names)
        for _ in range(max(depth, 0)):
            if not frontier or len(out) >= limit:
                break
            step = [r for r in self.records(frontier) if r.id not in seen]
            seen.update(r.id for r in step)
            out += [r for r in step if normalize_term(r.t2) not in ignored]
            frontier = sorted({r.t3 for r in step} - set(frontier))
        return out[:limit]

    def with_nodes(
        self, records: Iterable[TripletRecord]
    ) -> list[tuple[NodeRecord | str, TripletRecord, NodeRecord | str]]:
        """``(subject, record, object)`` per record: each end's stored node, else its term (an implicit entity)."""
        records = list(records)
        terms = sorted({term for r in records for term in (r.t1, r.t3)})
        known = {n.id: n for n in self.node_records(terms)}
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
        writes = []
        for s, label, t, props in relations:
            raw = "\x1f".join(normalize_term(x) for x in (s, label, t))
            key = "rel-" + hashlib.sha1(raw.encode("utf-8")).hexdigest()  # one key per normalised triplet
            writes.append(TripletWrite((s, label, t), key=key, namespace=self.namespace, payload=dict(props)))
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
        terms: dict[str, float] = {}
        for r in self.core.search(query, namespace=self.namespace, k=k):
            for m in r.matches:
                if m.field in ("t1", "t3"):
                    terms.setdefault(m.term, m.similarity)
        return sorted(terms.items(), key=lambda x: -x[1])[:k]

    def schema(self) -> dict[str, Any]:
        """The relation labels in use and the node labels stored."""
        relations = sorted({r.t2 for r in self.core.records(namespace=self.namespace)})
        return {"relations": relations, "node_labels": sorted({r.label for r in self.node_records()})}
