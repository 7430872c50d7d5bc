"""Graph-node attributes kept beside the triplets (the ``nodes`` table).

Only the LlamaIndex property-graph view (:class:`fragrel_integrations.llama_index.TripletGraphStore`) stores
nodes: RET-LLM's memory itself is triplets only. :class:`NodeTable` shares the store's backend and write lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..._validation import check_text, check_type, stored_json
from .backend import StorageBackend
from .facts import Namespace, NamespaceLike, decode_namespace, encode_namespace, namespace_tuple
from .rows import dump_payload

__all__ = ["NodeRecord", "NodeTable"]


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A graph node's attributes (what a property-graph view stores next to the triplets)."""

    id: str
    label: str
    kind: str
    text: str
    properties: Mapping[str, Any]
    namespace: Namespace = ()


class NodeTable:
    """Insert, read and delete :class:`NodeRecord` rows per namespace."""

    def __init__(self, backend: StorageBackend, lock: threading.RLock) -> None:
        self.backend = backend
        self._lock = lock

    def put(self, nodes: Iterable[NodeRecord], namespace: NamespaceLike) -> None:
        """Insert or replace node attributes (one transaction)."""
        enc = encode_namespace(namespace_tuple(namespace))
        rows = []
        for n in nodes:
            check_type(n, NodeRecord, "put_nodes takes NodeRecord objects")
            for field in ("id", "label", "kind", "text"):
                check_text(getattr(n, field), f"node {field}")
            rows.append((enc, n.id, n.label, n.kind, n.text, dump_payload(n.properties)))
        if not rows:
            return
        with self._lock, self.backend.write() as cur:
            cur.executemany(
                "INSERT INTO nodes (namespace, id, label, kind, text, properties) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (namespace, id) DO UPDATE SET label = excluded.label, kind = excluded.kind, "
                "text = excluded.text, properties = excluded.properties",
                rows,
            )

    def get(self, ids: Sequence[str] | None, namespace: NamespaceLike) -> list[NodeRecord]:
        """Stored node attributes (all of the namespace, or those with ``ids``)."""
        ns = namespace_tuple(namespace)
        sql = "SELECT id, label, kind, text, properties FROM nodes WHERE namespace = ?"
        with self.backend.read() as cur:
            if ids is None:
                rows = cur.execute(f"{sql} ORDER BY id", (encode_namespace(ns),)).fetchall()
            else:
                found = self.backend.each_chunk(cur, f"{sql} AND id IN ({{marks}})", list(ids), encode_namespace(ns))
                rows = [row for result in found for row in result.fetchall()]
        where = f"{self.backend!r}: the properties of node"
        return [NodeRecord(r[0], r[1], r[2], r[3], stored_json(r[4], f"{where} {r[0]!r:.60}"), ns) for r in rows]

    def namespaces(self, kind: str | None = None) -> list[Namespace]:
        """Distinct namespaces holding nodes (of ``kind``, or any), sorted."""
        where, params = ("", ()) if kind is None else (" WHERE kind = ?", (kind,))
        with self.backend.read() as cur:
            rows = cur.execute(f"SELECT DISTINCT namespace FROM nodes{where}", params).fetchall()
        return sorted(decode_namespace(r[0]) for r in rows)

    def delete(self, ids: Sequence[str], namespace: NamespaceLike) -> int:
        """Delete the nodes with ``ids``; the number deleted."""
        enc = encode_namespace(namespace_tuple(namespace))
        with self._lock, self.backend.write() as cur:
            done = self.backend.each_chunk(
                cur, "DELETE FROM nodes WHERE namespace = ? AND id IN ({marks})", list(ids), enc
            )
            return sum(result.rowcount for result in done)
