"""What the framework views of a :class:`~.store.TripletStore` share, without a framework: LangChain's
``TripletMemoryStore`` (a LangGraph store of triplets and documents), its agent tools, and LlamaIndex's
``TripletGraphStore`` and ``TripletMemoryRetriever``.

* values: a triplet is a dict with ``subject``/``relation``/``object`` (other keys: its payload); any other JSON
  dict is a *document*, kept in the node table and found by the cosine of its text (:func:`put_document`,
  :func:`search_documents`); :func:`matches` applies a LangGraph-style filter to a value;
* reads: :func:`read_pattern` tells a RET-LLM read (``"a>>b>>"`` or ``[MEM_READ{..}]``) from free text, and
  :func:`lookup` / :func:`search_records` answer either kind;
* tools: :func:`write_fact` and :func:`read_facts` answer an agent in the RET-LLM text format.

>>> read_pattern("Dan Jaffe>>works at>>"), read_pattern("where does Dan work?")
(('Dan Jaffe', 'works at', None), None)
>>> matches({"n": 3, "kind": "note"}, {"n": {"$gt": 2}, "kind": "note"})
True
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any

import numpy as np

from .._validation import check_query, check_type
from ..core.triplets.facts import Namespace, Triplet, TripletRecord
from ..core.triplets.memory_store import TripletStore, TripletWrite
from ..core.triplets.node_table import NodeRecord
from ..core.triplets.text_api import parse_calls, render_read, render_write, term_problem
from ..models.embedder import embed_documents, embed_query

__all__ = [
    "core_triplet_store",
    "get_item",
    "list_namespaces",
    "lookup",
    "matches",
    "read_facts",
    "run_batch",
    "search_items",
    "triplet_hit",
    "write_fact",
]

TRIPLET_KEYS = ("subject", "relation", "object")
#: The node-table kind of non-triplet values (LangMem memories, ...).
DOCUMENT_KIND = "langgraph_document"


# ------------------------------------------------------------------------------------------------- values
def record_value(record: TripletRecord) -> dict[str, Any]:
    """A stored triplet as a value: its payload plus ``subject``/``relation``/``object``."""
    return {**dict(record.payload), **record.triplet.as_dict()}


def is_triplet_value(value: dict[str, Any]) -> bool:
    """A triplet has all of subject/relation/object, a document none of them; a part of a triplet is a mistake."""
    present = [k for k in TRIPLET_KEYS if k in value]
    if present and len(present) < len(TRIPLET_KEYS):
        missing = [k for k in TRIPLET_KEYS if k not in value]
        raise ValueError(
            f"a triplet value needs 'subject', 'relation' and 'object' (missing {missing}); a value with none of "
            "them is stored as a document"
        )
    return bool(present)


def document_text(value: dict[str, Any]) -> str:
    """What a document's search compares with the query: its ``content`` text, else the value as JSON."""
    content = value.get("content")
    if isinstance(content, str) and content.strip():
        return content
    return json.dumps(content if isinstance(content, dict | list) else value, sort_keys=True, ensure_ascii=False)


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a is not None and a > b,
    "$gte": lambda a, b: a is not None and a >= b,
    "$lt": lambda a, b: a is not None and a < b,
    "$lte": lambda a, b: a is not None and a <= b,
}


def _compare(actual: Any, wanted: Any) -> bool:
    """A filter condition: equality, nested dicts, or ``{"$op": x}`` with $eq $ne $gt $gte $lt $lte."""
    if isinstance(wanted, dict) and wanted and all(isinstance(k, str) and k.startswith("$") for k in wanted):
        for op, arg in wanted.items():
            if op not in _OPS:
                raise ValueError(f"unsupported filter operator {op!r}; use $eq $ne $gt $gte $lt $lte")
            try:
                ok = _OPS[op](actual, arg)
            except TypeError:
                ok = False
            if not ok:
                return False
        return True
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(_compare(actual.get(k), v) for k, v in wanted.items())
    return actual == wanted


def matches(value: dict[str, Any], flt: dict[str, Any] | None) -> bool:
    """Whether ``value`` passes the filter ``flt`` (None or empty: everything passes)."""
    return not flt or all(_compare(value.get(k), v) for k, v in flt.items())


def namespace_matches(ns: tuple[str, ...], path: Sequence[str], match_type: str) -> bool:
    """Whether ``ns`` starts (``match_type="prefix"``) or ends (``"suffix"``) with ``path``; ``*`` matches any
    (a str ``path`` is one label, as everywhere)."""
    path = (path,) if isinstance(path, str) else tuple(path)
    if len(path) > len(ns):
        return False
    part = ns[: len(path)] if match_type == "prefix" else ns[len(ns) - len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


# ------------------------------------------------------------------------------------------------- reads
def read_pattern(query: str) -> tuple[str | None, str | None, str | None] | None:
    """``a>>b>>`` or ``[MEM_READ{a>>b>>}]`` as a read pattern; None for free text."""
    calls = [c for c in parse_calls(query) if c.kind == "read"]
    if not calls and query.count(">>") == 2:
        calls = parse_calls(f"[MEM_READ{{{query.strip()}}}]")
    return calls[0].fields if calls else None


def _read_or_search(
    core: TripletStore, query: str, namespace: Namespace, k: int, prefix: bool = False
) -> list[TripletRecord]:
    """The triplets a read pattern reads (best score first), else the ``k`` a term search finds for free text."""
    pattern = read_pattern(query)
    if pattern is None:
        return core.search(query, namespace=namespace, prefix=prefix, k=k)
    return sorted(core.read(*pattern, namespace=namespace, prefix=prefix), key=lambda r: (-r.score, r.id))


def lookup(core: TripletStore, query: str, namespace: Namespace, k: int) -> list[TripletRecord]:
    """At most ``k`` triplets for ``query``: a read pattern reads (exact, else fuzzy; best score first), free text
    is matched against every stored term. A blank query is a ValueError (:func:`check_query`)."""
    return _read_or_search(core, check_query(query), namespace, k)[:k]


def search_records(
    core: TripletStore, prefix: Namespace, query: str | None, flt: dict[str, Any] | None, need: int
) -> list[tuple[TripletRecord, float | None]]:
    """The triplets under ``prefix`` that a LangGraph search asks for, with their scores: a read pattern or free
    text ``query`` (at least ``need`` asked of the term search), else every triplet, newest first; ``flt``
    applies to each value (plain subject/relation/object filters are pushed into an exact database read)."""
    if query:
        records = _read_or_search(core, query, prefix, max(need * 4, 20), prefix=True)
        return [(r, r.score) for r in records if matches(record_value(r), flt)]
    given = flt or {}
    exact = {k: given[k] for k in TRIPLET_KEYS if isinstance(given.get(k), str) and given[k].strip()}
    if exact:
        records = core.read(*(exact.get(k) for k in TRIPLET_KEYS), namespace=prefix, prefix=True, fuzzy=False)
    else:
        records = core.records(namespace=prefix, prefix=True)
    records.sort(key=lambda r: r.id, reverse=True)  # newest first
    return [(r, None) for r in records if matches(record_value(r), flt)]


def triplet_hit(record: TripletRecord) -> tuple[str, str, dict[str, Any]]:
    """A retrieved triplet as a text node: its text ``"subject relation object"``, its id and its metadata (the
    three terms, the key and the validity)."""
    validity = {"valid_from": record.valid_from, "valid_to": record.valid_to}
    metadata = {**record.triplet.as_dict(), "triplet_key": record.key, **validity}
    return f"{record.t1} {record.t2} {record.t3}", f"triplet-{record.id}", metadata


# ------------------------------------------------------------------------------------------------- documents
def _unit(vector: Any) -> np.ndarray:
    arr = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(arr))
    return arr / norm if norm > 0 else arr


def put_document(
    core: TripletStore, namespace: Namespace, key: str, value: dict[str, Any], index: bool, hard_delete: bool
) -> None:
    """Store a non-triplet ``value`` under ``key`` (JSON, its text embedded unless ``index`` is False), keeping
    its first ``created_at``; a triplet under the same key is deleted (a key holds one item)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"a TripletMemoryStore document value must be JSON-serialisable: {exc}") from exc
    now = time.time()
    old = core.get_nodes([key], namespace=namespace)
    created = old[0].properties.get("created_at", now) if old and old[0].kind == DOCUMENT_KIND else now
    text = document_text(value)
    vector = embed_documents(core.embedder, [text])[0].tolist() if index else None
    props = {"value": value, "created_at": created, "updated_at": now, "embedding": vector}
    if core.get(key, namespace=namespace) is not None:
        core.delete(key, namespace=namespace, hard=hard_delete)
    core.put_nodes([NodeRecord(key, "document", DOCUMENT_KIND, text, props)], namespace=namespace)


def documents(core: TripletStore, prefix: Namespace) -> list[NodeRecord]:
    """Every document under the namespace ``prefix``."""
    spaces = [ns for ns in core.node_namespaces(kind=DOCUMENT_KIND) if ns[: len(prefix)] == prefix]
    return [r for ns in spaces for r in core.get_nodes(namespace=ns) if r.kind == DOCUMENT_KIND]


def search_documents(
    core: TripletStore, prefix: Namespace, query: str | None, flt: dict[str, Any] | None
) -> list[tuple[NodeRecord, float | None]]:
    """The documents under ``prefix`` that pass ``flt``: all of them (no score) without a query, none for a read
    pattern (it reads triplets), else the indexed ones scored by the cosine with the query."""
    docs = [d for d in documents(core, prefix) if matches(d.properties["value"], flt)]
    if not query:
        return [(d, None) for d in docs]
    if read_pattern(query) is not None:
        return []
    docs = [d for d in docs if d.properties.get("embedding") is not None]
    if not docs:
        return []
    q = _unit(embed_query(core.embedder, query))
    return [(d, float(_unit(d.properties["embedding"]) @ q)) for d in docs]


def item_fields(record: TripletRecord | NodeRecord) -> dict[str, Any]:
    """The fields of a key-value store item (LangGraph's ``Item``) for a triplet or a document record:
    ``namespace``, ``key``, ``value``, ``created_at`` and ``updated_at`` (UTC datetimes)."""
    if isinstance(record, NodeRecord):
        props = record.properties
        key, value, created, updated = record.id, dict(props["value"]), props["created_at"], props["updated_at"]
    else:
        key, value, created, updated = record.key, record_value(record), record.created_at, record.created_at
    utc = partial(datetime.fromtimestamp, tz=UTC)
    return dict(namespace=record.namespace, key=key, value=value, created_at=utc(created), updated_at=utc(updated))


def get_item(core: TripletStore, namespace: Namespace, key: str) -> dict[str, Any] | None:
    """:func:`item_fields` of the triplet, else the document, stored under ``key`` (None: neither)."""
    record = core.get(key, namespace=namespace)
    if record is None:
        record = next((r for r in core.get_nodes([key], namespace=namespace) if r.kind == DOCUMENT_KIND), None)
    return None if record is None else item_fields(record)


def search_items(
    core: TripletStore, prefix: Namespace, query: str | None, flt: dict[str, Any] | None, offset: int, limit: int
) -> list[tuple[dict[str, Any], float | None]]:
    """A store search over triplets and documents: ``(item fields, score)`` best score first with a ``query``
    (:func:`search_records`, :func:`search_documents`), else newest first; ``offset``/``limit`` page the result."""
    need = offset + limit
    items = [(item_fields(r), s) for r, s in search_records(core, prefix, query, flt, need)]
    docs = [(item_fields(d), s) for d, s in search_documents(core, prefix, query, flt)]
    if docs:
        if query:  # best score first across triplets and documents
            items = sorted(items + docs, key=lambda i: -(i[1] if i[1] is not None else float("-inf")))
        else:
            items = sorted(items + docs, key=lambda i: i[0]["updated_at"], reverse=True)  # newest first
    return items[offset:need]


def list_namespaces(
    core: TripletStore, conditions: Iterable[tuple[Sequence[str], str]], max_depth: int | None, offset: int, limit: int
) -> list[tuple[str, ...]]:
    """The namespaces of triplets and documents matching every ``(path, match_type)`` condition
    (:func:`namespace_matches`), cut to ``max_depth`` labels, sorted, paged by ``offset``/``limit``."""
    spaces = sorted(set(core.namespaces()) | set(core.node_namespaces(kind=DOCUMENT_KIND)))
    conditions = list(conditions)
    spaces = [ns for ns in spaces if all(namespace_matches(ns, path, kind) for path, kind in conditions)]
    if max_depth is not None:
        spaces = sorted({ns[:max_depth] for ns in spaces})
    return spaces[offset : offset + limit]


def apply_puts(
    core: TripletStore, puts: Sequence[tuple[Namespace, str, dict[str, Any] | None, bool]], hard_delete: bool
) -> None:
    """Apply a batch of key-value puts ``(namespace, key, value, index)``: None deletes, a triplet value is written
    (one transaction for all), any other dict is a document (:func:`put_document`). A key holds one item, so a
    triplet replaces a document under its key and the other way round; within the batch the last put of a key
    wins (as in LangGraph's stores), and every value is checked before anything is written."""
    last = {(ns, key): (value, index) for ns, key, value, index in puts}
    for value, _ in last.values():
        if value is not None:
            check_type(value, dict, "a TripletMemoryStore value must be a dict")
            is_triplet_value(value)
    writes = []
    for (ns, key), (value, index) in last.items():
        if value is None:
            core.delete(key, namespace=ns, hard=hard_delete)
            core.delete_nodes([key], namespace=ns)
        elif is_triplet_value(value):
            triplet = Triplet(value["subject"], value["relation"], value["object"])
            payload = {k: v for k, v in value.items() if k not in TRIPLET_KEYS}
            writes.append(TripletWrite(triplet, key=key, namespace=ns, payload=payload, single_valued=False))
            core.delete_nodes([key], namespace=ns)
        else:
            put_document(core, ns, key, dict(value), index, hard_delete)
    if writes:
        core.write_many(writes)


def run_batch(
    core: TripletStore,
    ops: Sequence[Any],
    put_of: Callable[[Any], tuple[Namespace, str, dict[str, Any] | None, bool] | None],
    read: Callable[[Any], Any],
    hard_delete: bool,
) -> list[Any]:
    """Run a key-value store's batch of operations in order: each run of puts (``put_of(op)``: the put's
    ``(namespace, key, value, index)``, None for any other operation) goes through :func:`apply_puts` as one batch
    before the next operation, which ``read(op)`` answers; one result per operation (None for a put)."""
    results: list[Any] = [None] * len(ops)
    pending: list[tuple[Namespace, str, dict[str, Any] | None, bool]] = []
    for i, op in enumerate(ops):
        put = put_of(op)
        if put is not None:
            pending.append(put)
            continue
        apply_puts(core, pending, hard_delete)
        pending = []
        results[i] = read(op)
    apply_puts(core, pending, hard_delete)
    return results


# ------------------------------------------------------------------------------------------------- tools
def write_fact(core: TripletStore, namespace: Namespace, terms: Sequence[Any], max_term_chars: int) -> str:
    """An agent's write of ``(subject, relation, object)``: ``stored [MEM_WRITE{..}]``, or ``not stored: <why>``
    (a term too long, empty or with a NUL character) so the model can retry."""
    problem = next((p for p in (term_problem(t, max_term_chars) for t in terms if isinstance(t, str)) if p), None)
    if problem:
        return f"not stored: {problem}"
    try:
        triplet = Triplet(*terms)
    except (TypeError, ValueError) as exc:
        return f"not stored: {exc}"
    return "stored " + render_write(core.write(triplet, namespace=namespace).triplet)


def read_facts(core: TripletStore, namespace: Namespace, subject: str, relation: str, object: str) -> str:
    """An agent's read (empty fields unknown), answered as ``[MEM_READ{..}: {..}; ..]``."""
    fields = (subject or None, relation or None, object or None)
    if all(f is None for f in fields):
        return "give at least one of subject, relation, object"
    return render_read(fields, [r.triplet for r in core.read(*fields, namespace=namespace)])


def core_triplet_store(store: object) -> TripletStore:
    """The core :class:`TripletStore` of ``store``: a core store itself, or the one a framework view keeps as
    ``core`` or ``store`` (``TripletMemoryStore``, ``TripletKVStore``, ``TripletGraphStore``)."""
    if isinstance(store, TripletStore):
        return store
    for attribute in ("core", "store"):
        inner = getattr(store, attribute, None)
        if isinstance(inner, TripletStore):
            return inner
    raise TypeError(
        f"store must be a TripletStore, a TripletMemoryStore, a TripletKVStore or a TripletGraphStore, "
        f"got {type(store).__name__}"
    )
