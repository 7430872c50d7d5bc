"""RET-LLM triplet memory for LangChain / LangGraph: a LangGraph ``BaseStore``, agent tools, and a
``langchain_core.stores.BaseStore`` key-value view. All three convert types and delegate to the core
:class:`~fragrel_integrations.core.triplets.TripletStore`.

Items are triplets: ``value = {"subject": ..., "relation": ..., "object": ...}``; any other keys of the value
are kept as the triplet's payload and returned with it. Any other JSON value (such as LangMem's
``{"content": "..."}`` memories, written by ``langmem.create_manage_memory_tool`` under ``("memories", user_id)``)
is kept as is beside the triplets, as a plain document: one LangGraph store serves both. ``search`` reads the
memory the RET-LLM way:

* ``query="Dan Jaffe>>works at>>"`` (or a whole ``[MEM_READ{...}]``) — one or two fields given, exact match
  first, LSH fuzzy fallback (triplets only);
* any other ``query`` — free text matched against every stored term (exact, else fuzzy), and, for documents,
  cosine similarity between the query and the document's text (its ``content``, else the whole value as JSON;
  documents put with ``index=False`` are not searched this way), best score first;
* no query — the items under the namespace prefix (newest first); ``filter`` applies to the item value in every
  case.

>>> from fragrel_integrations.testing import HashingEmbedder
>>> memory = TripletMemoryStore(embedder=HashingEmbedder(dim=64))
>>> memory.put(("memories", "alice"), "job", {"subject": "Alice", "relation": "works at", "object": "Acme"})
>>> [i.value["object"] for i in memory.search(("memories",), query="Alice>>works at>>")]
['Acme']
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from .._optional import require

require("langgraph", "langchain")

from langchain_core.stores import BaseStore as KVBaseStore  # noqa: E402
from langchain_core.tools import BaseTool, StructuredTool  # noqa: E402
from langgraph.store.base import (  # noqa: E402
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from pydantic import BaseModel, Field  # noqa: E402

from .._adapters import split_store_or_path  # noqa: E402
from .._validation import check_positive_int  # noqa: E402
from ..core.triplets import (  # noqa: E402
    NodeRecord,
    Triplet,
    TripletRecord,
    TripletStore,
    parse_calls,
    render_read,
    render_write,
)
from ..core.triplets.controller import DEFAULT_MAX_TERM_CHARS  # noqa: E402
from ..core.triplets.store import TripletWrite, build_store  # noqa: E402
from ..core.triplets.text_api import term_problem  # noqa: E402
from ..core.triplets.types import namespace_tuple  # noqa: E402
from ..models.base import Embedder, embed_documents, embed_query  # noqa: E402
from ..models.convert import optional_embedder  # noqa: E402

__all__ = ["TripletKVStore", "TripletMemoryStore", "core_triplet_store", "make_memory_tools"]

_TRIPLET_KEYS = ("subject", "relation", "object")


def _when(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def _value(record: TripletRecord) -> dict[str, Any]:
    return {**dict(record.payload), **record.triplet.as_dict()}


_DOC_KIND = "langgraph_document"  # the node-table kind of non-triplet values (LangMem memories, ...)


def _is_triplet_value(value: dict[str, Any]) -> bool:
    """A triplet has all of subject/relation/object, a document none of them; a part of a triplet is a mistake."""
    present = [k for k in _TRIPLET_KEYS if k in value]
    if present and len(present) < len(_TRIPLET_KEYS):
        missing = [k for k in _TRIPLET_KEYS if k not in value]
        raise ValueError(
            f"a triplet value needs 'subject', 'relation' and 'object' (missing {missing}); a value with none of "
            "them is stored as a document"
        )
    return bool(present)


def _split_value(value: Any) -> tuple[Triplet, dict[str, Any]]:
    triplet = Triplet(value["subject"], value["relation"], value["object"])
    return triplet, {k: v for k, v in value.items() if k not in _TRIPLET_KEYS}


def _document_text(value: dict[str, Any]) -> str:
    """What a document's search compares with the query: its ``content`` text, else the value as JSON."""
    content = value.get("content")
    if isinstance(content, str) and content.strip():
        return content
    return json.dumps(content if isinstance(content, dict | list) else value, sort_keys=True, ensure_ascii=False)


def _unit(vector: Any) -> np.ndarray:
    arr = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(arr))
    return arr / norm if norm > 0 else arr


_OPS = {
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


def _matches(value: dict[str, Any], flt: dict[str, Any] | None) -> bool:
    return not flt or all(_compare(value.get(k), v) for k, v in flt.items())


def _pattern(query: str) -> tuple[str | None, str | None, str | None] | None:
    """``a>>b>>`` or ``[MEM_READ{a>>b>>}]`` as a read pattern; None for free text."""
    calls = [c for c in parse_calls(query) if c.kind == "read"]
    if calls:
        return calls[0].fields
    if query.count(">>") == 2:
        calls = parse_calls(f"[MEM_READ{{{query.strip()}}}]")
        if calls:
            return calls[0].fields
    return None


def _ns_matches(ns: tuple[str, ...], cond: MatchCondition) -> bool:
    path = tuple(cond.path)
    if len(path) > len(ns):
        return False
    part = ns[: len(path)] if cond.match_type == "prefix" else ns[len(ns) - len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


class TripletMemoryStore(BaseStore):
    """A LangGraph store whose items are RET-LLM triplets kept in a :class:`TripletStore`.

    Pass an existing core store or a ``path`` (a SQLite file, ``":memory:"`` or a ``postgresql://`` URL) as
    the first argument, like the core ``TripletStore("memory.db")``, plus the arguments to build the store
    (``embedder`` — any embedding model :func:`~fragrel_integrations.models.as_embedder` accepts — and any
    other :class:`TripletStore` keyword).
    A put on an existing key keeps the previous version (readable ``as_of`` through :attr:`core`); a delete
    ends the item's validity (``hard_delete=True`` erases instead). TTLs are not supported, and a put's
    ``index`` argument is ignored for triplets: every term of every triplet is always embedded and LSH-indexed.

    A value that is not a triplet (no ``subject``/``relation``/``object``) is a document, stored as is (JSON)
    in the store's node table beside the triplets, with its text embedded for search unless put with
    ``index=False``; a put replaces it (no history) and a delete erases it. So LangMem's memory tools and
    memory managers can use the same store as the triplet tools (see the module docstring). A search reads the
    documents under the namespace prefix and scores them all (no LSH index for documents): fine for per-user
    memories, not meant for millions of documents under one prefix.
    """

    supports_ttl = False

    def __init__(
        self,
        store: TripletStore | str | Path | None = None,
        *,
        path: str | Path | None = None,
        embedder: Embedder | Any | None = None,
        hard_delete: bool = False,
        **store_kwargs: Any,
    ) -> None:
        store, path = split_store_or_path(store, path)
        self.core = build_store(store, path=path, embedder=optional_embedder(embedder), **store_kwargs)
        self.hard_delete = bool(hard_delete)

    # -- LangGraph BaseStore ---------------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run get/search/put/list-namespaces operations in order (puts of one batch share one transaction)."""
        ops = list(ops)
        results: list[Result] = [None] * len(ops)
        pending: list[tuple[int, PutOp]] = []
        for i, op in enumerate(ops):
            if isinstance(op, PutOp):
                pending.append((i, op))
                continue
            self._flush(pending)
            pending = []
            if isinstance(op, GetOp):
                rec = self.core.get(op.key, namespace=op.namespace)
                results[i] = self._item(rec) if rec is not None else self._document_item(op.namespace, op.key)
            elif isinstance(op, SearchOp):
                results[i] = self._search(op)
            elif isinstance(op, ListNamespacesOp):
                results[i] = self._list_namespaces(op)
            else:
                raise TypeError(f"unknown store operation {type(op).__name__}")
        self._flush(pending)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async :meth:`batch` (the database work runs in a worker thread)."""
        return await asyncio.to_thread(self.batch, list(ops))

    def _flush(self, puts: list[tuple[int, PutOp]]) -> None:
        if not puts:
            return
        last: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for _, op in puts:  # within one batch the last put of a key wins (as in LangGraph's stores)
            last[(tuple(op.namespace), op.key)] = op
        writes = []
        for op in last.values():  # check every value before writing any
            if op.value is not None and not isinstance(op.value, dict):
                raise TypeError(f"a TripletMemoryStore value must be a dict, got {type(op.value).__name__}")
            if op.value is not None:
                _is_triplet_value(op.value)
        for (ns, key), op in last.items():
            if op.value is None:
                self.core.delete(key, namespace=ns, hard=self.hard_delete)
                self.core.delete_nodes([key], namespace=ns)
            elif _is_triplet_value(op.value):
                triplet, payload = _split_value(dict(op.value))
                writes.append(TripletWrite(triplet, key=key, namespace=ns, payload=payload, single_valued=False))
                self.core.delete_nodes([key], namespace=ns)  # a key holds one item: the triplet replaces a document
            else:
                self._put_document(ns, key, dict(op.value), op.index is not False)
        if writes:
            self.core.write_many(writes)

    # -- documents (non-triplet values) ------------------------------------------------------------------------
    def _put_document(self, ns: tuple[str, ...], key: str, value: dict[str, Any], index: bool) -> None:
        try:
            json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"a TripletMemoryStore document value must be JSON-serialisable: {exc}") from exc
        now = time.time()
        old = self.core.get_nodes([key], namespace=ns)
        created = old[0].properties.get("created_at", now) if old and old[0].kind == _DOC_KIND else now
        text = _document_text(value)
        vector = embed_documents(self.core.embedder, [text])[0].tolist() if index else None
        props = {"value": value, "created_at": created, "updated_at": now, "embedding": vector}
        if self.core.get(key, namespace=ns) is not None:  # a key holds one item: the document replaces a triplet
            self.core.delete(key, namespace=ns, hard=self.hard_delete)
        self.core.put_nodes([NodeRecord(key, "document", _DOC_KIND, text, props)], namespace=ns)

    @staticmethod
    def _doc_item(rec: NodeRecord, score: float | None = None, search: bool = False) -> Item:
        props = rec.properties
        kwargs = {
            "namespace": rec.namespace,
            "key": rec.id,
            "value": dict(props["value"]),
            "created_at": _when(props["created_at"]),
            "updated_at": _when(props["updated_at"]),
        }
        return SearchItem(**kwargs, score=score) if search else Item(**kwargs)

    def _document_item(self, namespace: Sequence[str], key: str) -> Item | None:
        recs = [r for r in self.core.get_nodes([key], namespace=tuple(namespace)) if r.kind == _DOC_KIND]
        return self._doc_item(recs[0]) if recs else None

    def _documents(self, prefix: tuple[str, ...]) -> list[NodeRecord]:
        spaces = [ns for ns in self.core.node_namespaces(kind=_DOC_KIND) if ns[: len(prefix)] == prefix]
        return [r for ns in spaces for r in self.core.get_nodes(namespace=ns) if r.kind == _DOC_KIND]

    def _search_documents(self, op: SearchOp) -> list[tuple[NodeRecord, float | None]]:
        docs = [d for d in self._documents(tuple(op.namespace_prefix)) if _matches(d.properties["value"], op.filter)]
        if not op.query:
            return [(d, None) for d in docs]
        if op.query and _pattern(op.query) is not None:
            return []  # a RET-LLM read pattern reads triplets
        docs = [d for d in docs if d.properties.get("embedding") is not None]
        if not docs:
            return []
        q = _unit(embed_query(self.core.embedder, op.query))
        return [(d, float(_unit(d.properties["embedding"]) @ q)) for d in docs]

    @staticmethod
    def _item(rec: TripletRecord, score: float | None = None, search: bool = False) -> Item:
        kwargs = {
            "namespace": rec.namespace,
            "key": rec.key,
            "value": _value(rec),
            "created_at": _when(rec.created_at),
            "updated_at": _when(rec.created_at),
        }
        return SearchItem(**kwargs, score=score) if search else Item(**kwargs)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        need = op.offset + op.limit
        if op.query:
            pattern = _pattern(op.query)
            if pattern is not None:
                records = self.core.read(*pattern, namespace=prefix, prefix=True)
                records.sort(key=lambda r: (-r.score, r.id))
            else:
                records = self.core.search(op.query, namespace=prefix, prefix=True, k=max(need * 4, 20))
            scored = [(r, r.score) for r in records if _matches(_value(r), op.filter)]
        else:
            flt = op.filter or {}
            exact = {k: flt[k] for k in _TRIPLET_KEYS if isinstance(flt.get(k), str) and flt[k].strip()}
            if exact:  # push plain subject/relation/object filters into an exact database read
                records = self.core.read(
                    exact.get("subject"), exact.get("relation"), exact.get("object"),
                    namespace=prefix, prefix=True, fuzzy=False,
                )  # fmt: skip
            else:
                records = self.core.records(namespace=prefix, prefix=True)
            records.sort(key=lambda r: r.id, reverse=True)  # newest first
            scored = [(r, None) for r in records if _matches(_value(r), op.filter)]
        items = [self._item(r, s, search=True) for r, s in scored]
        docs = [self._doc_item(d, s, search=True) for d, s in self._search_documents(op)]
        if docs:
            if op.query:  # best score first across triplets and documents
                items = sorted(items + docs, key=lambda i: -(i.score if i.score is not None else float("-inf")))
            else:
                items = sorted(items + docs, key=lambda i: i.updated_at, reverse=True)  # newest first
        return items[op.offset : need]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        spaces = sorted(set(self.core.namespaces()) | set(self.core.node_namespaces(kind=_DOC_KIND)))
        if op.match_conditions:
            spaces = [ns for ns in spaces if all(_ns_matches(ns, c) for c in op.match_conditions)]
        if op.max_depth is not None:
            spaces = sorted({ns[: op.max_depth] for ns in spaces})
        return spaces[op.offset : op.offset + op.limit]

    # -- views ---------------------------------------------------------------------------------------------------
    def as_kv_store(self, namespace: Sequence[str] = ("kv",)) -> TripletKVStore:
        """A ``langchain_core.stores.BaseStore[str, Triplet]`` over one namespace of this memory."""
        return TripletKVStore(self.core, namespace=namespace, hard_delete=self.hard_delete)

    def as_tools(self, namespace: Sequence[str] = ("memories",)) -> list[BaseTool]:
        """``memory_write`` and ``memory_read`` tools for an agent, bound to ``namespace``."""
        return make_memory_tools(self.core, namespace=namespace)

    def close(self) -> None:
        self.core.close()


class TripletKVStore(KVBaseStore[str, Triplet]):
    """Key -> :class:`Triplet` view of one namespace of a :class:`TripletStore` (LangChain's ``BaseStore``).

    ``mset`` accepts Triplets, ``(t1, t2, t3)`` tuples or subject/relation/object dicts; overwriting a key
    keeps the old version's history; ``mdelete`` ends validity (or erases, ``hard_delete=True``).
    """

    def __init__(
        self, store: TripletStore | TripletMemoryStore, *, namespace: Sequence[str] = ("kv",), hard_delete: bool = False
    ) -> None:
        self.store = core_triplet_store(store)
        self.namespace = namespace_tuple(namespace)  # a str is one label, never split into characters
        self.hard_delete = hard_delete

    def mget(self, keys: Sequence[str]) -> list[Triplet | None]:
        return [None if r is None else r.triplet for r in self.store.get_many(list(keys), namespace=self.namespace)]

    def mset(self, key_value_pairs: Sequence[tuple[str, Triplet]]) -> None:
        writes = [
            TripletWrite(Triplet.coerce(v), key=k, namespace=self.namespace, single_valued=False)
            for k, v in key_value_pairs
        ]
        self.store.write_many(writes)

    def mdelete(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.store.delete(key, namespace=self.namespace, hard=self.hard_delete)

    def yield_keys(self, *, prefix: str | None = None) -> Iterator[str]:
        for rec in self.store.records(namespace=self.namespace):
            if prefix is None or rec.key.startswith(prefix):
                yield rec.key


class _WriteArgs(BaseModel):
    subject: str = Field(description="who or what the fact is about, e.g. 'Dan Jaffe'")
    relation: str = Field(description="a short verb phrase, e.g. 'works at'")
    object: str = Field(description="the value, e.g. 'Google'")


class _ReadArgs(BaseModel):
    subject: str = Field(default="", description="the subject, or empty to look it up")
    relation: str = Field(default="", description="the relation, or empty to look it up")
    object: str = Field(default="", description="the object, or empty to look it up")


def core_triplet_store(store: object) -> TripletStore:
    """The core :class:`TripletStore` of ``store``: a core store itself, or the one inside a
    :class:`TripletMemoryStore`, a :class:`TripletKVStore` or a LlamaIndex ``TripletGraphStore``."""
    if isinstance(store, TripletStore):
        return store
    for attribute in ("core", "store"):  # framework stores keep the core store here
        inner = getattr(store, attribute, None)
        if isinstance(inner, TripletStore):
            return inner
    raise TypeError(
        f"store must be a TripletStore, a TripletMemoryStore, a TripletKVStore or a TripletGraphStore, "
        f"got {type(store).__name__}"
    )


def make_memory_tools(
    store: TripletStore | TripletMemoryStore | TripletKVStore | Any,
    *,
    namespace: Sequence[str] = ("memories",),
    max_term_chars: int = DEFAULT_MAX_TERM_CHARS,
) -> list[BaseTool]:
    """Agent tools over a triplet memory: ``memory_write(subject, relation, object)`` and
    ``memory_read(subject, relation, object)`` (leave one or two fields empty). Both answer in the
    RET-LLM text format, so the model sees ``[MEM_READ{..}: {..}; ..]``.

    ``store`` is a core :class:`TripletStore` or a framework store over one (:class:`TripletMemoryStore`,
    :class:`TripletKVStore`, the LlamaIndex ``TripletGraphStore``); the tools read and write its core store.
    The arguments come from a model: a write with a term longer than ``max_term_chars``, an empty term or a
    NUL character is not stored, and the tool answers ``not stored: <why>`` so the model can retry.
    """
    store = core_triplet_store(store)
    check_positive_int(max_term_chars, "max_term_chars")
    ns = namespace_tuple(namespace)  # a str is one label, never split into characters

    def memory_write(subject: str, relation: str, object: str) -> str:
        terms = (subject, relation, object)
        problem = next((p for p in (term_problem(t, max_term_chars) for t in terms if isinstance(t, str)) if p), None)
        if problem:
            return f"not stored: {problem}"
        try:
            trip = Triplet(*terms)
        except (TypeError, ValueError) as exc:
            return f"not stored: {exc}"
        rec = store.write(trip, namespace=ns)
        return "stored " + render_write(rec.triplet)

    def memory_read(subject: str = "", relation: str = "", object: str = "") -> str:
        fields = (subject or None, relation or None, object or None)
        if all(f is None for f in fields):
            return "give at least one of subject, relation, object"
        records = store.read(*fields, namespace=ns)
        return render_read(fields, [r.triplet for r in records])

    async def amemory_write(subject: str, relation: str, object: str) -> str:
        return await asyncio.to_thread(memory_write, subject, relation, object)

    async def amemory_read(subject: str = "", relation: str = "", object: str = "") -> str:
        return await asyncio.to_thread(memory_read, subject, relation, object)

    return [
        StructuredTool.from_function(
            func=memory_write,
            coroutine=amemory_write,
            name="memory_write",
            description="Store one fact in long-term memory as a (subject, relation, object) triplet.",
            args_schema=_WriteArgs,
        ),
        StructuredTool.from_function(
            func=memory_read,
            coroutine=amemory_read,
            name="memory_read",
            description=(
                "Look facts up in long-term memory. Give one or two of subject, relation, object and leave the "
                "unknown ones empty; similar wording is matched too. Returns the matching triplets."
            ),
            args_schema=_ReadArgs,
        ),
    ]
