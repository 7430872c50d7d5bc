"""RET-LLM triplet memory for LangChain / LangGraph: a LangGraph ``BaseStore``, agent tools, and a
``langchain_core.stores.BaseStore`` key-value view. All three convert types and delegate to the core
:class:`~fragrel_integrations.core.triplets.TripletStore`.

Items are triplets (``{"subject", "relation", "object"}`` plus any payload keys) or any other JSON value, kept
as a plain document beside them (LangMem's ``{"content": ...}`` memories), so one LangGraph store serves both.
``search`` reads a RET-LLM pattern (``"Dan Jaffe>>works at>>"``), free text (terms, and the cosine of documents),
or no query (newest first); see :func:`~fragrel_integrations.adapters.triplet_views.search_items`.

>>> from fragrel_integrations.testing import HashingEmbedder
>>> memory = TripletMemoryStore(embedder=HashingEmbedder(dim=64))
>>> memory.put(("memories", "alice"), "job", {"subject": "Alice", "relation": "works at", "object": "Acme"})
>>> [i.value["object"] for i in memory.search(("memories",), query="Alice>>works at>>")]
['Acme']
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .._optional import require

require("langgraph", "langchain")

from langchain_core.stores import BaseStore as KVBaseStore  # noqa: E402
from langchain_core.tools import BaseTool, StructuredTool  # noqa: E402
from langgraph.store.base import BaseStore, GetOp, Item, ListNamespacesOp, Op, PutOp, Result, SearchItem, SearchOp  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402

from .._validation import check_positive_int  # noqa: E402
from ..adapters.arguments import split_store_or_path  # noqa: E402
from ..adapters.triplet_views import (  # noqa: E402
    core_triplet_store,
    get_item,
    list_namespaces,
    read_facts,
    run_batch,
    search_items,
    write_fact,
)
from ..core.triplets import Triplet, TripletStore  # noqa: E402
from ..core.triplets.facts import namespace_tuple  # noqa: E402
from ..core.triplets.lenient import DEFAULT_MAX_TERM_CHARS  # noqa: E402
from ..core.triplets.memory_store import TripletWrite, build_store  # noqa: E402
from ..models.convert import optional_embedder  # noqa: E402
from ..models.embedder import Embedder  # noqa: E402

__all__ = ["TripletKVStore", "TripletMemoryStore", "core_triplet_store", "make_memory_tools"]


class TripletMemoryStore(BaseStore):
    """A LangGraph store whose items are RET-LLM triplets (and documents) kept in a :class:`TripletStore`.

    Pass a core store or a ``path`` (a SQLite file, ``":memory:"`` or a ``postgresql://`` URL), plus the
    arguments to build the store (``embedder``: anything :func:`~fragrel_integrations.models.as_embedder`
    accepts; other :class:`TripletStore` keywords). A put on an existing triplet key keeps the previous version
    (readable ``as_of`` through :attr:`core`); a delete ends its validity (``hard_delete=True`` erases). TTLs are
    not supported; a put's ``index`` is ignored for triplets (always indexed). Documents follow
    :func:`~fragrel_integrations.adapters.triplet_views.apply_puts` (a put replaces, a delete erases; a search scores
    every document under the prefix: fine per user, not for millions under one prefix).
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
        return run_batch(self.core, list(ops), self._put, self._read, self.hard_delete)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async :meth:`batch` (the database work runs in a worker thread)."""
        return await asyncio.to_thread(self.batch, list(ops))

    @staticmethod
    def _put(op: Op) -> tuple[tuple[str, ...], str, dict[str, Any] | None, bool] | None:
        if not isinstance(op, PutOp):
            return None
        return namespace_tuple(op.namespace), op.key, op.value, op.index is not False

    def _read(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            fields = get_item(self.core, namespace_tuple(op.namespace), op.key)
            return None if fields is None else Item(**fields)
        if isinstance(op, SearchOp):
            found = search_items(
                self.core, namespace_tuple(op.namespace_prefix), op.query, op.filter, op.offset, op.limit
            )
            return [SearchItem(**fields, score=score) for fields, score in found]
        if isinstance(op, ListNamespacesOp):
            conditions = [(namespace_tuple(c.path), c.match_type) for c in op.match_conditions or ()]
            return list_namespaces(self.core, conditions, op.max_depth, op.offset, op.limit)
        raise TypeError(f"unknown store operation {type(op).__name__}")

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
        return write_fact(store, ns, (subject, relation, object), max_term_chars)

    def memory_read(subject: str = "", relation: str = "", object: str = "") -> str:
        return read_facts(store, ns, subject, relation, object)

    return [
        StructuredTool.from_function(
            func=memory_write,
            name="memory_write",
            description="Store one fact in long-term memory as a (subject, relation, object) triplet.",
            args_schema=_WriteArgs,
        ),
        StructuredTool.from_function(
            func=memory_read,
            name="memory_read",
            description=(
                "Look facts up in long-term memory. Give one or two of subject, relation, object and leave the "
                "unknown ones empty; similar wording is matched too. Returns the matching triplets."
            ),
            args_schema=_ReadArgs,
        ),
    ]
