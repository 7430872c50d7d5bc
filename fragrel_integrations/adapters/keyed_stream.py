"""The layout of an SCM memory stream in a key-value store with namespaces (LangGraph's ``BaseStore``, through
:class:`fragrel_integrations.langchain.scm_store.LangGraphStoreStream`), without the framework.

Each interaction is one item under ``namespace + (session label,)``; its key is the slot it claimed, zero-padded,
plus a random suffix (:func:`new_key`), so keys sort in time order and no write replaces another. Items are read
duck-typed (``namespace``, ``key``, ``value``), so the helpers work on any store's items.
:class:`KeyedStoreStream` is the stream itself; an adapter adds the store's two batch operations.

>>> slot_of(new_key(7)), slot_of("0000000007"), slot_of("notes")
(7, 7, None)
>>> session_label("a.b%"), seq(3)
('a%2Eb%25', '0000000003')
"""

from __future__ import annotations

import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple
from urllib.parse import unquote

import numpy as np

from .._validation import check_min_int
from ..core.scm.interactions import MemoryItem
from ..core.scm.stream import BaseMemoryStream, check_session

__all__ = [
    "DEFAULT_NAMESPACE",
    "KeyedStoreStream",
    "entries",
    "new_key",
    "owned_namespace",
    "seq",
    "stamp",
    "turn_value",
]

KEY_DIGITS = 10
FIELDS = ("observation", "response", "summary")
#: The namespace prefix of the stream's items (the session id is appended as the last label).
DEFAULT_NAMESPACE: tuple[str, ...] = ("fragrel", "scm")
#: How far below the last cached slot a read looks for a write that another process made late.
RACE_SLOTS = 4
_STREAM_KEY = re.compile(rf"([0-9]{{{KEY_DIGITS}}})(?:-[0-9A-Za-z]+)?")

_LOCKS_GUARD = threading.Lock()
_LOCKS: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_BY_ID: dict[int, threading.RLock] = {}  # for a store that cannot be weakly referenced


def store_lock(store: object) -> threading.RLock:
    """The one lock of this process for ``store``: every stream object on the same store shares it."""
    with _LOCKS_GUARD:
        try:
            return _LOCKS.setdefault(store, threading.RLock())
        except TypeError:  # not weak-referenceable
            return _LOCKS_BY_ID.setdefault(id(store), threading.RLock())


def seq(slot: int) -> str:
    return f"{slot:0{KEY_DIGITS}d}"


def stamp(when: float) -> str:
    """A write time as sortable text (microseconds, zero-padded), compared as text by every store.

    >>> stamp(1.5)
    '00000000001500000'
    """
    return f"{max(0, round(when * 1e6)):017d}"


def new_key(slot: int) -> str:
    """A key no other writer can repeat: the slot, then a random suffix."""
    return f"{seq(slot)}-{uuid.uuid4().hex}"


def slot_of(key: str) -> int | None:
    """The slot of a key the stream wrote (``0000000007`` or ``0000000007-<hex>``), or None for any other key."""
    match = _STREAM_KEY.fullmatch(key)
    return int(match[1]) if match else None


def session_label(session_id: str) -> str:
    """The namespace label of a session (``%``, ``.`` and NUL percent-encoded; :func:`unquote` reverses it)."""
    return session_id.replace("%", "%25").replace(".", "%2E").replace("\x00", "%00")


def check_namespace(namespace: object) -> tuple[str, ...]:
    """``namespace`` as a tuple of labels (a str is ONE label, never split into characters); ValueError/TypeError
    naming the rule otherwise."""
    if isinstance(namespace, str):
        namespace = (namespace,)
    if not isinstance(namespace, tuple) or not namespace:
        raise TypeError(f"namespace must be a str (one label) or a non-empty tuple of str, got {namespace!r}")
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise ValueError(f"namespace labels must be non-empty str without '.' or NUL, got {label!r}")
    if namespace[0] == "langgraph":
        raise ValueError("the namespace cannot start with 'langgraph' (reserved by LangGraph)")
    return namespace


def owned_namespace(name: str | None, namespace: str | tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The namespace of a stream owned by an adapter called ``name`` (e.g. a LangChain ``SCMMiddleware``):
    ``namespace`` if given (a str is one label), else one derived from ``name`` (None: the default owner, whose
    stream keeps :data:`DEFAULT_NAMESPACE`), so that two owners on one store never share a stream by accident.

    >>> owned_namespace(None), owned_namespace("work"), owned_namespace("x", "shared")
    (('fragrel', 'scm'), ('fragrel', 'scm:work'), ('shared',))
    """
    if namespace is not None:
        return check_namespace(namespace)
    if name is None:
        return DEFAULT_NAMESPACE
    return (DEFAULT_NAMESPACE[0], f"{DEFAULT_NAMESPACE[1]}:{session_label(name)}")


def created_of(item: Any) -> float | None:
    value = None if item is None else item.value
    created = value.get("created") if isinstance(value, Mapping) else None
    return float(created) if isinstance(created, int | float) else None


class Entry(NamedTuple):
    """One stored interaction: its order (slot, created, key) and the item read from the store."""

    slot: int
    created: float
    key: str
    item: Any


def entries(ns: tuple[str, ...], items: Iterable[Any]) -> list[Entry]:
    """The stream's items among ``items`` (those of exactly ``ns`` with a stream key), unsorted."""
    return [
        Entry(slot, created_of(item) or 0.0, item.key, item)
        for item in items
        if (slot := slot_of(item.key)) is not None and tuple(item.namespace) == ns
    ]


def decode_item(session_id: str, index: int, item: Any) -> MemoryItem:
    value = item.value
    if not isinstance(value, Mapping) or any(not isinstance(value.get(f), str) for f in FIELDS):
        raise ValueError(
            f"store item {item.namespace}/{item.key} is not an SCM interaction (needs str observation, response "
            "and summary): keep other data out of the stream's namespace"
        )
    raw = value.get("embedding")
    embedding = None
    if raw is not None:
        embedding = np.asarray(raw, dtype=np.float32).ravel()
        embedding.flags.writeable = False
    return MemoryItem(session_id, index, *(value[f] for f in FIELDS), embedding, created_of(item) or 0.0)


class Cached(NamedTuple):
    """A session as last read: the order of each item and its decoded form (same length, same order)."""

    order: list[tuple[int, float, str]]
    items: list[MemoryItem]
    total: int = 0  # items the store held under the session's namespace then, of any kind (its own count)


def turn_value(observation: str, response: str, summary: str, vector: np.ndarray | None, slot: int) -> dict[str, Any]:
    """The JSON-compatible store value of one interaction at ``slot`` (``created`` and ``written`` are now)."""
    now = time.time()
    return {
        "observation": observation,
        "response": response,
        "summary": summary,
        "embedding": None if vector is None else [float(x) for x in vector.tolist()],
        "created": now,
        "index": slot,
        "seq": seq(slot),
        "written": stamp(now),
    }


def merge_new(session_id: str, cached: Cached, new: Iterable[Entry]) -> Cached | None:
    """``cached`` plus the ``new`` entries it does not hold yet (searches that also return cached ones); None when
    one sorts before the last cached item (a late write by another process: read again)."""
    known = {key for _, _, key in cached.order}
    fresh = sorted({e.key: e for e in new if e.key not in known}.values())
    if not fresh:
        return cached
    if fresh[0][:3] < cached.order[-1]:
        return None
    start = len(cached.items)
    return Cached(
        [*cached.order, *(e[:3] for e in fresh)],
        [*cached.items, *(decode_item(session_id, start + i, e.item) for i, e in enumerate(fresh))],
    )


class KeyedStoreStream(BaseMemoryStream):
    """An SCM memory stream (:class:`~fragrel_integrations.core.scm.MemoryStream`) in a key-value store with
    namespaces: the store's ``search(ns, limit=, offset=, filter=)``, ``put(ns, key, value, index=False)`` and
    ``list_namespaces(prefix=, max_depth=, limit=, offset=)``, plus two batch operations a subclass supplies
    (:meth:`_batch_ends`, :meth:`_batch_delete`). Example: the LangGraph adapter
    :class:`fragrel_integrations.langchain.scm_store.LangGraphStoreStream`.

    The value of an item is a JSON-compatible dict: ``observation``, ``response``, ``summary``, ``embedding`` (a
    list of floats, or None), ``created`` (a Unix timestamp), ``index`` (the slot), ``seq`` (the slot as zero-padded
    text) and ``written`` (the write time as sortable text, :func:`stamp`). A session's interactions are its items
    ordered by (slot, created, key); an interaction's index is its position in that order. Items are written with
    ``index=False``: SCM scores the stored embeddings itself. Session ids are free text: ``%``, ``.`` and NUL are
    percent-encoded in the label. Items of the earlier key layout (ten digits alone) are read as before.

    Concurrent writers (the store has no put-if-absent): within one process every stream object on the same store
    shares one lock (:func:`store_lock`), so appends to one session take consecutive slots; across processes two
    writers may claim one slot at once, both items are kept (their keys differ) and every reader orders them the
    same way, so no turn is lost (the index :meth:`append` returned may then move up by one).

    Reads: :meth:`items` keeps each session's items in memory. Each call asks the store, in one batch, for the first
    and last cached items (their ``created`` must match, so a clear elsewhere is noticed), for items whose ``seq``
    is at least the last cached slot less :data:`RACE_SLOTS` (the next turns; text, so the comparison is right in
    every store), and for the items past the number the session's namespace held at the previous read (a search
    from that offset, in the store's own order). When more items were added than the turn search found -- a
    writer that stalled between reading and writing claimed an old slot, whatever its clock said -- or fewer (a
    deletion), or a new item sorts before the last cached one, the call reads the whole session (in pages of
    ``page_size``). No wall-clock time is compared, so writers with skewed clocks are seen at once. Only new items
    are decoded. A store with a default TTL (``ttl_config["default_ttl"]``) keeps no cache: every call reads the
    whole session.
    :meth:`count` always reads the whole session.
    """

    def __init__(
        self, store: Any, *, namespace: str | tuple[str, ...] = DEFAULT_NAMESPACE, page_size: int = 100
    ) -> None:
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

    # ------------------------------------------------------------------------------------------- store batches

    def _batch_ends(
        self,
        ns: tuple[str, ...],
        keys: tuple[str, str],
        refresh: bool,
        searches: Sequence[tuple[dict[str, Any] | None, int]],
    ) -> list[Any]:
        """One store batch: get the two ``keys`` (refreshing their TTL if ``refresh``), then search ``ns`` once
        per ``(filter, offset)`` of ``searches`` (``limit=page_size``); returns the two items (None: not found),
        then the pages."""
        raise NotImplementedError

    def _batch_delete(self, ns: tuple[str, ...], keys: list[str]) -> None:
        """One store batch deleting ``keys`` of ``ns``."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------- helpers

    def _ns(self, session_id: str) -> tuple[str, ...]:
        return (*self.namespace, session_label(check_session(session_id)))

    def _paged(self, fetch: Callable[[int], list[Any]]) -> Iterator[list[Any]]:
        """The pages ``fetch(offset)`` returns, from offset 0 until a page shorter than ``page_size``."""
        offset = 0
        while True:
            page = fetch(offset)
            yield page
            if len(page) < self.page_size:
                return
            offset += len(page)

    def _scan(self, ns: tuple[str, ...], offset: int = 0, **kwargs: Any) -> tuple[list[Entry], int]:
        """The stream items of one session namespace (optionally filtered) from ``offset`` on, paging through
        ``store.search``, and how many items of any kind the pages held."""
        pages = list(self._paged(lambda at: self.store.search(ns, limit=self.page_size, offset=offset + at, **kwargs)))
        return [e for page in pages for e in entries(ns, page)], sum(map(len, pages))

    def _search_all(self, ns: tuple[str, ...], **kwargs: Any) -> list[Entry]:
        """Every stream item of one session namespace (optionally filtered)."""
        return self._scan(ns, **kwargs)[0]

    def _read_all(self, session_id: str, ns: tuple[str, ...]) -> Cached:
        found, total = self._scan(ns)
        found.sort()
        return Cached([e[:3] for e in found], [decode_item(session_id, i, e.item) for i, e in enumerate(found)], total)

    def _read_new(self, session_id: str, ns: tuple[str, ...], cached: Cached) -> Cached | None:
        """The cached items plus those written since, or None when the cache is stale: its first or last item is
        gone or was rewritten (``created`` differs), an item appeared before its last one, or the store holds
        another number of items than the cache accounts for (a late write to an old slot, a deletion)."""
        first, last = cached.order[0], cached.order[-1]
        config = getattr(self.store, "ttl_config", None) or {}
        refresh = bool(config.get("refresh_on_read", True))  # as BaseStore.get does by default
        turns = {"seq": {"$gte": seq(max(0, last[0] - RACE_SLOTS))}}  # the turns after the last cached one
        try:
            # and the items past the cached count, in the store's own order: how many were added since
            results = self._batch_ends(ns, (first[2], last[2]), refresh, [(turns, 0), (None, cached.total)])
        except (TypeError, ValueError):  # a store that cannot compare a foreign item's value: read everything
            return None
        if any(created_of(found) != created for (_, created, _), found in zip((first, last), results[:2], strict=True)):
            return None  # gone (None) or rewritten
        page, beyond = (p if isinstance(p, list) else [] for p in results[2:])
        try:
            new = entries(ns, page) if len(page) < self.page_size else self._search_all(ns, filter=turns)
            added = len(beyond) if len(beyond) < self.page_size else self._scan(ns, cached.total)[1]
        except (TypeError, ValueError):
            return None
        merged = merge_new(session_id, cached, new)
        if merged is None or len(merged.order) - len(cached.order) != added:
            return None  # something the turn search cannot see changed: whatever the writers' clocks said
        return merged._replace(total=cached.total + added)

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

    def _write(
        self, session_id: str, observation: str, response: str, summary: str, vector: np.ndarray | None
    ) -> MemoryItem:
        ns = self._ns(session_id)
        with self._lock:
            current = self._read(session_id)
            slot = current.order[-1][0] + 1 if current.order else 0
            key, value = new_key(slot), turn_value(observation, response, summary, vector, slot)
            created = value["created"]
            self.store.put(ns, key, value, index=False)
            item = MemoryItem(session_id, len(current.items), observation, response, summary, vector, created)
            if self._cache_items:
                order, items = [*current.order, (slot, created, key)], [*current.items, item]
                self._cache[session_id] = Cached(order, items, current.total + 1)
        return item

    def items(self, session_id: str) -> list[MemoryItem]:
        """Every interaction of the session, in time order (a new list; see the class docstring for reads)."""
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
        prefix, depth = self.namespace, len(self.namespace) + 1
        pages = self._paged(
            lambda at: self.store.list_namespaces(prefix=prefix, max_depth=depth, limit=self.page_size, offset=at)
        )
        labels = {ns[-1] for page in pages for ns in page if len(ns) == depth and tuple(ns[:-1]) == prefix}
        # a store may keep listing a namespace whose items were all deleted
        names = [unquote(label) for label in labels]
        return sorted(name for name in names if name and self._scan_one(self._ns(name)))

    def _scan_one(self, ns: tuple[str, ...]) -> bool:
        pages = self._paged(lambda at: self.store.search(ns, limit=self.page_size, offset=at))
        return any(entries(ns, page) for page in pages)

    def clear(self, session_id: str) -> int:
        """Delete the session's interactions (one batch of deletes); returns how many were deleted."""
        ns = self._ns(session_id)
        with self._lock:
            self._cache.pop(session_id, None)
            keys = [entry.key for entry in self._search_all(ns)]
            if keys:
                self._batch_delete(ns, keys)
            return len(keys)

    def close(self) -> None:
        """Forget the cached items; the store itself belongs to the caller and stays open."""
        with self._lock:
            self._cache.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.store).__name__}, namespace={self.namespace!r})"
