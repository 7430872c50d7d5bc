"""RET-LLM triplet memory for LangChain / LangGraph: a LangGraph ``BaseStore``, agent tools, and a
``langchain_core.stores.BaseStore`` key-value view. All three convert types and delegate to the core
:class:`~fragrel_integrations.core.triplets.TripletStore`.

Items are triplets: ``value = {"subject": ..., "relation": ..., "object": ...}``; any other keys of the value
are kept as the triplet's payload and returned with it. ``search`` reads the memory the RET-LLM way:

* ``query="Dan Jaffe>>works at>>"`` (or a whole ``[MEM_READ{...}]``) — one or two fields given, exact match
  first, LSH fuzzy fallback;
* any other ``query`` — free text matched against every stored term (exact, else fuzzy);
* no query — the items under the namespace prefix; ``filter`` applies to the item value in every case.

>>> from fragrel_integrations.testing import HashingEmbedder
>>> memory = TripletMemoryStore(embedder=HashingEmbedder(dim=64))
>>> memory.put(("memories", "alice"), "job", {"subject": "Alice", "relation": "works at", "object": "Acme"})
>>> [i.value["object"] for i in memory.search(("memories",), query="Alice>>works at>>")]
['Acme']
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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
from ..core.triplets import Triplet, TripletRecord, TripletStore, parse_calls, render_read, render_write  # noqa: E402
from ..core.triplets.controller import DEFAULT_MAX_TERM_CHARS  # noqa: E402
from ..core.triplets.store import TripletWrite, build_store  # noqa: E402
from ..core.triplets.text_api import term_problem  # noqa: E402
from ..core.triplets.types import namespace_tuple  # noqa: E402
from ..models.base import Embedder  # noqa: E402
from ..models.convert import optional_embedder  # noqa: E402

__all__ = ["TripletKVStore", "TripletMemoryStore", "core_triplet_store", "make_memory_tools"]

_TRIPLET_KEYS = ("subject", "relation", "object")


def _when(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def _value(record: TripletRecord) -> dict[str, Any]:
    return {**dict(record.payload), **record.triplet.as_dict()}


def _split_value(value: Any) -> tuple[Triplet, dict[str, Any]]:
    if not isinstance(value, dict):
        raise TypeError(f"a TripletMemoryStore value must be a dict, got {type(value).__name__}")
    missing = [k for k in _TRIPLET_KEYS if k not in value]
    if missing:
        raise ValueError(
            "TripletMemoryStore stores triplets: the value needs 'subject', 'relation' and 'object' "
            f"(missing {missing}); keep other data in a different LangGraph store"
        )
    triplet = Triplet(value["subject"], value["relation"], value["object"])
    return triplet, {k: v for k, v in value.items() if k not in _TRIPLET_KEYS}


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
    ``index`` argument is ignored: every term of every triplet is always embedded and LSH-indexed.
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
                results[i] = None if rec is None else self._item(rec)
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
        for (ns, key), op in last.items():
            if op.value is None:
                self.core.delete(key, namespace=ns, hard=self.hard_delete)
                continue
            triplet, payload = _split_value(dict(op.value))
            writes.append(TripletWrite(triplet, key=key, namespace=ns, payload=payload, single_valued=False))
        if writes:
            self.core.write_many(writes)

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
        return [self._item(r, s, search=True) for r, s in scored[op.offset : need]]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        spaces = self.core.namespaces()
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
