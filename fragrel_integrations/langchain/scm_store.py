"""The SCM memory stream in a LangGraph store: :class:`LangGraphStoreStream` over any ``BaseStore``.

Each interaction is one store item under the namespace ``namespace + (session_id,)``. Its key is the *slot* it
claimed, zero-padded to ten digits, and a random suffix that no other writer can repeat
(``"0000000000-3f2a..."``), so keys sort in time order and **no write can ever replace another**. The value is a
JSON-compatible dict: ``observation``, ``response``, ``summary``, ``embedding`` (a list of floats, or None),
``created`` (a Unix timestamp), ``index`` (the slot) and ``seq`` (the slot as zero-padded text). A session's
interactions are its items ordered by (slot, created, key); an interaction's index is its position in that order.
Items are written with ``index=False``: SCM scores the stored embeddings itself (cosine plus the optional FragRel
relation), so a store configured with an ``index`` must not embed them again. Use the same store object you pass to
``create_agent(store=...)`` (an ``InMemoryStore``, a ``SqliteStore``, a ``PostgresStore``, ...). The sync store
methods are used; with an async store (``AsyncPostgresStore``) call the stream from a worker thread, as the async
methods of the SCM memory do. Items written by earlier versions (keys of ten digits alone) are read as before.

Session ids are free text: ``%``, ``.`` and NUL (not allowed in a namespace label) are percent-encoded in the
label and decoded by :meth:`LangGraphStoreStream.sessions`.

Concurrent writers. A ``BaseStore`` has no put-if-absent, so the stream never relies on one:

* within one process, every stream object on the same store shares one lock, so two agents (or an agent built per
  request) appending to one session take consecutive slots;
* across processes, two writers may claim the same slot at the same moment; both items are kept (their keys
  differ) and every reader orders them the same way, so no turn is lost. The index :meth:`append` returns is the
  position at the time of the write; in that rare race the later-ordered of the two turns moves up by one.

Reads. :meth:`LangGraphStoreStream.items` keeps each session's items in memory, as ``SCMStream`` does. On every
call it asks the store, in one ``store.batch``, for the first and last cached items by key (their ``created`` must
match, so a clear by another stream object or process is noticed) and searches for items whose ``seq`` is at
least the last cached slot less four (``seq`` is text, so the comparison is right in every store, ``PostgresStore``
included, which compares ``value->>'seq'`` as text). Only new items are decoded; a new item that sorts before the
last cached one (a cross-process race, or a late write) makes the call read the whole session with ``store.search``
(in pages of ``page_size``).
A deletion in the *middle* of a session that leaves its first and last items in place (the stream itself never
deletes single items; a direct ``store.delete`` or a TTL sweep could) is not noticed while the cache lasts;
:meth:`LangGraphStoreStream.close` drops the cache. A store with a default TTL
(``PostgresStore(ttl={"default_ttl": ...})``) expires items on its own, so no cache is kept there: every call reads
the whole session. :meth:`LangGraphStoreStream.count` always reads the whole session.

>>> import numpy as np
>>> from langgraph.store.memory import InMemoryStore
>>> store = InMemoryStore()
>>> stream = LangGraphStoreStream(store)
>>> item = stream.append("ana", "Hi, I am Ana.", "Hello Ana!", summary="The user is Ana.", embedding=np.ones(2))
>>> item.index, stream.count("ana"), stream.count("bo"), stream.sessions()
(0, 1, 0, ['ana'])
>>> stream.last("ana").summary, stream.items("ana")[0].embedding.tolist()
('The user is Ana.', [1.0, 1.0])
>>> [(it.key[:10], it.value["response"]) for it in store.search(("fragrel", "scm", "ana"))]
[('0000000000', 'Hello Ana!')]
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import numpy as np

from .._closing import Closing
from .._optional import require
from .._validation import check_min_int

require("langgraph.store.base", "langchain")

from langgraph.store.base import BaseStore, GetOp, Item, PutOp, SearchOp  # noqa: E402

from ..core.scm.keyed_stream import (  # noqa: E402
    RACE_SLOTS,
    Cached,
    Entry,
    check_namespace,
    created_of,
    decode_item,
    entries,
    merge_new,
    new_key,
    seq,
    session_label,
    store_lock,
    turn_value,
)
from ..core.scm.stream import check_session, check_turn  # noqa: E402
from ..core.scm.types import MemoryItem  # noqa: E402

__all__ = ["DEFAULT_NAMESPACE", "LangGraphStoreStream"]

#: The namespace prefix of the stream's items (the session id is appended as the last label).
DEFAULT_NAMESPACE: tuple[str, ...] = ("fragrel", "scm")


class LangGraphStoreStream(Closing):
    """An SCM memory stream in a LangGraph ``BaseStore`` (see the module docstring for the layout and caveats).

    Implements :class:`~fragrel_integrations.core.scm.MemoryStream`; pass it as
    ``SelfControlledMemory(..., stream=LangGraphStoreStream(store))`` or ``SCMMiddleware(..., store=store)``.

    Args:
        store: the LangGraph store (the caller owns it: :meth:`close` leaves it open).
        namespace: prefix of the stream's namespaces; each session lives under ``namespace + (session_id,)``.
        page_size: items per ``store.search`` / ``store.list_namespaces`` call when reading a session.
    """

    def __init__(
        self, store: BaseStore, *, namespace: tuple[str, ...] = DEFAULT_NAMESPACE, page_size: int = 100
    ) -> None:
        if not isinstance(store, BaseStore):
            raise TypeError(
                "store must be a LangGraph BaseStore (e.g. langgraph.store.memory.InMemoryStore() or a "
                f"PostgresStore), got {type(store).__name__}"
            )
        check_min_int(page_size, "page_size", 1)
        self.store = store
        self.namespace = check_namespace(namespace)
        self.page_size = page_size
        self._lock = store_lock(store)  # shared with every other stream object on this store in this process
        self._cache: dict[str, Cached] = {}  # session -> its items as last read, in order
        # With a default TTL the store expires items (the stream passes no ttl of its own), oldest or not: then
        # no cache is kept and every read is a whole-session read, which also refreshes every item's TTL.
        ttl = getattr(store, "ttl_config", None) or {}
        self._cache_items = not (getattr(store, "supports_ttl", False) and ttl.get("default_ttl") is not None)

    # ------------------------------------------------------------------------------------------- helpers

    def _ns(self, session_id: str) -> tuple[str, ...]:
        return (*self.namespace, session_label(check_session(session_id)))

    def _search_all(self, ns: tuple[str, ...], **kwargs: Any) -> list[Entry]:
        """Every stream item of one session namespace (optionally filtered), paging through ``store.search``."""
        found: list[Entry] = []
        offset = 0
        while True:
            page = self.store.search(ns, limit=self.page_size, offset=offset, **kwargs)
            found.extend(entries(ns, page))
            if len(page) < self.page_size:
                return found
            offset += len(page)

    def _read_all(self, session_id: str, ns: tuple[str, ...]) -> Cached:
        found = sorted(self._search_all(ns))
        return Cached([e[:3] for e in found], [decode_item(session_id, i, e.item) for i, e in enumerate(found)])

    def _read_new(self, session_id: str, ns: tuple[str, ...], cached: Cached) -> Cached | None:
        """The cached items plus those written since, or None when the cache is stale: its first or last item is
        gone or was rewritten (``created`` differs), or an item appeared before its last one."""
        first, last = cached.order[0], cached.order[-1]
        config = getattr(self.store, "ttl_config", None) or {}
        refresh = bool(config.get("refresh_on_read", True))  # as BaseStore.get does by default
        floor = max(0, last[0] - RACE_SLOTS)
        since = {"seq": {"$gte": seq(floor)}}
        ops = [GetOp(ns, first[2], refresh), GetOp(ns, last[2], refresh)]
        try:
            results = self.store.batch([*ops, SearchOp(ns, since, self.page_size, 0)])
        except (TypeError, ValueError):  # a store that cannot compare a foreign item's value: read everything
            return None
        for (_, created, _), found in zip((first, last), results[:2], strict=True):
            if not isinstance(found, Item) or created_of(found) != created:
                return None
        page = results[2] if isinstance(results[2], list) else []
        if len(page) >= self.page_size:
            try:
                new = self._search_all(ns, filter=since)
            except (TypeError, ValueError):
                return None
        else:
            new = entries(ns, page)
        return merge_new(session_id, cached, new, floor)

    def _read(self, session_id: str) -> Cached:
        """The session in order (from the cache plus what is new where possible); caller holds the lock."""
        ns = self._ns(session_id)
        cached = self._cache.get(session_id)
        result = self._read_new(session_id, ns, cached) if cached else None
        if result is None:
            result = self._read_all(session_id, ns)
        if result.items and self._cache_items:
            self._cache[session_id] = result
        else:
            self._cache.pop(session_id, None)
        return result

    # ------------------------------------------------------------------------------------------- stream

    def append(
        self,
        session_id: str,
        observation: str,
        response: str,
        *,
        summary: str = "",
        embedding: np.ndarray | None = None,
    ) -> MemoryItem:
        """Write one interaction at the end of the session's stream and return it (with its index)."""
        ns = self._ns(session_id)
        vector = check_turn(observation, response, summary, embedding)
        with self._lock:
            current = self._read(session_id)
            slot = current.order[-1][0] + 1 if current.order else 0
            key, value = new_key(slot), turn_value(observation, response, summary, vector, slot)
            created = value["created"]
            self.store.put(ns, key, value, index=False)
            item = MemoryItem(session_id, len(current.items), observation, response, summary, vector, created)
            if self._cache_items:
                self._cache[session_id] = Cached([*current.order, (slot, created, key)], [*current.items, item])
        return item

    def items(self, session_id: str) -> list[MemoryItem]:
        """Every interaction of the session, in time order (a new list; items written since the last call are
        searched for, the rest comes from memory unless the session was cleared or rewritten meanwhile)."""
        with self._lock:
            return list(self._read(session_id).items)

    def last(self, session_id: str) -> MemoryItem | None:
        """The latest interaction (the flash memory of the next turn), or None for an empty session."""
        with self._lock:
            items = self._read(session_id).items
        return items[-1] if items else None

    def count(self, session_id: str) -> int:
        """Number of interactions in the session (always read from the store)."""
        return len(self._search_all(self._ns(session_id)))

    def sessions(self) -> list[str]:
        """The session ids with at least one interaction, sorted."""
        depth = len(self.namespace) + 1
        labels: set[str] = set()
        offset = 0
        while True:
            page = self.store.list_namespaces(
                prefix=self.namespace, max_depth=depth, limit=self.page_size, offset=offset
            )
            labels.update(ns[-1] for ns in page if len(ns) == depth and tuple(ns[:-1]) == self.namespace)
            if len(page) < self.page_size:
                break
            offset += len(page)
        # a store may keep listing a namespace whose items were all deleted
        names = [unquote(label) for label in labels]
        return sorted(name for name in names if name and self._scan_one(self._ns(name)))

    def _scan_one(self, ns: tuple[str, ...]) -> bool:
        offset = 0
        while True:
            page = self.store.search(ns, limit=self.page_size, offset=offset)
            if entries(ns, page):
                return True
            if len(page) < self.page_size:
                return False
            offset += len(page)

    def clear(self, session_id: str) -> int:
        """Delete the session's interactions (one ``store.batch`` of deletes); returns how many were deleted."""
        ns = self._ns(session_id)
        with self._lock:
            self._cache.pop(session_id, None)
            keys = [entry.key for entry in self._search_all(ns)]
            if keys:
                self.store.batch([PutOp(ns, key, None) for key in keys])
            return len(keys)

    def close(self) -> None:
        """Forget the cached items; the store itself belongs to the caller and stays open."""
        with self._lock:
            self._cache.clear()

    def __repr__(self) -> str:
        return f"LangGraphStoreStream({type(self.store).__name__}, namespace={self.namespace!r})"
