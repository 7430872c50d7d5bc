"""What the vector-store indexes of an SCM memory stream share across frameworks (LangChain's and LlamaIndex's
``VectorStoreStreamIndex``): entry ids and metadata, the checks of their options, ownership of a hit, and
:class:`StoreIndexAdapter`. The :class:`~fragrel_integrations.core.scm.stream_index.StreamIndex` protocol they
implement is the core's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain, repeat
from typing import Any

import numpy as np

from .._validation import check_min_int, check_type
from ..core.scm.interactions import MemoryItem
from ..core.scm.stream import check_session

__all__ = ["StoreIndexAdapter", "check_entry", "check_filter", "check_search", "default_entry_id", "first_hits"]


def default_entry_id(session_id: str, index: int) -> str:
    """The id adapters give a turn's entry in an external store: ``f"scm:{session_id}:{index}"``."""
    return f"scm:{session_id}:{index}"


def read_index(value: object) -> int | None:
    """An interaction index read back from store metadata (stores may return it as int, float or str).

    >>> read_index(3), read_index(3.0), read_index("3"), read_index(True), read_index("x")
    (3, 3, 3, None, None)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | np.integer) or (isinstance(value, float) and value.is_integer()):
        return int(value)
    return int(value) if isinstance(value, str) and value.isdigit() else None


def check_keys(session_key: object, index_key: object) -> tuple[str, str]:
    """Validate the two metadata key names adapters store with each entry (non-empty, different strs)."""
    for name, value in (("session_key", session_key), ("index_key", index_key)):
        if not isinstance(value, str) or not value:
            raise TypeError(f"{name} must be a non-empty str, got {value!r}")
    if session_key == index_key:
        raise ValueError(f"session_key and index_key must differ, both are {session_key!r}")
    return session_key, index_key  # type: ignore[return-value]


def check_filter(value: object, name: str, returns: str, hint: str = "") -> None:
    """TypeError unless ``value`` (an adapter's per-session filter) is None or a function session_id -> ``returns``."""
    if value is not None and not callable(value):
        raise TypeError(
            f"{name} must be a function session_id -> {returns} (or None), got {type(value).__name__}{hint}"
        )


def check_search(session_id: object, k: object) -> None:
    """Validate a ``search`` call of an adapter: a non-empty session id (TypeError) and ``k`` >= 1 (ValueError)."""
    check_session(session_id)
    check_min_int(k, "k", 1)


def first_hits(candidates: Iterable[tuple[int | None, float]], k: int) -> list[tuple[int, float]]:
    """The first ``k`` ``(interaction index, score)`` of a store's results, skipping ``None`` (not a turn of the
    session) and repeated indexes; reads ``candidates`` lazily, only as far as needed.

    >>> first_hits([(3, 0.9), (None, 0.8), (3, 0.7), (1, 0.5), (0, 0.4)], 2)
    [(3, 0.9), (1, 0.5)]
    """
    hits: dict[int, float] = {}
    for index, score in candidates:
        if index is not None and index not in hits:
            hits[index] = score
            if len(hits) == k:
                break
    return list(hits.items())


#: Ids asked of a store per probe of :meth:`StoreIndexAdapter.probe_session`.
PROBE_BLOCK = 256


class EntryIds:
    """The entry ids an adapter added to an external store, by session (thread-safe): which ids a session has
    (to delete them) and whose turn an id is (to recognise custom ids in a store that returns ids only).

    >>> ids = EntryIds()
    >>> ids.add("ana", 0, "doc-1"); ids.owner("doc-1"), ids.of("ana"), ids.forget("ana"), ids.of("ana")
    (('ana', 0), {'doc-1'}, None, set())
    """

    def __init__(self) -> None:
        self._owners: dict[str, tuple[str, int]] = {}
        self._lock = threading.Lock()

    def add(self, session_id: str, index: int, entry_id: str) -> None:
        """Record that ``entry_id`` holds turn ``index`` of ``session_id``."""
        with self._lock:
            self._owners[entry_id] = (session_id, index)

    def owner(self, entry_id: str) -> tuple[str, int] | None:
        """``(session_id, index)`` of an added id, or None."""
        with self._lock:
            return self._owners.get(entry_id)

    def of(self, session_id: str) -> set[str]:
        """The ids added for ``session_id``."""
        with self._lock:
            return {i for i, (s, _) in self._owners.items() if s == session_id}

    def forget(self, session_id: str) -> None:
        """Forget the ids of ``session_id`` (after its entries were deleted)."""
        with self._lock:
            self._owners = {i: owner for i, owner in self._owners.items() if owner[0] != session_id}


def check_entry(item: object, text: object) -> None:
    """Validate one ``add`` call of an adapter: a :class:`MemoryItem` and its non-empty text."""
    check_type(item, MemoryItem, "item must be a MemoryItem")
    if not isinstance(text, str) or not text:
        raise TypeError(f"text must be a non-empty str, got {text!r}")


class StoreIndexAdapter:
    """What the vector-store adapters of every framework share (a :class:`StreamIndex` over an external store):
    the options, entry ids and metadata, ownership of a hit, and the repr.

    Args:
        session_key, index_key: the metadata keys of an entry's session id and interaction index.
        fetch_k: entries asked from the store per search (at least the memory's ``k``; None: ``k``); raise it
            when the store's filter is weak, so post-filtering still leaves enough turns.
        make_id: ``make_id(session_id, index)`` gives an entry's id (default :func:`default_entry_id`; stores
            that need UUIDs, such as Qdrant, can use ``uuid.uuid5`` of it). Ids must be stable: adding a turn
            again replaces its entry.

    >>> adapter = StoreIndexAdapter(object(), session_key="s", index_key="i", fetch_k=None, make_id=None)
    >>> adapter.entry_id("ana", 2), adapter.entry_metadata(MemoryItem("ana", 2, "o", "r")), adapter.fetch(3)
    ('scm:ana:2', {'s': 'ana', 'i': 2}, 3)
    >>> adapter.hit_index(None, "scm:ana:2", "ana"), adapter.hit_index({"s": "bob", "i": 1}, "x", "ana")
    (2, None)
    """

    def __init__(
        self, store: object, *, session_key: object, index_key: object, fetch_k: object, make_id: object
    ) -> None:
        self.session_key, self.index_key = check_keys(session_key, index_key)
        if fetch_k is not None:
            check_min_int(fetch_k, "fetch_k", 1, hint=" or None")
        if make_id is not None and not callable(make_id):
            raise TypeError(f"make_id must be a function (session_id, index) -> str, got {type(make_id).__name__}")
        self.fetch_k: int | None = fetch_k  # type: ignore[assignment]
        self.make_id: Callable[[str, int], str] = make_id or default_entry_id  # type: ignore[assignment]
        self._store_name = type(store).__name__
        #: The entry ids this object added, with their (session, index): what a store that returns ids only is read by.
        self.added_ids = EntryIds()

    def entry_id(self, session_id: str, index: int) -> str:
        """The id of a turn's entry: ``make_id(session_id, index)``, checked to be a non-empty str."""
        value = self.make_id(session_id, index)
        if not isinstance(value, str) or not value:
            raise TypeError(f"make_id must return a non-empty str, got {value!r}")
        return value

    def entry_metadata(self, item: MemoryItem) -> dict[str, Any]:
        """``{session_key: session id, index_key: interaction index}`` of a turn's entry."""
        return {self.session_key: item.session_id, self.index_key: item.index}

    def fetch(self, k: int) -> int:
        """Entries to ask the store for when the memory wants ``k``."""
        return max(k, self.fetch_k or k)

    def hit_index(self, metadata: Mapping[str, Any] | None, hit_id: str | None, session_id: str) -> int | None:
        """The interaction index of a store hit if it is a turn of ``session_id``, else None: read from its
        ``metadata`` when the store returns it, else from its id (the default id's text, or the ids this object
        added)."""
        if metadata is not None:  # post-filtered, so another session's turns never come back
            return read_index(metadata.get(self.index_key)) if metadata.get(self.session_key) == session_id else None
        if hit_id is None:
            return None
        if self.make_id is default_entry_id:
            prefix = f"scm:{session_id}:"
            return read_index(hit_id[len(prefix) :]) if hit_id.startswith(prefix) else None
        owner = self.added_ids.owner(hit_id)
        return owner[1] if owner is not None and owner[0] == session_id else None

    def probe_session(self, session_id: str, found: Callable[[list[str]], set[str]]) -> set[str]:
        """The ids of ``session_id``'s entries a store holds, probing :meth:`entry_id` ids of consecutive indexes in
        blocks of :data:`PROBE_BLOCK` until a block has none; ``found(ids)`` returns those of ``ids`` the store
        holds."""
        hits: set[str] = set()
        start = 0
        while block := found(sorted({self.entry_id(session_id, i) for i in range(start, start + PROBE_BLOCK)})):
            hits |= block
            start += PROBE_BLOCK
        return hits

    def ranked_hits(
        self,
        session_id: str,
        ids: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None],
        scores: Sequence[float],
        k: int,
    ) -> list[tuple[int, float]]:
        """The first ``k`` hits of ``session_id`` (see :func:`first_hits`) in a store's result: the hits' ``ids``,
        with their ``metadatas`` and ``scores`` where the store returned them (shorter lists: the rest have none;
        a hit without a score scores 0.0)."""
        padded = zip(ids, chain(metadatas, repeat(None)), chain(scores, repeat(0.0)), strict=False)  # ids' length
        return first_hits(((self.hit_index(m, hit_id, session_id), float(s)) for hit_id, m, s in padded), k)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self._store_name}, session_key={self.session_key!r}, index_key={self.index_key!r})"
        )
